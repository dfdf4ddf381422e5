"""The story end to end: an upgraded job restarts with a NEW checkpoint from the journal
and loses nothing. Real Spark with its own Kafka connector, a real Kafka broker, real Postgres."""

from __future__ import annotations

import pytest

from offset_journal import Journal
from tests.jobs_support import load_job, read_parquet_outputs, run_to_end

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.containers]


def test_stateless_upgrade_with_new_checkpoint_loses_nothing(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    spark, listener = journaled_spark
    job = load_job("kafka_to_sink")
    second = kafka_topic + "-late"
    produced = kafka_cluster.produce(kafka_topic, 60)
    assert len({p for p, *_ in produced}) >= 3
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers,
              "--query-name", "orders-to-lake",
              "--database-url", journal_url, "--sink", "parquet",
              "--output", str(tmp_path / "out"), "--max-offsets-per-trigger", "25"]
    # Spark's connector fails a query subscribed to a topic that does not exist
    # (UnknownTopicOrPartitionException), so v1 reads only the first topic; the upgraded
    # v2 also subscribes to a topic created since, which the journal has never seen.
    v1 = run_to_end(spark, listener, job, common + ["--topics", kafka_topic,
                                              "--checkpoint", str(tmp_path / "ck-v1")])
    assert len(v1.recentProgress) >= 3  # 60 records, 25 per trigger

    # v1 is gone; more records arrive, and a topic the journal has never seen.
    produced += [(kafka_topic, *r) for r in kafka_cluster.produce(kafka_topic, 40, start=60)]
    produced = [r if isinstance(r[0], str) else (kafka_topic, *r) for r in produced]
    produced += [(second, *r) for r in kafka_cluster.produce(second, 12)]
    v2_args = common + ["--topics", f"{kafka_topic},{second}",
                        "--checkpoint", str(tmp_path / "ck-v2"), "--from-journal"]
    run_to_end(spark, listener, job, v2_args)

    produced += [(kafka_topic, *r) for r in kafka_cluster.produce(kafka_topic, 20, start=100)]
    run_to_end(spark, listener, job, v2_args)  # v2 resumes from its own checkpoint

    got = read_parquet_outputs(spark, tmp_path / "out", ["topic", "partition", "offset", "key"])
    expected = sorted((t, p, o, k) for t, p, o, k, _v in produced)
    assert len(got) == len(set(got)), "a record was written twice"
    assert sorted(got) == expected

    runs = Journal(journal_url).runs("orders-to-lake")
    assert len(runs) == 3 and len({r.query_id for r in runs}) == 2


def test_windowed_upgrade_emits_every_window_once_with_exact_counts(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    """The knowledge-base scenario: windows still in state when the old checkpoint is
    dropped are rebuilt by rewinding; windows already emitted are not emitted again."""
    from collections import Counter

    spark, listener = journaled_spark
    job = load_job("windowed_counts")
    t0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
    step_ms = 1_500

    def ts(i):
        return t0 + i * step_ms

    produced = kafka_cluster.produce(kafka_topic, 80, timestamp_ms=ts)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "clicks-per-window", "--database-url", journal_url,
              "--output", str(tmp_path / "out"), "--window", "10 seconds",
              "--watermark", "4 seconds", "--max-offsets-per-trigger", "16"]
    run_to_end(spark, listener, job, common + ["--checkpoint", str(tmp_path / "ck-v1")])
    v1_rows = read_parquet_outputs(spark, tmp_path / "out", ["window_start", "count"])
    assert v1_rows, "v1 emitted no window: the test would prove nothing"

    produced += kafka_cluster.produce(kafka_topic, 80, start=80, timestamp_ms=ts)
    # One record far ahead moves the watermark past every real window, so all of them
    # are emitted; its own window stays open.
    kafka_cluster.produce(kafka_topic, 1, start=10_000, timestamp_ms=lambda i: t0 + 3_600_000)
    run_to_end(spark, listener, job, common + ["--checkpoint", str(tmp_path / "ck-v2"),
                                         "--from-journal"])

    rows = read_parquet_outputs(spark, tmp_path / "out", ["window_start", "count"])
    starts = [r[0] for r in rows]
    assert len(starts) == len(set(starts)), "a window was emitted twice"
    window_ms = 10_000
    expected = Counter((ts(int(k[1:])) // window_ms) * window_ms for _p, _o, k, _v in
                       [(p, o, k.decode(), v) for p, o, k, v in produced])
    got = {int(r[0].timestamp() * 1000): r[1] for r in rows}
    assert got == dict(expected)


def test_point_in_time_restart_reprocesses_exactly_that_range(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    spark, listener = journaled_spark
    job = load_job("kafka_to_sink")
    produced = kafka_cluster.produce(kafka_topic, 80)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "reprocess-me", "--database-url", journal_url,
              "--sink", "parquet", "--max-offsets-per-trigger", "20"]
    v1 = run_to_end(spark, listener, job, common + ["--checkpoint", str(tmp_path / "ck-v1"),
                                              "--output", str(tmp_path / "v1")])
    batches = Journal(journal_url).history("reprocess-me", run_id=str(v1.runId))
    assert len(batches) >= 4
    target = batches[2]
    start = {(p.topic, p.partition): p.start for p in target.sources[0].partitions}
    assert all(v is not None for v in start.values())

    run_to_end(spark, listener, job, common + [
        "--checkpoint", str(tmp_path / "ck-v2"), "--output", str(tmp_path / "v2"),
        "--from-journal", "--batch", f"{target.run_id}:{target.batch_id}"])

    got = read_parquet_outputs(spark, tmp_path / "v2", ["topic", "partition", "offset"])
    expected = sorted((kafka_topic, p, o) for p, o, _k, _v in produced
                      if o >= start[(kafka_topic, p)])
    assert sorted(got) == expected
    # exactly the journaled batches from the target on, by their offset ranges
    ranges = sum(p.end - p.start for b in batches[2:] for p in b.sources[0].partitions)
    assert len(got) == ranges
