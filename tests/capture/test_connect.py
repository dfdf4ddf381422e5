"""Under Spark Connect the listener is pickled and runs on the server.

One Connect session (tests/connect_job.py, in its own process) runs a file-source query
and a Kafka query one after the other: a local Connect server is a JVM of its own, and
one start serves both tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from offset_journal.journal.db import resolve_url, upgrade
from offset_journal.local.services import PostgresServer

pytestmark = pytest.mark.spark

TOPIC = f"t-connect-{os.getpid()}"


@dataclass(frozen=True)
class ConnectRun:
    url: str
    produced: list[Any]
    files: dict[str, Any]
    kafka: dict[str, Any]


@pytest.fixture(scope="module")
def connect_run(journal_server: PostgresServer, kafka_cluster: Any,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectRun]:
    """The Connect job run once, into a journal of its own."""
    url = journal_server.create_database()
    upgrade(url)
    produced = kafka_cluster.produce(TOPIC, 22)
    spool = tmp_path_factory.mktemp("connect") / "spool"
    spool.mkdir()
    env = dict(os.environ, OFFSET_JOURNAL_DATABASE_URL=url, PYSPARK_PYTHON=sys.executable)
    try:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve().parents[1] / "connect_job.py"),
             str(spool),
             kafka_cluster.bootstrap_servers, TOPIC, "connect_kafka_q"],
            env=env, capture_output=True, text=True, timeout=300,
            cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        yield ConnectRun(url, produced, result["files"], result["kafka"])
    finally:
        journal_server.drop_database(url)


def _rows_once_terminated(url: str, run_id: str, sql: str, enough: int) -> list[tuple]:
    """The journal's rows of ``run_id`` (``sql``, bound to ``:r``) once its run is
    journaled as terminated and ``enough`` rows are there: the server-side listener
    journals asynchronously. Bounded: 60 s."""
    engine = sa.create_engine(resolve_url(url))
    try:
        deadline = time.monotonic() + 60
        rows: list[tuple] = []
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                ended = conn.execute(sa.text(
                    "select terminated_at is not null from offset_journal.query_runs "
                    "where run_id = :r"), {"r": run_id}).scalar()
                rows = [tuple(r) for r in conn.execute(sa.text(sql), {"r": run_id})]
            if ended and len(rows) >= enough:
                break
            time.sleep(0.2)
        return rows
    finally:
        engine.dispose()


def test_listener_journals_under_spark_connect(connect_run: ConnectRun) -> None:
    files = connect_run.files
    assert files["exception"] == ""
    assert [b["batchId"] for b in files["batches"]] == [0, 1, 2]
    rows = _rows_once_terminated(
        connect_run.url, files["run_id"],
        "select b.batch_id, s.end_offset from offset_journal.batches b "
        "join offset_journal.batch_sources s on s.batch_pk = b.id "
        "where b.query_name = 'connect_q' and b.run_id = :r order by b.batch_id", 3)
    assert rows == [(0, {"logOffset": 0}), (1, {"logOffset": 1}), (2, {"logOffset": 2})]


def test_kafka_connector_under_spark_connect_is_journaled_as_connect_reports(
        connect_run: ConnectRun) -> None:
    """A Connect session reads Kafka with Spark's own connector (its jars on the local
    Connect server's spark.jars); the journal's partition rows are what Connect's own
    progress reports, batch by batch."""
    kafka = connect_run.kafka
    assert kafka["exception"] == ""
    batches = kafka["batches"]
    # (Connect's progress objects keep numInputRows per source only)
    assert len(batches) >= 3
    assert sum(s["numInputRows"] for b in batches for s in b["sources"]) \
        == len(connect_run.produced)
    expected = []
    for b in batches:
        (s,) = b["sources"]
        assert s["description"] == f"KafkaV2[Subscribe[{TOPIC}]]"
        start = s["startOffset"] or {}
        for part, end in sorted(s["endOffset"][TOPIC].items(), key=lambda kv: int(kv[0])):
            expected.append((b["batchId"], s["description"], s["numInputRows"], TOPIC,
                             int(part), start.get(TOPIC, {}).get(part), end))
    rows = _rows_once_terminated(
        connect_run.url, kafka["run_id"],
        "select b.batch_id, s.description, s.num_input_rows, k.topic, k.partition, "
        "k.start_offset, k.end_offset from offset_journal.batches b "
        "join offset_journal.batch_sources s on s.batch_pk = b.id "
        "join offset_journal.kafka_partitions k on k.batch_pk = b.id "
        "and k.source_index = s.source_index "
        "where b.run_id = :r order by b.batch_id, k.partition", len(expected))
    assert rows == expected
