"""Spark's listener bus drops streaming events when its ``streams`` queue is full: the
journal then lacks batches the checkpoint has. A driver of its own (the queue's capacity
is a SparkContext setting) with a tiny queue and a slow second listener reads a real
broker through Spark's connector; Spark's own log shows the drop. ``audit`` and
``check`` name the batch ids the journal lacks, and say how to journal them from the
checkpoint; after ``checkpoint import`` the audit is clean and ``check`` says nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from offset_journal import Journal
from offset_journal.checkpoint import read_checkpoint
from offset_journal.wording import ids_text
from tests.jobs_support import SHORT_LIVED_DRIVER
from tests.support import cli  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.containers]

JOB = Path(__file__).resolve().parents[1] / "listener_bus_job.py"
RECORDS = 80  # 4 per batch: 20 batches


def _spans(ids: set[int]) -> list[set[int]]:
    """Consecutive runs of ids."""
    out: list[set[int]] = []
    for i in sorted(ids):
        if out and i - 1 in out[-1]:
            out[-1].add(i)
        else:
            out.append({i})
    return out


def _read(ck: Path, topic: str) -> tuple[set[int], int]:
    """The checkpoint's committed batch ids and the records it had read by the last."""
    if not (ck / "commits").is_dir():
        return set(), 0
    committed = read_checkpoint(ck).committed_batches()
    if not committed or not committed[-1].offsets:
        return set(), 0
    ends = committed[-1].offsets[0]
    ends = json.loads(ends) if isinstance(ends, str) else ends
    return {b.batch_id for b in committed}, sum(int(v) for v in ends.get(topic, {}).values())


def _wait_for_the_drop(proc: subprocess.Popen, ck: Path, topic: str, url: str, query: str,
                       log: Path) -> None:
    """Until the checkpoint committed every record and the journal holds a batch after
    ids it lacks (bounded: under load a batch takes seconds). Which of the last
    batches the journal gets is up to the queue: ids it lacks at the end are filled by
    the import as well, but only those before a journaled one can be named."""
    deadline = time.monotonic() + 300
    committed: set[int] = set()
    journaled: set[int] = set()
    while True:
        assert proc.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, (sorted(committed), sorted(journaled),
                                             log.read_text()[-4000:])
        committed, read = _read(ck, topic)
        journaled = {b.batch_id for b in Journal(url).history(query)}
        if read >= RECORDS and journaled and any(
                i < max(journaled) for i in committed - journaled):
            return
        time.sleep(0.2)


def test_events_the_listener_bus_dropped_are_named_and_filled_from_the_checkpoint(
        cli, journal_url, kafka_cluster, kafka_topic, tmp_path):  # noqa: F811
    kafka_cluster.create_topic(kafka_topic, partitions=2)
    kafka_cluster.produce(kafka_topic, RECORDS)
    ck, log, stop = tmp_path / "ck", tmp_path / "driver.log", tmp_path / "stop"
    query = "bus-drops"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, **SHORT_LIVED_DRIVER)
    proc = subprocess.Popen(
        [sys.executable, str(JOB), kafka_cluster.bootstrap_servers, kafka_topic, str(ck),
         journal_url, query, str(tmp_path / "spool"), str(stop)],
        env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_the_drop(proc, ck, kafka_topic, journal_url, query, log)
        stop.touch()
        assert proc.wait(120) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    text = log.read_text()
    # Spark's own word that it dropped events from the streams queue.
    assert "Dropping event from queue streams" in text, text[-4000:]

    ckpt = read_checkpoint(ck)
    committed = {b.batch_id for b in ckpt.committed_batches()}
    journaled = {b.batch_id for b in Journal(journal_url).history(query)}
    lacking = {i for i in committed - journaled if i < max(journaled)}
    assert lacking, (sorted(committed), sorted(journaled))

    code, out, err = cli("--database-url", journal_url, "audit", query, "--format", "json")
    assert code == 3, out + err
    reasons = [f["reason"] for f in json.loads(out)["findings"]]
    for span in _spans(lacking):  # each span of ids, in every partition's gap it left
        named = [r for r in reasons
                 if f"journal rows lost: {ids_text(span)} of query id {ckpt.query_id}" in r]
        assert named, reasons
        assert all(f"`offset-journal checkpoint import CHECKPOINT --query-name {query}`"
                   in r for r in named), named

    code, out, err = cli("--database-url", journal_url, "check", query)
    assert code == 1, out + err
    first = _spans(lacking)[0]
    assert (f"{len(lacking)} batch id{'s' if len(lacking) > 1 else ''} missing from the "
            "journal") in out, out
    assert f"query id {ckpt.query_id}: {ids_text(first)}" in out, out
    assert f"`offset-journal checkpoint import CHECKPOINT --query-name {query}`" in out

    code, out, err = cli("--database-url", journal_url, "checkpoint", "import", str(ck),
                         "--query-name", query)
    assert code == 0, out + err
    journaled = {b.batch_id for b in Journal(journal_url).history(query)}
    assert committed <= journaled
    code, out, err = cli("--database-url", journal_url, "audit", query)
    assert code == 0, out + err
    code, out, err = cli("--database-url", journal_url, "check", query)
    assert code == 0 and "missing" not in out, out + err
