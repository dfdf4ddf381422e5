"""Upgrades in one call, as the audit reads them (pure): the journaled outcome of each
(a note), and a roll back, which explains why v1's run, resuming its own checkpoint,
reads again what v2 read.

A roll back's row (``command`` ``upgrade-result``, outcome ``rolled-back``) holds the
offsets v1 resumes from (where its last committed batch ended) and is linked to v1's
new run. The link is taken as the rules for any link say (:func:`._plans.link_problem`):
the row recorded, and the link, before the run's first batch was journaled; and that
batch started exactly at the row's offsets, as Spark reported them. The overlap the run
then shows (v2 had read those offsets, into its own sink) is planned.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..rows import AuditBatch, RecordedPlan
from ._plans import plan_offsets, recorded_later


def rollback_problem(plan: RecordedPlan, batch: AuditBatch) -> str | None:
    """Why the link of ``batch``'s run (one resuming a checkpoint) to roll back ``plan``
    cannot be taken (None: it can)."""
    run = f"run {batch.run_id} is linked to roll back {plan.id}"
    if recorded_later(plan.created_at, batch) or recorded_later(
            plan.linked_at.get(batch.run_id), batch):
        return (f"{run}, but the roll back or its link was recorded after the run's first "
                "batch was journaled: it cannot be where the run began")
    offsets = plan_offsets(plan)
    common = 0
    for source in batch.sources:
        for p in source.partitions:
            planned = offsets.get((p.topic, p.partition))
            if planned is None:
                continue
            common += 1
            if p.start != planned:
                return (f"{run}, but its first batch (batch {batch.batch_id}) started "
                        f"{p.topic}-{p.partition} at {p.start}, not at the {planned} v1 "
                        "was to resume from")
    return None if common else f"{run}, but its first batch reads none of its partitions"


def rollback_reason(plan: RecordedPlan, run_id: str) -> str:
    """Why a rolled-back v1 reads again what v2 read: planned."""
    info = plan.upgrade or {}
    why = "; ".join(info.get("reasons") or []) or "its verification failed"
    return (f"planned: roll back {plan.id}: v2 of upgrade plan {info.get('plan')} failed "
            f"({why}), and run {run_id} is v1 resumed on its own checkpoint after batch "
            f"{info.get('resumed_after', info.get('after_batch'))}: it reads again, into "
            "v1's sink, what v2 had read into its own")


def upgrade_notes(plans: Sequence[RecordedPlan]) -> list[str]:
    """One note per journaled upgrade outcome."""
    notes = []
    for plan in plans:
        info = plan.upgrade
        if info is None or plan.command != "upgrade-result":
            continue
        head = (f"upgrade {plan.id} by plan {info.get('plan')} (savepoint "
                f"{info.get('savepoint')}, after batch {info.get('after_batch')})")
        reasons = "; ".join(info.get("reasons") or [])
        batches = info.get("batches") or []
        if info["outcome"] == "upgraded":
            notes.append(f"{head}: v2 verified over {len(batches)} batch(es) on "
                         f"{info.get('new_checkpoint')}")
        elif info["outcome"] == "rolled-back":
            if plan.run_ids:
                notes.append(f"{head}: rolled back ({reasons}); v1 resumed "
                             f"{info.get('checkpoint')}: {', '.join(plan.run_ids)}")
            else:  # recorded before v1 started, and v1 did not start (or is not linked)
                notes.append(f"{head}: rolled back ({reasons}); no run of v1 is linked: "
                             f"v1 was not started again on {info.get('checkpoint')} by "
                             "the upgrade")
        else:
            notes.append(f"{head}: refused ({reasons}); v1 left on {info.get('checkpoint')}")
    return notes
