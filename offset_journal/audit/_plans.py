"""Which recorded plan a run began from (pure): a plan's offsets, whether a new
checkpoint's first batch fits them, the plan a run matches when no link holds, and why
a link cannot be taken. The walk (``_core``) asks these at each run's first batch; the
rules are in its docstring ("Where a run began")."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..offsets import EARLIEST
from ..rows import AuditBatch, RecordedPlan

TP = tuple[str, int]


def plan_offsets(plan: RecordedPlan) -> dict[TP, int]:
    """A recorded plan's Kafka start offsets by (topic, partition)."""
    return {(t, p): o for _i, t, p, o in plan.kafka_offsets}


def real_time_note(run_id: str, plan: RecordedPlan) -> str:
    """Why a restart after a run in real-time mode may have written rows twice, which no
    journaled batch shows."""
    rt = plan.real_time or {}
    bound = rt.get("bound")
    limit = (f"up to {bound} record(s)" if isinstance(bound, int)
             else "an uncounted number of records")
    return (f"run {run_id} started from plan {plan.id}, after batch {rt.get('after_batch')} "
            f"of run {rt.get('run_id')}, which ran in real-time mode: a batch it stopped "
            f"mid-way was never journaled, yet may have written rows to the sink, which "
            f"this run wrote again ({limit}, as the plan said); not an overlap of "
            "journaled batches")


def starts_a_checkpoint(batch: AuditBatch) -> bool:
    """A run's first batch on a new checkpoint: Spark reports no start offset at all."""
    parts = [p for s in batch.sources for p in s.partitions]
    return bool(parts) and all(p.start is None for p in parts)


def fits(plan: RecordedPlan, batch: AuditBatch, *, linked: bool = True) -> bool:
    """Whether ``batch`` (a new checkpoint's first) can have started at ``plan``'s
    offsets: every partition in both ends at or after the plan's start, and each
    source read exactly the records between them (when all its starts are known).
    Topics with compaction or transactions read fewer records than their offsets span:
    link such runs explicitly.

    A start at earliest only bounds the count for a ``linked`` plan (the job said it
    began there). For a plan no job linked (``linked=False``), earliest stands for the
    log start the plan recorded when it was made, and counts as that offset: a plan
    asked for and never used must not explain a run that started anywhere else, from
    latest say, skipping what lay between; without a recorded log start it fits no
    batch that reads the partition."""
    offsets: dict[TP, int | None] = dict(plan_offsets(plan))
    if not linked:  # None: at earliest, and where that was is not known
        starts = plan.log_starts
        offsets = {k: starts.get(k) if o == EARLIEST else o for k, o in offsets.items()}
    common = 0
    for source in batch.sources:
        spanned, exact = 0, True
        for p in source.partitions:
            key = (p.topic, p.partition)
            o = offsets.get(key)
            if o is None and key in offsets:
                return False
            if o is None or p.end is None:
                exact = False
                continue
            common += 1
            if o == EARLIEST:
                exact = False
            elif o > p.end:
                return False
            else:
                spanned += p.end - o
        rows = source.num_input_rows
        if rows is not None and (spanned > rows if not exact else spanned != rows):
            return False
    return common > 0


def match_plan(batch: AuditBatch, plans: Sequence[RecordedPlan],
               taken: set[int]) -> RecordedPlan | None:
    """The plan a new checkpoint's run began from, when no link to it holds: the most
    recent plan recorded before its first batch was journaled, not taken or linked by
    another run, that :func:`fits` the batch as an unlinked plan (earliest resolved to
    the log starts the plan recorded)."""
    for plan in sorted(plans, key=lambda p: p.id, reverse=True):
        if plan.id in taken or (plan.run_ids and batch.run_id not in plan.run_ids):
            continue
        if recorded_later(plan.created_at, batch) or not fits(plan, batch, linked=False):
            continue
        return plan
    return None


def recorded_later(when: datetime | None, batch: AuditBatch) -> bool:
    """Recorded (the database's clock) after ``batch`` was journaled."""
    return when is not None and batch.recorded_at is not None and when > batch.recorded_at


def link_problem(plan: RecordedPlan, batch: AuditBatch) -> str | None:
    """Why the recorded link of ``batch``'s run to ``plan`` cannot be taken as where the
    run began (None: it can). A link is the job's word, and a writer's credentials can
    insert plans and links at any time; only the database's clock and the offsets the
    run really read cannot be made up afterwards. So the plan must have been recorded
    before the run's first batch was journaled, the link too, and the first batch must
    have started at the plan's offsets (as :func:`fits` decides for a matched plan)."""
    run = f"run {batch.run_id} is linked to plan {plan.id}"
    if recorded_later(plan.created_at, batch):
        return (f"{run}, but the plan was recorded at {plan.created_at:%Y-%m-%d %H:%M:%S}, "
                "after the run's first batch was journaled "
                f"({batch.recorded_at:%Y-%m-%d %H:%M:%S}): it cannot be where the run began")
    linked_at = plan.linked_at.get(batch.run_id)
    if recorded_later(linked_at, batch):
        return (f"{run}, but the link was recorded at {linked_at:%Y-%m-%d %H:%M:%S}, after "
                f"the run's first batch was journaled ({batch.recorded_at:%Y-%m-%d %H:%M:%S})")
    if not fits(plan, batch):
        return (f"{run}, but its first batch (batch {batch.batch_id}) did not start at the "
                "plan's offsets: its end offsets and record count contradict them")
    return None



def replay_reason(plans: Sequence[RecordedPlan], starts: Sequence[tuple[int | None, str]],
                  run_id: str, query_id: str, batch_id: int) -> str | None:
    """Why a batch of a run resuming a checkpoint read old offsets again on purpose: the
    checkpoint is a recovery's (a plan recorded with it, whose own run on that
    checkpoint the walk tied to it: ``starts``, (plan id, query id) of the runs walked),
    and the batch is one it ran to read an old batch again into state (None: not
    such a batch)."""
    for plan in plans:
        rec = recovery_of(plan)
        if rec is None or batch_id not in rec[0] or (plan.id, query_id) not in starts:
            continue
        return (f"run {run_id} read an old batch again into state (batch {batch_id} of the "
                f"recovered checkpoint), as plan {plan.id} recorded: {rec[1]}")
    return None


def recovery_of(plan: RecordedPlan) -> tuple[frozenset[int], str] | None:
    """A recovery a plan recorded (``state recover``; the journal kept the field only as
    the command writes it): the batch ids of the recovered checkpoint (the one the
    plan's own run started) that read old batches again into state, and the decision."""
    rec = plan.request.get("recovery")
    if not isinstance(rec, dict):
        return None
    return frozenset(rec["new_batches"]), rec["note"]
