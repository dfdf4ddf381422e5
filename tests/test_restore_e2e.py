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
    the totals over all records; the state sits in 8 partitions.

    First the bad input, each refused in one line, a refused restore's new checkpoint
    removed: v2's operators do not match (named), a value that cannot be mapped, a type
    changed, a checkpoint that is not new (left untouched), a savepoint whose state file
    is gone, an HDFS-backed checkpoint to repartition in place. Last the command: ``state
    restore --query FILE:FUNCTION`` restores the savepoint into 3 partitions before the
    new query is deployed, which resumes on it."""
    import runpy

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
    starting = _ends(journal_url, str(sp))
    _refused(spark, journal_url, _events(spark, servers, kafka_topic, starting), sp, v1_ck,
             tmp_path, capsys)

    out_dir = tmp_path / "out"

    def write(batch: Any, batch_id: int) -> None:
        batch.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(str(out_dir))

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
    _run(v2(), "totals", v2_ck, listener)

    reference = _reference(produced)
    v2_state = _state(spark, v2_ck)
    assert {r.key.grp: tuple(r.value) for r in v2_state} == reference
    assert {r.partition_id for r in v2_state} <= set(range(8))
    (meta,) = spark.read.format("state-metadata").load(str(v2_ck)).collect()
    assert meta.numPartitions == 8
    rows = spark.read.parquet(str(out_dir)).collect()
    assert min(r.batch_id for r in rows) == 1, "v2's first real batch follows the bootstrap"
    latest = {r.grp: r for r in sorted(rows, key=lambda r: r.batch_id)}
    assert set(latest) == {v.decode().split(",")[0] for *_x, v in produced[70:]}
    for grp, row in latest.items():
        assert (row.n, row.mx, row.total) == reference[grp]

    # The command: the savepoint, restored before the new query is deployed.
    query_file = tmp_path / "v2.py"
    query_file.write_text(QUERY_FILE.format(servers=servers, topic=kafka_topic))
    cli_ck = tmp_path / "ck-cli"
    code, out, err = _cli(capsys, "--database-url", journal_url, "state", "restore", str(sp),
                          "--to", str(cli_ck), "--query", f"{query_file}:v2",
                          "--partitions", "3")
    assert code == 0, err
    assert "operator 0 (aggregation): restored (typed)" in out and "recorded as plan" in out
    _run(runpy.run_path(str(query_file))["v2"](spark, str(cli_ck), [starting]), "totals",
         cli_ck, listener)
    assert {r.key.grp: tuple(r.value) for r in _state(spark, cli_ck)} == reference
    assert {r.partition_id for r in _state(spark, cli_ck)} <= {0, 1, 2}
    code, out, err = _cli(capsys, "--database-url", journal_url, "state", "restore", str(sp),
                          "--to", str(tmp_path / "ck-x"), "--query", f"{query_file}:nope")
    assert code == 2 and "no function 'nope' there" in err


def _refused(spark: Any, journal_url: str, events: Any, sp: Path, v1_ck: Path,
             tmp_path: Path, capsys: Any) -> None:
    """Each bad input refused in one line (see the test above)."""
    import shutil

    from pyspark.sql import functions as F

    from offset_journal.errors import RestoreError, SavepointError
    from offset_journal.savepoint.restore import restore_savepoint

    def restore(frame: Any, checkpoint: Path) -> None:
        def v2() -> Any:
            return (frame.writeStream.outputMode("update").format("noop").queryName("totals")
                    .option("checkpointLocation", str(checkpoint)))
        with Journal(journal_url) as journal:
            restore_savepoint(spark, str(sp), str(checkpoint), v2, journal=journal)

    bad = tmp_path / "ck-bad"
    cases = [
        (events.dropDuplicates(["grp"]), r"operator 0 \(aggregation, stateStoreSave\) of the "
         r"savepoint is operator 0 \(dedup, dedupe\) in the new query"),
        (events.groupBy("grp").agg(F.count("*").alias("n"), F.sum("amount").alias("t")),
         r"the value has 3 field\(s\) in the savepoint \(count, max, sum\) and 2 in the new "
         r"query \(count, sum\)"),
        (events.groupBy("grp").agg(F.count("*").alias("n"), F.max("grp").alias("mx"),
                                   F.sum("amount").alias("t")),
         "field 'max' is long in the savepoint and string in the new query"),
    ]
    for frame, message in cases:
        with pytest.raises(RestoreError, match=message) as caught:
            restore(frame, bad)
        assert "\n" not in str(caught.value)
        assert not bad.exists(), "the refused restore's checkpoint is removed"
    before = sorted((p, p.stat().st_mtime_ns) for p in v1_ck.rglob("*"))
    with pytest.raises(RestoreError, match="is not a new checkpoint"):
        restore(_totals(events), v1_ck)
    assert sorted((p, p.stat().st_mtime_ns) for p in v1_ck.rglob("*")) == before
    victim = next((sp / "operator=0" / "part=0").glob("*.parquet"))
    shutil.move(victim, tmp_path / "elsewhere.parquet")
    with pytest.raises(SavepointError, match="is missing: the savepoint was altered"):
        restore(_totals(events), bad)
    assert not bad.exists()
    shutil.move(tmp_path / "elsewhere.parquet", victim)
    code, _out, err = _cli(capsys, "--database-url", journal_url, "state", "repartition",
                           "--checkpoint", str(v1_ck), "--partitions", "4")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "keeps its state on HDFSBackedStateStoreProvider" in err


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


# --------------------------------------------------------------------------- watermarks

BASE_MS = 1_767_225_600_000  # 2026-01-01


def _burst_ms(i: int) -> int:
    """Bursts of ten records (five pairs two seconds apart), twenty seconds between
    bursts: sessions close and windows end while the stream goes on. A pair of
    duplicates has one time."""
    return BASE_MS + (i // 10) * 20_000 + (i % 10) // 2 * 2_000


def _record(i: int) -> str:
    """id, group, amount: each record twice in a row (duplicates, whichever of the two
    a batch keeps is the same record)."""
    n = i // 2
    return f"{n},g{n % 3},{(n * 37) % 101}"


def _timed_events(spark: Any, servers: str, topic: str, starting: str) -> Any:
    from pyspark.sql import functions as F

    values = F.split(F.col("value").cast("string"), ",")
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic).option("startingOffsets", starting)
            .option("maxOffsetsPerTrigger", "20").load()
            .select(values[0].cast("long").alias("id"), values[1].alias("grp"),
                    values[2].cast("long").alias("amount"), F.col("timestamp").alias("ts")))


def _collect(out_dir: Path) -> Any:
    from pyspark.sql import functions as F

    def write(batch: Any, batch_id: int) -> None:
        batch.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(
            str(out_dir))
    return write


def _rows(spark: Any, *dirs: Path) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for d in dirs:
        if d.exists():
            out += [tuple(r[:-1]) for r in spark.read.parquet(str(d)).collect()]
    return sorted(out, key=repr)


def _upgrade(spark: Any, listener: Any, journal_url: str, kafka_cluster: Any,
             topics: list[str], build: Any, name: str, tmp: Path, capsys: Any,
             first: int = 63, more: int = 40, partitions: str = "4",
             lag: int = 0) -> dict[str, Any]:
    """v1 (HDFS-backed, 2 partitions) over ``first`` records per topic (``lag`` fewer on
    every topic but the first: the other side of a join arrives later), a savepoint, the
    rest arriving (``first + more`` per topic in all), v2 restored on a NEW checkpoint
    (``partitions``), run to the end; the reference: the same query over every record on
    a checkpoint of its own, never stopped. ``first`` odd splits a pair of duplicates and
    a burst across the upgrade (63: two ids of the burst before it, so a lost count and
    a duplicate counted again cannot cancel out): what v2 does with them depends on v1's
    state.
    ``build(starting offsets per source, output dir)`` is the query's writer. Returns the
    outputs and checkpoints."""
    from offset_journal.savepoint.restore import restore_savepoint
    from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf

    cut = {topic: first - (lag if i else 0) for i, topic in enumerate(topics)}
    for topic in topics:
        kafka_cluster.produce(topic, cut[topic], value=_record, timestamp_ms=_burst_ms)
    earliest = ["earliest"] * len(topics)
    with session_conf(spark, PROVIDER_CONF, HDFS):
        _run(build(earliest, tmp / "out-v1"), name, tmp / "ck-v1", listener)
    code, _out, err = _cli(capsys, "--database-url", journal_url, "savepoint", "create", name,
                           "--checkpoint", str(tmp / "ck-v1"), "--to", str(tmp / "sp"))
    assert code == 0, err
    for topic in topics:
        kafka_cluster.produce(topic, first + more - cut[topic], start=cut[topic],
                              value=_record, timestamp_ms=_burst_ms)
    with Journal(journal_url) as journal:
        from offset_journal.savepoint import load_savepoint

        manifest = load_savepoint(str(tmp / "sp"), journal, verify=False).manifest
    ends = [json.dumps(e.offset) for e in sorted(manifest.end_offsets, key=lambda e: e.index)]

    def v2() -> Any:
        return (build(ends, tmp / "out-v2").queryName(name)
                .option("checkpointLocation", str(tmp / "ck-v2")))

    with session_conf(spark, "spark.sql.shuffle.partitions", partitions), \
            Journal(journal_url) as journal:
        restored = restore_savepoint(spark, str(tmp / "sp"), str(tmp / "ck-v2"), v2,
                                     journal=journal)
    q = v2().trigger(availableNow=True).start()
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    with session_conf(spark, PROVIDER_CONF, HDFS):
        _run(build(earliest, tmp / "out-ref"), name + "-reference", tmp / "ck-ref")
    return {"restored": restored, "v1": _rows(spark, tmp / "out-v1"),
            "v2": _rows(spark, tmp / "out-v2"), "both": _rows(spark, tmp / "out-v1",
                                                              tmp / "out-v2"),
            "reference": _rows(spark, tmp / "out-ref"), "v2_ck": tmp / "ck-v2",
            "ref_ck": tmp / "ck-ref"}


def _keys(spark: Any, checkpoint: Path, operator: int) -> set[Any]:
    return {tuple(r.key) for r in _state(spark, checkpoint, operatorId=str(operator))}


def test_dedup_within_watermark_into_a_windowed_aggregation_across_the_upgrade(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """dropDuplicatesWithinWatermark(id) chained into a 10-second windowed aggregation
    with a watermark, append mode: v1 and v2 together emit exactly the windows a run that
    never stopped emits, each once, with the same counts (no duplicate id counted, none
    dropped); v2's two stores end as the reference's; v1's watermark was carried."""
    from pyspark.sql import functions as F

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers

    def build(starting: list[str], out: Path) -> Any:
        events = _timed_events(spark, servers, kafka_topic, starting[0])
        counts = (events.withWatermark("ts", "5 seconds").dropDuplicatesWithinWatermark(["id"])
                  .groupBy(F.window("ts", "10 seconds"), "grp")
                  .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
                  .select(F.col("window.start").alias("start"), "grp", "n", "total"))
        return counts.writeStream.outputMode("append").foreachBatch(_collect(out))

    got = _upgrade(spark, listener, journal_url, kafka_cluster, [kafka_topic], build,
                   "windows", tmp_path, capsys)
    restored = got["restored"]
    assert sorted((o.kind, o.decision) for o in restored.layout.operators) == [
        ("aggregation", "restored"), ("dedup-within-watermark", "restored")]
    assert restored.next_watermark_ms > BASE_MS, "v1's watermark is carried"
    first_real = json.loads((got["v2_ck"] / "offsets" / "1").read_text().splitlines()[1])
    assert first_real["batchWatermarkMs"] == restored.next_watermark_ms
    assert got["v1"] and got["v2"], "windows were emitted on both sides of the upgrade"
    assert got["both"] == got["reference"]
    assert len({r[:2] for r in got["both"]}) == len(got["both"]), "no window emitted twice"
    for op in (0, 1):
        assert _keys(spark, got["v2_ck"], op) == _keys(spark, got["ref_ck"], op)


