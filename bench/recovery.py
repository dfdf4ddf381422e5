"""A broken checkpoint of a stateful query recovered with its state (``recover``: the
newest savepoint restored, the old batches since replayed into it) against what a team
does without it: a new checkpoint that builds the state again from the start of the
topic.

For each size (``--sizes``, keys of state), in one local SparkSession (local[2],
``--partitions`` shuffle partitions, RocksDB state, the journal listener attached, a
throwaway Postgres, a Kafka broker: the test session's or a local one):

* the topic: ``--history`` records per key ``key,v`` (N distinct keys), written by a
  Spark batch job;
* v1: ``groupBy(key).agg(count, max, sum)`` over it (one batch), journaled; a savepoint
  of its checkpoint at that batch (``create_savepoint``, timed);
* ``--batches`` more batches of ``--per-batch`` records each on v1's keys, run by v1 and
  journaled; then v1's ``state/`` is deleted (the checkpoint is broken);
* recovery: :func:`offset_journal.restart.recover` into a NEW checkpoint (restore, then
  one replay per old batch, each with the sink swapped for noop): wall time, and the
  restore's own share;
* rebuild: the same query on another new checkpoint from the start of the topic
  (``availableNow``, one batch): wall time until it ends;
* both checkpoints' state read back (State Data Source): the same number of keys and the
  same totals, or the script stops.

    .venv/bin/python bench/recovery.py [--sizes 1000000,10000000] [--memory 6g]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import header, journal_database, postgres, rmtree, table
from restore import aggregation, broker, say

NAME = "bench_recovery"


def session(memory: str, partitions: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from offset_journal.local.jars import spark_jars_value, state_restore_jar
    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER

    return (SparkSession.builder.master("local[2]").appName("bench-recovery")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(partitions))
            .config(PROVIDER_CONF, ROCKSDB_PROVIDER)
            .config("spark.driver.memory", memory)
            .config("spark.jars", f"{spark_jars_value()},{state_restore_jar()}")
            .getOrCreate())


def produce(spark: Any, servers: str, topic: str, first: int, count: int, modulo: int) -> None:
    """``count`` records ``key,v`` (key = i mod ``modulo``) written by a Spark batch job:
    a Python producer takes minutes at 10^7."""
    from pyspark.sql import functions as F

    (spark.range(first, first + count)
     .select(F.concat_ws(",", (F.col("id") % modulo).cast("string"),
                         (F.col("id") % 97).cast("string")).alias("value"))
     .write.format("kafka").option("kafka.bootstrap.servers", servers)
     .option("topic", topic).save())


def events(spark: Any, servers: str, topic: str, starting: str,
           per_batch: int | None = None) -> Any:
    """The topic's records as (key, v), ``per_batch`` records a batch when given."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
              .option("subscribe", topic).option("startingOffsets", starting))
    if per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(per_batch))
    values = F.split(F.col("value").cast("string"), ",")
    return reader.load().select(values[0].cast("long").alias("key"),
                                values[1].cast("long").alias("v"))


def writer(spark: Any, servers: str, topic: str, starting: str, checkpoint: Path,
           per_batch: int | None = None, name: str = NAME) -> Any:
    """The query's writer (noop sink: the state is what is measured), not started."""
    return (aggregation(events(spark, servers, topic, starting, per_batch)).writeStream
            .format("noop").outputMode("update").queryName(name)
            .option("checkpointLocation", str(checkpoint)))


def run_v1(spark: Any, listener: Any, servers: str, topic: str, checkpoint: Path,
           per_batch: int | None) -> float:
    """v1 on its checkpoint to the topic's end (``per_batch`` records a batch), journaled."""
    began = time.monotonic()
    q = writer(spark, servers, topic, "earliest", checkpoint, per_batch) \
        .trigger(availableNow=True).start()
    q.awaitTermination()
    took = time.monotonic() - began
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    listener.wait_terminated(q.runId, timeout=300)
    return took


def state_totals(spark: Any, checkpoint: Path) -> tuple[int, int]:
    """Keys and the sum of every key's count, read from the checkpoint's state."""
    from pyspark.sql import functions as F

    row = (spark.read.format("statestore").load(str(checkpoint))
           .agg(F.count("*").alias("keys"), F.sum("value.count").alias("n")).first())
    return int(row["keys"]), int(row["n"] or 0)


