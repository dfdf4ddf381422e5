"""What the stateful end-to-end tests share (tests/test_restore_*.py,
tests/savepoint/test_savepoint_e2e.py): the records, the queries, reading state back, the checks
of an upgraded query's state and output."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from offset_journal import Journal
from offset_journal.checkpoint.commits import HDFS_PROVIDER
from offset_journal.cli import main

HDFS = HDFS_PROVIDER
FAR = 4_102_444_800_000  # 2100-01-01: timers that never fire during the test
TTL_MS = 3_600_000


def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tree(root: Path) -> dict[str, str]:
    """Every file and directory under ``root``: its SHA-256 (a directory: "dir")."""
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


def amounts(i: int) -> str:
    return f"g{i % 7},{(i * 37) % 101}"


def reference(produced: list[tuple[int, int, bytes, bytes]]) -> dict[str, tuple[int, int, int]]:
    """(n, max, sum) per group over every record produced."""
    acc: dict[str, list[int]] = defaultdict(list)
    for _p, _o, _k, value in produced:
        grp, amount = value.decode().split(",")
        acc[grp].append(int(amount))
    return {g: (len(a), max(a), sum(a)) for g, a in acc.items()}


def state(spark: Any, checkpoint: Path, **options: str) -> list[Any]:
    spark.streams.active  # noqa: B018 - the StateStoreCoordinator
    return spark.read.format("statestore").options(**options).load(str(checkpoint)).collect()


def kafka_csv(spark: Any, servers: str, topic: str, starting: str = "earliest",
              per_trigger: int = 30) -> tuple[Any, Any]:
    """``topic`` as a stream from ``starting``, ``per_trigger`` records a batch, and its
    values split on ',' (a column: ``values[i]`` is the i-th field as a string)."""
    from pyspark.sql import functions as F

    frame = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
             .option("subscribe", topic).option("startingOffsets", starting)
             .option("maxOffsetsPerTrigger", str(per_trigger)).load())
    return frame, F.split(F.col("value").cast("string"), ",")


def events(spark: Any, servers: str, topic: str, starting: str = "earliest",
           per_trigger: int = 30) -> Any:
    frame, values = kafka_csv(spark, servers, topic, starting, per_trigger)
    return frame.select(values[0].alias("grp"), values[1].cast("long").alias("amount"))


def totals(events: Any) -> Any:
    from pyspark.sql import functions as F

    return events.groupBy("grp").agg(F.count("*").alias("n"), F.max("amount").alias("mx"),
                                     F.sum("amount").alias("total"))


def totals_writer(spark: Any, servers: str, topic: str, checkpoint: Path) -> Any:
    """The query ``totals`` (:func:`totals` of :func:`events`, to ``noop``) on
    ``checkpoint``: a stateful query whose output is not looked at."""
    return (totals(events(spark, servers, topic)).writeStream.outputMode("update")
            .format("noop").queryName("totals").option("checkpointLocation", str(checkpoint)))


def check_upgraded_totals(spark: Any, produced: list[tuple[int, int, bytes, bytes]],
                          checkpoint: Path, out_dir: Path, before: int) -> dict[str, Any]:
    """v2 of :func:`totals` (with ``mean``, its batch id in each row of ``out_dir``)
    restored into 8 partitions at ``checkpoint`` and run: its state is every key's
    totals over every record ``produced``, in 8 partitions; its first batch is 1 (batch
    0 is the restore's, reading nothing); the keys of the records after the first
    ``before`` are its output, with those totals. Returns them."""
    import pytest

    expected = reference(produced)
    restored = state(spark, checkpoint)
    assert {r.key.grp: tuple(r.value) for r in restored} == expected
    assert {r.partition_id for r in restored} <= set(range(8))
    (meta,) = spark.read.format("state-metadata").load(str(checkpoint)).collect()
    assert meta.numPartitions == 8
    rows = spark.read.parquet(str(out_dir)).collect()
    assert min(r.batch_id for r in rows) == 1, "v2's first real batch follows the bootstrap"
    latest = {r.grp: r for r in sorted(rows, key=lambda r: r.batch_id)}
    assert set(latest) == {v.decode().split(",")[0] for *_x, v in produced[before:]}
    for grp, row in latest.items():
        assert (row.n, row.mx, row.total) == expected[grp]
        assert row.mean == pytest.approx(expected[grp][2] / expected[grp][0])
    return expected


CLICK_T0, CLICK_STEP_MS = 1_704_067_200_000, 1_500
"""jobs/windowed_counts.py's records: record i at CLICK_T0 + i * CLICK_STEP_MS."""


def click_ms(i: int) -> int:
    return CLICK_T0 + i * CLICK_STEP_MS


def windowed_args(servers: str, journal_url: str) -> list[str]:
    """jobs/windowed_counts.py's options in the restore tests: 10 s windows, a 4 s
    watermark, 16 records a batch."""
    return ["--bootstrap-servers", servers, "--database-url", journal_url,
            "--window", "10 seconds", "--watermark", "4 seconds",
            "--max-offsets-per-trigger", "16"]


def check_each_window_once(spark: Any, out_dir: Path,
                           produced: list[tuple[int, int, bytes, bytes]]) -> None:
    """jobs/windowed_counts.py's output: every window of the records ``produced`` (keys
    ``k<i>``, timed by :func:`click_ms`) emitted once, with its exact count."""
    from collections import Counter

    from tests.jobs_support import read_parquet_outputs

    rows = read_parquet_outputs(spark, out_dir, ["window_start", "count"])
    starts = [r[0] for r in rows]
    assert len(starts) == len(set(starts)), "a window was emitted twice"
    expected = Counter((click_ms(int(k.decode()[1:])) // 10_000) * 10_000
                       for _p, _o, k, _v in produced)
    assert {int(r[0].timestamp() * 1000): r[1] for r in rows} == dict(expected)


def run(writer: Any, name: str, checkpoint: Path, listener: Any = None) -> Any:
    q = (writer.queryName(name).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    if listener is not None:
        assert listener.wait_terminated(q.runId, 60)
    return q


def ends(journal_url: str, savepoint: str) -> str:
    from offset_journal.savepoint import load_savepoint

    with Journal(journal_url) as journal:
        found = load_savepoint(savepoint, journal, verify=False)
    (end,) = found.manifest.end_offsets
    return json.dumps(end.offset)


def sessions(value_state: str = "cnt", initial: bool = False) -> Any:
    """A transformWithState processor with a value state (named ``value_state``), a list
    and a map state (the last two with a TTL) and a processing-time timer per key; with
    ``initial`` it seeds all four from a savepoint's ``initial_state`` (the Python path;
    a restore writes them without it)."""
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

        def handleInitialState(self, key: Any, row: Any, timerValues: Any) -> None:
            if not initial:
                return
            if row.state_var == value_state:
                self.cnt.update((row.n,))
            elif row.state_var == "seen":
                self.seen.appendValue((row.amount,))
            elif row.state_var == "m":
                self.m.updateValue((row.mk,), (row.mv,))
            elif row.state_var == "timers":
                self.handle.registerTimer(row.expiration_timestamp_ms)

        def close(self) -> None:
            pass

    return Sessions()
