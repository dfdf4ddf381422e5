"""The journal behind a real PgBouncer in transaction mode (Debian's package, with its
defaults): the fleet's setup. Each transaction of a client may run on another server
connection, so nothing may live in a session.

Before: every connection failed (``unsupported startup parameter: options``) and every
event waited in the spool; with that parameter ignored, psycopg's server-side prepared
statements sent about one batch in ten to ``rejected_events``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from offset_journal.capture.listener import attach
from offset_journal.capture.writer import Fault, Writer, WriterConfig, classify_error, fault_hint
from offset_journal.journal.db import make_engine
from tests.payloads import kafka_source, progress, sql_rows
from tests.support import Cli, cli, fill, journal_report_runs  # noqa: F401 (fixture)

pytestmark = pytest.mark.pgbouncer

STARTED, PROGRESS = "started", "progress"


def _events(run: str, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": STARTED, "query_id": f"q-{run}", "run_id": run,
                                  "name": f"pooled_{run}", "timestamp": "2024-01-01T00:00:00Z"}]
    for i in range(n):
        out.append({"type": PROGRESS, "json": progress(
            i, run_id=run, query_id=f"q-{run}", name=f"pooled_{run}",
            timestamp=f"2024-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
            sources=[kafka_source("t", {"t": {"0": i * 5}}, {"t": {"0": i * 5 + 5}})])})
    return out


def _plain(url: str) -> str:
    """The URL as psycopg itself takes it."""
    return sa.engine.make_url(url).set(drivername="postgresql") \
        .render_as_string(hide_password=False)


def test_twelve_writers_through_three_server_connections_journal_every_batch(
        journal_url: str, journal_pooler: Any, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="offset_journal")
    pooled = journal_pooler.url_for(journal_url)
    writers = [Writer(WriterConfig(pooled, str(tmp_path / f"spool-{i}"), retry_initial=0.05))
               for i in range(12)]
    for w in writers:
        w.start()

    def feed(i: int, w: Writer) -> None:
        for ev in _events(f"run-{i}", 40):
            w.submit(ev)

    threads = [threading.Thread(target=feed, args=(i, w)) for i, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    deadline = time.monotonic() + 120
    flushed = [w.flush(timeout=max(0.0, deadline - time.monotonic())) for w in writers]
    for w in writers:
        w.close()
    assert flushed == [True] * 12
    assert sum(w.stats().journaled for w in writers) == 12 * 40
    assert sum(w.stats().rejected + w.stats().lost for w in writers) == 0
    assert sql_rows(journal_url, "select count(*) from offset_journal.batches")[0][0] == 480
    assert sql_rows(journal_url, "select count(*) from offset_journal.query_runs")[0][0] == 12
    # Not one retry either: no statement was prepared on a server connection and then
    # looked for on another (psycopg prepares a statement run five times, by default).
    assert [r.getMessage() for r in caplog.records] == []
    assert sql_rows(journal_url, "select count(*) from offset_journal.rejected_events") \
        == [(0,)]


def test_the_statement_timeout_holds_on_whichever_server_connection_a_pooler_picks(
        journal_url: str, journal_pooler: Any) -> None:
    engine = make_engine(journal_pooler.url_for(journal_url), statement_timeout_ms=300)
    other = psycopg.connect(_plain(journal_pooler.url_for(journal_url)))
    try:
        for i in range(4):
            if i % 2:  # another client holds a server connection: the next one is used
                other.execute("select 1")
            else:
                other.commit()
            with engine.begin() as conn:
                assert conn.exec_driver_sql("show statement_timeout").scalar() == "300ms"
            started = time.monotonic()
            with pytest.raises(sa.exc.OperationalError) as err, engine.begin() as conn:
                conn.exec_driver_sql("select pg_sleep(5)")
            assert getattr(err.value.orig, "sqlstate", None) == "57014"
            assert time.monotonic() - started < 4
    finally:
        other.close()
        engine.dispose()


def test_pooler_errors_are_misconfigurations_never_refused_events(
        journal_url: str, journal_pooler: Any) -> None:
    plain = _plain(journal_pooler.url_for(journal_url))
    # A client that prepares on the server (psycopg's prepare_threshold=0), then finds its
    # next transaction on another server connection: PgBouncer's real error.
    preparing, holder = psycopg.connect(plain, prepare_threshold=0), psycopg.connect(plain)
    try:
        preparing.execute("select 1")
        preparing.commit()
        holder.execute("select 2")  # holds the server connection that has "_pg3_0"
        with pytest.raises(psycopg.Error) as lost_statement:
            preparing.execute("select 1")
    finally:
        preparing.close()
        holder.close()
    assert lost_statement.value.sqlstate == "26000"
    assert classify_error(lost_statement.value) is Fault.MISCONFIGURED
    assert "prepare_threshold" in fault_hint(lost_statement.value)

    with pytest.raises(psycopg.OperationalError) as startup:
        psycopg.connect(plain, options="-c statement_timeout=1000").close()
    assert "unsupported startup parameter" in str(startup.value)
    assert classify_error(startup.value) is Fault.MISCONFIGURED
    assert "ignore_startup_parameters" in fault_hint(startup.value)


def test_a_url_the_pooler_refuses_keeps_the_events_and_says_the_fix_once(
        journal_url: str, journal_pooler: Any, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    pooled = journal_pooler.url_for(journal_url)
    refused = pooled + "?options=-c%20statement_timeout%3D1000"
    spool = str(tmp_path / "spool")
    w = Writer(WriterConfig(refused, spool, retry_initial=0.05, retry_max=0.2))
    w.start()
    with caplog.at_level(logging.ERROR, logger="offset_journal.capture.writer"):
        for ev in _events("refused", 5):
            w.submit(ev)
        assert w.flush(timeout=3) is False
    w.close()
    assert (w.stats().rejected, w.stats().lost) == (0, 0)
    said = [r.getMessage() for r in caplog.records if "ignore_startup_parameters" in r.getMessage()]
    assert said, [r.getMessage() for r in caplog.records]
    assert sql_rows(journal_url, "select count(*) from offset_journal.batches") == [(0,)]
    # Fixed URL, same spool: everything is journaled, nothing was refused.
    again = Writer(WriterConfig(pooled, spool, retry_initial=0.05))
    again.start()
    assert again.flush(timeout=60)
    again.close()
    assert sql_rows(journal_url, "select count(*) from offset_journal.batches") == [(5,)]
    assert sql_rows(journal_url, "select count(*) from offset_journal.rejected_events") \
        == [(0,)]


def test_every_command_works_through_the_pooler(
        empty_database_url: str, journal_pooler: Any, cli: Cli, tmp_path: Path) -> None:  # noqa: F811
    pooled = journal_pooler.url_for(empty_database_url)
    code, _out, err = cli("--database-url", pooled, "db", "upgrade")
    assert code == 0, err
    journal_report_runs(pooled)
    code, out, err = cli("--database-url", pooled, "check", "--all")
    assert code == 2, err  # the journal's deliberate gap, flagged when written: critical
    assert out.startswith("CRITICAL: orders: 1 batch source flagged"), out
    for argv in (("db", "current"), ("runs", "orders"), ("history", "orders"),
                 ("plan", "orders"), ("starting-offsets", "orders"),
                 ("report", "orders", "-o", str(tmp_path / "r.html")),
                 ("rejected", "list"), ("prune", "--before", "2024-01-01T00:20:00Z")):
        code, out, err = cli("--database-url", pooled, *argv)
        assert code == 0, (argv, err)
    code, out, err = cli("--database-url", pooled, "audit", "orders")
    assert code == 3, err  # the journal's deliberate gap, found through the pooler too
    assert "gap" in out.lower()


@pytest.mark.spark
def test_a_spark_job_on_the_kafka_connector_journals_and_restarts_through_the_pooler(
        spark: Any, journal_url: str, journal_pooler: Any, kafka_cluster: Any,
        tmp_path: Path, cli: Cli) -> None:  # noqa: F811
    pooled = journal_pooler.url_for(journal_url)
    topic, name = f"pooled_{uuid.uuid4().hex[:8]}", f"pooled_{uuid.uuid4().hex[:8]}"
    fill(kafka_cluster, topic, {0: 9, 1: 4, 2: 7, 3: 0})
    listener = attach(spark, database_url=pooled, spool_dir=str(tmp_path / "spool"))
    try:
        q = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", 5).load()
             .writeStream.format("noop").queryName(name)
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert q.exception() is None
        assert listener.wait_terminated(q.runId, 60)
        batches = len(q.recentProgress)
    finally:
        spark.streams.removeListener(listener)
        listener.close()
    assert batches >= 4  # 20 records, 5 a batch
    assert sql_rows(journal_url, "select count(*) from offset_journal.batches b join "
                                 "offset_journal.query_runs r using (run_id) "
                                 "where r.query_name = :q", q=name) == [(batches,)]
    code, out, err = cli("--database-url", pooled, "starting-offsets", name,
                         "--bootstrap-servers", kafka_cluster.bootstrap_servers,
                         "--subscribe", topic)
    assert code == 0, err
    assert json.loads(out) == {topic: {"0": 9, "1": 4, "2": 7, "3": 0}}
