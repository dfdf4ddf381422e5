"""Recorded losses in the audit (pure): records retention deleted before the query read
them that no batch shows.

A job with ``failOnDataLoss=false`` reads on past records retention deleted: its next
batch starts where the last one ended and Spark skips the hole inside it, so the walk
(:mod:`._core`) sees no gap. ``offset-journal retention --record`` found them deleted
(:class:`~offset_journal.health_rows.RecordedLoss`); each becomes a **gap** here, unexplained
until a person acknowledges it (``offset-journal losses acknowledge``) or a restart
plan after the batch the query had reached accepted data loss there
(``--allow-data-loss``), then planned, with that decision as its reason. A loss inside
a gap the walk found already (a restart from a later offset) is that gap.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..formatting import format_time
from ..health_rows import RecordedLoss
from ..rows import RecordedPlan
from .model import GAP, PLANNED, UNEXPLAINED, AuditReport, Finding


def open_losses(losses: Iterable[RecordedLoss], plans: Sequence[RecordedPlan],
                ) -> list[RecordedLoss]:
    """The losses still to deal with: records no acknowledgement covers, in a partition
    no plan accepted data loss in."""
    return [x for x in losses if x.unacknowledged > 0 and x.accepted_by(plans) is None]


def _shown(f: Finding, loss: RecordedLoss) -> bool:
    """The walk's gap ``f`` holds the loss already."""
    return (f.kind == GAP and (f.topic, f.partition) == (loss.topic, loss.partition)
            and f.first is not None and f.end is not None
            and f.first <= loss.first_offset and loss.end_offset <= f.end)


def _finding(loss: RecordedLoss, plans: Sequence[RecordedPlan]) -> Finding:
    found = (f"records deleted by retention before being read, found by `offset-journal "
             f"retention --record` at {format_time(loss.first_recorded_at)}"
             + (f" after batch {loss.anchor_run_id}:{loss.anchor_batch_id}"
                if loss.anchor_run_id is not None else "")
             + ", that no batch shows skipped (Spark read on past them: failOnDataLoss=false)")
    plan = loss.accepted_by(plans)
    first, status = loss.first_offset, PLANNED
    if plan is not None:
        why = f"{found}; data loss accepted by plan {plan.id} (--allow-data-loss)"
    elif loss.unacknowledged == 0:
        why = f"{found}; {loss.acknowledgements[-1].label()}" if loss.acknowledgements \
            else f"{found}; acknowledged"
    else:
        first, status = loss.open_from, UNEXPLAINED
        why = (f"{found}; not acknowledged: once dealt with, `offset-journal losses "
               f"acknowledge {loss.query_name} --reason TEXT`")
    return Finding(GAP, status, loss.topic, loss.partition, first, loss.end_offset,
                   loss.anchor_run_id or "", [], plan_id=plan.id if plan else None,
                   reason=why, batch_count=0)


def add_recorded_losses(report: AuditReport, losses: Iterable[RecordedLoss],
                        plans: Sequence[RecordedPlan]) -> AuditReport:
    """``report`` with a gap for each recorded loss the walk did not find (with
    ``report.since``: those still open, and those recorded since then)."""
    walked = list(report.findings)
    for loss in losses:
        if any(_shown(f, loss) for f in walked):
            continue
        still_open = loss.unacknowledged > 0 and loss.accepted_by(plans) is None
        recorded = loss.last_recorded_at or loss.first_recorded_at
        if not still_open and report.since is not None and recorded < report.since:
            continue
        report.findings.append(_finding(loss, plans))
    return report
