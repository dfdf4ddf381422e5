"""Migrations as SQL a DBA can review and apply: Alembic's offline mode (``--sql``).

The script is applied with ``psql`` to an EMPTY database, and what it builds is compared
with a database that ``db upgrade`` migrated: tables, columns, constraints, indexes,
triggers, functions, views, comments and the version row.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from offset_journal.journal.db import (
    alembic_config,
    current_revision,
    libpq_url,
    resolve_url,
    upgrade,
)
from offset_journal.journal.schema import SCHEMA

ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("offset-journal")
PSQL = shutil.which("psql")

pytestmark = pytest.mark.skipif(PSQL is None, reason="the psql client is not installed")


def _head() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("postgresql://x@localhost/x")
                                       ).get_current_head()
    assert head is not None
    return head


HEAD = _head()

# Everything the journal's schema is made of, from the catalogs, in a stable order.
CATALOG = {
    "columns": """
        SELECT table_name, ordinal_position, column_name, data_type, is_nullable,
               column_default, is_identity, col_description(
                   (quote_ident(table_schema) || '.' || quote_ident(table_name))::regclass,
                   ordinal_position::int)
        FROM information_schema.columns WHERE table_schema = :s
        ORDER BY table_name, ordinal_position""",
    "constraints": """
        SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
        FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE n.nspname = :s ORDER BY 1, 2""",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = :s "
               "ORDER BY 1, 2",
    "triggers": """
        SELECT t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = :s AND NOT t.tgisinternal ORDER BY 1, 2""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = :s ORDER BY 1, 2""",
    "views": "SELECT viewname, definition FROM pg_views WHERE schemaname = :s ORDER BY 1",
    "relations": """
        SELECT c.relname, c.relkind, obj_description(c.oid, 'pg_class')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = :s ORDER BY 1""",
    "version": "SELECT version_num FROM offset_journal.alembic_version WHERE :s = :s",
}


def _catalog(url: str) -> dict[str, list[tuple[object, ...]]]:
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return {name: [tuple(row) for row in conn.execute(sa.text(sql), {"s": SCHEMA})]
                    for name, sql in CATALOG.items()}
    finally:
        engine.dispose()


def _pg_dump(url: str) -> str | None:
    """``pg_dump --schema-only`` of the journal's schema, by a pg_dump of the server's
    major version (pgserver ships one; Debian's client may be older), else None."""
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        major = int(conn.execute(sa.text("SHOW server_version_num")).scalar_one()) // 10000
    engine.dispose()
    candidates = [shutil.which("pg_dump")]
    try:
        from pgserver._commands import POSTGRES_BIN_PATH

        candidates.insert(0, str(POSTGRES_BIN_PATH / "pg_dump"))
    except ImportError:
        pass
    libpq = libpq_url(url)
    for exe in filter(None, candidates):
        version = subprocess.run([exe, "--version"], capture_output=True, text=True)
        found = re.search(r"(\d+)\.\d+", version.stdout)
        if version.returncode or not found or int(found.group(1)) != major:
            continue
        dump = subprocess.run([exe, "--schema-only", f"--schema={SCHEMA}", "--no-owner",
                               "-d", libpq], capture_output=True, text=True, timeout=120)
        assert dump.returncode == 0, dump.stderr
        return "\n".join(line for line in dump.stdout.splitlines()
                         if not line.startswith(("\\restrict", "\\unrestrict")))
    return None


def _psql(url: str, script: str) -> subprocess.CompletedProcess[str]:
    """Apply ``script`` as a DBA would: psql, stop at the first error."""
    libpq = libpq_url(url)
    assert PSQL is not None
    return subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", libpq],
                          input=script, capture_output=True, text=True, timeout=120)


def _env_without_url() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "OFFSET_JOURNAL_DATABASE_URL"}


@pytest.fixture
def migrated_url(journal_server):
    """A second database, migrated online by ``db upgrade``."""
    url = journal_server.create_database("oj_online")
    upgrade(url)
    yield url
    journal_server.drop_database(url)


def test_plain_alembic_sql_script_runs_on_an_empty_database(empty_database_url):
    """The defect: the offline script created the version table before its schema."""
    env = dict(_env_without_url(), OFFSET_JOURNAL_DATABASE_URL=empty_database_url)
    out = subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head", "--sql"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert current_revision(empty_database_url) is None  # offline: nothing was touched
    applied = _psql(empty_database_url, out.stdout)
    assert applied.returncode == 0, applied.stderr
    assert current_revision(empty_database_url) == HEAD


def test_db_upgrade_sql_builds_what_db_upgrade_builds(journal_server, empty_database_url,
                                                      migrated_url):
    # No database URL at all: a DBA reviews the script where the journal is not reachable.
    out = subprocess.run([str(EXE), "db", "upgrade", "--sql"], env=_env_without_url(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    script = out.stdout
    assert re.search(rf"CREATE SCHEMA IF NOT EXISTS {SCHEMA};", script)
    assert script.index("CREATE SCHEMA") < script.index(f"CREATE TABLE {SCHEMA}.alembic_version")
    assert out.stderr == ""

    applied = _psql(empty_database_url, script)
    assert applied.returncode == 0, applied.stderr
    catalog = _catalog(empty_database_url)
    assert all(catalog.values()), [name for name, rows in catalog.items() if not rows]
    assert catalog == _catalog(migrated_url)
    assert catalog["version"] == [(HEAD,)]
    dumped = _pg_dump(empty_database_url)
    assert dumped is not None or journal_server.kind != "pgserver"  # pgserver ships one
    if dumped is not None:  # a pg_dump of the server's version is on the machine
        assert "CREATE TRIGGER" in dumped and "CREATE FUNCTION" in dumped
        assert dumped == _pg_dump(migrated_url)

    current = subprocess.run([str(EXE), "--database-url", empty_database_url, "db", "current"],
                             env=_env_without_url(), capture_output=True, text=True,
                             timeout=120)
    assert current.returncode == 0, current.stderr
    assert current.stdout.strip() == f"{HEAD} (head)"


def test_db_upgrade_sql_from_a_revision_upgrades_an_older_journal(journal_server,
                                                                   migrated_url):
    """``--from REV`` (what `db current` says): only the newer migrations, as SQL."""
    url = journal_server.create_database("oj_old")
    try:
        upgrade(url, "0003")
        out = subprocess.run([str(EXE), "db", "upgrade", "--sql", "--from", "0003"],
                             env=_env_without_url(), capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert "CREATE TABLE offset_journal.query_runs" not in out.stdout
        assert "UPDATE offset_journal.alembic_version" in out.stdout
        applied = _psql(url, out.stdout)
        assert applied.returncode == 0, applied.stderr
        assert current_revision(url) == HEAD
        assert _catalog(url) == _catalog(migrated_url)
    finally:
        journal_server.drop_database(url)


def test_db_upgrade_sql_bad_input_is_one_line(empty_database_url):
    for argv, says in ((["--sql", "--from", "nope"], "Can't locate revision"),
                       (["--from", "0003"], "--from goes with --sql")):
        out = subprocess.run([str(EXE), "--database-url", empty_database_url, "db", "upgrade",
                              *argv], env=_env_without_url(), capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 2, out.stderr
        assert out.stdout == ""
        assert out.stderr.startswith("offset-journal: error: ") and says in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert current_revision(empty_database_url) is None  # nothing was changed
