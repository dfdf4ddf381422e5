"""Promises that hold while things go wrong around a running query.

* The journal database stops for 20 s under a real streaming query: the query never
  fails, its batches are not slowed, and once the database is back every completed
  batch is journaled exactly once (the spool took the rest).
* A driver that ends while the database is down leaves a spool; the next driver's
  listener replays it, exactly once.
* Two live runs under one query name (two drivers, two checkpoints) are reported by
  the journal (Journal.concurrent_runs, ``runs``) and by the restart plan.

Each test that stops Postgres owns a throwaway server; the session's server is shared.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal, OffsetJournalListener, attach
from offset_journal.cli import main as cli_main
from offset_journal.records import STARTED, TERMINATED, batch_from_progress, run_from_event
from offset_journal.restart import plan_restart
from tests.payloads import kafka_source, progress, sql_rows
from tests.support import OwnPostgres, own_postgres_for_mode

pytestmark = pytest.mark.spark


# --------------------------------------------------------------------------- a server to stop


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[OwnPostgres]:
    pg = own_postgres_for_mode()
    try:
        yield pg
    finally:
        pg.cleanup()


# --------------------------------------------------------------------------- helpers


_sql = sql_rows


def _journaled(url: str, run_id: str) -> tuple[int, int, set[int]]:
    """(rows, distinct batch ids, batch ids) journaled for a run."""
    rows = _sql(url, "select batch_id from offset_journal.batches where run_id = :r", r=run_id)
    ids = [r[0] for r in rows]
    return len(ids), len(set(ids)), set(ids)


def _wait(cond: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(interval)


def _parse_ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Progress:
    """Every progress of a query, by batch id (recentProgress only keeps the last 100)."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.by_id: dict[int, Any] = {}

    def poll(self) -> int:
        assert self.query.exception() is None, self.query.exception()
        for p in self.query.recentProgress:
            self.by_id[p.batchId] = p
        return len(self.by_id)

    def wait_for(self, n: int, timeout: float = 120.0) -> None:
        _wait(lambda: self.poll() >= n, timeout, f"{n} batches of {self.query.name}")

    def run_for(self, seconds: float) -> None:
        """Let the query run, checking it stays up, collecting its progress."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            assert self.query.isActive, "the query stopped"
            self.poll()
            time.sleep(0.2)

    def ids(self) -> set[int]:
        return set(self.by_id)

    def timed(self, t0: float, t1: float) -> list[Any]:
        """Batches triggered in [t0, t1) (wall clock), in batch order."""
        return [p for _, p in sorted(self.by_id.items()) if t0 <= _parse_ts(p.timestamp) < t1]


TRIGGER_MS = 300
WARM_UP = 3  # batches


def _rate_query(spark: Any, name: str, checkpoint: Path, trigger_ms: int = TRIGGER_MS) -> Any:
    """Rows on every trigger (the plain rate source has new rows once a second only)."""
    return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 20).load()
            .writeStream.format("noop").queryName(name)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{trigger_ms} milliseconds").start())


def _spool_files(spool: Path) -> list[Path]:
    return sorted(spool.glob("spool-*.jsonl")) if spool.is_dir() else []


def _spooled_batches(spool: Path) -> set[int]:
    """Batch ids of the progress events in the spool (complete lines only)."""
    ids = set()
    for path in _spool_files(spool):
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            if line.endswith("\n"):
                event = json.loads(line)
                if event.get("type") == "progress":
                    ids.add(json.loads(event["json"])["batchId"])
    return ids


# --------------------------------------------------------------------------- outage


@pytest.mark.containers
def test_database_outage_never_slows_or_fails_the_query_and_loses_nothing(
        spark: Any, own_postgres: OwnPostgres, tmp_path: Path) -> None:
    url = own_postgres.create_journal("outage")
    spool = tmp_path / "spool"
    listener = OffsetJournalListener(url, spool_dir=str(spool), retry_max=1.0, connect_timeout=2)
    spark.streams.addListener(listener)
    writer = listener.start()
    query = None
    try:
        query = _rate_query(spark, "outage_q", tmp_path / "ckpt")
        run_id = str(query.runId)
        prog = Progress(query)
        prog.wait_for(WARM_UP + 8)
        _wait(lambda: _journaled(url, run_id)[0] >= WARM_UP + 6, 30,
              "the first batches in the journal")

        down_at = time.time()
        own_postgres.stop()
        prog.run_for(20)
        # Nothing waits in memory for the database: every batch that completed during
        # the outage (but the last moments) is already on disk, in the spool.
        late = time.time() - 2
        on_disk = _spooled_batches(spool)
        own_postgres.start()
        up_at = time.time()
        expected = {p.batchId for p in prog.timed(down_at + 2, late)}
        assert expected and expected <= on_disk, sorted(expected - on_disk)

        # Batches keep coming and the spool drains while the query runs on.
        n = prog.poll()
        prog.wait_for(n + 6, timeout=60)
        _wait(lambda: not _spool_files(spool), 30, "the spool to drain while the query runs")
        query.stop()
        assert listener.wait_terminated(query.runId, timeout=30)
        assert query.exception() is None
        prog.poll()
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.streams.removeListener(listener)
        listener.close()

    # Every completed batch journaled exactly once, spooled ones included.
    rows, distinct, ids = _journaled(url, run_id)
    assert rows == distinct
    assert ids == prog.ids()
    assert writer.spooled > 0
    (run,) = Journal(url).runs("outage_q")
    assert run.terminated_at is not None and run.batches == len(ids)

    # Not slowed: batch durations and trigger intervals during the outage look like
    # before it (the first batches, slow while the JVM warms up, are no baseline).
    warm = sorted(prog.by_id)[WARM_UP]
    before = [p for p in prog.timed(0, down_at) if p.batchId >= warm]
    during = prog.timed(down_at, up_at)
    assert len(before) >= 4 and len(during) >= 20_000 // TRIGGER_MS // 2, (before, during)
    dur_before = statistics.median(p.batchDuration for p in before)
    dur_during = [p.batchDuration for p in during]
    assert statistics.median(dur_during) <= 2 * dur_before + 50, (dur_before, dur_during)
    assert max(dur_during) <= dur_before + 1000, (dur_before, dur_during)
    gap_before, gap_during = statistics.median(_gaps(before)), _gaps(during)
    assert statistics.median(gap_during) <= 2 * gap_before + 50, (gap_before, gap_during)
    assert max(gap_during) <= max(gap_before, TRIGGER_MS) + 1000, (gap_before, gap_during)


def _gaps(ps: list[Any]) -> list[float]:
    """Milliseconds between consecutive triggers."""
    ts = [_parse_ts(p.timestamp) * 1000 for p in ps]
    return [b - a for a, b in zip(ts, ts[1:], strict=False)]


@pytest.mark.containers
def test_spool_left_by_a_driver_that_ended_during_an_outage_is_replayed_exactly_once(
        spark: Any, own_postgres: OwnPostgres, tmp_path: Path) -> None:
    url = own_postgres.create_journal("restart")
    spool = tmp_path / "spool"
    first = OffsetJournalListener(url, spool_dir=str(spool), retry_max=1.0, connect_timeout=2,
                                  terminate_flush_timeout=1.0)
    spark.streams.addListener(first)
    first.start()
    query = None
    try:
        query = _rate_query(spark, "respawn_q", tmp_path / "ckpt")
        run_id = str(query.runId)
        prog = Progress(query)
        prog.wait_for(3)
        _wait(lambda: _journaled(url, run_id)[0] >= 2, 30, "the first batches in the journal")
        own_postgres.stop()
        prog.wait_for(prog.poll() + 4, timeout=60)
        query.stop()
        prog.poll()
        # The termination reaches the listener, whose flush cannot finish: DB is down.
        assert first.wait_terminated(query.runId, timeout=5) is False
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.streams.removeListener(first)
    # The driver goes away with the database still down: its events stay in the spool.
    assert first.close(timeout=1.0) is False
    assert _spool_files(spool)

    own_postgres.start()
    assert _journaled(url, run_id)[2] < prog.ids()
    # The next driver starts with the same spool directory and replays what was left.
    second = attach(spark, database_url=url, spool_dir=str(spool))
    try:
        assert second.flush(timeout=30)
    finally:
        spark.streams.removeListener(second)
        second.close()
    rows, distinct, ids = _journaled(url, run_id)
    assert rows == distinct and ids == prog.ids()
    assert not _spool_files(spool)
    (run,) = Journal(url).runs("respawn_q")
    assert run.started_at is not None and run.terminated_at is not None
    # Replaying the same events again (a crash after replay, before removing the file)
    # still leaves each batch once.
    again = OffsetJournalListener(url, spool_dir=str(spool))
    writer = again.start()
    for p in prog.by_id.values():
        writer.submit({"type": "progress", "json": p.json})
    assert again.close(timeout=30)
    assert _journaled(url, run_id)[:2] == (len(ids), len(ids))


# --------------------------------------------------------------------------- concurrent runs


def _minute(m: float) -> str:
    return f"2024-03-01T10:{int(m):02d}:{int((m % 1) * 60):02d}.000Z"


def _record(journal: Journal, run_id: str, query_id: str, batch_minutes: list[float], *,
            start: float | None = None, end: float | None = None, name: str = "orders") -> None:
    if start is not None:
        journal.record_run(run_from_event({"type": STARTED, "query_id": query_id,
                                           "run_id": run_id, "name": name,
                                           "timestamp": _minute(start)}))
    offset = 0
    for i, m in enumerate(batch_minutes):
        src = kafka_source("orders", {"orders": {"0": offset}}, {"orders": {"0": offset + 5}})
        journal.record_batch(batch_from_progress(progress(
            i, sources=[src], name=name, query_id=query_id, run_id=run_id,
            timestamp=_minute(m))))
        offset += 5
    if end is not None:
        journal.record_run(run_from_event({"type": TERMINATED, "query_id": query_id,
                                           "run_id": run_id, "name": name,
                                           "timestamp": _minute(end)}))


def _pairs(journal: Journal, name: str) -> list[tuple[str, str]]:
    return [(a.run_id, b.run_id) for a, b in journal.concurrent_runs(name)]


def test_interleaving_runs_are_reported_by_the_journal_and_the_plan(
        journal_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with Journal(journal_url) as j:
        # Two drivers under one name, batches interleaved in time.
        _record(j, "run-x", "qid-x", [1, 3, 5], start=0.5, end=6)
        _record(j, "run-y", "qid-y", [2, 4, 7])  # start and end events lost: batches only
        # Afterwards, runs one after the other: not concurrent.
        _record(j, "run-z", "qid-x", [11, 12], start=10, end=13)
        _record(j, "run-w", "qid-x", [14], start=13, end=15)  # starts as run-z ends
        # Another query's runs overlap run-x: other names are not mixed in.
        _record(j, "run-o", "qid-o", [1, 2], start=0, end=8, name="other")

        assert _pairs(j, "orders") == [("run-x", "run-y")]
        assert _pairs(j, "other") == []
        assert _pairs(j, "nobody") == []
        (a, b), = j.concurrent_runs("orders")
        assert a.query_name == b.query_name == "orders"

    plan = plan_restart(journal_url, "orders")
    warned = [w for w in plan.warnings if "same time" in w]
    assert len(warned) == 1 and "run-x" in warned[0] and "run-y" in warned[0]

    assert cli_main(["--database-url", journal_url, "runs", "orders"]) == 0
    out, err = capsys.readouterr()
    assert "run-x" in out and "run-z" in out
    (line,) = err.strip().splitlines()
    assert line.startswith("offset-journal: warning: ") and "run-x" in line and "run-y" in line
    assert cli_main(["--database-url", journal_url, "plan", "orders"]) == 0
    out, err = capsys.readouterr()
    assert "run-x and run-y" in " ".join(out.split())


_DRIVER = textwrap.dedent("""
    import json, os, sys, time
    from pyspark.sql import SparkSession
    from offset_journal import attach

    url, name, ckpt, spool, ready, stop = sys.argv[1:]
    spark = (SparkSession.builder.master("local[1]").appName("second-driver")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
             .config("spark.driver.memory", "512m").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    listener = attach(spark, database_url=url, spool_dir=spool)
    q = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
         .writeStream.format("noop").queryName(name).option("checkpointLocation", ckpt)
         .trigger(processingTime="200 milliseconds").start())
    deadline = time.monotonic() + 240
    while len(q.recentProgress) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    with open(ready + ".tmp", "w") as f:
        f.write(str(q.runId))
    os.rename(ready + ".tmp", ready)
    while not os.path.exists(stop) and time.monotonic() < deadline:
        time.sleep(0.1)
    q.stop()
    ok = listener.wait_terminated(q.runId, 60)
    listener.close()
    print(json.dumps({"run_id": str(q.runId), "journaled": ok}))
    spark.stop()
