"""The continuity audit's results as the report's findings and restart markers.

Pure: from an :class:`~offset_journal.audit.AuditReport` (the audit's own plain data) to
the report's :class:`~.model.Finding` and :class:`~.model.RestartMarker`. The I/O (running
the audit) is :func:`offset_journal.report.build_report`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..audit.model import PLANNED
from .gather import restart_markers
from .model import Finding, RestartMarker, RunSpan

if TYPE_CHECKING:
    from ..audit import AuditReport
    from ..audit.model import Finding as AuditFinding

MAX_AUDIT_FINDINGS = 200
"""The report highlights at most this many (unexplained first); the audit command lists
them all."""


def audit_findings(report: AuditReport) -> list[Finding]:
    """The audit's findings, unexplained ones first, then planned ones (shown, not
    defects); at most :data:`MAX_AUDIT_FINDINGS`."""
    ordered = report.unexplained + report.planned
    return [_finding(f) for f in ordered[:MAX_AUDIT_FINDINGS]]


def _finding(f: AuditFinding) -> Finding:
    earlier_runs = tuple(dict.fromkeys(b.run_id for b in f.earlier if b.run_id != f.run_id))
    plan = f" (plan {f.plan_id})" if f.plan_id is not None else ""
    first = f.batches[0] if f.batches else None
    return Finding(
        kind=f"audit {f.kind}",
        message=f"{f.status}{plan}: {f.reason}",
        topic=f.topic, partition=f.partition, offset_from=f.first, offset_to=f.end,
        records=f.records, runs=(f.run_id, *earlier_runs),
        batches=tuple(b.label() for b in [*f.batches, *f.earlier]),
        at=first.trigger_at if first else None,
        defect=f.status != PLANNED,
    )


def plan_markers(report: AuditReport) -> Callable[[Sequence[RunSpan]], list[RestartMarker]]:
    """Restart markers that name the recorded plan each run started from (as the audit
    tied them: recorded by the job, or matched by offsets)."""
    started = {r.run_id: r for r in report.runs}

    def markers(runs: Sequence[RunSpan]) -> list[RestartMarker]:
        out = []
        for marker in restart_markers(runs):
            run = started.get(marker.run_id)
            if run is not None and run.plan_id is not None:
                marker = replace(marker, plan=f"plan {run.plan_id}: {run.position or '?'}, "
                                              f"{run.link or 'linked'}")
            out.append(marker)
        return out

    return markers
