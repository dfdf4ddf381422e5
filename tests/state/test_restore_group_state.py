"""flatMapGroupsWithState and applyInPandasWithState across a restore, end to end and key
by key: v1 (HDFS-backed, 2 partitions) journaled on the test broker, a savepoint,
records arriving while it is down, the savepoint restored into v2's NEW checkpoint (3
partitions), v2 run to the end; against the same query over every record that never
stopped. Each group's count, sum and event-time timeout are in its group state: a group
whose records stopped before the upgrade times out only in v2, from the timeout and
watermark v1 left. Real Spark 4.2 with its Kafka connector, real Postgres.

PySpark has no flatMapGroupsWithState: its function is Java (tests/jvm/GroupCounts.java),
compiled here against the installed PySpark's jars and added to the session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from tests import restore_support as rs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BASE_MS = 1_767_225_600_000  # 2026-01-01
FIRST, MORE = 40, 20
"""v1 reads FIRST records, MORE arrive while it is down: with 20 records a trigger, v1's
two batches and v2's one are the batches of a run that never stopped."""
OUT_SCHEMA = "grp string, n long, total long, status string"
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"


def _ts(i: int) -> int:
    """Bursts of ten records a second apart, twenty seconds between bursts."""
    return BASE_MS + (i // 10) * 20_000 + (i % 10) * 1_000


def _value(i: int) -> str:
    """id, group, amount: group g3 only in the first two bursts (records 0..19), so it
    times out in v2's batch, from v1's state; g0..g2 throughout."""
    grp = f"g{i % 4}" if i < 20 else f"g{i % 3}"
    return f"{i},{grp},{(i * 37) % 101}"


def _events(spark: Any, servers: str, topic: str, starting: str) -> Any:
    from pyspark.sql import functions as F

    frame, values = rs.kafka_csv(spark, servers, topic, starting, per_trigger=20)
    return (frame.select(values[1].alias("grp"), values[2].cast("long").alias("amount"),
                         F.col("timestamp").alias("ts"),
                         F.unix_millis(F.col("timestamp")).alias("ts_ms"))
            .withWatermark("ts", "5 seconds"))


def _collect(out_dir: Path) -> Any:
    def write(batch: Any, _batch_id: int) -> None:
        batch.write.mode("append").parquet(str(out_dir))
    return write


def _rows(spark: Any, *dirs: Path) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for d in dirs:
        if d.exists():
            out += [tuple(r) for r in spark.read.parquet(str(d)).collect()]
    return sorted(out)


def _group_state(spark: Any, checkpoint: Path, **options: str) -> dict[str, Any]:
    """Each group's (count, sum) and timeout, read with the State Data Source."""
    return {r.key[0]: (tuple(r.value.groupState), r.value.timeoutTimestamp)
            for r in rs.state(spark, checkpoint, **options)}


def _upgrade(spark: Any, listener: Any, journal_url: str, kafka_cluster: Any, topic: str,
             build: Any, name: str, tmp: Path, capsys: Any) -> dict[str, Any]:
    """v1, the savepoint, the records while down, v2 restored and run, the reference;
    ``build(starting offsets, output dir)`` is the query's writer. No batch without data:
    a v1 that ran one after its last records would time a group out before the upgrade,
    which a run that never stopped does in its next data batch."""
    from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf
    from offset_journal.state import restore_savepoint

    kafka_cluster.create_topic(topic, 1)
    kafka_cluster.produce(topic, FIRST, value=_value, timestamp_ms=_ts)
    with session_conf(spark, NO_DATA_BATCHES, "false"):
        with session_conf(spark, PROVIDER_CONF, rs.HDFS):
            rs.run(build("earliest", tmp / "out-v1"), name, tmp / "ck-v1", listener)
        code, _out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint",
                                 "create", name, "--checkpoint", str(tmp / "ck-v1"),
                                 "--to", str(tmp / "sp"))
        assert code == 0, err
        kafka_cluster.produce(topic, MORE, start=FIRST, value=_value, timestamp_ms=_ts)
        starting = rs.ends(journal_url, str(tmp / "sp"))

        def v2() -> Any:
            return (build(starting, tmp / "out-v2").queryName(name)
                    .option("checkpointLocation", str(tmp / "ck-v2")))

        with session_conf(spark, "spark.sql.shuffle.partitions", "3"), \
                Journal(journal_url) as journal:
            restored = restore_savepoint(spark, str(tmp / "sp"), str(tmp / "ck-v2"), v2,
                                         journal=journal)
        carried = _group_state(spark, tmp / "ck-v2", batchId="0")
        rs.run(v2(), name, tmp / "ck-v2", listener)
        with session_conf(spark, PROVIDER_CONF, rs.HDFS):
            rs.run(build("earliest", tmp / "out-ref"), name + "-reference", tmp / "ck-ref")
    return {"restored": restored, "carried": carried,
            "v1_state": _group_state(spark, tmp / "ck-v1"),
            "v1": _rows(spark, tmp / "out-v1"), "v2": _rows(spark, tmp / "out-v2"),
            "reference": _rows(spark, tmp / "out-ref"),
            "v2_state": _group_state(spark, tmp / "ck-v2"),
            "ref_state": _group_state(spark, tmp / "ck-ref")}


