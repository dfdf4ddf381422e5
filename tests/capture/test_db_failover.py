"""The journal's own database fails over, for real: a primary and a streaming standby
(pg_basebackup, on loopback, pgserver's binaries), the primary's processes SIGKILLed
right after a burst of commits, the standby promoted (``pg_ctl promote``). The writer
is given a libpq multi-host URL over both.

* held behind by a delaying proxy between them (asynchronous replication losing the
  last batches the old primary acknowledged): every batch is in the journal once, no
  integrity flag, ``audit`` exits 0, and flush() says True only once that holds,
  whether the writer finds the new server by a new batch or by flush() alone;
* synchronous replication: nothing was lost, nothing is journaled again;
* two standbys and no primary: everything waits in the spool, never refused, until
  one is promoted;
* the commands on a standby: reads work, writes say in one line they need the
  primary, a plan is printed "not recorded", and the audit says which server it read
  and how far it lags, never calling a batch missing that is only not replayed yet;
* a Spark job on the Kafka connector journals through the failover, and a restart from
  the journal on a new checkpoint is exactly once by key.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.audit import audit_query, format_table
from offset_journal.capture.writer import Writer, WriterConfig, WriterStats
from offset_journal.cli import main as cli_main
from offset_journal.local.standby import (
    LocalPostgres,
    ServerSet,
    journal_template,
    make_synchronous,
    multi_host_url,
    workdir,
)
from offset_journal.records import PROGRESS, STARTED, batch_from_progress
from offset_journal.restart import plan_restart
from tests.payloads import kafka_source, progress, sql_rows

pytestmark = pytest.mark.slow

DB = "journal"
WRITER = "oj_writer"
QUERY = "orders"
RUN = "0f0f0f0f-1111-2222-3333-444444444444"


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="module")
def template() -> Iterator[Path]:
    """A stopped primary's data directory with the journal at head and a writer role
    (db grant --writer): each test's servers are copies of it."""
    base = workdir()
    try:
        yield journal_template(base, WRITER, DB)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def servers(template: Path) -> Iterator[ServerSet]:
    made = ServerSet(template)
    try:
        yield made
    finally:
        made.close()


# --------------------------------------------------------------------------- events


def _batch(i: int, *, partitions: int = 1, run_id: str = RUN,
           name: str = QUERY) -> dict[str, Any]:
    """Batch ``i`` of the run: ``partitions`` partitions of topic t, each advancing 10."""
    parts = range(partitions)
    return {"type": PROGRESS, "json": progress(
        i, run_id=run_id, query_id="q-" + run_id[:8], name=name,
        timestamp=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.000Z",
        sources=[kafka_source("t", {"t": {str(p): 10 * i for p in parts}},
                              {"t": {str(p): 10 * (i + 1) for p in parts}})])}


def _started(run_id: str = RUN, name: str = QUERY) -> dict[str, Any]:
    return {"type": STARTED, "query_id": "q-" + run_id[:8], "run_id": run_id, "name": name,
            "timestamp": "2026-01-01T00:00:00.000Z"}


def _writer(url: str, tmp_path: Path, **config: Any) -> Writer:
    config = {"retry_initial": 0.05, "retry_max": 0.5, **config}
    writer = Writer(WriterConfig(url, str(tmp_path / "spool"), connect_timeout=2, **config))
    writer.start()
    return writer


def _on_standby_then_burst(writer: Writer, primary: LocalPostgres, standby: LocalPostgres,
                           upto: int, partitions: int = 1) -> None:
    """Batches 0..9 journaled and replayed on the standby, then 10..``upto`` - 1 in a
    burst the standby has not received yet (its proxy holds it): all acknowledged."""
    writer.submit(_started())
    for i in range(10):
        writer.submit(_batch(i))
    assert writer.flush(30)
    standby.wait_replayed(primary.wal_lsn())
    for i in range(10, upto):
        writer.submit(_batch(i, partitions=partitions))
    assert writer.flush(30)


def _batch_ids(server: LocalPostgres, name: str = QUERY) -> list[int]:
    return [r[0] for r in sql_rows(server.url(DB), "SELECT batch_id FROM offset_journal.batches "
                                                   "WHERE query_name = :q ORDER BY batch_id",
                                   q=name)]


