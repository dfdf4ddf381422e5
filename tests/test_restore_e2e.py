"""Savepoints restored into a NEW checkpoint at JVM speed (issue 40): the savepoint's
state written straight into the new query's state store, for built-in operators, into
another number of shuffle partitions, then the new query runs on: every key's state and
output equal a run that never stopped. Real Spark 4.2 with its Kafka connector on the test
broker, real Postgres."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def _cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _amounts(i: int) -> str:
    return f"g{i % 7},{(i * 37) % 101}"


def _reference(produced: list[tuple[int, int, bytes, bytes]]) -> dict[str, tuple[int, int, int]]:
    """(n, max, sum) per group over every record produced."""
    acc: dict[str, list[int]] = defaultdict(list)
    for _p, _o, _k, value in produced:
        grp, amount = value.decode().split(",")
        acc[grp].append(int(amount))
    return {g: (len(a), max(a), sum(a)) for g, a in acc.items()}


def _state(spark: Any, checkpoint: Path, **options: str) -> list[Any]:
    spark.streams.active  # noqa: B018 - the StateStoreCoordinator
    return spark.read.format("statestore").options(**options).load(str(checkpoint)).collect()


def _events(spark: Any, servers: str, topic: str, starting: str = "earliest",
            per_trigger: int = 30) -> Any:
    from pyspark.sql import functions as F

    values = F.split(F.col("value").cast("string"), ",")
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic).option("startingOffsets", starting)
            .option("maxOffsetsPerTrigger", str(per_trigger)).load()
            .select(values[0].alias("grp"), values[1].cast("long").alias("amount")))


def _totals(events: Any) -> Any:
    from pyspark.sql import functions as F

    return events.groupBy("grp").agg(F.count("*").alias("n"), F.max("amount").alias("mx"),
                                     F.sum("amount").alias("total"))


def _run(writer: Any, name: str, checkpoint: Path, listener: Any = None) -> Any:
    q = (writer.queryName(name).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    if listener is not None:
        assert listener.wait_terminated(q.runId, 60)
    return q


def _ends(journal_url: str, savepoint: str) -> str:
    from offset_journal.savepoint import load_savepoint

    with Journal(journal_url) as journal:
        found = load_savepoint(savepoint, journal, verify=False)
    (end,) = found.manifest.end_offsets
    return json.dumps(end.offset)


def test_aggregation_restored_into_eight_partitions_with_a_changed_projection(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1: groupBy(grp).agg(count, max, sum) on the HDFS-backed store, 4 shuffle
    partitions; v2: the same aggregation with one more output column, on a NEW
    checkpoint, 8 partitions, its state restored from v1's savepoint while records kept
    arriving: every key's state, and the output of every key that received records, equal
    the totals over all records; the state sits in 8 partitions."""
    from pyspark.sql import functions as F

    from offset_journal.savepoint.restore import restore_savepoint
    from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    produced = kafka_cluster.produce(kafka_topic, 70, value=_amounts)
    v1_ck, v2_ck, sp = tmp_path / "ck-v1", tmp_path / "ck-v2", tmp_path / "sp"
    with session_conf(spark, "spark.sql.shuffle.partitions", "4"), \
            session_conf(spark, PROVIDER_CONF, HDFS):
        _run(_totals(_events(spark, servers, kafka_topic)).writeStream.outputMode("update")
             .format("noop"), "totals", v1_ck, listener)
    produced += kafka_cluster.produce(kafka_topic, 25, start=70,
                                      value=lambda i: _amounts(i) if i % 5 else f"g9,{i}")
    code, out, err = _cli(capsys, "--database-url", journal_url, "savepoint", "create",
                          "totals", "--checkpoint", str(v1_ck), "--to", str(sp))
    assert code == 0, err

    out_dir = tmp_path / "out"

    def write(batch: Any, batch_id: int) -> None:
        batch.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(str(out_dir))

    starting = _ends(journal_url, str(sp))

    def v2() -> Any:
        totals = _totals(_events(spark, servers, kafka_topic, starting))
        return (totals.withColumn("mean", F.col("total") / F.col("n")).writeStream
                .outputMode("update").foreachBatch(write).queryName("totals")
                .option("checkpointLocation", str(v2_ck)))

    with session_conf(spark, "spark.sql.shuffle.partitions", "8"), \
            Journal(journal_url) as journal:
        restored = restore_savepoint(spark, str(sp), str(v2_ck), v2, journal=journal)
    assert restored.partitions == 8 and restored.keys == 7
    (op,) = restored.layout.operators
    assert (op.decision, op.path) == ("restored", "typed")
    q = v2().trigger(availableNow=True).start()
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)

    reference = _reference(produced)
    v2_state = _state(spark, v2_ck)
    assert {r.key.grp: tuple(r.value) for r in v2_state} == reference
    assert {r.partition_id for r in v2_state} <= set(range(8))
    (meta,) = spark.read.format("state-metadata").load(str(v2_ck)).collect()
    assert meta.numPartitions == 8
    rows = spark.read.parquet(str(out_dir)).collect()
    assert min(r.batch_id for r in rows) == 2, "v2's first real batch comes after the seed"
    latest = {r.grp: r for r in sorted(rows, key=lambda r: r.batch_id)}
    assert set(latest) == {v.decode().split(",")[0] for *_x, v in produced[70:]}
    for grp, row in latest.items():
        assert (row.n, row.mx, row.total) == reference[grp]


