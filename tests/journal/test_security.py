"""Credentials never show, SQL is only ever parameterized, and the journal runs under
least-privilege roles (the SQL of docs/security.md, from offset_journal.journal.roles).

Passwords are checked for real: the tests own a Postgres whose pg_hba.conf asks every
role but the admin for a SCRAM password on the local socket.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from offset_journal import ConfigError, Journal, JournalError, OffsetJournalListener, attach, redact
from offset_journal.capture.writer import Writer, WriterConfig
from offset_journal.cli import main as cli_main
from offset_journal.journal.db import ENV_URL, resolve_url, upgrade
from offset_journal.journal.roles import JOURNAL_TABLES, grant_statements
from offset_journal.records import PROGRESS, STARTED
from offset_journal.restart import plan_restart
from tests import support
from tests.payloads import kafka_source, progress
from tests.support import READER_PW, WRITER_PW, Secure, denied

secure = support.secure  # the fixtures, shared with test_history_guard

ROOT = Path(__file__).resolve().parents[2]

WRONG_PW = "Wr0ng-Guess-55e1"
SECRETS = [WRITER_PW, READER_PW, WRONG_PW, quote(WRITER_PW, safe=""), "S3cret"]


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked in: {text[:2000]}"


# --------------------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _closed_port_url() -> str:
    return f"postgresql://oj_user:{quote(WRITER_PW, safe='')}@127.0.0.1:{_free_port()}/journal"




# --------------------------------------------------------------------------- redaction


@pytest.mark.parametrize(("text", "shown"), [
    ("postgresql://u:S3cret@h/db", "postgresql://u:***@h/db"),
    ("postgresql+psycopg://u:S3cret@h:5432/db?sslmode=require",
     "postgresql+psycopg://u:***@h:5432/db?sslmode=require"),
    ("postgresql://u:p%40S3cret@h/db", "postgresql://u:***@h/db"),
    ("postgresql://u:p@S3cret@h/db", "postgresql://u:***@h/db"),  # '@' not encoded
    ("postgresql://u@h/db?password=S3cret&x=1", "postgresql://u@h/db?password=***&x=1"),
    ("postgresql://u@h/db?sslpassword=S3cret", "postgresql://u@h/db?sslpassword=***"),
    ("password=S3cret host=h dbname=d", "password=*** host=h dbname=d"),
    ("host=h password = 'a S3cret' dbname=d", "host=h password = *** dbname=d"),
    ("PGPASSWORD=S3cret psql", "PGPASSWORD=*** psql"),
    ("failed: postgresql://u:S3cret@h/db (timeout) mail admin@example.com",
     "failed: postgresql://u:***@h/db (timeout) mail admin@example.com"),
    ("postgresql://h:5432/db user@x", "postgresql://h:5432/db user@x"),
])
def test_redact_covers_the_forms_a_password_takes(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize("url", [
    "password=S3cret host=h", "host=h password='S3cret x'", "postgresql://u:p@S3cret@h/db",
    "mysql://u:S3cret@h/db?x=[", "postgresql://u:S3cret@h:notaport/db",
])
def test_configuration_errors_never_show_the_password(url: str) -> None:
    try:
        resolve_url(url)
    except ConfigError as exc:
        assert_no_secret(str(exc))
        listener_error = None
        try:
            OffsetJournalListener(url)
        except ConfigError as again:
            listener_error = str(again)
        assert listener_error is not None
        assert_no_secret(listener_error)
    else:  # accepted: then nothing that prints it may show the password
        assert_no_secret(redact(url))


# --------------------------------------------------------------------------- the command

COMMANDS = [
    ["runs"], ["history", "orders"], ["history", "orders", "--format", "json"],
    ["starting-offsets", "orders"], ["plan", "orders"], ["db", "upgrade"], ["db", "current"],
    ["db", "grant", "--writer", "w"], ["checkpoint", "import", "{ckpt}", "--query-name", "q"],
    ["checkpoint", "compare", "{ckpt}", "orders"],
]


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    root = tmp_path / "ck"
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"0b8f1b8e-0000-4000-8000-000000000001"}')
    (root / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n'
                                        '{"t":{"0":5}}')
    (root / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


@pytest.mark.parametrize("verbose", [[], ["-vv"]], ids=["quiet", "-vv"])
@pytest.mark.parametrize("where", ["closed port", "wrong password", "not a URL"])
def test_the_command_never_shows_a_password(secure: Secure, checkpoint: Path, where: str,
                                            verbose: list[str], monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str],
                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(ENV_URL, raising=False)
    url = {"closed port": _closed_port_url(),
           "wrong password": secure.url(secure.writer, WRONG_PW),
           "not a URL": f"host=127.0.0.1 password='{WRITER_PW}' dbname=journal"}[where]
    caplog.set_level(logging.DEBUG)
    for argv in COMMANDS:
        argv = [a.replace("{ckpt}", str(checkpoint)) for a in argv]
        code = cli_main([*verbose, "--database-url", url, *argv])
        out, err = capsys.readouterr()
        assert code != 0, (argv, out, err)
        assert_no_secret(out, err, caplog.text)
        if not verbose:
            (line,) = err.strip().splitlines()
            assert line.startswith("offset-journal: error: ")
            if where == "wrong password":
                assert "password authentication failed" in line
    # Through the environment variable, as jobs pass it, the same.
    monkeypatch.setenv(ENV_URL, url)
    assert cli_main([*verbose, "history", "orders"]) != 0
    assert_no_secret(*capsys.readouterr(), caplog.text)


def test_the_console_script_with_tracebacks_never_shows_a_password(secure: Secure) -> None:
    env = {k: v for k, v in os.environ.items() if k != ENV_URL}
    script = str(Path(sys.executable).parent / "offset-journal")
    for url in (_closed_port_url(), secure.url(secure.writer, WRONG_PW)):
        for argv in (["-vv", "plan", "orders"], ["-vv", "db", "upgrade"], ["-v", "runs"]):
            done = subprocess.run([script, "--database-url", url, *argv], capture_output=True,
                                  text=True, timeout=60, env=env)
            assert done.returncode == 1 and done.stdout == ""
            assert_no_secret(done.stderr)


# --------------------------------------------------------------------------- the library


def _events(run: str, n: int = 3) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": STARTED, "query_id": "qid", "run_id": run,
                                  "name": "orders", "timestamp": "2024-01-01T00:00:00Z"}]
    for i in range(n):
        out.append({"type": PROGRESS, "json": progress(
            i, run_id=run, query_id="qid", name="orders", timestamp=f"2024-01-01T00:00:0{i}Z",
            sources=[kafka_source("t", {"t": {"0": i}}, {"t": {"0": i + 1}})])})
    return out


@pytest.mark.parametrize("where", ["closed port", "wrong password"])
def test_listener_writer_and_read_api_never_show_a_password(
        secure: Secure, tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture) -> None:
    url = _closed_port_url() if where == "closed port" else secure.url(secure.writer, WRONG_PW)
    caplog.set_level(logging.DEBUG)
    spool = tmp_path / "spool"
    listener = OffsetJournalListener(url, spool_dir=str(spool), connect_timeout=2,
                                     terminate_flush_timeout=0.5)
    run = str(uuid.uuid4())
    events = _events(run)
    listener.onQueryStarted(SimpleNamespace(runId=run, id="qid", name="orders",
                                            timestamp="2024-01-01T00:00:00Z"))
    for ev in events[1:]:
        listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=ev["json"])))
    listener.onQueryTerminated(SimpleNamespace(runId=run, id="qid", exception=None))
    assert listener.flush(timeout=1) is False
    assert listener.close(timeout=1) is False
    # Kept for later, and nothing of the URL on disk either.
    files = list(spool.rglob("*"))
    assert files
    assert_no_secret(*(str(f) for f in files), *(f.read_text() for f in files if f.is_file()))
    assert any("cannot write to" in r.getMessage() for r in caplog.records)

    errors = []
    for call in (lambda: Journal(url).history("orders"), lambda: Journal(url).runs(),
                 lambda: plan_restart(url, "orders"), lambda: upgrade(url)):
        try:
            call()
        except JournalError as exc:  # the journal's own, never SQLAlchemy's
            errors.append(f"{exc}\n{exc!r}")
    assert len(errors) == 4
    if where == "wrong password":
        assert all("password authentication failed" in e for e in errors)
    assert_no_secret(*errors, caplog.text)


# --------------------------------------------------------------------------- parameterized SQL

_SQL_START = re.compile(
    r"^\s*\(?\s*(SELECT|INSERT|UPDATE|DELETE|COPY|CREATE|DROP|ALTER|GRANT|REVOKE|TRUNCATE|"
    r"WITH|VACUUM|ANALYZE|COMMENT|LOCK|EXECUTE|DO)\b", re.IGNORECASE)


def _is_safe_interpolation(node: ast.expr) -> bool:
    """Inside SQL text only constants (SCHEMA) and quoted identifiers may be interpolated:
    values go as bind parameters."""
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.Attribute):
        return node.attr.isupper()
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return bool(re.search(r"quote|ident", name, re.IGNORECASE))
    return False


def _literal_text(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values
                       if isinstance(v, ast.Constant) and isinstance(v.value, str)) or None
    return None


def sql_building(source: str, filename: str = "<src>") -> list[str]:
    """Places where SQL text is built from something other than constants and quoted
    identifiers: f-strings, %-formatting, .format() and + concatenation."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        bad = None
        if isinstance(node, ast.JoinedStr) and _SQL_START.match(_literal_text(node) or ""):
            values = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
            if not all(_is_safe_interpolation(v) for v in values):
                bad = "f-string"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
            sides = (node.left, node.right)
            if any(_SQL_START.match(_literal_text(s) or "") for s in sides) and not all(
                    isinstance(s, ast.Constant) or _is_safe_interpolation(s) for s in sides):
                bad = "% formatting" if isinstance(node.op, ast.Mod) else "concatenation"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "format"
              and _SQL_START.match(_literal_text(node.func.value) or "")):
            bad = ".format()"
        if bad:
            found.append(f"{filename}:{getattr(node, 'lineno', '?')}: SQL built by {bad}")
    return found


