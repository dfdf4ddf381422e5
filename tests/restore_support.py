"""What the restore's end-to-end tests share (tests/test_restore_e2e.py,
tests/test_restore_operators.py): the records, the queries, reading state back."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from offset_journal import Journal
from offset_journal.cli import main

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


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


def events(spark: Any, servers: str, topic: str, starting: str = "earliest",
            per_trigger: int = 30) -> Any:
    from pyspark.sql import functions as F

    values = F.split(F.col("value").cast("string"), ",")
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic).option("startingOffsets", starting)
            .option("maxOffsetsPerTrigger", str(per_trigger)).load()
            .select(values[0].alias("grp"), values[1].cast("long").alias("amount")))


def totals(events: Any) -> Any:
    from pyspark.sql import functions as F

    return events.groupBy("grp").agg(F.count("*").alias("n"), F.max("amount").alias("mx"),
                                     F.sum("amount").alias("total"))


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