def test_stateful_job_restores_an_aggregation_into_transform_with_state(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """jobs/stateful_counts.py: v1 the built-in aggregation (HDFS-backed, 2 partitions);
    v2 transformWithState on a NEW checkpoint with 3 partitions, ``--from-journal
    --savepoint --restore``: the plan records the restore as its decision, the
    aggregation's buffer goes into the value state through the job's declared mapping at
    JVM speed, v2's state and output equal the totals over all records, and the audit
    finds nothing unexplained (the plan is linked to the bootstrap run)."""
    from offset_journal.savepoint.spark import session_conf
    from tests.jobs_support import load_job, run_to_end

    spark, listener = journaled_spark
    job = load_job("stateful_counts")
    produced = kafka_cluster.produce(kafka_topic, 70, value=_amounts)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "totals", "--database-url", journal_url,
              "--output", str(tmp_path / "out"), "--max-offsets-per-trigger", "30"]
    v1_ck, v2_ck, sp = tmp_path / "ck-v1", tmp_path / "ck-v2", tmp_path / "sp"
    run_to_end(spark, listener, job, [*common, "--checkpoint", str(v1_ck)])
    produced += kafka_cluster.produce(kafka_topic, 25, start=70,
                                      value=lambda i: _amounts(i) if i % 5 else f"g9,{i}")
    code, out, err = _cli(capsys, "--database-url", journal_url, "savepoint", "create",
                          "totals", "--checkpoint", str(v1_ck), "--to", str(sp))
    assert code == 0, err
    code, out, err = _cli(capsys, "--database-url", journal_url, "plan", "totals",
                          "--savepoint", "1", "--restore", "--checkpoint", str(v2_ck),
                          "--format", "json")
    assert code == 0, out + err
    (state,) = json.loads(out)["state"]
    assert state["decision"] == "restored" and "the JVM path" in state["how"]

    with session_conf(spark, "spark.sql.shuffle.partitions", "3"):
        run_to_end(spark, listener, job, [*common, "--checkpoint", str(v2_ck), "--engine",
                                          "transform-with-state", "--from-journal",
                                          "--savepoint", str(sp), "--restore"])
    reference = _reference(produced)
    v2_state = _state(spark, v2_ck, stateVarName="totals")
    assert {r.key.grp: tuple(r.value) for r in v2_state} == reference
    assert {r.partition_id for r in v2_state} <= {0, 1, 2}
    rows = spark.read.parquet(job.output_dir_for(str(tmp_path / "out"), str(v2_ck))).collect()
    latest = {r.grp: r for r in sorted(rows, key=lambda r: r.batch_id)}
    assert set(latest) == {v.decode().split(",")[0] for *_x, v in produced[70:]}
    for grp, row in latest.items():
        assert (row.n, row.mx, row.total) == reference[grp]
        assert row.mean == pytest.approx(reference[grp][2] / reference[grp][0])

    with Journal(journal_url) as journal:
        (recorded,) = [p for p in journal.recorded_plans("totals") if p.request.get("restore")]
        assert recorded.request["state"] == [[0, "aggregation", 7, "restored"]]
    code, out, err = _cli(capsys, "--database-url", journal_url, "audit", "totals")
    assert code == 0, out
