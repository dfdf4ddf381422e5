"""The story end to end: an upgraded job restarts with a NEW checkpoint from the journal
and loses nothing. Real Spark, the Kafka protocol peer, real Postgres."""

from __future__ import annotations

import pytest

from offset_journal import Journal
from tests.jobs_support import load_job, read_parquet_outputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _run(spark, listener, module, argv):
    args = module.parser().parse_args(argv)
    q = module.build_query(spark, args)
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)
    return q


def test_stateless_upgrade_with_new_checkpoint_loses_nothing(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    spark, listener = journaled_spark
    job = load_job("kafka_to_sink")
    second = kafka_topic + "-late"
    produced = kafka_cluster.produce(kafka_topic, 60)
    assert len({p for p, *_ in produced}) >= 3
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers,
              "--topics", f"{kafka_topic},{second}", "--query-name", "orders-to-lake",
              "--database-url", journal_url, "--sink", "parquet",
              "--output", str(tmp_path / "out"), "--max-offsets-per-trigger", "25"]
    v1 = _run(spark, listener, job, common + ["--checkpoint", str(tmp_path / "ck-v1")])
    assert len(v1.recentProgress) >= 3  # 60 records, 25 per trigger

    # v1 is gone; more records arrive, and a topic the journal has never seen.
    produced += [(kafka_topic, *r) for r in kafka_cluster.produce(kafka_topic, 40, start=60)]
    produced = [r if isinstance(r[0], str) else (kafka_topic, *r) for r in produced]
    produced += [(second, *r) for r in kafka_cluster.produce(second, 12)]
    v2_args = common + ["--checkpoint", str(tmp_path / "ck-v2"), "--from-journal"]
    _run(spark, listener, job, v2_args)

    produced += [(kafka_topic, *r) for r in kafka_cluster.produce(kafka_topic, 20, start=100)]
    _run(spark, listener, job, v2_args)  # v2 resumes from its own checkpoint

    got = read_parquet_outputs(spark, tmp_path / "out", ["topic", "partition", "offset", "key"])
    expected = sorted((t, p, o, k) for t, p, o, k, _v in produced)
    assert len(got) == len(set(got)), "a record was written twice"
    assert sorted(got) == expected

    runs = Journal(journal_url).runs("orders-to-lake")
    assert len(runs) == 3 and len({r.query_id for r in runs}) == 2
