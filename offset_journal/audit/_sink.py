"""The audit's reading of the old query's sink (pure), as the plans that read its log
recorded it: the batches a plan took from the sink, with their offsets from
the old checkpoint, explain a run that starts after them, and a batch of them that Spark
ran again on resuming the old checkpoint (the sink skips a batch its log holds)."""

from __future__ import annotations

from collections.abc import Sequence

from ..rows import RecordedPlan
from .model import RunStart

Held = dict[tuple[str, int, str, int], tuple[int, int, int]]
"""(query id, batch id, topic, partition) -> (start, end, plan id)."""


def sink_held(plans: Sequence[RecordedPlan]) -> Held:
    """Every batch a plan took from the old query's sink, by query id, batch id and
    partition: its offsets and the plan."""
    out: Held = {}
    for plan in plans:
        query_id = (plan.sink or {}).get("query_id")
        for (topic, part), rows in plan.sink_offsets().items():
            for batch, start, end in rows:
                out[(str(query_id), batch, topic, part)] = (start, end, plan.id)
    return out


def after_the_sink(plan: RecordedPlan, key: tuple[str, int], start: int) -> bool:
    """The plan took batches from the sink that end, for ``key``, where the run began."""
    rows = plan.sink_offsets().get(key) or []
    return bool(rows) and rows[-1][2] == start


def after_the_sink_reason(plan: RecordedPlan, run_id: str) -> str:
    """Why a gap before a run that started after the sink's last batch is planned."""
    sink = plan.sink or {}
    taken = sink.get("taken") or []
    ids = (f"batch {taken[0]}" if len(taken) == 1
           else f"batches {taken[0]}..{taken[-1]}" if taken else "batches")
    return (f"planned: run {run_id} started from plan {plan.id} after batch "
            f"{sink.get('last_batch')}, the last the old query's sink held "
            f"({sink.get('path')}): the old run wrote {ids} of run {sink.get('run_id')} to "
            "the sink before it stopped, and the plan took their offsets from the old "
            "checkpoint; they are not in the journal")


def rerun_reason(held: Held, run: RunStart, batch_id: int, key: tuple[str, int],
                 start: int, end: int) -> str | None:
    """Why an overlap of a run resuming a checkpoint is no duplicate in the sink: Spark
    ran a batch again that the sink's log held (same query id, batch id and offsets);
    None when it is not such a batch."""
    found = held.get((run.query_id, batch_id, *key))
    if found is None or found[:2] != (start, end):
        return None
    return (f"run {run.run_id} resumed the old checkpoint and Spark ran batch {batch_id} "
            f"again with the same offsets; the sink's log already held it (plan {found[2]} "
            "read it there), and the sink skips a batch it holds: not written twice")
