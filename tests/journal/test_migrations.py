"""The schema comes from Alembic migrations only, and matches schema.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from offset_journal.journal.db import current_revision, resolve_url, upgrade
from offset_journal.journal.schema import SCHEMA, metadata

ROOT = Path(__file__).resolve().parents[2]


def _head() -> str:
    """The newest migration, from the migrations themselves (several branches add
    migrations at once; the lead chains them, so no test names the head's id)."""
    from alembic.script import ScriptDirectory

    from offset_journal.journal.db import alembic_config

    head = ScriptDirectory.from_config(alembic_config("postgresql://x@localhost/x")
                                       ).get_current_head()
    assert head is not None
    return head


HEAD = _head()
TABLES = {"query_runs", "batches", "batch_sources", "kafka_layouts", "kafka_partition_rows",
          "rejected_events", "spool_losses", "restart_plans", "plan_runs"}
VIEWS = {"kafka_partitions", "source_offsets", "partition_lag", "batch_freshness"}


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
    assert current_revision(empty_database_url) == HEAD
    insp, engine = _inspect(empty_database_url)
    assert TABLES <= set(insp.get_table_names(schema=SCHEMA))
    assert VIEWS <= set(insp.get_view_names(schema=SCHEMA))
    engine.dispose()
    upgrade(empty_database_url)  # a second upgrade is a no-op
    assert current_revision(empty_database_url) == HEAD


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
            checks = {c.name for c in table.constraints if isinstance(c, sa.CheckConstraint)}
            made = {c["name"] for c in insp.get_check_constraints(table.name, schema=SCHEMA)}
            assert checks <= made, table.name
        uniques = insp.get_unique_constraints("batches", schema=SCHEMA)
        assert ["run_id", "batch_id"] in [u["column_names"] for u in uniques]
    finally:
        engine.dispose()


def test_downgrade_removes_it(journal_url):
    from alembic import command

    from offset_journal.journal.db import alembic_config

    command.downgrade(alembic_config(journal_url), "base")
    insp, engine = _inspect(journal_url)
    assert not TABLES & set(insp.get_table_names(schema=SCHEMA))
    engine.dispose()


def test_plain_alembic_upgrade_head_works_from_the_repository(empty_database_url):
    env = dict(os.environ, OFFSET_JOURNAL_DATABASE_URL=empty_database_url)
    out = subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert current_revision(empty_database_url) == HEAD


def test_index_serves_last_offsets_lookup(journal_url):
    engine = sa.create_engine(resolve_url(journal_url))
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(r[0] for r in conn.execute(sa.text(
            "EXPLAIN SELECT id FROM offset_journal.batches WHERE query_name = :q "
            "ORDER BY trigger_at DESC, batch_id DESC LIMIT 1"), {"q": "x"}))
    engine.dispose()
    assert "batches_query_latest_idx" in plan


def _journal_two_batches(url):
    from offset_journal import Journal
    from offset_journal.records import batch_from_progress
    from tests.payloads import kafka_source, progress

    with Journal(url) as j:
        for b in (0, 1):
            j.record_batch(batch_from_progress(progress(b, run_id="run-t", sources=[
                kafka_source("t", {"t": {"0": b, "1": b}} if b else None,
                             {"t": {"0": b + 1, "1": b + 1}}),
                kafka_source("u", None, {"u": {"0": 7}})])))
    engine = sa.create_engine(resolve_url(url))
    with engine.connect() as conn:
        pks = conn.execute(sa.text(
            "select id from offset_journal.batches order by batch_id")).scalars().all()
    return engine, pks


def _count_partitions(conn, pk=None):
    return conn.execute(sa.text(
        "select count(*) from offset_journal.kafka_partitions "
        "where cast(:pk as bigint) is null or batch_pk = :pk"), {"pk": pk}).scalar_one()


def test_partition_rows_need_their_source_row(journal_url):
    """Migration 0002 replaced the per-row foreign key by a per-statement check: rows
    without their batch_sources row are still refused, by INSERT, COPY and UPDATE."""
    import psycopg

    engine, (pk0, _pk1) = _journal_two_batches(journal_url)
    try:
        with engine.connect() as conn:
            before = _count_partitions(conn)
        assert before == 6
        bad = [
            "insert into offset_journal.kafka_partition_rows values (999999, 0, 't', 0, 1, 2)",
            # one good row and one orphan in the same statement: all refused
            "insert into offset_journal.kafka_partition_rows values (:pk, 0, 't', 5, 1, 2), "
            "(:pk, 7, 't', 0, 1, 2)",
            # through the view, as listeners of releases before 0013 write
            "insert into offset_journal.kafka_partitions values (:pk, 7, 't', 0, 1, 2)",
        ]
        for statement in bad:
            with engine.connect() as conn:
                try:
                    conn.execute(sa.text(statement), {"pk": pk0})
                    raise AssertionError(f"accepted: {statement}")
                except sa.exc.IntegrityError as exc:
                    assert "without their batch_sources row" in str(exc.orig)
        dsn = sa.engine.make_url(resolve_url(journal_url)).set(
            drivername="postgresql").render_as_string(False)
        with psycopg.connect(dsn) as raw:
            try:
                with raw.cursor() as cur, cur.copy(
                        "COPY offset_journal.kafka_partitions (batch_pk, source_index, topic, "
                        "partition, start_offset, end_offset) FROM STDIN") as copy:
                    copy.write_row((pk0, 0, "t", 9, 1, 2))
                    copy.write_row((123456789, 0, "t", 0, 1, 2))
                raise AssertionError("COPY of an orphan row accepted")
            except psycopg.errors.ForeignKeyViolation:
                pass
        with engine.connect() as conn:
            assert _count_partitions(conn) == before
    finally:
        engine.dispose()


def test_deleting_batches_deletes_their_partition_rows(journal_url):
    """ON DELETE CASCADE, as the foreign key had: through batches -> batch_sources ->
    kafka_partitions; a source key in use cannot change; TRUNCATE empties both."""
    engine, (pk0, pk1) = _journal_two_batches(journal_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("delete from offset_journal.batches where id = :pk"),
                         {"pk": pk0})
            assert _count_partitions(conn, pk0) == 0
            assert _count_partitions(conn, pk1) == 3
        with engine.begin() as conn:
            conn.execute(sa.text("delete from offset_journal.batch_sources "
                                 "where batch_pk = :pk and source_index = 1"), {"pk": pk1})
            assert _count_partitions(conn, pk1) == 2
        with engine.connect() as conn:  # rows of the previous releases' shape
            conn.execute(sa.text("insert into offset_journal.kafka_partitions "
                                 "values (:pk, 0, 'old', 0, 1, 2)"), {"pk": pk1})
            try:
                conn.execute(sa.text("update offset_journal.batch_sources set source_index = 5 "
                                     "where batch_pk = :pk"), {"pk": pk1})
                raise AssertionError("source key changed under its partition rows")
            except sa.exc.IntegrityError as exc:
                assert "still used by kafka_partition_rows" in str(exc.orig)
        with engine.begin() as conn:
            # a key no partition row uses may change
            conn.execute(sa.text("insert into offset_journal.batch_sources "
                                 "(batch_pk, source_index, kind) values (:pk, 8, 'other')"),
                         {"pk": pk1})
            conn.execute(sa.text("update offset_journal.batch_sources set source_index = 9 "
                                 "where batch_pk = :pk and source_index = 8"), {"pk": pk1})
            conn.execute(sa.text("truncate offset_journal.batch_sources"))
            assert _count_partitions(conn) == 0
    finally:
        engine.dispose()


def test_downgrade_to_0001_restores_the_foreign_key_and_offsets_json(journal_url):
    from alembic import command

    from offset_journal.journal.db import alembic_config

    engine, _ = _journal_two_batches(journal_url)
    try:
        command.downgrade(alembic_config(journal_url), "0001")
        fks = sa.inspect(engine).get_foreign_keys("kafka_partitions", schema=SCHEMA)
        assert [(f["referred_table"], f["constrained_columns"]) for f in fks] == [
            ("batch_sources", ["batch_pk", "source_index"])]
        with engine.connect() as conn:
            assert _count_partitions(conn) == 6  # journaled rows survive both ways
            # 0003's downgrade wrote the Kafka offsets JSON back for the older code.
            assert conn.execute(sa.text(
                "select array_agg(end_offset order by batch_pk, source_index) "
                "from offset_journal.batch_sources")).scalar_one() == [
                {"t": {"0": 1, "1": 1}}, {"u": {"0": 7}}, {"t": {"0": 2, "1": 2}}, {"u": {"0": 7}}]
        command.upgrade(alembic_config(journal_url), "head")
        assert current_revision(journal_url) == HEAD
        assert sa.inspect(engine).get_foreign_keys("kafka_partitions", schema=SCHEMA) == []
        with engine.connect() as conn:
            assert _count_partitions(conn) == 6
    finally:
        engine.dispose()


def test_0015_downgrade_gives_the_views_back_as_others_left_them(empty_database_url):
    """0015's downgrade drops and creates the three views again (a view's column cannot
    be dropped): grants with their grant option, grants on single columns, comments a
    DBA wrote and the owner come back as they were at 0014."""
    import uuid

    from alembic import command

    from offset_journal.journal.db import alembic_config

    url = empty_database_url
    upgrade(url, "0014_batch_in_one_call")
    role = f"oj_dg_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    snapshot = sa.text("""
        SELECT c.relname, c.relowner::regrole::text, c.relacl::text,
               (SELECT array_agg(a.attname || '=' || a.attacl::text ORDER BY a.attname)
                FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attacl IS NOT NULL),
               (SELECT array_agg(d.objsubid || ':' || d.description ORDER BY d.objsubid)
                FROM pg_description d WHERE d.objoid = c.oid)
        FROM pg_class c
        WHERE c.relnamespace = 'offset_journal'::regnamespace
          AND c.relname IN ('kafka_partitions', 'source_offsets', 'partition_lag')
        ORDER BY c.relname""")
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE ROLE {role}")
        conn.exec_driver_sql(f"GRANT SELECT ON offset_journal.kafka_partitions TO {role} "
                             "WITH GRANT OPTION")
        conn.exec_driver_sql(f"GRANT SELECT (topic, lag) ON offset_journal.partition_lag "
                             f"TO {role}")
        conn.exec_driver_sql("GRANT SELECT ON offset_journal.source_offsets TO PUBLIC")
        conn.exec_driver_sql("COMMENT ON COLUMN offset_journal.partition_lag.lag IS "
                             "'a DBA''s note'")
        before = conn.execute(snapshot).all()
    upgrade(url)
    command.downgrade(alembic_config(url), "0014_batch_in_one_call")
    with engine.begin() as conn:
        after = conn.execute(snapshot).all()
        conn.exec_driver_sql(f"DROP OWNED BY {role}")
        conn.exec_driver_sql(f"DROP ROLE {role}")
    engine.dispose()
    assert after == before
    assert "WITH GRANT OPTION" not in str(before) and f"{role}=r*" in str(before)


def test_a_command_on_a_journal_older_than_this_release_says_so(empty_database_url, capsys):
    from offset_journal.cli import main
    from tests.support import journal_batches, kafka_progress, one_error_line

    upgrade(empty_database_url, "0014_batch_in_one_call")
    journal_batches(empty_database_url, [kafka_progress(0, None, {"t": {"0": 5}}, minute=0)])
    code = main(["--database-url", empty_database_url, "history", "orders"])
    line = one_error_line(code, capsys.readouterr().err)
    assert "older than this release (at 0014_batch_in_one_call)" in line
    assert "offset-journal db upgrade" in line


def test_0018_downgrade_refuses_while_plans_start_from_a_savepoint(journal_url):
    """A plan from a savepoint is a decision the audit reads: the downgrade refuses,
    naming them, instead of deleting them (and their links to runs)."""
    import pytest
    from alembic import command

    from offset_journal.journal.db import alembic_config
    from tests.payloads import sql_execute

    # Later migrations (each its own transaction) first: what is refused is 0018's step.
    command.downgrade(alembic_config(journal_url), "0018_savepoints")
    sql_execute(journal_url, "INSERT INTO offset_journal.restart_plans (query_name, position, "
                "mode, command, ok, request, options, kafka_offsets) VALUES ('q', "
                "'savepoint', 'stateless', 'plan', true, '{}', '{}', '[]')")
    # Down to 0018 first: each migration is its own transaction, so the ones after it
    # would be undone before 0018 refuses.
    command.downgrade(alembic_config(journal_url), "0018_savepoints")
    with pytest.raises(sa.exc.DBAPIError, match=r"downgrade below 0018_savepoints refused: 1 "
                                                 r"restart plan\(s\) start from a savepoint"):
        command.downgrade(alembic_config(journal_url), "0017_retention_forecasts")
    assert current_revision(journal_url) == "0018_savepoints"  # nothing changed
    sql_execute(journal_url, "DELETE FROM offset_journal.restart_plans")
    command.downgrade(alembic_config(journal_url), "0017_retention_forecasts")
    assert current_revision(journal_url) == "0017_retention_forecasts"


def test_0019_keeps_recorded_losses_and_its_downgrade_refuses_while_it_holds_some(journal_url):
    """The lost rows recorded before 0019 become recorded losses; a recorded loss is
    what check and the audit report until acknowledged: the downgrade refuses to drop
    it, naming how many, instead of deleting it."""
    import pytest
    from alembic import command

    from offset_journal.journal.db import alembic_config
    from tests.payloads import sql_execute, sql_rows

    command.downgrade(alembic_config(journal_url), "0018_savepoints")
    sql_execute(journal_url, "INSERT INTO offset_journal.retention_forecasts (query_name, "
                "source_index, topic, partition, status, next_offset, log_start, log_end, "
                "unread, lost) VALUES ('q', 0, 't', 3, 'lost', 100, 160, 500, 340, 60)")
    command.upgrade(alembic_config(journal_url), "0019_recorded_losses")
    assert sql_rows(journal_url, "SELECT query_name, topic, partition, first_offset, "
                    "end_offset FROM offset_journal.retention_losses") == [("q", "t", 3, 100, 160)]
    with pytest.raises(sa.exc.DBAPIError, match=r"downgrade below 0019_recorded_losses "
                                                 r"refused: 1 data loss\(es\) recorded"):
        command.downgrade(alembic_config(journal_url), "0018_savepoints")
    assert current_revision(journal_url) == "0019_recorded_losses"
    sql_execute(journal_url, "DELETE FROM offset_journal.retention_losses")
    command.downgrade(alembic_config(journal_url), "0018_savepoints")
    assert current_revision(journal_url) == "0018_savepoints"
