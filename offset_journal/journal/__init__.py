"""The storage layer: journal records go in, offset history comes out; the only place
in the library that holds SQL (besides the schema and its migrations).

:class:`Journal` is one Postgres database; what comes out is plain data
(:mod:`offset_journal.rows`), and every error a public method raises is the journal's
own (:class:`~offset_journal.errors.JournalError`'s kinds), never SQLAlchemy's.
Public beside it: :mod:`.db`, :mod:`.schema`, :mod:`.roles`, :mod:`.server`. Its
modules, and where it stands among the packages: docs/architecture.md.

May import: the shared modules only.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..errors import (
    JournalConnectionLost,
    JournalConstraintError,
    JournalError,
    JournalPermissionError,
    JournalReadOnly,
    JournalRefused,
    JournalSchemaError,
    JournalUnavailable,
)
from ..rows import (
    FLAGGED_PROBLEMS,
    HISTORY_PAGE,
    RECENT_RUNS,
    Batch,
    FlaggedProblem,
    PruneResult,
    RecordedPlan,
    RecordedSavepoint,
    Run,
    RunBounds,
    SourceOffsets,
    SpoolLoss,
)
from ._aggregates import ReportRows
from ._errors import as_journal_error, translated, translating
from ._health import Health
from ._losses import Losses
from ._queries import Queries
from ._retention import prune
from ._write import Writes
from ._write import record_all as _record_all
from ._write import record_each as _record_each

Connection = sa.Connection
"""A connection to the journal's database, for a caller that holds one across calls
(the listener's writer); its errors are translated by :func:`translated`."""


@translating
class Journal(Writes, Queries, Health, Losses):
    """The offset journal in one Postgres database.

    ``Journal(url)`` opens no connection until first used. Reading methods answer for a
    *query name*, which stays the same across checkpoints while query ids do not. Its
    methods raise only :class:`JournalError` and its kinds (``JournalUnavailable``,
    ``JournalReadOnly``, ``JournalSchemaError``, ``JournalRefused``, ...), never
    SQLAlchemy's or the driver's errors.
    """

    def prune(self, before: datetime, *, query_name: str | None = None,
              dry_run: bool = False, chunk: int = 5000,
              savepoints: Collection[int] | None = None) -> PruneResult:
        """Delete batches triggered before ``before`` (each query's newest is kept, and
        the batches of the recorded ``savepoints``); see
        :func:`offset_journal.journal._retention.prune`."""
        return prune(self, before, query_name=query_name, dry_run=dry_run, chunk=chunk,
                     savepoints=savepoints)


__all__: Sequence[str] = ["FLAGGED_PROBLEMS", "HISTORY_PAGE", "RECENT_RUNS", "Batch",
                          "Connection", "FlaggedProblem", "Journal", "JournalConnectionLost",
                          "JournalConstraintError", "JournalError", "JournalPermissionError",
                          "JournalReadOnly", "JournalRefused", "JournalSchemaError",
                          "JournalUnavailable", "PruneResult",
                          "RecordedPlan", "RecordedSavepoint", "ReportRows", "Run",
                          "RunBounds", "SourceOffsets", "SpoolLoss", "record_all", "record_each",
                          "as_journal_error", "translated"]


def record_all(journal: Journal, records: Any, conn: Connection) -> int:
    """Record runs and batches in ``conn``'s transaction (journal/_write.py)."""
    with translated():
        return _record_all(journal, records, conn)


def record_each(journal: Journal, records: Any, conn: Connection) -> list[bool]:
    """Record runs and batches in ``conn``'s transaction; for each, whether it was a
    batch new to the journal (journal/_write.py)."""
    with translated():
        return _record_each(journal, records, conn)
