"""The state restore on a source without a broker: a Python data source whose offsets
are steps. It runs on every Spark the restore runs on with the helper the package ships
for that minor, and is what proves the restore on Spark 4.3 here, where the registry
serves no Kafka connector for 4.3.0 (docs/compatibility.md)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest

from offset_journal.spark_version import available
from tests import restore_support as rs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS_PER_STEP = 40


def _rows(lo: int, hi: int) -> list[tuple[str, int]]:
    """Each step's rows: ``(group, amount)``, 13 groups."""
    return [(f"g{(i * 7) % 13}", i % 101)
            for i in range(lo * ROWS_PER_STEP, hi * ROWS_PER_STEP)]


def _register(spark: Any) -> None:
    """``format("steps")``: every row from step ``start`` up to step ``end`` (options) at
    once; its offset is the step, in Kafka's shape (topic ``steps``, partition 0) so that
    the audit reads it. ``start`` is what Kafka's ``startingOffsets`` is to the restore:
    the new query's first batch (the restore's bootstrap) starts there."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class Reader(DataSourceStreamReader):
        def __init__(self, start: int, end: int) -> None:
            self.start, self.end = start, end

        def initialOffset(self) -> dict:
            return {"steps": {"0": self.start}}

        def latestOffset(self) -> dict:
            return {"steps": {"0": self.end}}

        def partitions(self, start: dict, end: dict) -> list:
            return [InputPartition((start["steps"]["0"], end["steps"]["0"]))]

        def read(self, partition: Any) -> Any:
            yield from _rows(*partition.value)

    class Steps(DataSource):
        @classmethod
        def name(cls) -> str:
            return "steps"

        def schema(self) -> str:
            return "grp string, amount long"

        def streamReader(self, schema: Any) -> Any:
            return Reader(int(self.options.get("start", "0")), int(self.options["end"]))

    spark.dataSource.register(Steps)


def _totals(spark: Any, end: int, start: int = 0) -> Any:
    from pyspark.sql import functions as F

    return (spark.readStream.format("steps").option("start", str(start))
            .option("end", str(end)).load()
            .groupBy("grp").agg(F.count("*").alias("n"), F.sum("amount").alias("total")))


def test_a_restore_from_a_brokerless_source_goes_on_from_the_savepoints_step(
        journaled_spark, journal_url, capsys, tmp_path) -> None:
    """v1 reads steps 0-3 journaled; its savepoint is restored into v2's new checkpoint
    in 3 partitions with the shipped helper; v2 reads steps 3-5 from there: every
    group's count and sum over steps 0-5, each row once; the journal's audit of the two
    runs is clean and a plan from it starts v3 at step 5."""
    from offset_journal import Journal
    from offset_journal.savepoint.spark import session_conf
    from offset_journal.state import restore_savepoint

    spark, listener = journaled_spark
    if not available("state-restore", spark.version):
        pytest.fail(f"the state restore does not run on Spark {spark.version}")
    _register(spark)
    rs.run(_totals(spark, 3).writeStream.outputMode("update").format("noop"), "steps",
           tmp_path / "ck-v1", listener)
    code, _out, err = rs.cli(capsys, "savepoint", "create", "steps", "--checkpoint",
                             str(tmp_path / "ck-v1"), "--to", str(tmp_path / "sp"),
                             "--database-url", journal_url)
    assert code == 0, err

    v2_ck = tmp_path / "ck-v2"

    def v2() -> Any:
        # starting where the savepoint ends, as a plan from the journal says
        return (_totals(spark, 5, start=3).writeStream.outputMode("update").format("noop")
                .queryName("steps").option("checkpointLocation", str(v2_ck)))

    with session_conf(spark, "spark.sql.shuffle.partitions", "3"):
        with Journal(journal_url) as journal:
            restored = restore_savepoint(spark, str(tmp_path / "sp"), str(v2_ck), v2,
                                         journal=journal)
    assert "operator 0 (aggregation): restored (typed)" in restored.explain()
    restored_state = {r.key.grp: tuple(r.value) for r in rs.state(spark, v2_ck)}
    assert restored_state == _reference(0, 3)
    rs.run(v2(), "steps", v2_ck, listener)
    assert {r.key.grp: tuple(r.value) for r in rs.state(spark, v2_ck)} == _reference(0, 5)
    (meta,) = spark.read.format("state-metadata").load(str(v2_ck)).collect()
    assert meta.numPartitions == 3
    code, out, err = rs.cli(capsys, "audit", "steps", "--database-url", journal_url)
    assert code == 0, out + err
    code, out, err = rs.cli(capsys, "starting-offsets", "steps", "--no-record",
                            "--database-url", journal_url)
    assert code == 0 and json.loads(out) == {"steps": {"0": 5}}, out + err


def _reference(lo: int, hi: int) -> dict[str, tuple[int, int]]:
    acc: dict[str, list[int]] = defaultdict(list)
    for grp, amount in _rows(lo, hi):
        acc[grp].append(amount)
    return {g: (len(a), sum(a)) for g, a in acc.items()}
