"""Under Spark Connect the listener is pickled and runs on the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from offset_journal.journal.db import resolve_url

pytestmark = pytest.mark.spark


def test_listener_journals_under_spark_connect(journal_url, tmp_path):
    env = dict(os.environ, OFFSET_JOURNAL_DATABASE_URL=journal_url, PYSPARK_PYTHON=sys.executable)
    job = Path(__file__).with_name("connect_job.py")
    proc = subprocess.Popen([sys.executable, str(job), str(tmp_path / "spool")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    engine = sa.create_engine(resolve_url(journal_url))
    try:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["batches"] == [0, 1, 2]
        # The server-side listener journals asynchronously: wait for the terminated run.
        deadline = time.monotonic() + 60
        rows: list = []
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                rows = conn.execute(sa.text(
                    "select b.batch_id, s.end_offset, r.terminated_at is not null "
                    "from offset_journal.batches b join offset_journal.batch_sources s "
                    "on s.batch_pk = b.id join offset_journal.query_runs r using (run_id) "
                    "where b.query_name = 'connect_q' and b.run_id = :r order by b.batch_id"),
                    {"r": result["run_id"]}).all()
            if len(rows) == 3:
                break
            time.sleep(0.2)
        assert [(r[0], r[1]) for r in rows] == [
            (0, {"logOffset": 0}), (1, {"logOffset": 1}), (2, {"logOffset": 2})]
    finally:
        if proc.poll() is None:
            proc.kill()
        engine.dispose()


def test_kafka_connector_under_spark_connect_is_journaled_as_connect_reports(
        journal_url, kafka_cluster, kafka_topic, tmp_path):
    """A Connect session reads Kafka with Spark's own connector (its jars on the local
    Connect server's spark.jars); the journal's partition rows are what Connect's own
    progress reports, batch by batch."""
    produced = kafka_cluster.produce(kafka_topic, 22)
    env = dict(os.environ, OFFSET_JOURNAL_DATABASE_URL=journal_url, PYSPARK_PYTHON=sys.executable)
    job = Path(__file__).with_name("connect_kafka_job.py")
    spool = tmp_path / "spool"
    spool.mkdir()
    done = subprocess.run(
        [sys.executable, str(job), str(spool), kafka_cluster.bootstrap_servers, kafka_topic,
         "connect_kafka_q"], env=env, capture_output=True, text=True, timeout=240,
        cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["exception"] == ""
    batches = result["batches"]
    # (Connect's progress objects keep numInputRows per source only)
    assert len(batches) >= 3
    assert sum(s["numInputRows"] for b in batches for s in b["sources"]) == len(produced)
    expected = []
    for b in batches:
        (s,) = b["sources"]
        assert s["description"] == f"KafkaV2[Subscribe[{kafka_topic}]]"
        start = s["startOffset"] or {}
        for part, end in sorted(s["endOffset"][kafka_topic].items(), key=lambda kv: int(kv[0])):
            expected.append((b["batchId"], s["description"], s["numInputRows"], kafka_topic,
                             int(part), start.get(kafka_topic, {}).get(part), end))
    engine = sa.create_engine(resolve_url(journal_url))
    try:
        deadline = time.monotonic() + 60
        rows: list = []
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                done_run = conn.execute(sa.text(
                    "select terminated_at is not null from offset_journal.query_runs "
                    "where run_id = :r"), {"r": result["run_id"]}).scalar()
                rows = [tuple(r) for r in conn.execute(sa.text(
                    "select b.batch_id, s.description, s.num_input_rows, k.topic, k.partition, "
                    "k.start_offset, "
                    "k.end_offset from offset_journal.batches b "
                    "join offset_journal.batch_sources s on s.batch_pk = b.id "
                    "join offset_journal.kafka_partitions k on k.batch_pk = b.id "
                    "and k.source_index = s.source_index "
                    "where b.run_id = :r order by b.batch_id, k.partition"),
                    {"r": result["run_id"]})]
            if done_run and len(rows) >= len(expected):
                break
            time.sleep(0.2)
        assert rows == expected
    finally:
        engine.dispose()