def test_the_sql_scanner_finds_what_it_looks_for() -> None:
    bad = '''
name = input()
a = f"SELECT * FROM t WHERE name = '{name}'"
b = "delete from t where id = %s" % name
c = "UPDATE t SET x = {}".format(name)
d = "select * from t where n = '" + name + "'"
e = sa.text(f"DROP TABLE {table}")
'''
    good = '''
a = f"COPY {SCHEMA}.kafka_partitions FROM STDIN"
b = f"GRANT USAGE ON SCHEMA {quote_ident(SCHEMA)} TO {quote_ident(role)}"
c = sa.text("select * from t where name = :name")
d = f"cannot write to {url}"
'''
    assert len(sql_building(bad)) == 5
    assert sql_building(good) == []


def test_sql_is_only_ever_parameterized() -> None:
    files = sorted((ROOT / "offset_journal").rglob("*.py")) + sorted(
        (ROOT / "migrations").rglob("*.py"))
    assert len(files) > 10
    found = [hit for path in files
             for hit in sql_building(path.read_text(encoding="utf-8"),
                                     str(path.relative_to(ROOT)))]
    assert found == []


HOSTILE_NAMES = [
    "o'rders", 'a"; DROP TABLE offset_journal.batches; --', "x' OR '1'='1",
    "%s %(x)s {0} :name $1 ?", "ünïcødé 🚀 名前", "back\\slash", "semi;colon", " lead",
]