""")


def test_two_live_drivers_under_one_query_name_are_reported(
        spark: Any, journal_url: str, tmp_path: Path) -> None:
    """A second driver process (its own local Spark) runs the same query name on
    another checkpoint while this one runs: both runs are journaled and reported."""
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                           os.environ.get("PYTHONPATH", "")]))
    other = subprocess.Popen(
        [sys.executable, str(script), journal_url, "twin_q", str(tmp_path / "ckpt-other"),
         str(tmp_path / "spool-other"), str(ready), str(stop)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    listener = attach(spark, database_url=journal_url, spool_dir=str(tmp_path / "spool"))
    query = None
    try:
        _wait(lambda: ready.exists() or other.poll() is not None, 240,
              "the second driver's first batches", interval=0.2)
        assert ready.exists(), other.communicate(timeout=10)
        query = _rate_query(spark, "twin_q", tmp_path / "ckpt-this", 200)
        Progress(query).wait_for(3)
        query.stop()
        assert listener.wait_terminated(query.runId)
    finally:
        stop.touch()
        if query is not None and query.isActive:
            query.stop()
        spark.streams.removeListener(listener)
        listener.close()
        try:
            out, err = other.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            other.kill()
            out, err = other.communicate()
    assert other.returncode == 0, err[-3000:]
    theirs = json.loads(out.strip().splitlines()[-1])
    assert theirs["journaled"] is True
    ours = str(query.runId)

    with Journal(journal_url) as j:
        runs = {r.run_id: r for r in j.runs("twin_q")}
        assert set(runs) == {ours, theirs["run_id"]}
        assert runs[ours].query_id != runs[theirs["run_id"]].query_id  # two checkpoints
        assert all(r.batches >= 2 and r.terminated_at is not None for r in runs.values())
        pairs = j.concurrent_runs("twin_q")
        assert [{a.run_id, b.run_id} for a, b in pairs] == [{ours, theirs["run_id"]}]
    plan = plan_restart(journal_url, "twin_q")
    assert any(ours in w and theirs["run_id"] in w and "same time" in w for w in plan.warnings)


# --------------------------------------------------------------------------- kill -9 in an outage


def test_driver_killed_during_an_outage_leaves_a_spool_the_next_start_replays(
        own_postgres, kafka_cluster, kafka_topic, spark, tmp_path):
    """The database goes away, the driver is then killed with SIGKILL: what it spooled
    (including a line cut short by the kill) is replayed by the next start, exactly once,
    and a restart from the journal then loses no record."""
    import signal

    from offset_journal.capture.writer import Writer, WriterConfig
    from offset_journal.checkpoint import read_checkpoint
    from tests.jobs_support import load_job, read_parquet_outputs, start_driver

    url = own_postgres.create_journal("killed_in_outage")
    spool = tmp_path / "spool"
    produced = kafka_cluster.produce(kafka_topic, 300)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "killed-in-outage", "--database-url", url, "--sink", "parquet",
              "--output", str(tmp_path / "out"), "--max-offsets-per-trigger", "10",
              "--spool-dir", str(spool)]
    log = tmp_path / "v1.log"
    proc = start_driver("kafka_to_sink", common + ["--checkpoint", str(tmp_path / "ck-v1"),
                                                   "--trigger", "200 milliseconds"], log)
    try:
        _wait(lambda: bool(_sql(url, "select 1 from offset_journal.batches limit 1")), 180,
              "a first journaled batch")
        before = {r[0] for r in _sql(url, "select batch_id from offset_journal.batches")}
        own_postgres.stop()
        _wait(lambda: len(_spooled_batches(spool) - before) >= 3, 120, "batches in the spool")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    spooled = _spooled_batches(spool)
    files = _spool_files(spool)
    assert files
    with files[-1].open("a", encoding="utf-8") as f:
        f.write('{"type":"progress","json":"{\\"id\\":')  # what a kill mid-write leaves
    own_postgres.start()

    # The next start (a new writer on the same spool directory) replays it.
    writer = Writer(WriterConfig(url, str(spool)))
    writer.start()
    assert writer.flush(timeout=60)
    writer.close()
    rows = _sql(url, "select batch_id from offset_journal.batches")
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)), "a batch was journaled twice"
    assert set(ids) == before | spooled
    assert not _spool_files(spool)
    committed = {b.batch_id for b in read_checkpoint(tmp_path / "ck-v1").committed_batches()}
    assert set(ids) <= committed, "the journal holds a batch the checkpoint never committed"

    # A new checkpoint from the journal: nothing lost.
    listener = attach(spark, database_url=url, spool_dir=str(tmp_path / "spool2"))
    try:
        job = load_job("kafka_to_sink")
        q = job.build_query(spark, job.parser().parse_args(
            common + ["--checkpoint", str(tmp_path / "ck-v2"), "--from-journal"]))
        q.awaitTermination(300)
        assert q.exception() is None
        assert listener.wait_terminated(q.runId)
    finally:
        spark.streams.removeListener(listener)
        listener.close()
    got = read_parquet_outputs(spark, tmp_path / "out", ["partition", "offset"])
    assert set(got) == {(p, o) for p, o, _k, _v in produced}
