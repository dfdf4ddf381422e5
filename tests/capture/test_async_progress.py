"""Async progress tracking, with Spark's Kafka sink for real.

With ``asyncProgressTrackingEnabled`` Spark writes its offset log at most once per
``asyncProgressTrackingCheckpointIntervalMs``: the batches it reported since may not be
in its checkpoint. The progress events look the same either way, so the listener asks
the query how Spark executes it and journals that per run; the plan then names the
batches whose end offsets may not be final. The test shows the danger is real: the old
checkpoint, restarted, runs journaled batches again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from tests.payloads import sql_rows
from tests.support import Cli

pytestmark = [pytest.mark.spark, pytest.mark.slow]



def _query(spark: Any, kafka: Any, src: str, dst: str, ck: Path, **extra: str) -> Any:
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
              .option("subscribe", src).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "10").load())
    writer = (reader.selectExpr("key", "value").writeStream.format("kafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
              .option("topic", dst).option("checkpointLocation", str(ck))
              .queryName("async-sink"))
    for key, value in extra.items():
        writer = writer.option(key, value)
    return writer


def test_async_progress_tracking_is_journaled_and_the_plan_names_batches_not_final(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, cli: Cli):
    spark, listener = journaled_spark
    src, dst = kafka_topic, kafka_topic + "-out"
    kafka_cluster.create_topic(src, 2)
    kafka_cluster.create_topic(dst, 2)
    kafka_cluster.produce(src, 40)
    ck = tmp_path / "ck"
    q = (_query(spark, kafka_cluster, src, dst, ck, asyncProgressTrackingEnabled="true",
                asyncProgressTrackingCheckpointIntervalMs="60000")
         .trigger(processingTime="200 milliseconds").start())
    deadline = time.monotonic() + 180
    try:
        while sum(p["numInputRows"] for p in q.recentProgress) < 40:
            assert q.exception() is None, q.exception()
            assert time.monotonic() < deadline, "the async query did not read 40 records"
            time.sleep(0.2)
    finally:
        q.stop()
    assert listener.wait_terminated(q.runId, 60)
    run_id = str(q.runId)
    assert sql_rows(journal_url, "SELECT execution, async_interval_ms FROM "
                    "offset_journal.query_runs WHERE run_id = :r", r=run_id) == [
        ("AsyncProgressTrackingMicroBatchExecution", 60000)]
    last = Journal(journal_url).last_batch("async-sink")
    assert last is not None and last.run_id == run_id and last.batch_id >= 3
    # Spark's checkpoint really lacks the journal's last batches.
    durable = max(int(f.name) for f in (ck / "offsets").iterdir() if f.name.isdigit())
    assert durable < last.batch_id

    code, out, _err = cli("--database-url", journal_url, "plan", "async-sink",
                          "--bootstrap-servers", kafka_cluster.bootstrap_servers)
    assert code == 0, out
    text = " ".join(out.split())
    assert "ran with async progress tracking" in text and "every 60000 ms" in text
    assert f"batches 0..{last.batch_id}" in text
    assert f"--batch {run_id}:0" in text

    # The old checkpoint, restarted (synchronously), runs journaled batches again.
    again = _query(spark, kafka_cluster, src, dst, ck).trigger(availableNow=True).start()
    again.awaitTermination(180)
    assert again.exception() is None and listener.wait_terminated(again.runId, 60)
    rerun = [b for b in Journal(journal_url).history("async-sink")
             if b.run_id == str(again.runId)]
    assert rerun and rerun[0].batch_id <= last.batch_id  # batch ids journaled twice
    assert sql_rows(journal_url, "SELECT execution FROM offset_journal.query_runs "
                    "WHERE run_id = :r", r=str(again.runId)) == [("MicroBatchExecution",)]
    code, out, _err = cli("--database-url", journal_url, "plan", "async-sink")
    assert "async progress tracking" not in out  # the newest run is synchronous
