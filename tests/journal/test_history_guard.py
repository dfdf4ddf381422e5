"""The writer role journals new history and cannot rewrite old history:
source and partition rows only for batches of its own transaction, a run's row
only completed, never rewritten; and a plan does not hand out forged offsets silently.

Run as the writer role of a real Postgres (tests/journal/test_security.py's server and grants).
"""

# ruff: noqa: S608  (hostile SQL as a role would send it; values are uuids and ints)
from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from offset_journal import Journal
from offset_journal.cli import main as cli_main
from offset_journal.errors import JournalConstraintError, JournalRefused
from offset_journal.journal.db import resolve_url
from offset_journal.records import RunRecord, batch_from_progress
from offset_journal.restart import JournalFacts, KafkaFacts, compute_plan, plan_restart
from tests.payloads import kafka_source, progress
from tests.support import Secure, denied


def _rec(run: str, batch_id: int, end: int, when: str = "2024-01-01T00:00:00Z",
         name: str = "guarded") -> Any:
    return batch_from_progress(progress(
        batch_id, run_id=run, query_id="qid", name=name, timestamp=when,
        sources=[kafka_source("t", {"t": {"0": end - 1}}, {"t": {"0": end}})]))


def _admin(url: str, statement: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            result = conn.exec_driver_sql(statement)
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


def _old_batch(granted: Secure) -> tuple[str, int]:
    run = str(uuid.uuid4())
    with Journal(granted.writer_url) as j:
        j.record_run(RunRecord(query_id="qid", run_id=run, query_name="guarded", named=True,
                               started_at=datetime(2024, 1, 1, tzinfo=timezone.utc),
                               host="h", pid=1))
        assert j.record_batch(_rec(run, 0, 5))
    (pk,) = _admin(granted.admin_url, "select id from offset_journal.batches where run_id = '"
                   + run + "'")[0]
    return run, int(pk)


def test_the_writer_journals_batches_with_their_sources_and_partitions(
        granted: Secure) -> None:
    run, pk = _old_batch(granted)
    # Also with the batch inside a savepoint, as a writer retrying one event at a time does.
    engine = sa.create_engine(resolve_url(granted.writer_url), poolclass=sa.pool.NullPool)
    with Journal(engine=engine) as j, engine.begin() as conn:
        with conn.begin_nested():
            assert j.record_batch(_rec(run, 1, 6), conn)
        with conn.begin_nested():
            assert j.record_batch(_rec(run, 2, 7), conn)
    with Journal(granted.admin_url) as j:
        assert [b.source(0).end_offset for b in j.history("guarded", run_id=run)] == [
            {"t": {"0": 5}}, {"t": {"0": 6}}, {"t": {"0": 7}}]


def test_the_writer_cannot_add_offsets_to_a_journaled_batch(granted: Secure) -> None:
    run, pk = _old_batch(granted)
    for statement in (
        "INSERT INTO offset_journal.kafka_partitions VALUES "
        f"({pk}, 0, 't', 1, 0, 999999999)",
        "INSERT INTO offset_journal.batch_sources (batch_pk, source_index, kind) VALUES "
        f"({pk}, 1, 'kafka')",
    ):
        assert "journaled history is not rewritten" in denied(granted.writer_url, statement)
    # Nor by inserting a batch of its own first in the same transaction.
    engine = sa.create_engine(resolve_url(granted.writer_url), poolclass=sa.pool.NullPool)
    with Journal(engine=engine) as j, pytest.raises(sa.exc.ProgrammingError), \
            engine.begin() as conn:
        assert j.record_batch(_rec(run, 7, 8), conn)
        conn.exec_driver_sql("INSERT INTO offset_journal.kafka_partitions VALUES "
                             f"({pk}, 0, 't', 2, 0, 999999999)")
    assert _admin(granted.admin_url, "select count(*) from offset_journal.kafka_partitions "
                  f"where batch_pk = {pk}") == [(1,)]
    # The owner is not bound by it (restores, repairs).
    _admin(granted.admin_url, "INSERT INTO offset_journal.kafka_partitions VALUES "
           f"({pk}, 0, 't', 3, 0, 1)")


def test_the_writer_completes_a_run_but_cannot_rewrite_it(granted: Secure) -> None:
    run, _ = _old_batch(granted)
    done = datetime(2024, 1, 1, 1, tzinfo=timezone.utc)
    end = RunRecord(query_id="qid", run_id=run, query_name="guarded", named=True,
                    terminated_at=done, exception="boom")
    with Journal(granted.writer_url) as j:
        j.record_run(end)
        j.record_run(end)  # a replay changes nothing and is fine
        (r,) = [x for x in j.runs("guarded") if x.run_id == run]
    assert r.terminated_at == done and r.exception == "boom"
    for statement in (
        f"UPDATE offset_journal.query_runs SET terminated_at = now() WHERE run_id = '{run}'",
        f"UPDATE offset_journal.query_runs SET exception = NULL WHERE run_id = '{run}'",
        f"UPDATE offset_journal.query_runs SET query_name = 'other' WHERE run_id = '{run}'",
        f"UPDATE offset_journal.query_runs SET query_id = 'x' WHERE run_id = '{run}'",
        f"UPDATE offset_journal.query_runs SET recorded_at = now() WHERE run_id = '{run}'",
        "INSERT INTO offset_journal.batches (run_id, query_id, query_name, batch_id, "
        f"recorded_at) VALUES ('{run}', 'qid', 'guarded', 99, '2999-01-01')",
        f"INSERT INTO offset_journal.batches (id, run_id, query_id, query_name, batch_id) "
        f"VALUES (999999, '{run}', 'qid', 'guarded', 98)",
    ):
        denied(granted.writer_url, statement)


def test_checkpoint_import_works_as_the_writer(granted: Secure, tmp_path: Path) -> None:
    root = tmp_path / "ck"
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(f'{{"id":"{uuid.uuid4()}"}}')
    for b in range(3):
        (root / "offsets" / str(b)).write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"t":{"0":' + str(5 * b + 5) + "}}")
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert cli_main(["--database-url", granted.writer_url, "checkpoint", "import", str(root),
                     "--query-name", "imported_by_writer"]) == 0
    with Journal(granted.admin_url) as j:
        assert [b.source(0).end_offset for b in j.history("imported_by_writer")] == [
            {"t": {"0": 5}}, {"t": {"0": 10}}, {"t": {"0": 15}}]


def test_a_forged_batch_in_the_far_future_is_not_handed_out(
        granted: Secure, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(uuid.uuid4())
    name = f"forged_{uuid.uuid4().hex[:6]}"
    forged = _rec(run, 1, 10**15, when="2999-01-01T00:00:00Z", name=name)
    with Journal(granted.writer_url) as j:
        assert j.record_batch(_rec(run, 0, 5, name=name))
        # The writer role cannot journal it: the database refuses it as data.
        with pytest.raises(JournalConstraintError, match="more than a day after"):
            j.record_batch(forged)
    # One that got in anyway (journaled before this guard, or by the owner) ...
    with Journal(granted.admin_url) as j:
        assert j.record_batch(forged)
    capsys.readouterr()
    code = cli_main(["--database-url", granted.reader_url, "starting-offsets", name])
    out, err = capsys.readouterr()
    assert code == 1 and out == "", out
    assert "2999-01-01" in err and "future of the database's clock" in err, err
    plan = plan_restart(granted.reader_url, name)
    assert not plan.ok
    # A point in time before it plans from the batch before.
    code = cli_main(["--database-url", granted.reader_url, "starting-offsets", name,
                     "--as-of", "now"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out) == {"t": {"0": 5}}, err


def _batch(when: datetime) -> Any:
    from offset_journal.journal import Batch, SourceOffsets
    from offset_journal.offsets import PartitionOffset

    src = SourceOffsets(0, "KafkaV2[Subscribe[t]]", "kafka", {"t": {"0": 1}},
                        {"t": {"0": 50}}, 49, (PartitionOffset("t", 0, 1, 50),))
    return Batch("n", "q", "r", 3, when, 10, 49, None, None, None, (src,))


def test_trigger_times_ahead_of_the_database_clock() -> None:
    now = datetime(2026, 11, 23, 12, tzinfo=timezone.utc)
    fine = compute_plan("n",
                        JournalFacts(_batch(now - timedelta(seconds=5)), database_now=now))
    assert not any("future" in w for w in fine.warnings) and fine.ok
    skewed = compute_plan("n",
                          JournalFacts(_batch(now + timedelta(minutes=30)), database_now=now))
    assert skewed.ok and any("ahead of the database's clock" in w for w in skewed.warnings)
    forged = compute_plan("n",
                          JournalFacts(_batch(now + timedelta(days=3)), database_now=now))
    assert any("future of the database's clock" in e for e in forged.errors)


def test_offsets_beyond_the_log_end_are_an_error() -> None:
    plan = compute_plan("n",
                        _batch(datetime(2026, 1, 1, tzinfo=timezone.utc)),
                        kafka=KafkaFacts(state={"t": {0: (0, 20)}}))
    assert any("beyond its log end 20" in e for e in plan.errors), plan.errors


def test_db_grant_by_a_role_without_the_rights_fails_and_grants_nothing(
        granted: Secure, capsys: pytest.CaptureFixture[str]) -> None:
    """Postgres only warns when a GRANT gives nothing: the command must not say 'granted'."""
    _admin(granted.admin_url, "DROP ROLE IF EXISTS oj_fresh; CREATE ROLE oj_fresh")
    capsys.readouterr()
    for url in (granted.writer_url, granted.reader_url):
        for roles in (["--writer", "oj_fresh"], ["--writer", "oj_fresh", "--reader", "oj_fresh"]):
            code = cli_main(["--database-url", url, "db", "grant", *roles])
            out, err = capsys.readouterr()
            assert code == 1 and out == "", (out, err)
            (line,) = err.strip().splitlines()
            assert line.startswith("offset-journal: error: "), line
            assert "Traceback" not in err and "unexpected" not in line
            if url == granted.writer_url and len(roles) == 2:  # Postgres only warned
                assert "nothing granted" in line and "own the journal schema" in line, line
    assert _admin(granted.admin_url, """
        select has_schema_privilege('oj_fresh', 'offset_journal', 'USAGE'),
               has_table_privilege('oj_fresh', 'offset_journal.batches', 'SELECT')""") == [
        (False, False)]
    # The owner's grant works and says so.
    assert cli_main(["--database-url", granted.admin_url, "db", "grant", "--reader",
                     "oj_fresh"]) == 0
    assert "granted journal reader privileges" in capsys.readouterr().out


def test_the_writer_fills_a_runs_execution_once_but_cannot_clear_it(granted: Secure) -> None:
    """Migration 0009's columns are under the same guard: clearing `execution` would hide
    async progress tracking (and its not-yet-durable last batches) from the planner."""
    run, _ = _old_batch(granted)
    asynchronous = RunRecord(query_id="qid", run_id=run, query_name="guarded", named=True,
                             execution="AsyncProgressTrackingMicroBatchExecution",
                             async_interval_ms=60000)
    with Journal(granted.writer_url) as j:
        j.record_run(asynchronous)  # filling what the run lacked is allowed
    engine = sa.create_engine(resolve_url(granted.writer_url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        row = conn.exec_driver_sql(
            "SELECT execution, async_interval_ms FROM offset_journal.query_runs "
            f"WHERE run_id = '{run}'").one()
    engine.dispose()
    assert tuple(row) == ("AsyncProgressTrackingMicroBatchExecution", 60000)
    for statement in (
        f"UPDATE offset_journal.query_runs SET execution = NULL WHERE run_id = '{run}'",
        "UPDATE offset_journal.query_runs SET execution = 'MicroBatchExecution' "
        f"WHERE run_id = '{run}'",
        f"UPDATE offset_journal.query_runs SET async_interval_ms = 1 WHERE run_id = '{run}'",
    ):
        denied(granted.writer_url, statement)


def test_the_writer_journals_a_runs_cluster_once_and_cannot_move_it(granted: Secure) -> None:
    """Migration 0012's column is under the guard: moving a run to another cluster
    after the fact would let a plan against that cluster pass its check. A second
    cluster event for the run (a listener's retry) changes nothing."""
    run, _ = _old_batch(granted)
    seen = RunRecord(query_id="qid", run_id=run, query_name="guarded", named=True,
                     kafka_cluster_id="cluster-A")
    with Journal(granted.writer_url) as j:
        j.record_run(seen)  # filling what the run lacked is allowed
        j.record_run(replace(seen, kafka_cluster_id="cluster-B"))  # kept as it was
        assert j.run_cluster_id(run) == "cluster-A"
    for statement in (
        f"UPDATE offset_journal.query_runs SET kafka_cluster_id = NULL WHERE run_id = '{run}'",
        "UPDATE offset_journal.query_runs SET kafka_cluster_id = 'cluster-B' "
        f"WHERE run_id = '{run}'",
    ):
        denied(granted.writer_url, statement)


def test_a_journal_without_the_cluster_column_loses_only_the_id(
        empty_database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A listener of this release writing into a journal not upgraded to 0012: the
    cluster event costs a warning, never the events around it (they would otherwise be
    retried and spooled until the upgrade)."""
    from offset_journal.journal import record_all
    from offset_journal.journal.db import upgrade

    upgrade(empty_database_url, "0011_finite_times")
    run = RunRecord(query_id="qid", run_id="run-old-schema", query_name="old", named=True,
                    kafka_cluster_id="cluster-A")
    later = RunRecord(query_id="qid", run_id="run-after", query_name="old", named=True)
    with Journal(empty_database_url) as j, j.engine.begin() as conn:
        record_all(j, [run, later], conn)
    with Journal(empty_database_url) as j:
        assert j.run_cluster_id("run-old-schema") is None
        with j.engine.connect() as conn:
            runs = conn.exec_driver_sql("SELECT run_id FROM offset_journal.query_runs").all()
    assert {r[0] for r in runs} == {"run-old-schema", "run-after"}
    assert any("cluster id is not journaled" in r.getMessage() for r in caplog.records)


def test_savepoints_are_written_like_plans_and_name_a_journaled_batch(granted: Secure) -> None:
    """The writer (and a planner) may record a savepoint, never change or
    delete one, nor set what the database sets; and a savepoint row must name a batch
    the journal holds, so no role records the state of a batch the journal never had."""
    run = str(uuid.uuid4())
    with Journal(granted.writer_url) as j:
        assert j.record_batch(_rec(run, 4, 9))
        row = {"query_name": "guarded", "run_id": run, "query_id": "qid", "batch_id": 4,
               "checkpoint": "/chk", "location": "/sp", "manifest_sha256": "a" * 64,
               "manifest": {"format": "offset-journal-savepoint", "query_name": "guarded",
                            "run_id": run, "query_id": "qid", "batch_id": 4,
                            "checkpoint": "/chk"}, "host": "h", "os_user": "u"}
        saved = j.record_savepoint(row)
        assert [s.id for s in j.savepoints("guarded")] == [saved]
        for forged in ({"batch_id": 5}, {"run_id": "another-run"}, {"query_id": "other"},
                       {"query_name": "other"}):
            with pytest.raises(JournalRefused, match="a savepoint names a journaled batch"):
                j.record_savepoint({**row, **forged})
        with pytest.raises(JournalConstraintError, match="manifest_sha256_check"):
            j.record_savepoint({**row, "manifest_sha256": "not a digest"})
    for statement in (
            f"UPDATE offset_journal.savepoints SET batch_id = 3 WHERE id = {saved}",
            f"DELETE FROM offset_journal.savepoints WHERE id = {saved}",
            "INSERT INTO offset_journal.savepoints (id, query_name, run_id, query_id, "
            f"batch_id, checkpoint, location, manifest_sha256, manifest) VALUES (99, "
            f"'guarded', '{run}', 'qid', 4, '/c', '/s', '{'b' * 64}', '{{}}')"):
        assert "permission denied" in denied(granted.writer_url, statement)
    assert "permission denied" in denied(
        granted.reader_url, "INSERT INTO offset_journal.savepoints (query_name, run_id, "
        f"query_id, batch_id, checkpoint, location, manifest_sha256, manifest) VALUES "
        f"('guarded', '{run}', 'qid', 4, '/c', '/s', '{'b' * 64}', '{{}}')")


def _state_savepoint(where: Path, query: str, run: str, batch_id: int, end: int,
                     state: bytes) -> tuple[Any, str]:
    """A savepoint directory of one operator whose one file holds ``state`` (checksums
    only: no Spark reads it here), its manifest and SHA-256."""
    import hashlib

    from offset_journal.savepoint._files import write_manifest
    from offset_journal.savepoint.model import (
        Column,
        FileSum,
        Manifest,
        Operator,
        Part,
        SourceEnd,
    )

    part_dir = where / "operator=0" / "part=0"
    part_dir.mkdir(parents=True)
    (part_dir / "part-0.parquet").write_bytes(state)
    files = (FileSum("part-0.parquet", len(state), hashlib.sha256(state).hexdigest()),)
    part = Part(0, "default", "store", "operator=0/part=0", {"operatorId": "0"},
                {"type": "struct", "fields": []},
                (Column("k", ("key", 0), "string", True), Column("n", ("value", 0), "long")),
                1, 1, files)
    m = Manifest(query_name=query, run_id=run, query_id="qid", batch_id=batch_id,
                 checkpoint="/chk/a", end_offsets=(SourceEnd(0, "KafkaV2[Subscribe[t]]",
                                                             "kafka", {"t": {"0": end}}),),
                 operators=(Operator(0, "stateStoreSave", "aggregation", 2, ("default",)),),
                 parts=(part,), created_at="2026-11-25T10:00:00.000+00:00")
    return m, write_manifest(str(where), m)


def test_a_savepoint_row_vouches_only_for_a_manifest_of_its_own_batch(
        granted: Secure, tmp_path: Path, capsys: Any) -> None:
    """With the writer's credentials (every job's), a copy of query A's
    savepoint with altered state (a: 1 -> 1,000,000), re-signed, and a row naming batch
    0 of an unrelated query B with that copy's SHA-256: `plan A --savepoint COPY` took
    it as a recorded savepoint, `savepoint list B` listed it as B's. The database
    refuses a row whose manifest names another batch than its columns, and a row whose
    manifest is not the directory's vouches for nothing."""
    from dataclasses import replace as changed

    from tests.support import one_error_line

    a_run, b_run = str(uuid.uuid4()), str(uuid.uuid4())
    with Journal(granted.writer_url) as j:
        for batch_id in (0, 1):
            assert j.record_batch(_rec(a_run, batch_id, 10 + batch_id, name="sp-a"))
        assert j.record_batch(_rec(b_run, 0, 5, name="sp-b"))
        manifest, digest = _state_savepoint(tmp_path / "a", "sp-a", a_run, 1, 11, b"a=1")
        j.record_savepoint({
            "query_name": "sp-a", "run_id": a_run, "query_id": "qid", "batch_id": 1,
            "checkpoint": "/chk/a", "location": str(tmp_path / "a"),
            "manifest_sha256": digest, "manifest": manifest.to_dict(), "host": "h",
            "os_user": "u"})
        copy, copied = _state_savepoint(tmp_path / "a2", "sp-a", a_run, 1, 11, b"a=1000000")
        row = {"query_name": "sp-b", "run_id": b_run, "query_id": "qid", "batch_id": 0,
               "checkpoint": "/chk/a", "location": str(tmp_path / "a2"),
               "manifest_sha256": copied, "manifest": copy.to_dict(), "host": "h",
               "os_user": "u"}
        with pytest.raises(JournalConstraintError, match="savepoints_manifest_names_its_batch"):
            j.record_savepoint(row)
        # The row's manifest made to name B's batch: the database takes it, but it is
        # not the manifest the SHA-256 names, nor the directory's.
        as_b = changed(copy, query_name="sp-b", run_id=b_run, batch_id=0).to_dict()
        forged = j.record_savepoint({**row, "manifest": as_b})

    writer = ["--database-url", granted.writer_url]
    code = cli_main([*writer, "plan", "sp-a", "--savepoint", str(tmp_path / "a2"),
                     "--seed", "0"])
    line = one_error_line(code, capsys.readouterr().err)
    assert "not recorded in this journal" in line
    assert f"savepoint {forged} carries its SHA-256 but names batch 0 of run {b_run} of " \
           "query 'sp-b'" in line
    code = cli_main([*writer, "savepoint", "show", str(forged)])
    line = one_error_line(code, capsys.readouterr().err)
    assert f"names batch 1 of run {a_run} of query 'sp-a'" in line
    assert f"not the row's batch 0 of run {b_run} of query 'sp-b'" in line
    code = cli_main([*writer, "savepoint", "list", "sp-b"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"savepoint {forged}: its recorded manifest is ignored" in err
    assert "not the one its SHA-256 names" in err
    (listed,) = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert listed[0] == str(forged) and listed[4] == "?"
    # The real savepoint still plans.
    code = cli_main([*writer, "plan", "sp-a", "--savepoint", str(tmp_path / "a"),
                     "--seed", "0"])
    assert code == 0, capsys.readouterr()