def _check_whole(server: LocalPostgres, batches: int, name: str = QUERY) -> None:
    """Every batch of the run once, no flag, nothing rejected, the audit clean."""
    assert _batch_ids(server, name) == list(range(batches))
    with Journal(server.url(DB)) as journal:
        assert journal.flagged_problems(name) == []
        assert journal.rejected_rows() == []
        report = audit_query(journal, name)
        assert report.exit_code == 0, format_table(report)


# --------------------------------------------------------------------------- the writer


@pytest.mark.parametrize("found_by", ["flush", "next batch"])
def test_a_standby_held_behind_loses_nothing_acknowledged(servers, tmp_path, found_by):
    primary = servers.primary()
    standby = servers.standby(primary, held_ms=700)
    url = multi_host_url([primary, standby], DB, WRITER)
    writer = _writer(url, tmp_path)
    # the burst has a partition (a Kafka layout) the journal first sees in it
    _on_standby_then_burst(writer, primary, standby, 25, partitions=2)
    servers.lose(primary)
    standby.promote()
    lacked = 25 - len(_batch_ids(standby))
    assert lacked >= 5, f"the standby lacked only {lacked} batches: the test proves little"

    if found_by == "next batch":
        for i in range(25, 30):
            writer.submit(_batch(i, partitions=2))
    # flush() says True only once what the new server lacked is journaled again
    assert writer.flush(60)
    _check_whole(standby, 30 if found_by == "next batch" else 25)
    stats = writer.stats()
    assert stats == WriterStats(journaled=30 if found_by == "next batch" else 25,
                                spooled=stats.spooled, rejournaled=lacked)
    # and the run goes on on the new primary, checked against the journal there
    for i in range(30, 33):
        writer.submit(_batch(i, partitions=2))
    assert writer.close(30)
    if found_by == "flush":
        assert _batch_ids(standby) == [*range(25), *range(30, 33)]
    else:
        _check_whole(standby, 33)


@pytest.mark.parametrize("window", [60.0, 0.0])
def test_synchronous_replication_loses_nothing_and_journals_nothing_again(
        servers, tmp_path, caplog, window):
    caplog.set_level(logging.INFO, logger="offset_journal")
    primary = servers.primary()
    standby = servers.standby(primary)
    make_synchronous(primary, standby)
    writer = _writer(multi_host_url([primary, standby], DB, WRITER), tmp_path,
                     failover_window=window)
    writer.submit(_started())
    for i in range(20):
        writer.submit(_batch(i))
    assert writer.flush(30)
    servers.lose(primary)
    standby.promote()
    assert len(_batch_ids(standby)) == 20  # every acknowledged commit was on the standby
    for i in range(20, 25):
        writer.submit(_batch(i))
    assert writer.close(60)
    _check_whole(standby, 25)
    assert writer.stats() == WriterStats(journaled=25, spooled=writer.stats().spooled)
    # the change of server is seen without a window too: continuity checks forget
    # what the Journal remembers of the server before
    assert "is another server now" in caplog.text


def test_two_standbys_and_no_primary_keep_everything_in_the_spool(servers, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="offset_journal")
    primary = servers.primary()
    one, two = servers.standby(primary, "one"), servers.standby(primary, "two")
    for standby in (one, two):
        standby.wait_replayed(primary.wal_lsn())
    servers.lose(primary)
    # a multi-host URL (the writer asks for the read-write host), with the listener's
    # retries; and a URL naming one standby alone (it refuses the write: read-only)
    started = time.monotonic()
    both = _writer(multi_host_url([one, two], DB, WRITER), tmp_path / "both",
                   retry_initial=0.5, retry_max=30.0)
    alone = _writer(two.url(DB, WRITER), tmp_path / "alone")
    for writer, name, run in ((both, QUERY, RUN), (alone, "alone", RUN[::-1])):
        events = [_started(run, name), *(_batch(i, run_id=run, name=name) for i in range(10))]
        for ev in events:
            writer.submit(ev)
        assert writer.flush(1.5) is False
        assert writer.flush(10, to_database=False)
        stats = writer.stats()
        assert (stats.journaled, stats.rejected, stats.lost) == (0, 0, 0)
        assert stats.spooled == len(events)
    while time.monotonic() - started < 5:  # long enough for a backoff to reach 4 s
        time.sleep(0.1)
    two.promote()
    # found within a second of its promotion, by the writer on its own (no flush)
    deadline = time.monotonic() + 2.5
    while len(_batch_ids(two)) < 10:
        assert time.monotonic() < deadline, "the promoted standby was not found in time"
        time.sleep(0.05)
    for writer in (both, alone):
        assert writer.close(60)
    _check_whole(two, 10)
    _check_whole(two, 10, "alone")
    # a standby is an outage: said as a warning, never an event's fault or ours
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    assert "is a standby (in recovery)" in caplog.text