def test_hostile_names_are_only_data(journal_url: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    writer = Writer(WriterConfig(journal_url, str(tmp_path / "spool")))
    writer.start()
    for i, name in enumerate(HOSTILE_NAMES):
        run = str(uuid.uuid4())
        writer.submit({"type": STARTED, "query_id": f"qid-{i}", "run_id": run, "name": name,
                       "timestamp": "2024-01-01T00:00:00Z"})
        writer.submit({"type": PROGRESS, "json": progress(
            0, run_id=run, query_id=f"qid-{i}", name=name,
            sources=[kafka_source(name, None, {name: {"0": 7 + i}})])})
    assert writer.flush(timeout=30)
    writer.close()
    with Journal(journal_url) as j:
        assert sorted(j.query_names()) == sorted(HOSTILE_NAMES)
        for name in HOSTILE_NAMES:
            (batch,) = j.history(name)
            assert batch.query_name == name and batch.sources[0].partitions[0].topic == name
    for i, name in enumerate(HOSTILE_NAMES):
        assert cli_main(["--database-url", journal_url, "starting-offsets", name]) == 0
        out, _ = capsys.readouterr()
        assert json.loads(out) == {name: {"0": 7 + i}}
    engine = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        counts = {t: conn.execute(sa.text(f"select count(*) from offset_journal.{t}"))  # noqa: S608
                  .scalar_one() for t in ("query_runs", "batches", "kafka_partitions")}
    engine.dispose()
    assert counts == {t: len(HOSTILE_NAMES) for t in counts}


# --------------------------------------------------------------------------- roles


def test_grant_sql_is_the_documented_sql(capsys: pytest.CaptureFixture[str]) -> None:
    doc = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    lines = [line.strip() for line in doc.splitlines()]
    expected = [s + ";" for s in grant_statements("oj_writer", "oj_reader", database="journal")]
    assert any(lines[i:i + len(expected)] == expected for i in range(len(lines)))
    assert cli_main(["db", "grant", "--writer", "oj_writer", "--reader", "oj_reader",
                     "--dry-run"]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines() == [s + ";" for s in grant_statements("oj_writer", "oj_reader")]
    assert "offset-journal db grant" in doc
    for table in JOURNAL_TABLES:
        assert table in doc


@pytest.mark.spark
def test_the_listener_runs_as_the_writer_role_and_the_roles_can_do_nothing_else(
        spark: Any, granted: Secure, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    listener = attach(spark, database_url=granted.writer_url, spool_dir=str(tmp_path / "spool"))
    query = None
    try:
        query = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
                 .writeStream.format("noop").queryName("least_privilege_q")
                 .option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(processingTime="100 milliseconds").start())
        deadline = time.monotonic() + 120
        while len(query.recentProgress) < 3:
            assert time.monotonic() < deadline and query.exception() is None
            time.sleep(0.1)
        query.stop()
        # Started, progress and the termination (an UPDATE), then a rejected event: all
        # written as the writer role. A rejected event is not in the journal, so flush()
        # says False from then on, and stats() tells it from a lost one.
        assert listener.wait_terminated(query.runId, timeout=30)
        listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json="{garbage")))
        assert not listener.flush(30)
        stats = listener.stats()
        assert (stats.rejected, stats.lost) == (1, 0)
        done = [p.batchId for p in query.recentProgress]
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.streams.removeListener(listener)
        listener.close()

    # The reader reads it all (read API and command), and cannot change any of it.
    with Journal(granted.reader_url) as j:
        assert [b.batch_id for b in j.history("least_privilege_q")] == done
        (run,) = j.runs("least_privilege_q")
        assert run.terminated_at is not None
    assert cli_main(["--database-url", granted.reader_url, "history", "least_privilege_q"]) == 0
    assert cli_main(["--database-url", granted.reader_url, "db", "current"]) == 0
    capsys.readouterr()
    for table in JOURNAL_TABLES:
        assert "permission denied" in denied(
            granted.reader_url, "INSERT INTO offset_journal." + table + " DEFAULT VALUES")
    for statement in ("UPDATE offset_journal.query_runs SET host = 'x'",
                      "DELETE FROM offset_journal.batches",
                      "CREATE TABLE offset_journal.mine (x int)"):
        denied(granted.reader_url, statement)

    # The writer cannot delete, rewrite, empty or drop the journal, nor add to its schema.
    for statement in ("DELETE FROM offset_journal.batches",
                      "DELETE FROM offset_journal.query_runs",
                      "UPDATE offset_journal.batches SET batch_id = batch_id + 1",
                      "UPDATE offset_journal.kafka_partition_rows SET end_offset = 0",
                      "UPDATE offset_journal.batch_sources SET end_offsets = NULL",
                      "UPDATE offset_journal.kafka_layouts SET topics = topics",
                      "DELETE FROM offset_journal.kafka_layouts",
                      "TRUNCATE offset_journal.batches CASCADE",
                      "DROP TABLE offset_journal.kafka_partition_rows",
                      "DROP VIEW offset_journal.kafka_partitions",
                      "ALTER TABLE offset_journal.batches ADD COLUMN x int",
                      "CREATE TABLE offset_journal.mine (x int)",
                      "DROP SCHEMA offset_journal CASCADE",
                      "DELETE FROM offset_journal.alembic_version"):
        denied(granted.writer_url, statement)
    # Nor prune it: retention is the owner's (one line, exit 1; counted below).
    capsys.readouterr()
    assert cli_main(["--database-url", granted.writer_url, "prune", "--before=now"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "permission denied" in err[0], err
    engine = sa.create_engine(resolve_url(granted.admin_url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        n = conn.execute(sa.text("select count(*) from offset_journal.batches b join "
                                 "offset_journal.query_runs r using (run_id) where "
                                 "r.query_name = 'least_privilege_q'")).scalar_one()
        rejected = conn.execute(sa.text("select count(*) from offset_journal.rejected_events "
                                        "where payload = '{garbage'")).scalar_one()
    engine.dispose()
    assert n == len(done) and rejected == 1
    assert_no_secret(caplog.text)


def test_a_listener_given_the_reader_role_loses_nothing(granted: Secure, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A misconfigured role is refused like an outage: events wait in the spool, and
    the warnings name neither password."""
    caplog.set_level(logging.DEBUG)
    spool = tmp_path / "spool"
    writer = Writer(WriterConfig(granted.reader_url, str(spool), retry_initial=0.05))
    writer.start()
    run = str(uuid.uuid4())
    for ev in _events(run):
        writer.submit(ev)
    assert writer.flush(timeout=2) is False
    writer.close(timeout=2)
    spooled = [json.loads(line) for f in spool.glob("spool-*.jsonl")
               for line in f.read_text().splitlines()]
    assert {e.get("run_id") or json.loads(e["json"])["runId"] for e in spooled} == {run}
    assert len(spooled) >= 4
    assert any("permission denied" in r.getMessage() for r in caplog.records)
    assert_no_secret(caplog.text)
    with Journal(granted.admin_url) as j:
        assert not j.history("orders", run_id=run)
    # The same events, replayed as the writer, are journaled.
    replay = Writer(WriterConfig(granted.writer_url, str(spool)))
    replay.start()
    assert replay.flush(timeout=30)
    replay.close()
    with Journal(granted.admin_url) as j:
        assert [b.batch_id for b in j.history("orders", run_id=run)] == [0, 1, 2]


def test_the_writer_completes_a_run_with_how_spark_executes_it(granted: Secure) -> None:
    """A run first journaled without its start (a batch came first) gains the execution
    recorded at its start (migration 0008): the writer role may fill those columns."""
    from datetime import datetime, timezone

    from offset_journal.records import ASYNC_EXECUTION, RunRecord

    run_id = f"run-{uuid.uuid4().hex[:8]}"
    with Journal(granted.writer_url) as j:
        j.record_run(RunRecord("qid-x", run_id, "exec-q", True))
        j.record_run(RunRecord("qid-x", run_id, "exec-q", True,
                               started_at=datetime.now(timezone.utc),
                               execution=ASYNC_EXECUTION, async_interval_ms=1500))
    engine = sa.create_engine(resolve_url(granted.admin_url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT execution, async_interval_ms FROM "
                                   "offset_journal.query_runs WHERE run_id = :r"),
                           {"r": run_id}).one()
    engine.dispose()
    assert tuple(row) == (ASYNC_EXECUTION, 1500)
