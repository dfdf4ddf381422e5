"""Where a plan is decided: :func:`decide` (pure: one :class:`~._inputs.PlanInputs`
in, the plan out; :func:`compute_plan` builds the inputs from a batch and the typed
groups). It only calls the steps, each a module, in order, and joins what they found once:

1. ``refuse.py``: refuse what cannot be planned (after the request's mode is checked
   against its position: a used checkpoint, an unknown recreated topic, another
   cluster);
2. ``sink.py`` (with ``sink_held.py``): when the old query's sink holds batches beyond
   the journal's last, the plan starts after the last of them, as if the journal had
   them;
3. ``start.py``: where to start, one module per kind of start: after the last batch
   (start_after.py), at a batch or a record time (start_at.py), state-aware
   (state_aware.py), from a savepoint (seeding.py); a translated start says its note
   once the sources are planned (translated.py);
4. ``sources.py``: each source (Kafka: kafka_offsets.py, from_time.py, translate.py on
   a replica; others: other_sources.py);
5. ``flagged.py`` and ``checks.py``: what the journal flagged, the output path, the
   new checkpoint, the clocks, concurrent runs and what the gather step read besides;
   then which cluster (cluster.py), a real-time run (real_time.py), the state carried
   from a savepoint (carried.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...rows import Batch, BatchRef
from .._findings import Findings
from .._inputs import (
    JournalFacts,
    KafkaFacts,
    LocationFacts,
    OldQueryFacts,
    PlanInputs,
    SavepointFacts,
)
from ..model import MODE_STATE_AWARE, POSITION_FROM_TIME, CarriedState, RestartPlan
from ..request import PlanRequest, check_request
from .carried import carried_state
from .checks import gathered_warnings, plan_checks
from .cluster import cluster_findings
from .flagged import flagged_batches, flagged_findings
from .real_time import real_time_findings
from .refuse import refuse
from .sink import sink_outcome
from .sources import source_plans
from .start import where_to_start
from .translated import translated_start


def compute_plan(query_name: str, anchor: Batch | JournalFacts, *,
                 locations: LocationFacts | None = None, kafka: KafkaFacts | None = None,
                 old_query: OldQueryFacts | None = None,
                 savepoint_facts: SavepointFacts | None = None,
                 command: str = "api", **asked: Any) -> RestartPlan:
    """Make a restart plan from journal data alone (pure: no I/O).

    ``anchor``: the batch to plan from, or the journal's facts around it
    (:class:`~._inputs.JournalFacts`); the other facts come as their typed groups
    (:class:`~._inputs.PlanInputs` says what each holds). The other keyword arguments
    are the request's fields (:class:`~.request.PlanRequest`: ``mode``, ``as_of``,
    ``allow_data_loss``...); a name that is not one is a TypeError.
    """
    journal = anchor if isinstance(anchor, JournalFacts) else JournalFacts(anchor)
    return decide(PlanInputs(PlanRequest(query_name, **asked), journal,
                             locations or LocationFacts(), kafka or KafkaFacts(),
                             old_query or OldQueryFacts(), savepoint_facts or SavepointFacts(),
                             command=command))


def decide(inp: PlanInputs) -> RestartPlan:
    """The plan for ``inp``: the steps of the module docstring, in order."""
    gathered = gathered_warnings(inp)  # before all: the journal must know its last batch
    check_request(inp.mode, inp.journal.position)
    refuse(inp)
    sink = sink_outcome(inp)
    if sink.taken:  # the sink holds batches beyond the journal: start after its last
        inp = replace(inp, journal=replace(inp.journal, anchor=sink.taken[-1]),
                      sink_taken=sink.taken)
    flagged = flagged_batches(inp.journal.problems, [inp.anchor, *inp.journal.chain])
    start = where_to_start(inp, flagged)
    sources, source_findings = source_plans(inp, start)
    notes = translated_start(inp, start, flagged, sources)
    checked, tables = plan_checks(inp, start, sources)
    cluster = cluster_findings(inp.kafka.cluster, inp.request.translate_from,
                               inp.request.accept_cluster)
    real_time, rt_record = real_time_findings(inp, start, sources)
    saved = inp.savepoint_facts.loaded
    state: list[CarriedState] = []
    carried = Findings()
    if saved is not None:
        state, carried = carried_state(inp, saved)
    found = Findings.joined(
        Findings(notes=notes), start.findings, sink.findings,
        flagged_findings(inp, start, flagged), source_findings, checked, cluster,
        real_time, carried, Findings(warnings=gathered), tables)
    return RestartPlan(
        query_name=inp.request.query_name, mode=inp.mode, position=start.position,
        anchor=BatchRef.of(inp.anchor), start_batch=start.start_ref, sources=sources,
        notes=found.notes, plan_warnings=found.warnings, plan_errors=found.errors,
        as_of=inp.request.as_of, event_time_cutoff=start.cutoff,
        window=inp.request.window if inp.mode == MODE_STATE_AWARE else None,
        checkpoint=inp.locations.checkpoint.path if inp.locations.checkpoint else None,
        output_path=inp.locations.output.path if inp.locations.output else None,
        kafka_checked=inp.kafka.state is not None,
        from_time=inp.request.from_time if start.position == POSITION_FROM_TIME else None,
        reread=list(inp.kafka.reread) if start.position == POSITION_FROM_TIME else [],
        kafka_cluster_id=inp.kafka.cluster.now if inp.kafka.cluster else None,
        journaled_cluster_id=inp.kafka.cluster.journaled if inp.kafka.cluster else None,
        savepoint_id=saved.id if saved else None,
        savepoint_location=saved.location if saved else None,
        savepoint_sha256=saved.digest if saved else None,
        state=state, real_time=rt_record, sink=sink.record, sink_batches=list(sink.taken),
    )


__all__ = ["compute_plan", "decide"]
