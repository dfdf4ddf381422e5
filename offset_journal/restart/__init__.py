"""Restart plans: where a query on a NEW checkpoint starts, and why.

**Where a plan is decided:** :func:`compute_plan` in ``restart/plan.py``, a short
sequence of named steps (its module docstring lists them) over journal data; nothing
in it does I/O. :func:`plan_restart` (``restart/edge.py``) is the thin edge that
gathers those inputs from the journal, the checkpoint location and the Kafka cluster.

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
  the journaled batches that reads again (``from_time.py``).

The modules, one job each:

* ``model.py``: the data (inputs, :class:`Findings`, :class:`RestartPlan`), closed sets;
* ``plan.py``: :func:`compute_plan`, the decision;
* ``kafka_offsets.py``: Kafka start offsets, and the check against the cluster;
* ``other_sources.py``: Delta, file, rate and other sources;
* ``state_aware.py``: the cutoff and the rewind of state-aware plans;
* ``edge.py``: :func:`plan_restart`, the I/O.

Importing a checkpoint into the journal lives in :mod:`offset_journal.checkpoint_import`,
comparing offsets in :mod:`offset_journal.compare`; their names stay importable from
here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import RestartError
from ..overlap import RunSpan, concurrent_runs
from .edge import PlanOptions, PlanRequest, checkpoint_state, plan_from_journal, plan_restart
from .kafka_offsets import (
    check_against_cluster,
    end_offsets_of,
    kafka_strategy,
    kafka_topics,
    start_offsets_from,
)
from .model import (
    KIND_DELTA,
    KIND_FILE,
    KIND_KAFKA,
    KIND_OTHER,
    KIND_RATE,
    MODE_STATE_AWARE,
    MODE_STATELESS,
    MODES,
    POSITION_AFTER,
    POSITION_AT,
    POSITION_FROM_TIME,
    POSITION_REWIND,
    POSITIONS,
    AsyncTail,
    BatchRef,
    CheckpointState,
    Findings,
    Mode,
    PlanInputs,
    Position,
    RereadRun,
    RestartPlan,
    SinkState,
    SourceKind,
    SourcePlan,
    source_kind,
)
from .plan import (
    check_last_batch,
    check_request,
    compute_plan,
    decide,
    future_trigger_problems,
    refuse_used_checkpoint,
)
from .state_aware import emitted_cutoff, rewind_index

if TYPE_CHECKING:
    from ..checkpoint_import import (
        ImportResult,
        checkpoint_run_id,
        import_checkpoint,
        records_from_checkpoint,
    )
    from ..compare import (
        OffsetComparison,
        compare_offsets,
        comparison_verdict,
        group_offsets,
        journal_kafka_offsets,
    )

_MOVED = {
    "ImportResult": "checkpoint_import", "checkpoint_run_id": "checkpoint_import",
    "import_checkpoint": "checkpoint_import", "records_from_checkpoint": "checkpoint_import",
    "OffsetComparison": "compare", "compare_offsets": "compare",
    "comparison_verdict": "compare", "group_offsets": "compare",
    "journal_kafka_offsets": "compare",
}


def __getattr__(name: str) -> Any:
    # Checkpoint import and comparison live in their own modules, which import this
    # package: loaded on first use, so that old imports from here keep working.
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f"offset_journal.{_MOVED[name]}"), name)
    raise AttributeError(f"module 'offset_journal.restart' has no attribute {name!r}")


__all__ = [
    "KIND_DELTA",
    "KIND_FILE",
    "KIND_KAFKA",
    "KIND_OTHER",
    "KIND_RATE",
    "MODES",
    "MODE_STATELESS",
    "MODE_STATE_AWARE",
    "POSITION_AFTER",
    "POSITION_AT",
    "POSITION_FROM_TIME",
    "POSITION_REWIND",
    "POSITIONS",
    "AsyncTail",
    "BatchRef",
    "CheckpointState",
    "Findings",
    "ImportResult",
    "Mode",
    "OffsetComparison",
    "PlanInputs",
    "PlanOptions",
    "PlanRequest",
    "Position",
    "RereadRun",
    "RestartError",
    "RestartPlan",
    "RunSpan",
    "SinkState",
    "SourceKind",
    "SourcePlan",
    "check_against_cluster",
    "check_last_batch",
    "check_request",
    "checkpoint_run_id",
    "checkpoint_state",
    "compare_offsets",
    "comparison_verdict",
    "compute_plan",
    "concurrent_runs",
    "decide",
    "emitted_cutoff",
    "end_offsets_of",
    "future_trigger_problems",
    "group_offsets",
    "import_checkpoint",
    "journal_kafka_offsets",
    "kafka_strategy",
    "kafka_topics",
    "plan_from_journal",
    "plan_restart",
    "records_from_checkpoint",
    "refuse_used_checkpoint",
    "rewind_index",
    "source_kind",
    "start_offsets_from",
]
