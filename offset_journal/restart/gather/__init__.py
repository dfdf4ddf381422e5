"""Gather: every fact a plan may need, read once (the I/O step; it writes nothing), one
typed group per place it is read from (:mod:`~offset_journal.restart._inputs`):

* ``savepoint.py``: the savepoint asked for, loaded and checked (:class:`SavepointFacts`);
* ``journal.py``: the anchor, the batches around it, the runs, the clock, what was
  flagged (:class:`JournalFacts`);
* ``locations.py``: the new checkpoint location, the output path, the Delta source
  tables (:class:`LocationFacts`);
* ``old_checkpoint.py`` and ``sink.py``: the old query's checkpoint, and its sink as
  its own log says (:class:`OldQueryFacts`);
* ``cluster.py``: which cluster it is, MM2's offset syncs on a replica; ``kafka.py``: the
  topics' partitions, offsets at a time (both :class:`KafkaFacts`).

:func:`gather` puts them into one frozen :class:`PlanInputs`, which ``decide`` reads
alone. May import: the restart package's pure modules (the request, the model, the
inputs, the steps' helpers), :mod:`offset_journal.journal`, :mod:`offset_journal.kafka`,
:mod:`offset_journal.checkpoint`, :mod:`offset_journal.savepoint`; never the planner's
entry (``edge``) nor the recording.
"""

from __future__ import annotations

from dataclasses import replace

from ...journal import Journal
from .._inputs import (
    JournalFacts,
    KafkaFacts,
    LocationFacts,
    OldQueryFacts,
    PlanInputs,
    SavepointFacts,
)
from ..request import PlanRequest
from .cluster import cluster_facts, mirror_facts
from .journal import journal_facts
from .kafka import kafka_facts
from .locations import delta_tables, locations
from .old_checkpoint import old_checkpoint_facts, read_old_checkpoint
from .savepoint import savepoint_facts
from .sink import old_query_facts


def gather(journal: Journal, request: PlanRequest, places: LocationFacts | None = None,
           command: str = "api") -> PlanInputs:
    """Every fact a plan for ``request`` may need, read once, as one frozen
    :class:`PlanInputs`; ``places``: the request's :func:`locations` when already read.
    Raises what cannot be read (a batch not journaled, a used checkpoint)."""
    places = places if places is not None else locations(request)
    old_checkpoint = read_old_checkpoint(request)
    digested = None if old_checkpoint is None else old_checkpoint_facts(old_checkpoint)
    saved = savepoint_facts(journal, request)
    found = journal_facts(journal, request, saved)
    cluster, mirror = cluster_facts(journal, request, found), mirror_facts(request)
    return PlanInputs(
        request, found,
        locations=replace(places, delta_tables=delta_tables(found.anchor)),
        kafka=kafka_facts(journal, request, found, cluster, mirror),
        old_query=old_query_facts(journal, request, found.anchor, old_checkpoint, digested),
        savepoint_facts=saved, command=command)


__all__ = ["JournalFacts", "KafkaFacts", "LocationFacts", "OldQueryFacts", "PlanInputs",
           "SavepointFacts", "gather", "locations"]
