"""Every built-in stateful operator and transformWithState across a restore:
dropDuplicatesWithinWatermark into a windowed aggregation, dropDuplicates into a session
window, a stream-stream join, transformWithState's bytes with a state variable renamed;
each split mid-burst across the upgrade, against a run that never stopped. Real Spark 4.2
with its Kafka connector on the test broker, real Postgres."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from tests import restore_support as rs

pytestmark = [pytest.mark.spark, pytest.mark.slow]


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

    frame, values = rs.kafka_csv(spark, servers, topic, starting, per_trigger=20)
    return frame.select(values[0].cast("long").alias("id"), values[1].alias("grp"),
                        values[2].cast("long").alias("amount"), F.col("timestamp").alias("ts"))


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
             first: int = 33, more: int = 27, partitions: str = "4",
             lag: int = 0) -> dict[str, Any]:
    """v1 (HDFS-backed, 2 partitions) over ``first`` records per topic (``lag`` fewer on
    every topic but the first: the other side of a join arrives later), a savepoint, the
    rest arriving (``first + more`` per topic in all), v2 restored on a NEW checkpoint
    (``partitions``), run to the end; the reference: the same query over every record on
    a checkpoint of its own, never stopped. ``first`` odd splits a pair of duplicates and
    a burst across the upgrade (33: two ids of the burst before it, so a lost count and
    a duplicate counted again cannot cancel out): what v2 does with them depends on v1's
    state.
    ``build(starting offsets per source, output dir)`` is the query's writer. Returns the
    outputs and checkpoints."""
    from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf
    from offset_journal.state import restore_savepoint

    cut = {topic: first - (lag if i else 0) for i, topic in enumerate(topics)}
    for topic in topics:
        kafka_cluster.produce(topic, cut[topic], value=_record, timestamp_ms=_burst_ms)
    earliest = ["earliest"] * len(topics)
    with session_conf(spark, PROVIDER_CONF, rs.HDFS):
        rs.run(build(earliest, tmp / "out-v1"), name, tmp / "ck-v1", listener)
    code, _out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create", name,
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
    with session_conf(spark, PROVIDER_CONF, rs.HDFS):
        rs.run(build(earliest, tmp / "out-ref"), name + "-reference", tmp / "ck-ref")
    return {"restored": restored, "v1": _rows(spark, tmp / "out-v1"),
            "v2": _rows(spark, tmp / "out-v2"), "both": _rows(spark, tmp / "out-v1",
                                                              tmp / "out-v2"),
            "reference": _rows(spark, tmp / "out-ref"), "v2_ck": tmp / "ck-v2",
            "ref_ck": tmp / "ck-ref"}


def _keys(spark: Any, checkpoint: Path, operator: int) -> set[Any]:
    return {tuple(r.key) for r in rs.state(spark, checkpoint, operatorId=str(operator))}


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
                   build, "joined", tmp_path, capsys, first=20, more=20, lag=6)
    (op,) = got["restored"].layout.operators
    assert (op.kind, op.decision, op.path) == ("stream-stream-join", "restored", "typed")
    assert got["v1"] and got["v2"] and got["both"] == got["reference"]
    for side in ("left", "right"):
        mine = sorted(repr(tuple(r.value)) for r in rs.state(spark, got["v2_ck"], joinSide=side))
        ref = sorted(repr(tuple(r.value)) for r in rs.state(spark, got["ref_ck"], joinSide=side))
        assert mine == ref and mine, side


OUTER_QUERY = '''
from pyspark.sql import functions as F


def _events(spark, topic, starting):
    values = F.split(F.col("value").cast("string"), ",")
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", {servers!r})
            .option("subscribe", topic).option("startingOffsets", starting)
            .option("maxOffsetsPerTrigger", "20").load()
            .select(values[0].cast("long").alias("id"), values[2].cast("long").alias("amount"),
                    F.col("timestamp").alias("ts")))


def joined(spark, checkpoint, starting):
    """A LEFT OUTER join with time bounds and watermarks, into a file sink next to its
    checkpoint."""
    left = _events(spark, {left!r}, starting[0]).withWatermark("ts", "5 seconds")
    right = (_events(spark, {right!r}, starting[1])
             .select(F.col("id").alias("rid"), F.col("amount").alias("paid"),
                     F.col("ts").alias("rts")).withWatermark("rts", "5 seconds"))
    rows = left.join(right, F.expr("id = rid AND rts BETWEEN ts - interval 3 seconds "
                                   "AND ts + interval 3 seconds"), "leftOuter")
    return (rows.select("id", "amount", "paid", "ts", "rts").writeStream.outputMode("append")
            .format("parquet").option("path", checkpoint + "-out").queryName("outer")
            .option("checkpointLocation", checkpoint))
'''


def _unmatched(i: int) -> str:
    """A right side record; every fourth id is another (its left rows never match)."""
    n = i // 2
    return f"{n + 1000 if n % 4 == 0 else n},g{n % 3},{(n * 37) % 101}"


def test_an_outer_join_from_the_savepoints_rows_is_refused_unless_its_flags_are_declared(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """A LEFT OUTER join on the HDFS-backed store (no RocksDB bytes to copy): the
    savepoint's rows carry no 'matched' flag, so ``state restore`` refuses in one line
    naming the join type and its flag. Declared (``--assume-matched 0:true``, recorded
    with the plan) it restores, and the note says what that costs, which is exactly what
    v1 and v2 together lack against a run that never stopped: the null-padded row of
    each left row the savepoint held that never matched."""
    import runpy
    from collections import Counter

    from offset_journal.savepoint import load_savepoint
    from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf

    spark, listener = journaled_spark
    right = kafka_topic + "-payments"
    query = tmp_path / "outer.py"
    query.write_text(OUTER_QUERY.format(servers=kafka_cluster.bootstrap_servers,
                                        left=kafka_topic, right=right))
    joined = runpy.run_path(str(query))["joined"]
    kafka_cluster.produce(kafka_topic, 20, value=_record, timestamp_ms=_burst_ms)
    kafka_cluster.produce(right, 14, value=_unmatched, timestamp_ms=_burst_ms)
    with session_conf(spark, PROVIDER_CONF, rs.HDFS):
        rs.run(joined(spark, str(tmp_path / "ck-v1"), ["earliest"] * 2), "outer",
               tmp_path / "ck-v1", listener)
    code, _out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                             "outer", "--checkpoint", str(tmp_path / "ck-v1"),
                             "--to", str(tmp_path / "sp"))
    assert code == 0, err
    held = {r.value.id for r in rs.state(spark, tmp_path / "ck-v1", joinSide="left")}
    kafka_cluster.produce(kafka_topic, 20, start=20, value=_record, timestamp_ms=_burst_ms)
    kafka_cluster.produce(right, 26, start=14, value=_unmatched, timestamp_ms=_burst_ms)

    restore = ["--database-url", journal_url, "state", "restore", str(tmp_path / "sp"),
               "--query", f"{query}:joined"]
    code, out, err = rs.cli(capsys, *restore, "--to", str(tmp_path / "ck-refused"))
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert ("operator 0 (stream-stream-join, symmetricHashJoin) is a LEFT OUTER join, which "
            "reads each row's 'matched' flag") in err
    assert "(--assume-matched 0:true or --assume-matched 0:false)" in err
    assert "Rules(" not in err and not (tmp_path / "ck-refused").exists()
    code, out, err = rs.cli(capsys, *restore, "--to", str(tmp_path / "ck-v2"),
                            "--assume-matched", "0:true")
    assert code == 0, err
    assert ("a LEFT OUTER join restored from the savepoint's rows, which carry no 'matched' "
            "flag: every row restored as matched (declared: --assume-matched 0:true): a left "
            "row that never matched emits no null-padded row") in out
    with Journal(journal_url) as journal:
        recorded = journal.recorded_plans("outer")[-1]
        manifest = load_savepoint(str(tmp_path / "sp"), journal, verify=False).manifest
    assert recorded.request["restore_rules"] == {"matched": {"0": True}}
    ends = [json.dumps(e.offset) for e in sorted(manifest.end_offsets, key=lambda e: e.index)]
    rs.run(joined(spark, str(tmp_path / "ck-v2"), ends), "outer", tmp_path / "ck-v2")
    with session_conf(spark, PROVIDER_CONF, rs.HDFS):
        rs.run(joined(spark, str(tmp_path / "ck-ref"), ["earliest"] * 2), "outer-reference",
               tmp_path / "ck-ref")

    def rows(checkpoint: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in spark.read.parquet(str(tmp_path / checkpoint) + "-out")
                .collect()]

    reference = rows("ck-ref")
    lost = [r for r in reference if r[2] is None and r[0] in held]
    assert lost, "the savepoint held left rows that never matched and expire in v2"
    assert Counter(rows("ck-v1") + rows("ck-v2")) == Counter(reference) - Counter(lost)


# --------------------------------------------------------------------------- RocksDB bytes





def _tws_state(spark: Any, checkpoint: Path, value_state: str) -> dict[str, Any]:
    got: dict[str, dict[str, Any]] = defaultdict(lambda: {"seen": [], "m": {}, "timers": []})
    for r in rs.state(spark, checkpoint, stateVarName=value_state):
        got[r.key.grp]["cnt"] = r.value.n
    for r in rs.state(spark, checkpoint, stateVarName="seen"):
        got[r.key.grp]["seen"].append(r.list_element.value.amount)
        assert r.list_element.ttlExpirationMs is not None
    for r in rs.state(spark, checkpoint, stateVarName="m"):
        got[r.key.grp]["m"][r.user_map_key.mk] = r.user_map_value.value.mv
    for r in rs.state(spark, checkpoint, readRegisteredTimers="true"):
        got[r.key.grp]["timers"].append(r.expiration_timestamp_ms)
    return {g: {**v, "seen": sorted(v["seen"]), "timers": sorted(v["timers"])}
            for g, v in got.items()}


@contextmanager
def _tws_confs(spark: Any) -> Iterator[ExitStack]:
    """The session as a transformWithState in processing time needs it, for this test:
    RocksDB, checkpoint format v2, no no-data batches (availableNow would never end)."""
    from offset_journal.savepoint.spark import (
        FORMAT_CONF,
        PROVIDER_CONF,
        ROCKSDB_PROVIDER,
        session_conf,
    )

    with ExitStack() as stack:
        for key, value in {PROVIDER_CONF: ROCKSDB_PROVIDER, FORMAT_CONF: "2",
                           "spark.sql.streaming.noDataMicroBatches.enabled": "false"}.items():
            stack.enter_context(session_conf(spark, key, value))
        yield stack


def test_transform_with_state_bytes_copied_with_a_state_variable_renamed(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1: transformWithState with a value, a list and a map state (TTL) and a timer, on
    RocksDB with checkpoint format v2, 2 partitions; v2 renames its value state ``cnt``
    to ``count`` (declared) and runs on 3 partitions: the old checkpoint's bytes are
    copied (TTL indexes, timers and all), column families renamed and repartitioned; per
    key, v2's state equals a run that never stopped."""
    import sys

    from pyspark import cloudpickle

    from offset_journal.savepoint.spark import session_conf
    from offset_journal.state import Rules, restore_savepoint

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    kafka_cluster.produce(kafka_topic, 60, value=rs.amounts)

    def writer(value_state: str, starting: str) -> Any:
        out = rs.events(spark, servers, kafka_topic, starting).groupBy("grp").transformWithState(
            rs.sessions(value_state), "grp string, n long", "Update", "ProcessingTime")
        return out.writeStream.outputMode("update").format("noop")

    with _tws_confs(spark) as stack:
        rs.run(writer("cnt", "earliest"), "sessions", tmp_path / "ck-v1", listener)
        code, _out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                               "sessions", "--checkpoint", str(tmp_path / "ck-v1"),
                               "--to", str(tmp_path / "sp"))
        assert code == 0, err
        kafka_cluster.produce(kafka_topic, 30, start=60, value=rs.amounts)
        starting = rs.ends(journal_url, str(tmp_path / "sp"))

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
        rs.run(v2(), "sessions", tmp_path / "ck-v2")
        rs.run(writer("count", "earliest"), "sessions-reference", tmp_path / "ck-ref")
        reference = _tws_state(spark, tmp_path / "ck-ref", "count")  # format v2: read so
        mine = _tws_state(spark, tmp_path / "ck-v2", "count")
    assert len(reference) == 7 and all(v["timers"] == [rs.FAR + v["cnt"]]
                                       for v in reference.values())
    assert mine == reference
    assert (tmp_path / "ck-v2" / "commits" / "0").read_text().startswith("v2")