# --------------------------------------------------------------------------- the commands


def _cli(capsys: Any, url: str, *argv: str) -> tuple[int, str, str]:
    code = cli_main(["--database-url", url, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_commands_on_a_standby_read_and_say_what_needs_the_primary(servers, tmp_path, capsys):
    primary = servers.primary()
    standby = servers.standby(primary)
    writer = _writer(primary.url(DB, WRITER), tmp_path)
    for ev in [_started(), *(_batch(i) for i in range(4))]:
        writer.submit(ev)
    assert writer.flush(30)
    # Batch 4 is journaled in a transaction that commits after batch 5's (two drivers,
    # one replaying its spool): the journal's order is 4, 5 and the primary is whole,
    # but a standby that stops replaying between the two commits lacks batch 4 alone.
    late = Journal(primary.url(DB, WRITER))
    with late.engine.connect() as conn, conn.begin():
        assert late.record_batch(batch_from_progress(_batch(4)["json"]), conn)
        for i in (5, 6):
            writer.submit(_batch(i))
        assert writer.close(30)
        standby.wait_replayed(primary.wal_lsn())
        standby.sql("SELECT pg_wal_replay_pause()")
    late.close()
    assert _batch_ids(standby) == [0, 1, 2, 3, 5, 6]
    assert _batch_ids(primary) == list(range(7))

    reader = standby.url(DB, WRITER)
    for argv in (["runs"], ["history", QUERY], ["plan", QUERY],
                 ["report", QUERY, "-o", str(tmp_path / "report.html")]):
        code, out, err = _cli(capsys, reader, *argv)
        assert code == 0 and out, (argv, err)
        assert argv[0] != "plan" or "Not recorded" in out  # printed, marked
    # what a job starts from is recorded where it can be: here it says why not
    code, out, err = _cli(capsys, reader, "starting-offsets", QUERY)
    assert code == 0 and json.loads(out) == {"t": {"0": 70}}, err
    assert "not recorded" in err and "needs the primary" in err
    plan = plan_restart(reader, QUERY, record=True)
    assert plan.plan_id is None and "needs the primary" in (plan.record_problem or "")
    assert "Not recorded: this plan was not recorded" in plan.explain()
    # The audit says where it read, and calls nothing missing that is only behind
    code, out, err = _cli(capsys, reader, "audit", QUERY)
    assert code == 0, out + err
    assert f"127.0.0.1:{standby.port}, a standby" in out
    assert "batch 4 of query id" in out and "not on this standby" in out
    # on the primary, batch 4 is there and nothing is said of standbys
    code, out, _ = _cli(capsys, primary.url(DB, WRITER), "audit", QUERY)
    assert code == 0 and "standby" not in out, out

    owner = standby.url(DB)
    for argv in (["db", "upgrade"], ["db", "grant", "--writer", WRITER],
                 ["prune", "--before", "2026-06-01"]):
        code, out, err = _cli(capsys, owner, *argv)
        assert code == 1, (argv, out, err)
        assert len(err.splitlines()) == 1 and "needs the primary" in err, (argv, err)
        assert f"`offset-journal {' '.join(argv[:2] if argv[0] == 'db' else argv[:1])}`" \
            in err
    assert _batch_ids(primary) == list(range(7))


# --------------------------------------------------------------------------- a Spark job


def _kafka_query(spark: Any, bootstrap: str, topic: str, starting: str, out: Path,
                 name: str, per_batch: int, **trigger: Any) -> Any:
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", starting)
            .option("maxOffsetsPerTrigger", str(per_batch)).load()
            .selectExpr("CAST(key AS STRING) AS key", "topic", "partition", "offset")
            .writeStream.format("parquet").option("path", str(out))
            .option("checkpointLocation", str(out.parent / f"ck-{out.name}"))
            .queryName(name).trigger(**trigger).start())


@pytest.mark.spark
def test_a_spark_job_journals_through_a_failover_and_restarts_exactly_once(
        servers, spark, kafka_cluster, kafka_topic, tmp_path, capsys):
    from offset_journal import attach

    primary = servers.primary()
    standby = servers.standby(primary)
    url = multi_host_url([primary, standby], DB, WRITER)
    keys = [k.decode() for _p, _o, k, _v in kafka_cluster.produce(kafka_topic, 120)]
    bootstrap = kafka_cluster.bootstrap_servers
    listener = attach(spark, database_url=url, spool_dir=str(tmp_path / "spool"),
                      retry_max=0.5)
    try:
        v1 = _kafka_query(spark, bootstrap, kafka_topic, "earliest", tmp_path / "v1", QUERY,
                          12, processingTime="100 milliseconds")
        deadline = time.monotonic() + 120
        while len(_batch_ids(primary)) < 4:  # a burst of commits, then the machine dies
            assert time.monotonic() < deadline and v1.exception() is None
            time.sleep(0.05)
        servers.lose(primary)
        standby.promote()
        v1.processAllAvailable()  # the job keeps running
        assert v1.exception() is None
        v1.stop()
        assert listener.wait_terminated(v1.runId, 60)
        last = v1.lastProgress["batchId"]
        assert last >= 9 and _batch_ids(standby) == list(range(last + 1))
        assert listener.stats().lost == listener.stats().rejected == 0
        code, out, _ = _cli(capsys, url, "audit", QUERY)
        assert code == 0, out

        keys += [k.decode() for _p, _o, k, _v in kafka_cluster.produce(kafka_topic, 40,
                                                                        start=120)]
        code, starting, err = _cli(capsys, url, "starting-offsets", QUERY, "--bootstrap-servers",
                                   bootstrap, "--subscribe", kafka_topic)
        assert code == 0, err
        v2 = _kafka_query(spark, bootstrap, kafka_topic, starting.strip(), tmp_path / "v2",
                          QUERY, 1000, availableNow=True)
        v2.awaitTermination(120)
        assert v2.exception() is None
    finally:
        spark.streams.removeListener(listener)
        listener.close()
    read = [r.key for r in spark.read.parquet(str(tmp_path / "v1"), str(tmp_path / "v2"))
            .select("key").collect()]
    assert sorted(read) == sorted(keys), "a record lost or read twice"


@pytest.mark.pgbouncer
def test_behind_pgbouncer_nothing_is_written_on_the_new_server_before_what_it_lacked(
        servers, tmp_path, caplog):
    from offset_journal.local.pgbouncer import start_pgbouncer

    caplog.set_level(logging.INFO, logger="offset_journal.capture.writer")

    primary = servers.primary()
    standby = servers.standby(primary, held_ms=700)
    bouncer = start_pgbouncer(primary.url(), pool_size=2)
    try:
        writer = _writer(bouncer.url_for(primary.url(DB)), tmp_path)
        _on_standby_then_burst(writer, primary, standby, 20)
        # The primary is lost, the standby promoted, and the pooler sends its new
        # server connections there: the writer's own connection to it never breaks, so
        # only the guard on each transaction can tell it is on another server.
        servers.lose(primary)
        standby.promote()
        bouncer.repoint(standby.url())
        lacked = 20 - len(_batch_ids(standby))
        assert lacked >= 5, f"the standby lacked only {lacked} batches"
        for i in range(20, 25):
            writer.submit(_batch(i))
        assert writer.close(60)
        _check_whole(standby, 25)
        assert writer.stats().rejournaled == lacked
        assert "a transaction was refused before it wrote anything" in caplog.text
    finally:
        bouncer.stop()