def one(spark: Any, listener: Any, url: str, servers: str, keys: int, history: int,
        batches: int, per_batch: int, work: Path) -> list[Any]:
    from offset_journal import Journal
    from offset_journal.kafka.admin import admin_client, create_topic
    from offset_journal.restart import recover
    from offset_journal.savepoint import create_savepoint

    rmtree(work)
    work.mkdir(parents=True)
    topic = f"bench-recovery-{keys}-{time.time_ns()}"
    create_topic(admin_client(servers), topic, 2)
    produce(spark, servers, topic, 0, keys * history, keys)
    v1_s = run_v1(spark, listener, servers, topic, work / "ck-v1", None)
    say(f"{keys:,} keys: v1 built the state in {v1_s:.1f} s")
    with Journal(url) as journal:
        began = time.monotonic()
        create_savepoint(spark, journal, NAME, str(work / "ck-v1"), str(work / "sp"))
        export_s = time.monotonic() - began
        produce(spark, servers, topic, keys * history, batches * per_batch, keys)
        run_v1(spark, listener, servers, topic, work / "ck-v1", per_batch)
        shutil.rmtree(work / "ck-v1" / "state")
        began = time.monotonic()
        done = recover(spark, journal, NAME, str(work / "ck-new"),
                       lambda starting: writer(spark, servers, topic, starting[0],
                                               work / "ck-new"))
        recover_s = time.monotonic() - began
    say(f"{keys:,} keys: recovered in {recover_s:.1f} s ({len(done.replayed)} replayed)")
    began = time.monotonic()
    q = writer(spark, servers, topic, "earliest", work / "ck-build",
               name=NAME + "_rebuild").trigger(availableNow=True).start()
    q.awaitTermination()
    build_s = time.monotonic() - began
    say(f"{keys:,} keys: rebuilt from the topic's start in {build_s:.1f} s")
    recovered, rebuilt = state_totals(spark, work / "ck-new"), state_totals(spark,
                                                                             work / "ck-build")
    if recovered != rebuilt or recovered[1] != keys * history + batches * per_batch:
        raise SystemExit(f"state differs: recovered {recovered}, rebuilt {rebuilt}")
    restore_s = done.restored.seconds.get("total", float("nan"))
    row = [f"{keys:,}", f"{keys * history:,}", f"{os.getloadavg()[0]:.1f}", f"{v1_s:.1f}",
           f"{export_s:.1f}", f"{len(done.replayed)} ({batches * per_batch:,} records)",
           f"{recover_s:.1f}", f"{restore_s:.1f}",
           f"{build_s:.1f}", f"{recover_s / build_s:.2f}", f"{recovered[0]:,}"]
    rmtree(work)
    return row


HEADERS = ["keys", "records before the savepoint", "load (1 min)", "v1 builds it s",
           "savepoint s", "old batches replayed",
           "recovery s", "of it: restore s", "rebuild from the topic's start s",
           "recovery / rebuild", "keys in both states"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1000000",
                   type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--history", type=int, default=1,
                   help="records per key in the topic before the savepoint (what a rebuild "
                        "reads again; a real topic holds many)")
    p.add_argument("--batches", type=int, default=5, help="old batches after the savepoint")
    p.add_argument("--per-batch", type=int, default=10_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--memory", default="4g", help="spark.driver.memory")
    p.add_argument("--admin-url", default=None)
    p.add_argument("--work", default=None, help="work directory (default: a temporary one)")
    args = p.parse_args()
    header("A broken stateful checkpoint recovered from a savepoint, against rebuilding "
           "its state from the topic's start", args)
    import offset_journal

    rows = []
    with postgres(args.admin_url) as server, broker() as servers, \
            tempfile.TemporaryDirectory(dir=args.work) as tmp:
        spark = session(args.memory, args.partitions)
        spark.sparkContext.setLogLevel("ERROR")
        try:
            for keys in args.sizes:
                url = journal_database(server)
                listener = offset_journal.attach(spark, database_url=url,
                                                 spool_dir=str(Path(tmp) / "spool"))
                try:
                    rows.append(one(spark, listener, url, servers, keys, args.history,
                                    args.batches, args.per_batch, Path(tmp) / f"n{keys}"))
                finally:
                    spark.streams.removeListener(listener)
                    listener.close()
                print(table(HEADERS, rows[-1:]), file=sys.stderr)
        finally:
            spark.stop()
    print(table(HEADERS, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
