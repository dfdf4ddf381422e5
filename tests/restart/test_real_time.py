"""Real-time mode (``trigger(realTime="5 seconds")``): journaled,
planned and restarted on a new checkpoint with Spark's Kafka connector. A batch stopped
mid-way leaves no progress event, offsets entry or commit, while its rows may already be
in the sink: the plan says so with what bounds it, and the audit does not call it an
overlap the journal caused."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.cli import main
from offset_journal.offsets import PartitionOffset
from offset_journal.records import is_real_time
from offset_journal.restart import JournalFacts, KafkaFacts, compute_plan
from offset_journal.rows import Batch, BatchRef, RealTimeTail, SourceOffsets

T0 = datetime(2026, 11, 25, 10, tzinfo=timezone.utc)


def _anchor(batch_id: int = 3) -> Batch:
    parts = (PartitionOffset("t", 0, 10, 20), PartitionOffset("t", 1, 5, 9))
    src = SourceOffsets(0, "KafkaV2[Subscribe[t]]", "kafka", {"t": {"0": 10, "1": 5}},
                        {"t": {"0": 20, "1": 9}}, 14, parts)
    return Batch("rt", "qid", "run-rt", batch_id, T0, 5000, 14, None, None, None, (src,), pk=4)


def test_a_plan_after_a_real_time_run_says_what_may_be_written_again():
    anchor = _anchor()
    tail = RealTimeTail("run-rt", BatchRef.of(anchor), T0 + timedelta(seconds=7), True)
    state = {"t": {0: (0, 40), 1: (0, 30)}}
    plan = compute_plan("rt",
                        JournalFacts(anchor, real_time=tail),
                        kafka=KafkaFacts(state=state, real_time_ends={"t": {0: 26, 1: None}}))
    assert plan.ok and plan.starting_offsets() == '{"t":{"0":20,"1":9}}'
    (warning,) = [w for w in plan.warnings if "real-time mode" in w]
    # partition 0: 20..25 (26 was timestamped after the stop); 1: 9..29 (the log end)
    assert "at most 27 records" in warning and "t-0 6, t-1 21" in warning
    assert plan.real_time is not None and plan.real_time["bound"] == 27
    uncounted = compute_plan("rt",
                             JournalFacts(anchor, real_time=tail))
    (warning,) = [w for w in uncounted.warnings if "real-time mode" in w]
    assert "give --bootstrap-servers to count them" in warning
    assert uncounted.real_time is not None and uncounted.real_time["bound"] is None
    moved_on = compute_plan("rt",
                            JournalFacts(_anchor(2), real_time=tail))
    assert not [w for w in moved_on.warnings if "real-time mode" in w]
    assert is_real_time("MicroBatchExecution:RealTimeTrigger")
    assert not is_real_time("MicroBatchExecution") and not is_real_time(None)


def _real_time_query(spark: Any, servers: str, topic: str, checkpoint: Path, sink: str,
                     starting: str = "earliest") -> Any:
    """Each record's (partition, offset) copied to the Kafka topic ``sink`` in real-time
    mode: the Kafka sink sends each row as the batch reads it."""
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
          .option("subscribe", topic).option("startingOffsets", starting).load()
          .selectExpr("concat(CAST(partition AS STRING), ',', CAST(offset AS STRING)) "
                      "AS value"))
    return (df.writeStream.queryName("rt-copy").outputMode("update").format("kafka")
            .option("kafka.bootstrap.servers", servers).option("topic", sink)
            .option("checkpointLocation", str(checkpoint)).trigger(realTime="5 seconds")
            .start())


def _sink_rows(cluster: Any, topic: str) -> Counter[str]:
    """Every value in ``topic``, counted."""
    from confluent_kafka import Consumer, TopicPartition

    ends = cluster.watermarks(topic)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": "oj-real-time-sink", "enable.auto.commit": False})
    got: Counter[str] = Counter()
    try:
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _h) in ends.items()])
        want = sum(high - low for low, high in ends.values())
        deadline = time.monotonic() + 60
        while sum(got.values()) < want and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                got[msg.value().decode()] += 1
    finally:
        consumer.close()
    return got


def _wait(predicate: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.spark
@pytest.mark.slow
def test_real_time_query_journaled_planned_and_restarted(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    kafka_cluster.create_topic(kafka_topic, 2)  # one long-running task per core
    sink = kafka_topic + "-copy"
    kafka_cluster.create_topic(sink, 1)
    produced = kafka_cluster.produce(kafka_topic, 20)
    journal = Journal(journal_url)
    stop = threading.Event()

    def feed() -> None:
        i = 20
        while not stop.is_set():
            produced.extend(kafka_cluster.produce(kafka_topic, 4, start=i))
            i += 4
            time.sleep(0.5)

    v1 = _real_time_query(spark, servers, kafka_topic, tmp_path / "ck-v1", sink)
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        _wait(lambda: len(journal.history("rt-copy")) >= 2, "v1 journaled no batch")
        time.sleep(2.5)  # mid-way through the next 5-second batch
        v1.stop()
    finally:
        stop.set()
        feeder.join(10)
    assert listener.wait_terminated(v1.runId, 60)
    (run,) = [r for r in journal.runs("rt-copy")]
    assert run.terminated_at is not None
    from tests.payloads import sql_rows

    assert sql_rows(journal_url, "SELECT execution FROM offset_journal.query_runs") == [
        ("MicroBatchExecution:RealTimeTrigger",)]
    lags = sql_rows(journal_url, "SELECT min(lag) FROM offset_journal.partition_lag")
    assert lags[0][0] is None or lags[0][0] >= 0

    code = main(["--database-url", journal_url, "plan", "rt-copy", "--bootstrap-servers",
                 servers, "--checkpoint", str(tmp_path / "ck-v2"), "--format", "json",
                 "--record"])  # plan is a preview unless recorded: v2 is linked to it
    out, err = capsys.readouterr()
    assert code == 0, out + err
    plan = json.loads(out)
    assert plan["plan_id"] is not None, plan["record_problem"]
    assert plan["real_time"]["bound"] is not None
    assert any("ran in real-time mode" in w for w in plan["warnings"])
    v1_rows = _sink_rows(kafka_cluster, sink)

    v2 = _real_time_query(spark, servers, kafka_topic, tmp_path / "ck-v2", sink,
                          plan["sources"][0]["options"]["startingOffsets"])
    journal.link_plan(plan["plan_id"], str(v2.runId))
    _wait(lambda: len(journal.history("rt-copy", run_id=str(v2.runId))) >= 1,
          "v2 journaled no batch")
    v2.stop()
    assert listener.wait_terminated(v2.runId, 60)

    rows = _sink_rows(kafka_cluster, sink)
    expected = {f"{p},{o}" for p, o, _k, _v in produced}
    assert set(rows) == expected, "a record is missing"
    again = sum(n - 1 for n in rows.values())
    # A run here: 172 records, 196 rows in the sink, 24 written again; the bound said 24.
    assert 0 < plan["real_time"]["bound"] and again <= plan["real_time"]["bound"], (
        again, plan["real_time"])
    assert all(n <= 2 for n in rows.values()) and all(n == 1 for n in v1_rows.values())

    code = main(["--database-url", journal_url, "audit", "rt-copy", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["findings"] == [], report
    assert any("ran in real-time mode" in n for n in report["notes"])