def _check(got: dict[str, Any], kind: str) -> None:
    """The upgrade as a run that never stopped: the same rows out, each group's state."""
    (op,) = got["restored"].layout.operators
    assert (op.kind, op.decision, op.path) == (kind, "restored", "typed")
    assert got["restored"].partitions == 3
    # v1 left g3 open with its timeout; the restore carried it, and v1's watermark.
    assert got["carried"] == got["v1_state"] and "g3" in got["carried"]
    (_counts, g3_timeout) = got["carried"]["g3"]
    assert g3_timeout == _ts(19) + 5_000
    assert got["restored"].next_watermark_ms == _ts(FIRST - 1) - 5_000 > g3_timeout
    assert ("g3", 5, sum((i * 37) % 101 for i in (3, 7, 11, 15, 19)), "closed") in got["v2"]
    assert got["v1"] and sorted(got["v1"] + got["v2"]) == got["reference"]
    assert got["v2_state"] == got["ref_state"] and set(got["v2_state"]) == {"g0", "g1", "g2"}
    n = sum(s[0][0] for s in got["ref_state"].values())
    assert n == FIRST + MORE - 5  # every record counted once, g3's five in its closed row


@pytest.fixture(scope="module")
def group_counts(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """tests/jvm/GroupCounts.java compiled against the installed PySpark and added to
    the session (ADD JAR: the driver's class loader and the executors')."""
    import pyspark

    home = os.environ.get("JAVA_HOME")
    javac = str(Path(home, "bin", "javac")) if home and Path(home, "bin", "javac").exists() \
        else shutil.which("javac")
    if javac is None:
        pytest.fail("javac is not installed: the flatMapGroupsWithState test compiles its "
                    "function (apt-get install openjdk-17-jdk-headless)")
    out = tmp_path_factory.mktemp("group-counts")
    source = Path(__file__).resolve().parents[1] / "jvm" / "GroupCounts.java"
    jars = Path(pyspark.__file__).parent / "jars"
    subprocess.run([javac, "-nowarn", "-d", str(out / "classes"), "-cp", f"{jars}/*",
                    str(source)], check=True, capture_output=True, timeout=300)
    jar = out / "group-counts.jar"
    jar_tool = Path(javac).with_name("jar")
    subprocess.run([str(jar_tool), "cf", str(jar), "-C", str(out / "classes"), "."],
                   check=True, capture_output=True, timeout=120)
    spark.sql(f"ADD JAR '{jar}'")
    return spark._jvm.ojtest.GroupCounts


def test_flat_map_groups_with_state_restored_key_by_key(
        journaled_spark, group_counts, journal_url, kafka_cluster, kafka_topic, tmp_path,
        capsys):
    """flatMapGroupsWithState (Java, event-time timeout) restored into 3 partitions:
    every group's count, sum and timeout as a run that never stopped, the same rows out,
    g3 closed in v2 by the timeout and watermark v1 left."""
    from pyspark.sql import DataFrame

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers

    def build(starting: str, out: Path) -> Any:
        counted = DataFrame(group_counts.counts(
            _events(spark, servers, kafka_topic, starting)._jdf), spark)
        return counted.writeStream.outputMode("update").foreachBatch(_collect(out))

    got = _upgrade(spark, listener, journal_url, kafka_cluster, kafka_topic, build,
                   "java-groups", tmp_path, capsys)
    _check(got, "flat-map-groups-with-state")


def _count_in_pandas(key: Any, frames: Any, state: Any) -> Any:
    """GroupCounts.Count in Python: the same state, timeout and rows."""
    import pandas as pd

    def row(n: int, total: int, status: str) -> Any:
        return pd.DataFrame({"grp": [key[0]], "n": [n], "total": [total], "status": [status]})

    if state.hasTimedOut:
        n, total = state.get
        state.remove()
        yield row(n, total, "closed")
        return
    n, total = state.get if state.exists else (0, 0)
    latest = 0
    for frame in frames:
        n += len(frame)
        total += int(frame["amount"].sum())
        latest = max(latest, int(frame["ts_ms"].max()))
    state.update((n, total))
    state.setTimeoutTimestamp(max(latest, state.getCurrentWatermarkMs()) + 5_000)
    yield row(n, total, "open")


def test_apply_in_pandas_with_state_restored_key_by_key(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """applyInPandasWithState (event-time timeout) restored into 3 partitions: every
    group's count, sum and timeout as a run that never stopped, the same rows out, g3
    closed in v2 by the timeout and watermark v1 left."""
    from pyspark import cloudpickle
    from pyspark.sql.streaming.state import GroupStateTimeout

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers

    def build(starting: str, out: Path) -> Any:
        counted = _events(spark, servers, kafka_topic, starting).groupBy(
            "grp").applyInPandasWithState(_count_in_pandas, OUT_SCHEMA, "n long, total long",
                                          "update", GroupStateTimeout.EventTimeTimeout)
        return counted.writeStream.outputMode("update").foreachBatch(_collect(out))

    got = _upgrade(spark, listener, journal_url, kafka_cluster, kafka_topic, build,
                   "pandas-groups", tmp_path, capsys)
    _check(got, "apply-in-pandas-with-state")
