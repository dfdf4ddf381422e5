"""Alembic environment for the offset journal.

The URL comes from (first wins): a connection handed over by offset_journal.db,
``-x database_url=...``, the ``sqlalchemy.url`` option, OFFSET_JOURNAL_DATABASE_URL.
The version table lives in the journal's own schema, created here if missing.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import context

SCHEMA = "offset_journal"
config = context.config


def _url() -> str:
    url = (
        context.get_x_argument(as_dictionary=True).get("database_url")
        or config.get_main_option("sqlalchemy.url")
        or os.environ.get("OFFSET_JOURNAL_DATABASE_URL")
    )
    if not url:
        raise SystemExit("no database URL: pass -x database_url=... "
                         "or set OFFSET_JOURNAL_DATABASE_URL")
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _run(connection: sa.Connection) -> None:
    connection.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
    connection.commit()
    context.configure(connection=connection, version_table_schema=SCHEMA,
                      include_schemas=True, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = sa.create_engine(_url(), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), literal_binds=True, version_table_schema=SCHEMA)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
