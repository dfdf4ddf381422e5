"""Stream throughput with scheduled savepoints against without, side by side in one
run: the same stateful query, the journal listener attached in every variant, with a
``SavepointSchedule`` every N batches or none.

For each size (keys of state), in one local SparkSession (local[2], 4 shuffle
partitions, the RocksDB state store unless ``--provider hdfs``), over a Parquet file
source read one file per batch (``availableNow``):

* batch 0 reads one file holding every key once: the state is built (untimed);
* batches 1..B read ``--rows`` rows each, on keys spread over the whole state;
* the query: ``groupBy(key).agg(count, sum)`` into the noop sink (update mode);
* variants (order rotating per round): ``none`` (the listener, no schedule), and one
  per ``--every`` (a savepoint every N batches, ``keep=2``, under a local directory).

A run's throughput is the rows of batches 1..B over the time from batch 1's trigger to
the end of batch B (Spark's own progress timestamps and durations), so the state's
build and the query's start are left out. After each run, untimed, the schedule is
closed (a savepoint still running is waited for). Also per variant: savepoints taken,
skipped (due while the previous one ran), and their median duration.

    .venv/bin/python bench/savepoint_schedule.py [--keys 100000,1000000] [--every 10,100]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from _common import header, journal_database, minmax, postgres, quantile, rmtree, table

NAME = "bench_scheduled"


def session(memory: str, provider: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER

    builder = (SparkSession.builder.master("local[2]").appName("bench-savepoint-schedule")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
               .config("spark.driver.memory", memory)
               .config("spark.sql.streaming.noDataMicroBatches.enabled", "false"))
    if provider == "rocksdb":
        builder = builder.config(PROVIDER_CONF, ROCKSDB_PROVIDER)
    return builder.getOrCreate()


def make_input(spark: Any, where: Path, keys: int, batches: int, rows: int) -> None:
    """One file with every key (batch 0), then ``batches`` files of ``rows`` rows."""
    from pyspark.sql import functions as F

    spark.range(keys).select(F.col("id").alias("key"), (F.col("id") % 97).alias("v")) \
        .coalesce(1).write.parquet(str(where))
    time.sleep(1.1)  # the file source orders files by modification time (1 s resolution)
    (spark.range(batches * rows, numPartitions=batches)
     .select(F.pmod(F.xxhash64("id"), F.lit(keys)).alias("key"), (F.col("id") % 97).alias("v"))
     .write.mode("append").parquet(str(where)))


def _ms(progress: dict[str, Any]) -> float:
    stamp = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00"))
    return stamp.timestamp() * 1000


def run_once(spark: Any, url: str, src: Path, work: Path, label: str, every: int | None,
             seq: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    import offset_journal
    from offset_journal.savepoint import SavepointSchedule

    name = f"{NAME}_{seq}"
    ck, under = work / f"ck-{seq}", work / f"sp-{seq}"
    schedule = (SavepointSchedule(name, checkpoint=str(ck), under=str(under),
                                  every_batches=every, keep=2) if every else None)
    listener = offset_journal.attach(spark, url, spool_dir=str(work / "spool"),
                                     savepoints=schedule)
    try:
        df = (spark.readStream.schema("key long, v long").option("maxFilesPerTrigger", 1)
              .parquet(str(src)).groupBy("key").agg(F.count("*").alias("n"),
                                                    F.sum("v").alias("total")))
        q = (df.writeStream.format("noop").outputMode("update").queryName(name)
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        q.awaitTermination()
        progress = [p for p in q.recentProgress if p["batchId"] >= 1]
        assert listener.wait_terminated(str(q.runId), timeout=300), "journal not flushed"
    finally:
        spark.streams.removeListener(listener)
        listener.close(timeout=600)  # a savepoint still running is waited for (untimed)
    first, last = progress[0], progress[-1]
    span = (_ms(last) + last["durationMs"]["triggerExecution"] - _ms(first)) / 1000
    rows = sum(p["numInputRows"] for p in progress)
    out = {"label": label, "rows/s": rows / span, "batches": len(progress), "rows": rows}
    if schedule is not None:
        stats = schedule.stats()
        took = [a.ended - a.started for a in stats.attempts if a.outcome == "taken"]
        out.update(taken=stats.taken, skipped=stats.skipped, failed=stats.failed,
                   savepoint_s=quantile(took, .5) if took else float("nan"))
    print(f"{name} ({label}): {len(progress)} batches, {rows:,} rows in {span:.1f} s = "
          f"{rows / span:,.0f} rows/s {out.get('taken', '')} taken "
          f"{out.get('skipped', '')} skipped", file=sys.stderr, flush=True)
    return out


def one_size(spark: Any, server: Any, keys: int, args: argparse.Namespace, work: Path,
             ) -> list[list[Any]]:
    rmtree(work)
    work.mkdir(parents=True)
    make_input(spark, work / "in", keys, args.batches, args.rows)
    url = journal_database(server)
    variants: list[tuple[str, int | None]] = [("none", None)] + [
        (f"every {n}", n) for n in args.every]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in variants}
    seq = 0
    for i in range(args.rounds):
        order = variants[i % len(variants):] + variants[:i % len(variants)]
        for label, every in order:
            seq += 1
            runs[label].append(run_once(spark, url, work / "in", work, label, every, seq))
    base = [r["rows/s"] for r in runs["none"]]
    rows = []
    for label, _every in variants:
        got = runs[label]
        thr = [r["rows/s"] for r in got]
        ratio = [t / b for t, b in zip(thr, base, strict=True)]
        rows.append([f"{keys:,}", label, len(got), f"{quantile(thr, .5):,.0f}",
                     f"{quantile(ratio, .5):.3f}" if label != "none" else "1",
                     minmax(ratio, "{:.3f}") if label != "none" else "",
                     sum(r.get("taken", 0) for r in got), sum(r.get("skipped", 0) for r in got),
                     sum(r.get("failed", 0) for r in got),
                     f"{quantile([r['savepoint_s'] for r in got], .5):.1f}"
                     if label != "none" else "",
                     ("yes" if quantile(ratio, .5) >= 0.95 else "**no**")
                     if label != "none" else "", f"{os.getloadavg()[0]:.1f}"])
    rmtree(work)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", default=[100_000], type=lambda s: [int(x) for x in s.split(",")],
                   help="keys of state, comma-separated (default 100000)")
    p.add_argument("--every", default=[10, 100], type=lambda s: [int(x) for x in s.split(",")],
                   help="a savepoint every N batches, one variant each (default 10,100)")
    p.add_argument("--batches", type=int, default=200, help="batches after the state's build")
    p.add_argument("--rows", type=int, default=5000, help="rows per batch")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--provider", choices=("rocksdb", "hdfs"), default="rocksdb")
    p.add_argument("--memory", default="3g", help="spark.driver.memory")
    p.add_argument("--admin-url", default=None)
    p.add_argument("--work", default=None, help="work directory (default: a temporary one)")
    args = p.parse_args()
    header("Stream throughput with scheduled savepoints against without", args)
    out = []
    with postgres(args.admin_url) as server, tempfile.TemporaryDirectory(dir=args.work) as tmp:
        spark = session(args.memory, args.provider)
        spark.sparkContext.setLogLevel("ERROR")
        try:
            for keys in args.keys:
                out += one_size(spark, server, keys, args, Path(tmp) / f"k{keys}")
        finally:
            spark.stop()
    print(f"\n{args.batches} batches of {args.rows:,} rows after the state's build, "
          f"{args.rounds} round(s), order rotating; the listener attached in every variant; "
          f"{args.provider} state store; keep=2.\n")
    print(table(["keys", "variant", "runs", "rows/s median", "ratio to none (median)",
                 "ratio min-max", "savepoints taken", "skipped", "failed",
                 "savepoint s (median)", "target >= 0.95", "load (1 min) at the end"], out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
