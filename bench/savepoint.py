"""Savepoints at 10^5, 10^6 (and 10^7) keys: the time and bytes of ``create_savepoint``
against the checkpoint's own state, and the new query's first batch seeded from it
against an empty-state start.

For each size, in one local SparkSession (local[2], 4 shuffle partitions, RocksDB state
store, the journal listener attached, a throwaway Postgres):

* v1: ``groupBy(key).agg(count, max, sum)`` over a Parquet file source holding N
  distinct keys (one batch, availableNow), journaled;
* create: ``create_savepoint`` of v1's checkpoint (wall time), the savepoint's bytes and
  the bytes of v1's ``state/`` directory;
* v2, twice, on new checkpoints, over a new input of 1,000 records (100 of them on keys
  v1 had): a ``transformWithState`` seeded with ``initial_state(savepoint)``, and the same
  with no initial state (run first): wall time of the query (start to end) and its
  first batch's ``triggerExecution``; ``--seeded-max`` skips them above a size.

    .venv/bin/python bench/savepoint.py [--sizes 100000,1000000,10000000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    dir_bytes,
    header,
    journal_database,
    postgres,
    rmtree,
    table,
    totals_processor,
)

NAME = "bench_totals"


def session(memory: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER

    return (SparkSession.builder.master("local[2]").appName("bench-savepoint")
            .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.memory", memory).config(PROVIDER_CONF, ROCKSDB_PROVIDER)
            .getOrCreate())




def run(query: Any) -> tuple[float, float]:
    """(wall seconds, first batch's triggerExecution seconds)."""
    began = time.monotonic()
    query.awaitTermination()
    wall = time.monotonic() - began
    first = query.recentProgress[0]["durationMs"]["triggerExecution"] / 1000
    return wall, first


def one_size(spark: Any, listener: Any, url: str, keys: int, work: Path,
             seeded_max: int) -> list[Any]:
    from pyspark.sql import functions as F

    from offset_journal import Journal
    from offset_journal.savepoint import create_savepoint, initial_state

    rmtree(work)
    work.mkdir(parents=True)
    spark.range(keys).select(F.col("id").alias("key"), (F.col("id") % 97).alias("v")) \
        .write.parquet(str(work / "in1"))
    src = spark.readStream.schema("key long, v long").parquet(str(work / "in1"))
    agg = src.groupBy("key").agg(F.count("*").alias("n"), F.max("v").alias("mx"),
                                 F.sum("v").alias("total"))
    began = time.monotonic()
    v1 = (agg.writeStream.format("noop").outputMode("update").queryName(NAME)
          .option("checkpointLocation", str(work / "ck-v1")).trigger(availableNow=True).start())
    v1.awaitTermination()
    v1_s = time.monotonic() - began
    print(f"{keys:,} keys: v1 {v1_s:.1f} s", file=sys.stderr, flush=True)
    listener.wait_terminated(v1.runId, timeout=120)  # journaled after the query ends
    with Journal(url) as journal:
        began = time.monotonic()
        made = create_savepoint(spark, journal, NAME, str(work / "ck-v1"), str(work / "sp"))
        create_s = time.monotonic() - began
    print(f"{keys:,} keys: savepoint {create_s:.1f} s", file=sys.stderr, flush=True)

    spark.range(keys - 100, keys + 900).select(F.col("id").alias("key"),
                                               (F.col("id") % 97).alias("v")) \
        .write.parquet(str(work / "in2"))
    results = {}
    for label, seeded in (("empty", False), ("seeded", True)):
        if keys > seeded_max:
            results[label] = (float("nan"), float("nan"))
            continue
        new = spark.readStream.schema("key long, v long").parquet(str(work / "in2"))
        init = initial_state(spark, made, operator=0) if seeded else None
        out = new.groupBy("key").transformWithState(totals_processor(), "key long, n long",
                                                    "Update", "None", initialState=init)
        q = (out.writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(work / f"ck-{label}"))
             .trigger(availableNow=True).start())
        results[label] = run(q)
        print(f"{keys:,} keys: v2 {label} {results[label][0]:.1f} s", file=sys.stderr,
              flush=True)
    state = dir_bytes(work / "ck-v1" / "state")
    saved = dir_bytes(work / "sp")
    row = [f"{keys:,}", f"{os.getloadavg()[0]:.1f}", f"{v1_s:.1f}", f"{state / 2**20:.1f}",
           f"{saved / 2**20:.1f}", f"{saved / state:.2f}", f"{create_s:.1f}",
           f"{results['seeded'][0]:.1f} ({results['seeded'][1]:.1f})",
           f"{results['empty'][0]:.1f} ({results['empty'][1]:.1f})"]
    rmtree(work)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100000,1000000",
                   type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--memory", default="3g", help="spark.driver.memory")
    p.add_argument("--seeded-max", type=int, default=1_000_000,
                   help="run the two v2 queries for sizes up to this many keys only (a "
                        "seeded first batch calls handleInitialState once per key)")
    p.add_argument("--admin-url", default=None)
    p.add_argument("--work", default=None, help="work directory (default: a temporary one)")
    args = p.parse_args()
    header("Savepoints: create, and the first batch seeded from one", args)
    import offset_journal

    rows = []
    with postgres(args.admin_url) as server, tempfile.TemporaryDirectory(
            dir=args.work) as tmp:
        spark = session(args.memory)
        spark.sparkContext.setLogLevel("ERROR")
        try:
            for keys in args.sizes:
                url = journal_database(server)
                listener = offset_journal.attach(spark, database_url=url,
                                                 spool_dir=str(Path(tmp) / "spool"))
                try:
                    rows.append(one_size(spark, listener, url, keys, Path(tmp) / f"n{keys}",
                                         args.seeded_max))
                finally:
                    spark.streams.removeListener(listener)
                    listener.close()
                print(table(["keys", "load", "v1 s", "state MiB", "savepoint MiB", "ratio",
                             "create s", "v2 seeded s (first batch s)",
                             "v2 empty s (first batch s)"], rows[-1:]), file=sys.stderr)
        finally:
            spark.stop()
    print(table(["keys", "load (1 min)", "v1 s", "checkpoint state MiB", "savepoint MiB",
                 "savepoint / state", "create s", "v2 seeded: query s (first batch s)",
                 "v2 empty: query s (first batch s)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
