"""``offset-journal report``: one self-contained HTML file about a query's journal.

:func:`build_report` reads a :class:`~offset_journal.journal.Journal` (_gather.py: SQL
aggregates) and renders the page (_render.py: pure, from the plain data in model.py).

Its modules, and where it stands among the packages: docs/architecture.md.

May import: :mod:`offset_journal.audit`, :mod:`offset_journal.journal` and the shared
modules.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..audit import audit_query
from ._audited import audit_findings, plan_markers
from ._gather import (
    DEFAULT_BUCKETS,
    DEFAULT_TOP,
    NothingToReport,
    ReportError,
    gather,
    journal_findings,
    restart_markers,
)
from ._render import render
from .model import ReportData, ReportFinding, RestartMarker, RunBar

if TYPE_CHECKING:
    from ..journal import Journal

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_BUCKETS", "DEFAULT_TOP", "ReportFinding", "NothingToReport", "ReportData",
           "ReportError", "RestartMarker", "RunBar", "build_report", "gather", "journal_findings",
           "render", "restart_markers", "write_report"]


def build_report(journal: Journal, query_name: str, *, since: datetime | None = None,
                 audit: bool = True, **options: Any) -> str:
    """The report of ``query_name`` as HTML (``options``: see :func:`gather`). With
    ``audit``, the continuity audit runs first: its gaps and overlaps are highlighted
    beside what the journal flagged, and each restart is marked with its recorded plan."""
    if audit and "findings" not in options:
        found = audit_query(journal, query_name, since)
        options["findings"] = journal_findings(journal, query_name) + audit_findings(found)
        options.setdefault("restarts", plan_markers(found))
    return render(gather(journal, query_name, since=since, **options))


def write_report(journal: Journal, query_name: str, path: str | Path, *,
                 since: datetime | None = None, **options: Any) -> Path:
    """Write the report to ``path`` (replaced whole: written beside it, then renamed)."""
    html = build_report(journal, query_name, since=since, **options)
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(html, encoding="utf-8")
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ReportError(f"cannot write the report to {target}: "
                          f"{exc.strerror or type(exc).__name__}") from None
    log.info("offset-journal: report of %s written to %s (%d bytes)", query_name, target,
             len(html.encode("utf-8")))
    return target
