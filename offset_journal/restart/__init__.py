"""Restart plans: where a query on a NEW checkpoint starts, and why.

**Gather, then decide.** :func:`plan_restart` (``restart/edge.py``, the planner's
entry) lets ``gather/`` read every fact from the journal, the checkpoint locations,
the old sink, the savepoint and the Kafka cluster (one module and one frozen typed group
each) into one frozen :class:`PlanInputs`; then ``decide`` (``decide/plan.py``, a short
sequence of named steps, one module each in ``decide/``) makes the plan from it alone,
with no I/O (:func:`compute_plan` builds the inputs from a batch and the groups). The
plan handed out is recorded after (``record.py``, the one step that writes).

A new checkpoint knows nothing; the journal knows every completed batch's offsets. A
plan turns them into ``readStream`` options, checked against what can go wrong:
partitions added since, topics deleted, offsets deleted by retention (data loss), a
checkpoint location that is not new (Spark would ignore the options), a file sink that
would skip the new query's first batches, two runs journaling under one name.

Positions a plan can start from:

* **after** a batch (default: the last journaled one; or the last one triggered at or
  before ``as_of``): that batch's END offsets. Kafka start offsets are inclusive and a
  batch's end offsets exclusive, so nothing is skipped and nothing is read twice.
* **at** a batch (``batch=(run_id, batch_id)``): that batch's START offsets, so the
  batch is processed again ("reprocess from a certain point").
* **rewind** (state-aware): the START offsets of the earliest batch that may hold a
  record of a window the old checkpoint's state had not emitted yet.
* **from-time** (``from_time``): per partition, the first offset whose RECORD timestamp
  is at or after a time (Kafka's offsetsForTimes; the log end when there is none), with
  the journaled batches that reads again (``_from_time.py``).

The modules, one job each, in the order data flows:

* ``request.py``: :class:`PlanRequest`, what a person asks for, checked once (pure);
  its fields are the one list of a plan's options;
* ``_inputs.py``: :class:`PlanInputs` and its typed groups (:class:`JournalFacts`,
  :class:`LocationFacts`, :class:`KafkaFacts`, :class:`OldQueryFacts`,
  :class:`SavepointFacts`), the request and the facts gathered for it (pure);
* ``gather/``: the I/O, one module per place read (``journal``, ``locations``,
  ``kafka``, ``sink``, ``savepoint``); it writes nothing;
* ``model.py``: the data (:class:`RestartPlan`, frozen, and its parts), closed sets;
  ``_findings.py``: what each step found (notes, warnings, errors);
* ``decide/``: the decision (pure): ``plan.py`` (``decide``, :func:`compute_plan`); the
  kinds of start (``start_after``, ``start_at``, ``from_time``, ``state_aware``,
  ``seeding``: a savepoint, ``translated`` with ``translate``: another Kafka cluster,
  ``real_time``); the sources (``kafka_offsets``, ``other_sources``: Delta, file,
  rate); the old query's sink (``sink``); the facts that only warn (``checks``);
* ``edge.py``: the planner's entry, :func:`plan_restart` and :func:`plan_from_journal`;
* ``record.py``: the plan as the journal records it (``restart_plans``), the write step;
* ``compare.py``: a checkpoint's offsets against the journal's, and a journaled batch
  as consumer-group offsets;
* ``_delta_log.py``: a Delta table's id. The wording is shared with the audit and the
  health check: :mod:`offset_journal.wording`.

Importing a checkpoint into the journal lives in
:mod:`offset_journal.checkpoint.importing`.

What this package exports is what a caller needs; the steps stay in their modules. The
pure modules load without the database driver: the I/O names (:func:`plan_restart`,
:func:`plan_from_journal`, :func:`recover`: a lost checkpoint recovered from a
savepoint) are imported on first use, as :mod:`offset_journal` does for
the listener.

May import: :mod:`offset_journal.savepoint`, :mod:`offset_journal.checkpoint`,
:mod:`offset_journal.journal`, :mod:`offset_journal.kafka` and the shared modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import RestartError
from ..rows import BatchRef
from ._findings import Findings
from ._inputs import (
    ClusterFacts,
    JournalFacts,
    KafkaFacts,
    LocationFacts,
    MirrorFacts,
    OldQueryFacts,
    PlanInputs,
    SavepointFacts,
)
from .decide.plan import compute_plan
from .model import MODE_STATE_AWARE, MODE_STATELESS, Mode, Position, RestartPlan, SourcePlan
from .request import PlanRequest

if TYPE_CHECKING:
    from .edge import plan_from_journal, plan_restart
    from .recovery import Recovered, recover

_EDGE = {"plan_from_journal": "edge", "plan_restart": "edge", "recover": "recovery",
         "Recovered": "recovery"}


def __getattr__(name: str) -> Any:
    if name in _EDGE:
        import importlib

        return getattr(importlib.import_module(f".{_EDGE[name]}", __name__), name)
    raise AttributeError(f"module 'offset_journal.restart' has no attribute {name!r}")


__all__ = [
    "MODE_STATELESS",
    "MODE_STATE_AWARE",
    "BatchRef",
    "ClusterFacts",
    "Findings",
    "JournalFacts",
    "KafkaFacts",
    "LocationFacts",
    "MirrorFacts",
    "OldQueryFacts",
    "PlanInputs",
    "SavepointFacts",
    "Mode",
    "PlanRequest",
    "Position",
    "RestartError",
    "Recovered",
    "RestartPlan",
    "SourcePlan",
    "compute_plan",
    "plan_from_journal",
    "plan_restart",
    "recover",
]
