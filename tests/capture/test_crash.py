"""The driver killed with SIGKILL mid-stream: nothing is lost, the journal never runs
ahead of a completed batch, and an idempotent sink holds no duplicate. (A file sink and
a Delta sink, restarted from what their own logs committed, are killed in
tests/restart/test_sink_crash.py and bench/sink_chaos.py.)"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from offset_journal import Journal
from offset_journal.checkpoint import read_checkpoint
from offset_journal.journal.db import resolve_url
from tests.jobs_support import load_job, run_to_end, start_driver

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.containers]


def _journaled_batches(url: str) -> int:
    """Batches journaled by runs still live (not terminated)."""
    engine = sa.create_engine(resolve_url(url))
    with engine.connect() as conn:
        n = conn.execute(sa.text(
            "select count(*) from offset_journal.batches b join offset_journal.query_runs r "
            "using (run_id) where r.terminated_at is null")).scalar_one()
    engine.dispose()
    return n


def _start_driver(argv: list[str], log: Path) -> subprocess.Popen:
    return start_driver("kafka_to_sink", argv, log)


def _kill_after(proc: subprocess.Popen, url: str, batches: int, log: Path,
                timeout: float = 180) -> None:
    """SIGKILL the driver (Python and its JVM) once it has journaled ``batches``."""
    deadline = time.monotonic() + timeout
    while _journaled_batches(url) < batches:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the driver journaled too few batches"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _check_journal_behind_checkpoint(url: str, query: str, checkpoint: Path, run_id: str):
    """Every journaled batch of the killed run is a COMMITTED batch of its checkpoint,
    with the same end offsets: the journal never holds an offset beyond one."""
    ckpt = read_checkpoint(checkpoint)
    committed = {b.batch_id: b for b in ckpt.committed_batches()}
    journaled = Journal(url).history(query, run_id=run_id)
    assert journaled
    for b in journaled:
        assert b.batch_id in committed, f"batch {b.batch_id} journaled but not committed"
        assert b.sources[0].end_offset == committed[b.batch_id].offsets[0]


def test_sigkill_cycles_into_an_idempotent_sink(journal_url, journaled_spark, kafka_cluster,
                                                kafka_topic, tmp_path):
    """Kill -9 at random points, each time restarting from the journal with a NEW
    checkpoint; the Postgres sink, keyed by (topic, partition, offset), ends up with every
    record exactly once, and the journal never ran ahead of a committed batch.

    Three cycles (three driver starts, each a JVM, about 30 s; the final run in this
    process, on the session's SparkSession), each case once: the seeded kill depths are
    1, 2, 3 batches, so every depth the test draws is killed; the first cycle starts from
    an empty journal, the second from one killed run, the third from a journal holding
    two killed runs, of which the plan must take the newest; the final clean run then
    starts after three kills in a row. More cycles repeat these cases at 30 s each (five
    and ten did, in earlier versions of this test); the test checks the journal against
    the killed run's checkpoint after every kill either way."""
    rng = random.Random(2026)
    produced = kafka_cluster.produce(kafka_topic, 200)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "killed-again", "--database-url", journal_url,
              "--sink", "postgres", "--sink-table", "records", "--max-offsets-per-trigger", "8",
              "--spool-dir", str(tmp_path / "driver-spool"), "--from-journal"]
    cycles = 3
    depths: list[int] = []  # batches journaled before each kill
    for cycle in range(cycles):
        ck = tmp_path / f"ck-{cycle}"
        log = tmp_path / f"cycle-{cycle}.log"
        before = _journaled_batches(journal_url)
        proc = _start_driver(common + ["--checkpoint", str(ck), "--trigger", "150 milliseconds"],
                             log)
        depths.append(rng.randint(1, 3))
        _kill_after(proc, journal_url, before + depths[-1], log)
        runs = [r for r in Journal(journal_url).runs("killed-again") if r.terminated_at is None]
        newest = max(runs, key=lambda r: r.started_at or r.last_trigger_at)
        _check_journal_behind_checkpoint(journal_url, "killed-again", ck, newest.run_id)
        # mark the killed run as over so the next cycle counts only its own batches
        engine = sa.create_engine(resolve_url(journal_url))
        with engine.begin() as conn:
            conn.execute(sa.text("update offset_journal.query_runs set terminated_at = now(), "
                                 "exception = 'killed by test' where terminated_at is null"))
        engine.dispose()
        produced += kafka_cluster.produce(kafka_topic, 20, start=200 + cycle * 20)

    assert set(depths) == {1, 2, 3}, depths  # every kill depth drawn, as said above

    # A last, clean run from the journal drains the rest (in this process: the killed
    # drivers were the ones to run in their own).
    spark, listener = journaled_spark
    job = load_job("kafka_to_sink")
    run_to_end(spark, listener, job, [*common, "--checkpoint", str(tmp_path / "ck-final"),
                                      "--trigger", "available-now"])

    url = job.libpq_url(journal_url)
    with psycopg.connect(url) as conn:
        got = conn.execute('select partition, "offset" from records').fetchall()
    assert len(got) == len(set(got))  # the primary key guarantees it; counted anyway
    assert sorted(got) == sorted((p, o) for p, o, _k, _v in produced)
