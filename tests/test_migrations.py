"""The schema comes from Alembic migrations only, and matches schema.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from offset_journal.db import current_revision, resolve_url, upgrade
from offset_journal.schema import SCHEMA, metadata

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"query_runs", "batches", "batch_sources", "kafka_partitions", "rejected_events"}


def _inspect(url):
    engine = sa.create_engine(resolve_url(url))
    try:
        return sa.inspect(engine), engine
    except Exception:
        engine.dispose()
        raise


def test_upgrade_creates_the_journal(empty_database_url):
    assert current_revision(empty_database_url) is None
    upgrade(empty_database_url)
    assert current_revision(empty_database_url) == "0001"
    insp, engine = _inspect(empty_database_url)
    assert TABLES <= set(insp.get_table_names(schema=SCHEMA))
    engine.dispose()
    upgrade(empty_database_url)  # a second upgrade is a no-op
    assert current_revision(empty_database_url) == "0001"


def test_migrated_schema_matches_schema_module(journal_url):
    """Columns, types, nullability and indexes the code relies on are what Alembic made."""
    insp, engine = _inspect(journal_url)
    try:
        for table in metadata.tables.values():
            cols = {c["name"]: c for c in insp.get_columns(table.name, schema=SCHEMA)}
            assert set(cols) == {c.name for c in table.columns}, table.name
            for col in table.columns:
                assert cols[col.name]["nullable"] == col.nullable, (table.name, col.name)
                declared_type = col.type.compile(dialect=engine.dialect)
                actual_type = cols[col.name]["type"].compile(dialect=engine.dialect)
                assert actual_type == declared_type, (table.name, col.name)
            pk = insp.get_pk_constraint(table.name, schema=SCHEMA)["constrained_columns"]
            assert pk == [c.name for c in table.primary_key.columns], table.name
            declared = {i.name for i in table.indexes}
            actual = {i["name"] for i in insp.get_indexes(table.name, schema=SCHEMA)}
            assert declared <= actual, table.name
        uniques = insp.get_unique_constraints("batches", schema=SCHEMA)
        assert ["run_id", "batch_id"] in [u["column_names"] for u in uniques]
    finally:
        engine.dispose()


def test_downgrade_removes_it(journal_url):
    from alembic import command

    from offset_journal.db import alembic_config

    command.downgrade(alembic_config(journal_url), "base")
    insp, engine = _inspect(journal_url)
    assert not TABLES & set(insp.get_table_names(schema=SCHEMA))
    engine.dispose()


def test_plain_alembic_upgrade_head_works_from_the_repository(empty_database_url):
    env = dict(os.environ, OFFSET_JOURNAL_DATABASE_URL=empty_database_url)
    out = subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert current_revision(empty_database_url) == "0001"


def test_index_serves_last_offsets_lookup(journal_url):
    engine = sa.create_engine(resolve_url(journal_url))
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(r[0] for r in conn.execute(sa.text(
            "EXPLAIN SELECT id FROM offset_journal.batches WHERE query_name = :q "
            "ORDER BY trigger_at DESC, batch_id DESC LIMIT 1"), {"q": "x"}))
    engine.dispose()
    assert "batches_query_latest_idx" in plan
