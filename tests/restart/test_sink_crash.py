"""The proof on the real parts (Spark 4.2 with Spark's Kafka connector, a real
broker, Postgres, Delta from Maven Central): the driver SIGKILLed after its sink
committed batch N and before Spark wrote ``commits/N`` (stopped with SIGSTOP the moment
the sink's log file for N appears, then killed), for the file sink, Delta's sink and a
foreachBatch Delta writer with txnAppId/txnVersion. The job restarted on a NEW
checkpoint with ``--from-journal --old-checkpoint`` ends with every record in the sink
exactly once, by (topic, partition, offset); the plan from the journal alone would have
started before N (the batch in flight, written twice)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.audit import audit_query
from offset_journal.checkpoint import read_checkpoint
from offset_journal.restart import plan_restart
from tests.jobs_support import (
    kill_after_sink_commit,
    load_job,
    read_parquet_outputs,
    run_to_end,
    start_driver,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SINKS = ("parquet", "delta", "delta-txn")
DELTA_SMALL = "--conf spark.databricks.delta.snapshotPartitions=2 pyspark-shell"
"""The driver's Delta rebuilds a small table's state in 2 tasks, not 50 (2 cores here)."""
COLUMNS = ["topic", "partition", "offset"]


def _journaled(url: str, name: str) -> int:
    with Journal(url) as journal:
        last = journal.last_batch(name)
    return -1 if last is None else last.batch_id


def _sink_rows(spark: Any, sink: str, out: Path) -> list[tuple[Any, ...]]:
    if sink == "parquet":
        return read_parquet_outputs(spark, out, COLUMNS)
    return [tuple(r) for r in spark.read.format("delta").load(str(out)).select(*COLUMNS)
            .collect()]


def _log_dir(sink: str, out: Path, checkpoint: Path) -> Path:
    if sink == "parquet":
        return Path(load_job("_common").output_dir_for(str(out), str(checkpoint))) / \
            "_spark_metadata"
    return out / "_delta_log"


@pytest.mark.parametrize("sink", SINKS)
def test_killed_after_the_sink_committed_and_before_commits_is_exactly_once(
        journaled_spark, delta_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, sink):
    spark, listener = journaled_spark
    produced = kafka_cluster.produce(kafka_topic, 400)
    name = f"killed-{sink}"
    out = tmp_path / ("out" if sink == "parquet" else "table")
    ck1, ck2 = tmp_path / "ck-v1", tmp_path / "ck-v2"
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", name, "--database-url", journal_url, "--sink", sink,
              "--output", str(out)]
    log = tmp_path / "v1.log"
    job = load_job("kafka_to_sink")
    proc = start_driver("kafka_to_sink", common + [
        "--checkpoint", str(ck1), "--max-offsets-per-trigger", "10",
        "--trigger", "300 milliseconds", "--spool-dir", str(tmp_path / "spool")], log,
        PYSPARK_SUBMIT_ARGS=DELTA_SMALL)

    def query_id() -> str | None:  # Delta's sink: the txn appId is the query id
        return read_checkpoint(ck1).query_id if (ck1 / "metadata").exists() else None

    try:
        batch = kill_after_sink_commit(
            proc, _log_dir(sink, out, ck1), ck1,
            app_id={"parquet": None, "delta": query_id,
                    "delta-txn": job.txn_app_id_for(str(ck1))}[sink],
            after=lambda: _journaled(journal_url, name) >= 1, log=log)
    finally:
        if proc.poll() is None:
            proc.kill()
    ckpt = read_checkpoint(ck1)
    assert ckpt.batch(batch) is not None and not ckpt.batch(batch).committed
    journaled = _journaled(journal_url, name)
    assert journaled < batch  # the journal is behind the sink: N is the batch in flight

    # The plan from the journal alone starts before N: it would write N again.
    blind = plan_restart(journal_url, name, bootstrap_servers=kafka_cluster.bootstrap_servers,
                         old_sink="none", record=False)
    run_to_end(spark, listener, job, [*common, "--checkpoint", str(ck2), "--from-journal",
                                      "--old-checkpoint", str(ck1)])

    rows = _sink_rows(spark, sink, out)
    twice = [r for r, n in Counter(rows).items() if n > 1]
    assert not twice, f"{len(twice)} records written twice, e.g. {twice[:3]}"
    assert set(rows) == {(kafka_topic, p, o) for p, o, _k, _v in produced}, "a record is missing"

    with Journal(journal_url) as j:
        plan = j.recorded_plans(name)[-1]
        assert plan.sink is not None and plan.sink["last_batch"] == batch
        assert plan.sink["taken"] == list(range(journaled + 1, batch + 1))
        assert batch in {b.batch_id for b in j.history(name, run_id=plan.sink["run_id"])}
        report = audit_query(j, name)
    assert report.ok, [f.reason for f in report.findings]
    handed = {(t, p): o for _i, t, p, o in plan.kafka_offsets}
    before = {(t, int(p)): o for t, parts in blind.sources[0].offsets.items()
              for p, o in parts.items()}
    assert any(before[k] < handed[k] for k in handed), "the blind plan started as late"



def test_the_idempotent_sink_restarts_with_an_old_checkpoint_ahead_of_the_journal(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    """jobs/kafka_to_sink.py ``--sink postgres`` (an upsert keyed by (topic, partition,
    offset), no log to read): its old checkpoint committed a batch the journal never had
    (a run without the listener). Restarted with ``--from-journal --old-checkpoint``, the
    plan reads that batch again on purpose, as the job's sink allows, instead of refusing
    for want of a sink log the job has no flag to waive: every record once in the sink."""
    import psycopg

    spark, listener = journaled_spark
    job = load_job("kafka_to_sink")
    produced = kafka_cluster.produce(kafka_topic, 30)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "upserts", "--database-url", journal_url, "--sink", "postgres",
              "--sink-table", "upserts", "--max-offsets-per-trigger", "10"]
    old = tmp_path / "ck-old"
    run_to_end(spark, listener, job, [*common, "--checkpoint", str(old)])
    produced += kafka_cluster.produce(kafka_topic, 10, start=30)
    spark.streams.removeListener(listener)
    try:
        q = job.build_query(spark, job.parser().parse_args([*common, "--checkpoint", str(old)]))
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()
    finally:
        spark.streams.addListener(listener)
    committed = read_checkpoint(str(old)).last_committed
    assert committed is not None and committed.batch_id > _journaled(journal_url, "upserts")
    produced += kafka_cluster.produce(kafka_topic, 10, start=40)
    run_to_end(spark, listener, job, [*common, "--from-journal", "--checkpoint",
                                      str(tmp_path / "ck-new"), "--old-checkpoint", str(old)])
    with psycopg.connect(job.libpq_url(journal_url)) as conn:
        got = conn.execute('select partition, "offset" from upserts').fetchall()
    assert sorted(got) == sorted((p, o) for p, o, _k, _v in produced)
