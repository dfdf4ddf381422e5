"""The storage layer: journal records go in, offset history comes out; the only place
in the library that holds SQL (besides the schema and its migrations).

:class:`Journal` is one Postgres database. Every statement is built with SQLAlchemy Core
(parameterized) or is constant text over :data:`~offset_journal.journal.schema.SCHEMA`; Kafka
partition rows, the bulk of a batch, go in with one COPY. Recording the same (run id,
batch id) twice leaves one row, so a spooled event can be replayed any number of times.

The modules, in the order data flows:

* ``_base.py``: the connection (an engine opened lazily, reads that say when the schema
  is missing);
* ``_errors.py``: SQLAlchemy's and the driver's errors translated, once, into the
  journal's own (``JournalUnavailable``, ``JournalReadOnly``, ``JournalSchemaError``,
  ``JournalRefused``, ...): every public method of :class:`Journal` raises only those;
* ``_batch_args.py``: a batch as the arguments of its one call (pure);
* ``_driver.py``: that call on psycopg, in a transaction or alone in one round trip;
* ``_write.py``: runs, batches, rejected events, spool losses, restart plans and
  savepoints in;
* ``_batch_rows.py``: batches read back with their sources and partitions, in journal
  order;
* ``_read.py``: history, runs, plans and problems for people and plans;
* ``_plan_rows.py``: a recorded plan's row read back, fields no plan command writes left
  out with a note (pure);
* ``_queries.py`` with ``_aggregates.py``: what the planner, the audit, the report,
  ``rejected`` and checkpoint import read, as named methods;
* ``_health.py``: the fleet's health in a few statements (``check``) and the recorded
  retention forecasts (``retention --record``);
* ``_losses.py``: the losses those recordings found, kept until acknowledged;
* ``_retention.py``: prune;
* ``_arrays.py``, ``_checks.py``, ``_write_state.py``: a Kafka source's offsets as arrays
  over a layout, what is checked as a batch is written, what a Journal remembers
  between batches (pure).

Public beside :class:`Journal`: :mod:`.db` (URLs, engines, schema upgrades),
:mod:`.schema` (the tables), :mod:`.roles` (least-privilege grants) and :mod:`.server`
(which server a connection is on, and the guard used for failover).

What comes out is plain data (:mod:`offset_journal.rows`).

May import: the shared modules only. Nothing above it (restart, audit, health, ...):
what those need from storage is in :mod:`offset_journal.rows`.
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
