"""Record-time restarts on a real broker with Spark's own connector.

Records carry explicit timestamps (producer CreateTime) in two waves an hour apart. A
journaled job reads both; the plan ``--from-time`` between the waves must start every
partition at the second wave (a partition the second wave never reached: at its end),
say what is read again, and a new job on a new checkpoint, started from the plan's
``startingOffsets`` or from its ``startingOffsetsByTimestamp``, must read exactly the
second wave, once, by (topic, partition, offset).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.formatting import format_time
from tests.jobs_support import load_job
from tests.support import Cli, one_error_line

pytestmark = [pytest.mark.spark, pytest.mark.slow]


Rows = list[tuple[str, int, int]]


def _millis(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def _produce(kafka: Any, topic: str, n: int, start: int, at: datetime, parts: int) -> Rows:
    """``n`` records over partitions 0..parts-1, timestamped ``at`` + i ms."""
    base = _millis(at)
    acked = kafka.produce(topic, n, start=start, partitions=parts,
                          timestamp_ms=lambda i: base + i)
    return [(topic, p, o) for p, o, _k, _v in acked]


def _journaled_job(spark: Any, listener: Any, kafka: Any, topic: str, url: str,
                   tmp: Path) -> None:
    job = load_job("kafka_to_sink")
    argv = ["--bootstrap-servers", kafka.bootstrap_servers, "--topics", topic,
            "--query-name", "replay-me", "--database-url", url, "--sink", "parquet",
            "--output", str(tmp / "v1-out"), "--checkpoint", str(tmp / "ck-v1"),
            "--max-offsets-per-trigger", "12"]
    q = job.build_query(spark, job.parser().parse_args(argv))
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)


def _new_job(spark: Any, kafka: Any, topic: str, options: dict[str, str], tmp: Path,
             name: str) -> Rows:
    """A job on a NEW checkpoint started from ``options``: what it read, by offset."""
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
              .option("subscribe", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    q = (reader.load().selectExpr("topic", "partition", "offset").writeStream
         .format("parquet").option("path", str(tmp / name / "out"))
         .option("checkpointLocation", str(tmp / name / "ck")).queryName(name)
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    return [tuple(r) for r in spark.read.parquet(str(tmp / name / "out"))
            .select("topic", "partition", "offset").collect()]


def test_from_time_replays_exactly_the_second_wave_in_both_forms(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, cli: Cli):
    spark, listener = journaled_spark
    now = datetime.now(timezone.utc).replace(microsecond=0)
    kafka_cluster.create_topic(kafka_topic, 3)
    first = _produce(kafka_cluster, kafka_topic, 30, 0, now - timedelta(hours=2), parts=3)
    second = _produce(kafka_cluster, kafka_topic, 20, 30, now - timedelta(hours=1), parts=2)
    _journaled_job(spark, listener, kafka_cluster, kafka_topic, journal_url, tmp_path)
    servers = kafka_cluster.bootstrap_servers
    when = format_time(now - timedelta(minutes=90))
    base = ("--database-url", journal_url)

    code, out, _err = cli(*base, "plan", "replay-me", "--bootstrap-servers", servers,
                          "--from-time", when)
    assert code == 0, out
    text = " ".join(out.split())
    assert "Starts at record time" in text
    assert "20 journaled records will be processed again" in text
    assert f"{kafka_topic}-0 10 (offsets 10..19)" in text
    assert f"no record at or after {when}" in text and f"{kafka_topic}-2" in text
    assert "Processed again:" in text and "of run" in text
    code, out, _err = cli(*base, "plan", "replay-me", "--bootstrap-servers", servers,
                          "--from-time", when, "--format", "json")
    as_json = json.loads(out)
    assert as_json["sources"][0]["records_again"] == {
        kafka_topic: {"0": 10, "1": 10, "2": 0}}
    assert as_json["sources"][0]["records_again_total"] == 20
    reread = as_json["reprocessed_batches"]
    assert len(reread) == 1 and reread[0]["batches"] >= 1

    code, out, err = cli(*base, "starting-offsets", "replay-me", "--bootstrap-servers",
                         servers, "--from-time", when)
    assert code == 0, err
    offsets = json.loads(out)
    assert offsets == {kafka_topic: {"0": 10, "1": 10, "2": 10}}
    # Recorded as a decision: from-time, with exactly the offsets handed out.
    with Journal(journal_url) as j:
        recorded = j.recorded_plans("replay-me")[-1]
    assert (recorded.command, recorded.position, recorded.ok) == ("starting-offsets",
                                                                  "from-time", True)
    assert {(t, p): o for _i, t, p, o in recorded.kafka_offsets} == {
        (kafka_topic, int(p)): o for p, o in offsets[kafka_topic].items()}
    assert recorded.request["from_time"] == when
    got = _new_job(spark, kafka_cluster, kafka_topic, {"startingOffsets": out.strip()},
                   tmp_path, "from-offsets")
    assert len(got) == len(set(got)) and sorted(got) == sorted(second)

    code, out, err = cli(*base, "starting-offsets", "replay-me", "--bootstrap-servers",
                         servers, "--from-time", when, "--format", "by-timestamp")
    assert code == 0, err
    assert "startingOffsetsByTimestampStrategy=latest" in err
    millis = _millis(now - timedelta(minutes=90))
    assert json.loads(out) == {kafka_topic: {"0": millis, "1": millis, "2": millis}}
    got = _new_job(spark, kafka_cluster, kafka_topic,
                   {"startingOffsetsByTimestamp": out.strip(),
                    "startingOffsetsByTimestampStrategy": "latest"}, tmp_path, "by-time")
    assert len(got) == len(set(got)) and sorted(got) == sorted(second)
    assert not set(got) & set(first)


def test_bad_record_times_and_unknown_topics_are_one_line(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, cli: Cli):
    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 1)
    _produce(kafka_cluster, kafka_topic, 5, 0, datetime.now(timezone.utc), parts=1)
    _journaled_job(spark, listener, kafka_cluster, kafka_topic, journal_url, tmp_path)
    base = ("--database-url", journal_url)
    servers = ("--bootstrap-servers", kafka_cluster.bootstrap_servers)
    for cmd in ("plan", "starting-offsets"):
        code, out, err = cli(*base, cmd, "replay-me", *servers, "--from-time", "+1d")
        assert "bad time" in one_error_line(code, err) and out == ""
        code, out, err = cli(*base, cmd, "replay-me", *servers, "--from-time",
                             "2999-01-01T00:00:00Z")
        assert "in the future" in one_error_line(code, err) and out == ""
        code, out, err = cli(*base, cmd, "replay-me", *servers, "--from-time=-1h",
                             "--subscribe", f"{kafka_topic}-nope")
        assert "unknown topic" in one_error_line(code, err) and out == ""
        code, out, err = cli(*base, cmd, "replay-me", "--from-time=-1h")
        assert "--bootstrap-servers" in one_error_line(code, err) and out == ""
    code, out, err = cli(*base, "starting-offsets", "replay-me", "--format", "by-timestamp")
    assert "needs --from-time" in one_error_line(code, err)