def test_dedup_into_a_session_window_across_the_upgrade(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """dropDuplicates(id) (state kept for ever) chained into a session window with a
    watermark: the sessions v1 and v2 emit are the ones a run that never stopped emits;
    the sessions still open and every id seen are v2's state as the reference's."""
    from pyspark.sql import functions as F

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers

    def build(starting: list[str], out: Path) -> Any:
        events = _timed_events(spark, servers, kafka_topic, starting[0])
        sessions = (events.withWatermark("ts", "5 seconds").dropDuplicates(["id"])
                    .groupBy(F.session_window("ts", "5 seconds"), "grp")
                    .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
                    .select(F.col("session_window.start").alias("start"),
                            F.col("session_window.end").alias("end"), "grp", "n", "total"))
        return sessions.writeStream.outputMode("append").foreachBatch(_collect(out))

    got = _upgrade(spark, listener, journal_url, kafka_cluster, [kafka_topic], build,
                   "sessions", tmp_path, capsys, partitions="3")
    assert sorted(o.kind for o in got["restored"].layout.operators) == ["dedup",
                                                                       "session-window"]
    assert got["v1"] and got["v2"] and got["both"] == got["reference"]
    for op in (0, 1):
        assert _keys(spark, got["v2_ck"], op) == _keys(spark, got["ref_ck"], op)


def test_stream_stream_join_keeps_both_sides(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """An inner stream-stream join with time bounds and watermarks on both sides (two
    topics, each id twice per side, the right side's last six records of v1's time
    arriving after the upgrade): both sides' four stores are rebuilt from the
    savepoint's rows, so the left rows v1 kept meet their right rows in v2; the joined
    rows v1 and v2 emit are the reference's, none twice, and each side's state ends as
    the reference's."""
    from pyspark.sql import functions as F

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    right_topic = kafka_topic + "-payments"

    def build(starting: list[str], out: Path) -> Any:
        left = _timed_events(spark, servers, kafka_topic, starting[0]).withWatermark(
            "ts", "5 seconds")
        right = (_timed_events(spark, servers, right_topic, starting[1])
                 .select(F.col("id").alias("rid"), F.col("amount").alias("paid"),
                         F.col("ts").alias("rts")).withWatermark("rts", "5 seconds"))
        joined = left.join(right, F.expr("id = rid AND rts BETWEEN ts - interval 3 seconds "
                                         "AND ts + interval 3 seconds"))
        return (joined.select("id", "grp", "amount", "paid", "ts", "rts").writeStream
                .outputMode("append").foreachBatch(_collect(out)))

    got = _upgrade(spark, listener, journal_url, kafka_cluster, [kafka_topic, right_topic],
                   build, "joined", tmp_path, capsys, first=40, more=30, lag=6)
    (op,) = got["restored"].layout.operators
    assert (op.kind, op.decision, op.path) == ("stream-stream-join", "restored", "typed")
    assert got["v1"] and got["v2"] and got["both"] == got["reference"]
    for side in ("left", "right"):
        mine = sorted(repr(tuple(r.value)) for r in _state(spark, got["v2_ck"], joinSide=side))
        ref = sorted(repr(tuple(r.value)) for r in _state(spark, got["ref_ck"], joinSide=side))
        assert mine == ref and mine, side


# --------------------------------------------------------------------------- RocksDB bytes

FAR = 4_102_444_800_000  # 2100-01-01: timers that never fire during the test
TTL_MS = 3_600_000


def _sessions(value_state: str) -> Any:
    """A transformWithState processor with a value state (named ``value_state``), a list
    and a map state with a TTL, and a processing-time timer per key."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    class Sessions(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.cnt = handle.getValueState(value_state,
                                            StructType([StructField("n", LongType())]))
            self.seen = handle.getListState(
                "seen", StructType([StructField("amount", LongType())]), TTL_MS)
            self.m = handle.getMapState("m", StructType([StructField("mk", StringType())]),
                                        StructType([StructField("mv", LongType())]), TTL_MS)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            n = self.cnt.get()[0] if self.cnt.exists() else 0
            for row in rows:
                n += 1
                self.seen.appendValue((row.amount,))
                mk = f"a{row.amount % 3}"
                old = self.m.getValue((mk,)) if self.m.containsKey((mk,)) else None
                self.m.updateValue((mk,), ((old[0] if old else 0) + row.amount,))
            self.cnt.update((n,))
            for timer in list(self.handle.listTimers()):
                self.handle.deleteTimer(timer)
            self.handle.registerTimer(FAR + n)
            yield Row(grp=key[0], n=n)

        def close(self) -> None:
            pass

    return Sessions()


def _tws_state(spark: Any, checkpoint: Path, value_state: str) -> dict[str, Any]:
    got: dict[str, dict[str, Any]] = defaultdict(lambda: {"seen": [], "m": {}, "timers": []})
    for r in _state(spark, checkpoint, stateVarName=value_state):
        got[r.key.grp]["cnt"] = r.value.n
    for r in _state(spark, checkpoint, stateVarName="seen"):
        got[r.key.grp]["seen"].append(r.list_element.value.amount)
        assert r.list_element.ttlExpirationMs is not None
    for r in _state(spark, checkpoint, stateVarName="m"):
        got[r.key.grp]["m"][r.user_map_key.mk] = r.user_map_value.value.mv
    for r in _state(spark, checkpoint, readRegisteredTimers="true"):
        got[r.key.grp]["timers"].append(r.expiration_timestamp_ms)
    return {g: {**v, "seen": sorted(v["seen"]), "timers": sorted(v["timers"])}
            for g, v in got.items()}


def test_transform_with_state_bytes_copied_with_a_state_variable_renamed(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1: transformWithState with a value, a list and a map state (TTL) and a timer, on
    RocksDB with checkpoint format v2, 2 partitions; v2 renames its value state ``cnt``
    to ``count`` (declared) and runs on 3 partitions: the old checkpoint's bytes are
    copied (TTL indexes, timers and all), column families renamed and repartitioned; per
    key, v2's state equals a run that never stopped."""
    import sys

    from pyspark import cloudpickle

    from offset_journal.savepoint.restore import Rules, restore_savepoint
    from offset_journal.savepoint.spark import (
        FORMAT_CONF,
        PROVIDER_CONF,
        ROCKSDB_PROVIDER,
        session_conf,
    )

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    kafka_cluster.produce(kafka_topic, 60, value=_amounts)

    def writer(value_state: str, starting: str) -> Any:
        out = _events(spark, servers, kafka_topic, starting).groupBy("grp").transformWithState(
            _sessions(value_state), "grp string, n long", "Update", "ProcessingTime")
        return out.writeStream.outputMode("update").format("noop")

    confs = {PROVIDER_CONF: ROCKSDB_PROVIDER, FORMAT_CONF: "2",
             "spark.sql.streaming.noDataMicroBatches.enabled": "false"}
    from contextlib import ExitStack

    with ExitStack() as stack:
        for key, value in confs.items():
            stack.enter_context(session_conf(spark, key, value))
        _run(writer("cnt", "earliest"), "sessions", tmp_path / "ck-v1", listener)
        code, _out, err = _cli(capsys, "--database-url", journal_url, "savepoint", "create",
                               "sessions", "--checkpoint", str(tmp_path / "ck-v1"),
                               "--to", str(tmp_path / "sp"))
        assert code == 0, err
        kafka_cluster.produce(kafka_topic, 30, start=60, value=_amounts)
        starting = _ends(journal_url, str(tmp_path / "sp"))

        def v2() -> Any:
            return writer("count", starting).queryName("sessions").option(
                "checkpointLocation", str(tmp_path / "ck-v2"))

        stack.enter_context(session_conf(spark, "spark.sql.shuffle.partitions", "3"))
        with Journal(journal_url) as journal:
            restored = restore_savepoint(spark, str(tmp_path / "sp"), str(tmp_path / "ck-v2"),
                                         v2, journal=journal,
                                         rules=Rules(variables={0: {"count": "cnt"}}))
        (op,) = restored.layout.operators
        assert (op.decision, op.path) == ("restored", "raw")
        assert ("count", "cnt") in op.raw[0].families
        q = v2().trigger(availableNow=True).start()
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()
        _run(writer("count", "earliest"), "sessions-reference", tmp_path / "ck-ref")
        reference = _tws_state(spark, tmp_path / "ck-ref", "count")  # format v2: read so
        mine = _tws_state(spark, tmp_path / "ck-v2", "count")
    assert len(reference) == 7 and all(v["timers"] == [FAR + v["cnt"]]
                                       for v in reference.values())
    assert mine == reference
    assert (tmp_path / "ck-v2" / "commits" / "0").read_text().startswith("v2")


# --------------------------------------------------------------------------- in place


def test_a_running_jobs_checkpoint_repartitioned_in_place(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """A RocksDB aggregation on 2 partitions: ``state repartition`` is refused while the
    journal says it runs; stopped, repartitioned to 4 (journaled as a decision), resumed
    on the same checkpoint with records that arrived meanwhile: every key's state is the
    totals over all records, in 4 partitions, and the audit finds nothing unexplained."""
    import time

    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER, session_conf

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    produced = kafka_cluster.produce(kafka_topic, 60, value=_amounts)
    ck = tmp_path / "ck"

    def writer() -> Any:
        return (_totals(_events(spark, servers, kafka_topic)).writeStream.outputMode("update")
                .format("noop").queryName("totals").option("checkpointLocation", str(ck)))

    with session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER):
        q = writer().trigger(processingTime="200 milliseconds").start()
        deadline = time.monotonic() + 120
        with Journal(journal_url) as journal:
            while not any(r.terminated_at is None and r.batches
                          for r in journal.runs("totals")):
                assert time.monotonic() < deadline, "the run never showed in the journal"
                q.processAllAvailable()
        code, out, err = _cli(capsys, "--database-url", journal_url, "state", "repartition",
                              "--checkpoint", str(ck), "--partitions", "4")
        assert code == 1 and "is running on" in err and "--assume-stopped" in err, err
        q.processAllAvailable()
        q.stop()
        assert listener.wait_terminated(q.runId, 60)
        code, out, err = _cli(capsys, "--database-url", journal_url, "state", "repartition",
                              "--checkpoint", str(ck), "--partitions", "4")
        assert code == 0, err
        assert "2 -> 4 partitions" in out and "journaled as decision" in out
        code, out, err = _cli(capsys, "--database-url", journal_url, "state", "repartition",
                              "--checkpoint", str(ck), "--partitions", "4")
        assert code == 1 and "runs with 4 partitions already" in err
        produced += kafka_cluster.produce(kafka_topic, 30, start=60, value=_amounts)
        _run(writer(), "totals", ck, listener)
    state = _state(spark, ck)
    assert {r.key.grp: tuple(r.value) for r in state} == _reference(produced)
    assert {r.partition_id for r in state} == {0, 1, 2, 3}
    with Journal(journal_url) as journal:
        (decision,) = [p for p in journal.recorded_plans("totals") if p.mode == "repartition"]
    assert decision.request["repartition"]["to"] == 4 and decision.checkpoint == str(ck)
    code, out, err = _cli(capsys, "--database-url", journal_url, "audit", "totals")
    assert code == 0, out


# --------------------------------------------------------------------------- the command

QUERY_FILE = """
from pyspark.sql import functions as F


def v2(spark, checkpoint, starting):
    values = F.split(F.col("value").cast("string"), ",")
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "{servers}")
              .option("subscribe", "{topic}").option("startingOffsets", starting[0]).load()
              .select(values[0].alias("grp"), values[1].cast("long").alias("amount")))
    totals = events.groupBy("grp").agg(F.count("*").alias("n"), F.max("amount").alias("mx"),
                                       F.sum("amount").alias("total"))
    return (totals.writeStream.outputMode("update").format("noop")
            .option("checkpointLocation", checkpoint))
"""


def test_windowed_job_keeps_its_windows_through_a_restore(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """jobs/windowed_counts.py upgraded with ``--from-journal --savepoint --restore``
    instead of the state-aware rewind: the windows open at the savepoint (one of them
    split across the upgrade) and v1's watermark carried into the new checkpoint, nothing
    read again; every window is emitted once, with its exact count, into the file sink."""
    from collections import Counter

    from tests.jobs_support import load_job, read_parquet_outputs, run_to_end

    spark, listener = journaled_spark
    job = load_job("windowed_counts")
    t0, step_ms = 1_704_067_200_000, 1_500

    def ts(i: int) -> int:
        return t0 + i * step_ms

    produced = kafka_cluster.produce(kafka_topic, 75, timestamp_ms=ts)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "clicks", "--database-url", journal_url,
              "--output", str(tmp_path / "out"), "--window", "10 seconds",
              "--watermark", "4 seconds", "--max-offsets-per-trigger", "16"]
    run_to_end(spark, listener, job, common + ["--checkpoint", str(tmp_path / "ck-v1")])
    assert read_parquet_outputs(spark, tmp_path / "out", ["window_start", "count"])
    code, _out, err = _cli(capsys, "--database-url", journal_url, "savepoint", "create",
                           "clicks", "--checkpoint", str(tmp_path / "ck-v1"),
                           "--to", str(tmp_path / "sp"))
    assert code == 0, err
    produced += kafka_cluster.produce(kafka_topic, 85, start=75, timestamp_ms=ts)
    kafka_cluster.produce(kafka_topic, 1, start=10_000, timestamp_ms=lambda i: t0 + 3_600_000)
    run_to_end(spark, listener, job, common + ["--checkpoint", str(tmp_path / "ck-v2"),
                                               "--from-journal", "--savepoint",
                                               str(tmp_path / "sp"), "--restore"])
    rows = read_parquet_outputs(spark, tmp_path / "out", ["window_start", "count"])
    starts = [r[0] for r in rows]
    assert len(starts) == len(set(starts)), "a window was emitted twice"
    expected = Counter((ts(int(k.decode()[1:])) // 10_000) * 10_000 for _p, _o, k, _v in produced)
    assert {int(r[0].timestamp() * 1000): r[1] for r in rows} == dict(expected)
    code, out, err = _cli(capsys, "--database-url", journal_url, "audit", "clicks")
    assert code == 0, out
