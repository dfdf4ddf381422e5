"""The continuity audit's results as the report's findings and restart markers.

Pure: from an :class:`~offset_journal.audit.AuditReport` (the audit's own plain data) to
the report's :class:`~.model.ReportFinding` and :class:`~.model.RestartMarker`. The I/O (running
the audit) is :func:`offset_journal.report.build_report`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..audit.model import PLANNED
from ._gather import restart_markers
from .model import ReportFinding, RestartMarker, RunBar

if TYPE_CHECKING:
    from ..audit import AuditReport
    from ..audit.model import Finding

MAX_AUDIT_FINDINGS = 200
"""The report highlights at most this many groups (unexplained first); the audit command
lists every finding."""
MAX_GROUP_LINES = 500
"""Partition lines kept in one group (the rest are counted), so the page stays small."""


def audit_findings(report: AuditReport) -> list[ReportFinding]:
    """The audit's findings grouped by what happened to whom (kind, status, the runs and
    the plan): one restart's gap across 1,000 partitions is one row with its partitions
    folded inside. Unexplained groups first, then planned ones (shown, not defects); at
    most :data:`MAX_AUDIT_FINDINGS`; then a row per recorded plan field the audit
    ignored."""
    groups: dict[tuple[object, ...], list[Finding]] = {}
    for f in report.unexplained + report.planned:
        groups.setdefault(_group_key(f), []).append(f)
    # A plan row's field no plan command writes (a row written by hand) is shown, not
    # a defect: the audit left it out.
    ignored = [ReportFinding(kind="audit ignored", message=note, defect=False)
               for note in report.ignored]
    return [_finding(g) for g in list(groups.values())[:MAX_AUDIT_FINDINGS]] + ignored


def _earlier_runs(f: Finding) -> tuple[str, ...]:
    return tuple(dict.fromkeys(b.run_id for b in f.earlier if b.run_id != f.run_id))


def _group_key(f: Finding) -> tuple[object, ...]:
    return (f.kind, f.status, f.run_id, _earlier_runs(f), f.plan_id)


def _finding(group: list[Finding]) -> ReportFinding:
    f = group[0]
    plan = f" (plan {f.plan_id})" if f.plan_id is not None else ""
    first = f.batches[0] if f.batches else None
    counts = [g.records for g in group]
    records = None if any(c is None for c in counts) else sum(c for c in counts if c)
    batches = tuple(dict.fromkeys(b.label() for g in group for b in [*g.batches, *g.earlier]))
    common = dict(kind=f"audit {f.kind}", records=records, runs=(f.run_id, *_earlier_runs(f)),
                  batches=batches[:20], at=first.trigger_at if first else None,
                  defect=f.status != PLANNED)
    if len(group) == 1:
        return ReportFinding(message=f"{f.status}{plan}: {f.reason}", topic=f.topic,
                       partition=f.partition, offset_from=f.first, offset_to=f.end,
                       **common)  # type: ignore[arg-type]
    topics = sorted({g.topic for g in group})
    lines = tuple(f"{g.topic}-{g.partition} [{_at(g.first)}, {_at(g.end)}): "
                  f"{_at(g.records)} records" for g in group[:MAX_GROUP_LINES])
    if len(group) > MAX_GROUP_LINES:
        lines += (f"and {len(group) - MAX_GROUP_LINES:,} more partitions",)
    return ReportFinding(
        message=(f"{f.status}{plan}: {f.kind} in {len(group):,} partitions of "
                 f"{', '.join(topics)}; the first: {f.reason}"),
        topic=topics[0] if len(topics) == 1 else None, partitions=lines,
        partition_count=len(group),
        **common)  # type: ignore[arg-type]


def _at(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def plan_markers(report: AuditReport) -> Callable[[Sequence[RunBar]], list[RestartMarker]]:
    """Restart markers that name the recorded plan each run started from (as the audit
    tied them: recorded by the job, or matched by offsets)."""
    started = {r.run_id: r for r in report.runs}

    def markers(runs: Sequence[RunBar]) -> list[RestartMarker]:
        out = []
        for marker in restart_markers(runs):
            run = started.get(marker.run_id)
            if run is not None and run.plan_id is not None:
                marker = replace(marker, plan=f"plan {run.plan_id}: {run.position or '?'}, "
                                              f"{run.link or 'linked'}")
            out.append(marker)
        return out

    return markers
