"""Least-privilege database roles for the journal: a writer, a reader and a planner.

* The **writer** is what the listener connects as: it may read and add journal rows,
  and complete a run row when the query terminates (UPDATE of some ``query_runs``
  columns, each filled once), but it cannot delete, change batches, truncate, drop or
  create anything, nor set the columns the database fills in (``recorded_at``, ids).
* The **reader** is for people and tools reading the history (``offset-journal
  history``/``audit``, SQL dashboards): SELECT only. A reader's ``plan`` is handed
  out but not recorded (a warning says so).
* The **planner** is the reader plus INSERT on the plan tables (``restart_plans``,
  ``plan_runs``, ``savepoints``): people who plan restarts, so that the audit knows
  where each new run began. The writer may record plans too (jobs plan their own
  restarts with its URL). The planner also replaces the retention forecasts
  (``retention --record``: INSERT and DELETE on ``retention_forecasts``, which the
  writer only reads), records the losses it finds and acknowledges them (INSERT on
  ``retention_losses`` and ``loss_acknowledgements``, which the writer only reads).

The schema itself (``offset-journal db upgrade``) is created by the role that owns it;
neither role can change it. ``ALL TABLES``/``ALL SEQUENCES`` cover what exists when
the grants run: run :func:`grant` (``offset-journal db grant``) again after an upgrade
that adds tables. docs/security.md shows these statements; both come from here.

These are DDL statements: role and table names are identifiers, which Postgres does
not take as bind parameters, so each one goes through the dialect's identifier
quoting (:func:`quote_ident`), never plain string formatting.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql

from ..errors import GrantError, InvalidValueError
from ._errors import translating_call
from .schema import SCHEMA, metadata, views

JOURNAL_TABLES: tuple[str, ...] = tuple(t.name for t in metadata.tables.values())
"""The tables the listener writes (the schema also holds Alembic's version table)."""

JOURNAL_VIEWS: tuple[str, ...] = tuple(t.name for t in views.tables.values())
"""The views readers query (``kafka_partitions``, migration 0013); listeners of older
releases insert into it (an INSTEAD OF trigger keeps their rows)."""

_PREPARER = postgresql.dialect().identifier_preparer


def quote_ident(name: str) -> str:
    """A Postgres identifier, quoted when it needs to be (``oj_writer``, ``"Oj Writer"``)."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InvalidValueError(f"not a usable role or object name: {name!r}")
    return str(_PREPARER.quote(name))


def _quote_tables(names: tuple[str, ...]) -> str:
    return ", ".join(f"{quote_ident(SCHEMA)}.{quote_ident(n)}" for n in names)


# What the database sets, never the writer: the time a row was journaled (by the
# database's clock) and the identity keys.
_SET_BY_DATABASE = frozenset({"recorded_at", "created_at", "id", "first_recorded_at",
                              "last_recorded_at", "deleted_at"})

WRITE_FUNCTION = "journal_batch"
"""The function the writer journals a batch with (migration 0014): EXECUTE is PUBLIC's by
default, granted explicitly for journals where that default was revoked."""

PLAN_TABLES: tuple[str, ...] = ("restart_plans", "plan_runs", "savepoints",
                                "savepoint_deletions")
"""Where restart plans (migration 0008_decisions), savepoints (0018_savepoints) and their
deletions (0022) are recorded: the writer (jobs plan their own restarts with the
listener's URL, and a driver's savepoint schedule prunes with it) and the planner role
may add to them."""

FORECAST_TABLES: tuple[str, ...] = ("retention_forecasts",)
"""What ``offset-journal retention --record`` replaces (migration 0017): the planner role
(people and their cron jobs) may insert and delete its rows; the writer only reads it."""

LOSS_TABLES: tuple[str, ...] = ("retention_losses", "loss_acknowledgements")
"""The losses ``retention --record`` found and the decisions acknowledging them
(migration 0019): the planner role adds to them (and grows a loss's end offset, which
migration 0021's trigger lets only grow); the writer only reads them, so a job can
neither hide nor acknowledge a loss."""

LOSS_UPDATE_COLUMNS: tuple[str, ...] = ("end_offset", "last_recorded_at")
"""What a later recording of the same loss changes (more records found deleted)."""

RUN_UPDATE_COLUMNS: tuple[str, ...] = (
    "started_at", "terminated_at", "exception", "error_class", "host", "pid",
    "query_name", "named", "execution", "async_interval_ms", "kafka_cluster_id",
)
"""The query_runs columns the writer's upsert (journal.Journal.record_run) sets: a run
first seen through a batch gets its start, and every run its end; a trigger (migration
0004) lets each be filled once only."""


def _quote_columns(names: tuple[str, ...]) -> str:
    return ", ".join(quote_ident(c) for c in names)


def _quote_insert_columns(table: str) -> str:
    """The columns of ``table`` the writer may insert: all but those the database sets."""
    return _quote_columns(tuple(c.name for c in metadata.tables[f"{SCHEMA}.{table}"].columns
                                if c.name not in _SET_BY_DATABASE))


def writer_statements(role: str) -> list[str]:
    """GRANTs for the role the listener writes as."""
    guarded = ("query_runs", "batches", *PLAN_TABLES)
    free = tuple(t for t in JOURNAL_TABLES
                 if t not in guarded and t not in FORECAST_TABLES and t not in LOSS_TABLES)
    out = [
        f"GRANT USAGE ON SCHEMA {quote_ident(SCHEMA)} TO {quote_ident(role)}",
        # A writer granted by an older release held INSERT and UPDATE on whole tables:
        # take them back, the column grants below replace them.
        f"REVOKE INSERT, UPDATE ON TABLE {_quote_tables(guarded)} FROM {quote_ident(role)}",
        f"GRANT SELECT ON TABLE {_quote_tables(JOURNAL_TABLES + JOURNAL_VIEWS)} "
        f"TO {quote_ident(role)}",
        f"GRANT INSERT ON TABLE {_quote_tables(free + JOURNAL_VIEWS)} TO {quote_ident(role)}",
    ]
    out += [f"GRANT INSERT ({_quote_insert_columns(t)}) ON TABLE {_quote_tables((t,))} "
            f"TO {quote_ident(role)}" for t in guarded]
    # A run's row is completed when its termination event arrives.
    out.append(f"GRANT UPDATE ({_quote_columns(RUN_UPDATE_COLUMNS)}) ON TABLE "
               f"{_quote_tables(('query_runs',))} TO {quote_ident(role)}")
    # Identity columns (batches.id, rejected_events.id).
    out.append(
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {quote_ident(SCHEMA)} TO {quote_ident(role)}")
    # A batch is journaled by one call (migration 0014); it runs with the writer's rights.
    out.append(f"GRANT EXECUTE ON FUNCTION {quote_ident(SCHEMA)}.{quote_ident(WRITE_FUNCTION)} "
               f"TO {quote_ident(role)}")
    return out


def reader_statements(role: str) -> list[str]:
    """GRANTs for a role that reads the journal (and its schema version) only."""
    return [
        f"GRANT USAGE ON SCHEMA {quote_ident(SCHEMA)} TO {quote_ident(role)}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {quote_ident(SCHEMA)} TO {quote_ident(role)}",
    ]


def planner_statements(role: str) -> list[str]:
    """GRANTs for a role that reads the journal and records the restart plans it makes
    (``offset-journal plan``/``starting-offsets`` run by people): the reader's, and
    INSERT of the columns a plan sets on the plan tables. It cannot change or delete a
    recorded plan, nor write batches."""
    out = reader_statements(role)
    out += [f"GRANT INSERT ({_quote_insert_columns(t)}) ON TABLE {_quote_tables((t,))} "
            f"TO {quote_ident(role)}" for t in PLAN_TABLES]
    out.append(
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {quote_ident(SCHEMA)} TO {quote_ident(role)}")
    # Forecasts are replaced whole per query: no UPDATE, and nothing of the history.
    out.append(f"GRANT INSERT, DELETE ON TABLE {_quote_tables(FORECAST_TABLES)} "
               f"TO {quote_ident(role)}")
    # Losses and their acknowledgements are kept: added to, never deleted; a loss
    # recorded again grows its end.
    out += [f"GRANT INSERT ({_quote_insert_columns(t)}) ON TABLE {_quote_tables((t,))} "
            f"TO {quote_ident(role)}" for t in LOSS_TABLES]
    out.append(f"GRANT UPDATE ({_quote_columns(LOSS_UPDATE_COLUMNS)}) ON TABLE "
               f"{_quote_tables(LOSS_TABLES[:1])} TO {quote_ident(role)}")
    return out


def grant_statements(writer: str | None = None, reader: str | None = None, *,
                     database: str | None = None, planner: str | None = None) -> list[str]:
    """Every GRANT for a writer, a reader and/or a planner role, in the order to run them.

    With ``database``, CONNECT on it too (PUBLIC has it by default, unless revoked).
    """
    if not writer and not reader and not planner:
        raise InvalidValueError("name a writer role, a reader role, a planner role, or several")
    out: list[str] = []
    for role, statements in ((writer, writer_statements), (reader, reader_statements),
                             (planner, planner_statements)):
        if not role:
            continue
        if database:
            out.append(f"GRANT CONNECT ON DATABASE {quote_ident(database)} TO "
                       f"{quote_ident(role)}")
        out += statements(role)
    return out


@translating_call
def grant(database_url: str | None, writer: str | None = None, reader: str | None = None,
          planner: str | None = None) -> list[str]:
    """Run :func:`grant_statements` in the URL's database, in one transaction, as the
    URL's role (the schema's owner, or a superuser). Returns the statements run."""
    import sqlalchemy as sa

    from .db import make_engine

    engine = make_engine(database_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            database = conn.execute(sa.select(sa.func.current_database())).scalar_one()
            statements = grant_statements(writer, reader, database=database,
                                          planner=planner)
            # Postgres only warns when the role running a GRANT may not give the
            # privilege (SQLSTATE 01007; 01006 for a REVOKE): listen for it, and roll
            # everything back rather than report a grant that did not happen.
            refused: list[str] = []
            driver = conn.connection.driver_connection
            handler = _refusal_collector(refused)
            driver.add_notice_handler(handler)  # type: ignore[union-attr]
            try:
                for statement in statements:
                    _grant_one(conn, statement)
            finally:
                driver.remove_notice_handler(handler)  # type: ignore[union-attr]
            if refused:
                more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
                raise GrantError(f"nothing granted: {refused[0]}{more}; the role running "
                                 "`db grant` must own the journal schema")
    finally:
        engine.dispose()
    return statements



def _grant_one(conn: Any, statement: str) -> None:
    import sqlalchemy as sa

    try:
        conn.exec_driver_sql(statement)
    except sa.exc.ProgrammingError as exc:
        # A table, view or function this release grants on is not there yet.
        if getattr(exc.orig, "sqlstate", None) in ("42P01", "42883"):
            raise GrantError("nothing granted: the journal schema is older than this "
                             "release; run `offset-journal db upgrade` first") from None
        raise


def _refusal_collector(refused: list[str]) -> Any:
    def collect(diag: Any) -> None:
        if diag.sqlstate in ("01006", "01007"):
            refused.append(str(diag.message_primary))

    return collect
