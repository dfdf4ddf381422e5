"""Alembic environment for the offset journal, in Alembic's usual two shapes.

* Online (``alembic upgrade head``, ``offset-journal db upgrade``): migrations run on a
  connection. The URL comes from (first wins): a connection handed over in
  ``config.attributes["connection"]``, ``-x database_url=...``, the ``sqlalchemy.url``
  option, OFFSET_JOURNAL_DATABASE_URL; it is resolved by offset_journal.journal.db.resolve_url.
* Offline (``alembic upgrade head --sql``, ``offset-journal db upgrade --sql``): the
  migrations are written out as a SQL script for a DBA to review and apply, e.g. with
  psql. No database is needed (a URL, if one is given, only names the dialect).

The version table lives in the journal's own schema, so that schema is created here,
before Alembic creates or reads the version table: in offline mode it is the script's
first statement, so the script runs on an empty database. (Creating it in migration 0001
is too late: Alembic writes the version table before the first migration.)
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import context

from offset_journal.journal.db import SEARCH_PATH, ConfigError, make_engine, resolve_url
from offset_journal.journal.schema import SCHEMA

config = context.config
CREATE_SCHEMA = f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"
OPTIONS: dict[str, Any] = {"version_table_schema": SCHEMA, "include_schemas": True}


def _given_url() -> str | None:
    """The URL from ``-x database_url=...`` or ``sqlalchemy.url`` (else None)."""
    return (context.get_x_argument(as_dictionary=True).get("database_url")
            or config.get_main_option("sqlalchemy.url") or None)


def run_migrations_offline() -> None:
    """Write the migrations as SQL: the schema first, then the version table and DDL."""
    try:
        target: dict[str, Any] = {"url": resolve_url(_given_url())}
    except ConfigError:  # no URL: none is needed to write Postgres SQL
        target = {"dialect_name": "postgresql"}
    # paramstyle "named", as in Alembic's own template: with the driver's "pyformat" a
    # '%' in the migrations' SQL would be written out doubled.
    context.configure(literal_binds=True, dialect_opts={"paramstyle": "named"}, **target,
                      **OPTIONS)
    with context.begin_transaction():
        # What make_engine sets on every transaction online: names the migrations do not
        # qualify resolve in pg_catalog, never in a schema other roles may create in.
        context.execute(f"SET LOCAL search_path = {SEARCH_PATH}")
        context.execute(CREATE_SCHEMA)
        context.run_migrations()


def _run_on(connection: sa.Connection) -> None:
    connection.execute(sa.text(CREATE_SCHEMA))
    connection.commit()
    context.configure(connection=connection, transaction_per_migration=True, **OPTIONS)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on a connection (handed over, or opened from the URL)."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    try:
        url = resolve_url(_given_url())
    except ConfigError as exc:
        raise SystemExit(f"{exc} (or pass -x database_url=...)") from None
    engine = make_engine(url, poolclass=sa.pool.NullPool)  # the same engine, pooler-safe
    try:
        with engine.connect() as conn:
            _run_on(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
