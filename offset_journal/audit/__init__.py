"""The continuity audit: did the query skip or repeat anything, across its runs and
checkpoints? (``offset-journal audit QUERY``, :func:`audit_query` handed a Journal.)
The walk is pure (``_core``); its rules are in docs/audit-and-report.md, its modules
in docs/architecture.md.

May import: :mod:`offset_journal.journal` and the shared modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..rows import AuditBatch, AuditSource
from ._core import audit_batches
from ._losses import add_recorded_losses, open_losses
from ._plans import fits, match_plan
from ._report import format_json, format_table
from .model import (
    EXIT_CLEAN,
    EXIT_FINDINGS,
    GAP,
    OVERLAP,
    PLANNED,
    UNEXPLAINED,
    UNEXPLAINED_START,
    UNKNOWN_START,
    AuditReport,
    Finding,
    FindingKind,
    HistoryRef,
    RunStart,
    StartKind,
    Status,
)

if TYPE_CHECKING:
    from ._edge import audit_query, iter_audit_batches


def __getattr__(name: str) -> Any:
    # The edge reads the journal (SQLAlchemy): loaded on first use, so that the pure
    # walk and its model load without the database driver.
    if name in ("audit_query", "iter_audit_batches"):
        from . import _edge as edge

        return getattr(edge, name)
    raise AttributeError(f"module 'offset_journal.audit' has no attribute {name!r}")


__all__ = [
    "EXIT_CLEAN",
    "EXIT_FINDINGS",
    "GAP",
    "OVERLAP",
    "PLANNED",
    "UNEXPLAINED",
    "UNEXPLAINED_START",
    "UNKNOWN_START",
    "AuditBatch",
    "AuditReport",
    "AuditSource",
    "HistoryRef",
    "Finding",
    "FindingKind",
    "RunStart",
    "StartKind",
    "Status",
    "add_recorded_losses",
    "audit_batches",
    "audit_query",
    "fits",
    "format_json",
    "format_table",
    "iter_audit_batches",
    "match_plan",
    "open_losses",
]
