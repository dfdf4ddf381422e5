"""Restoring a savepoint into a new checkpoint at 10^5, 10^6 and 10^7 keys,
side by side with what it replaces: the savepoint's export of the same state, v1
building it, and the Python path (``handleInitialState`` per key); and v2's first batch
after a restore against an empty start.

For each size and each v1 state store (``--providers``: RocksDB, HDFS-backed), in one
local SparkSession (local[2], 4 shuffle partitions, the journal listener attached, a
throwaway Postgres, a Kafka broker: the test session's or a local one):

* v1: ``groupBy(key).agg(count, max, sum)`` over a Parquet file source of N distinct
  keys (one batch), journaled: its wall time ("v1 builds it");
* export: ``create_savepoint`` of v1's checkpoint (wall time);
* restore: ``restore_savepoint`` into a NEW RocksDB checkpoint of v2 (the same
  aggregation, over a Kafka topic of 1,000 new records, 100 of them on v1's keys,
  ``--partitions`` shuffle partitions): the bootstrap batch, the state write and keys per
  second of the write, the path (RocksDB: the old checkpoint's bytes; HDFS: the
  savepoint's typed rows encoded); then v2 runs: its first real batch's
  ``triggerExecution``, against v2 on an empty new checkpoint (the same records);
  then the same restore again in the same JVM, into another new checkpoint: each with
  the driver JVM's classes loaded, JIT compilation and GC time during it (what a JVM's
  first restore pays and its second does not);
* restore into transformWithState: the same state mapped into a value state (typed rows,
  the path a Python seed replaces), its write time; and, up to ``--seeded-max`` keys,
  today's Python path, a ``transformWithState`` seeded with ``initial_state``: its first
  batch calls ``handleInitialState`` once per key.

    .venv/bin/python bench/restore.py [--sizes 100000,1000000,10000000] [--memory 8g]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import header, journal_database, postgres, rmtree, table, totals_processor

from offset_journal.checkpoint.commits import HDFS_PROVIDER, ROCKSDB_PROVIDER

NAME = "bench_restore"
PROVIDERS = {"rocksdb": ROCKSDB_PROVIDER, "hdfs": HDFS_PROVIDER}


def session(memory: str, partitions: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from offset_journal.local.jars import spark_jars_value, state_restore_jar

    return (SparkSession.builder.master("local[2]").appName("bench-restore")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(partitions))
            .config("spark.driver.memory", memory)
            .config("spark.jars", f"{spark_jars_value()},{state_restore_jar()}")
            .getOrCreate())


@contextmanager
def broker() -> Iterator[str]:
    """The broker named by OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS (the test session's),
    else a local one started here and stopped after."""
    servers = os.environ.get("OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS")
    if servers:
        yield servers
        return
    from offset_journal.local.kafka import start_local_kafka

    local = start_local_kafka()
    try:
        yield local.bootstrap_servers
    finally:
        local.stop()


def new_records(servers: str, topic: str, keys: int) -> str:
    """1,000 records ``key,v`` on a topic of its own, 100 of them on v1's keys; returns
    the topic's start offsets (where v2 starts) as JSON."""
    from confluent_kafka import Producer

    from offset_journal.kafka.admin import admin_client, create_topic

    create_topic(admin_client(servers), topic, 2)
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for i in range(keys - 100, keys + 900):
        producer.produce(topic, value=f"{i},{i % 97}".encode(), partition=i % 2)
    producer.flush(60)
    return json.dumps({topic: {"0": 0, "1": 0}})


def aggregation(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.groupBy("key").agg(F.count("*").alias("n"), F.max("v").alias("mx"),
                                 F.sum("v").alias("total"))


def kafka_events(spark: Any, servers: str, topic: str, starting: str) -> Any:
    from pyspark.sql import functions as F

    values = F.split(F.col("value").cast("string"), ",")
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic).option("startingOffsets", starting).load()
            .select(values[0].cast("long").alias("key"), values[1].cast("long").alias("v")))


def first_batch(query: Any) -> float:
    """Run ``query`` to its end; its first batch's ``triggerExecution`` in seconds."""
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return float(query.recentProgress[0]["durationMs"]["triggerExecution"]) / 1000


def build_v1(spark: Any, listener: Any, work: Path, keys: int, provider: str) -> float:
    from pyspark.sql import functions as F

    from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf

    if not (work.parent / "in1").exists():
        spark.range(keys).select(F.col("id").alias("key"), (F.col("id") % 97).alias("v")) \
            .write.parquet(str(work.parent / "in1"))
    src = spark.readStream.schema("key long, v long").parquet(str(work.parent / "in1"))
    began = time.monotonic()
    with session_conf(spark, PROVIDER_CONF, provider):
        q = (aggregation(src).writeStream.format("noop").outputMode("update").queryName(NAME)
             .option("checkpointLocation", str(work / "ck-v1")).trigger(availableNow=True)
             .start())
        q.awaitTermination()
    took = time.monotonic() - began
    listener.wait_terminated(q.runId, timeout=120)  # journaled after the query ends
    return took


def jvm_counters(spark: Any) -> dict[str, float]:
    """The driver JVM's classes loaded so far, seconds its JIT compiled and its
    collectors ran: what a first run pays and a second does not."""
    mf = spark._jvm.java.lang.management.ManagementFactory
    gc = sum(max(int(b.getCollectionTime()), 0) for b in mf.getGarbageCollectorMXBeans())
    return {"classes": float(mf.getClassLoadingMXBean().getTotalLoadedClassCount()),
            "jit": mf.getCompilationMXBean().getTotalCompilationTime() / 1000,
            "gc": gc / 1000}


def restore_into_aggregation(spark: Any, work: Path, servers: str, topic: str,
                             starting: str, saved: Any, ck: str = "ck-v2") -> dict[str, Any]:
    """One restore into the new checkpoint ``ck`` and v2's first batch on it, with what
    the driver JVM spent on class loading, JIT and GC during the restore."""
    from offset_journal.state import restore_savepoint

    def v2() -> Any:
        return (aggregation(kafka_events(spark, servers, topic, starting)).writeStream
                .format("noop").outputMode("update").queryName(NAME)
                .option("checkpointLocation", str(work / ck)))

    before = jvm_counters(spark)
    restored = restore_savepoint(spark, saved, str(work / ck), v2, ends=[starting])
    after = jvm_counters(spark)
    first = first_batch(v2().trigger(availableNow=True).start())
    (op,) = restored.layout.operators
    return {"path": op.path, "first": first, **restored.seconds,
            **{k: after[k] - before[k] for k in after}}


def restore_into_tws(spark: Any, work: Path, servers: str, topic: str, starting: str,
                     saved: Any) -> float:
    from offset_journal.state import Rules, restore_savepoint

    def v2() -> Any:
        out = kafka_events(spark, servers, topic, starting).groupBy("key").transformWithState(
            totals_processor(False), "key long, n long", "Update", "None")
        return (out.writeStream.format("noop").outputMode("update")
                .queryName(NAME + "_tws").option("checkpointLocation", str(work / "ck-tws")))

    rules = Rules(fields={0: {"n": "count", "mx": "max", "total": "sum"}})
    restored = restore_savepoint(spark, saved, str(work / "ck-tws"), v2, ends=[starting],
                                 rules=rules)
    return float(restored.seconds["write"])


def seeded(spark: Any, work: Path, servers: str, topic: str, starting: str,
           saved: Any) -> float:
    """Today's Python path: the first batch of a transformWithState seeded with
    ``initial_state`` (``handleInitialState`` once per key)."""
    from offset_journal.savepoint import initial_state
    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER, session_conf

    init = initial_state(spark, saved, operator=0)
    out = kafka_events(spark, servers, topic, starting).groupBy("key").transformWithState(
        totals_processor(True), "key long, n long", "Update", "None", initialState=init)
    with session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER):
        q = (out.writeStream.format("noop").outputMode("update").queryName(NAME + "_seeded")
             .option("checkpointLocation", str(work / "ck-seeded")).trigger(availableNow=True)
             .start())
    return first_batch(q)




def empty_start(spark: Any, work: Path, servers: str, topic: str, starting: str) -> float:
    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER, session_conf

    with session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER):
        q = (aggregation(kafka_events(spark, servers, topic, starting)).writeStream
             .format("noop").outputMode("update").queryName(NAME + "_empty")
             .option("checkpointLocation", str(work / "ck-empty"))
             .trigger(availableNow=True).start())
    return first_batch(q)


def one(spark: Any, listener: Any, url: str, servers: str, keys: int, provider: str,
        work: Path, seeded_max: int) -> list[Any]:
    from offset_journal import Journal
    from offset_journal.savepoint import create_savepoint

    rmtree(work)
    work.mkdir(parents=True)
    v1_s = build_v1(spark, listener, work, keys, PROVIDERS[provider])
    say(f"{keys:,} keys, {provider}: v1 {v1_s:.1f} s")
    with Journal(url) as journal:
        began = time.monotonic()
        saved = create_savepoint(spark, journal, NAME, str(work / "ck-v1"), str(work / "sp"))
        export_s = time.monotonic() - began
    say(f"{keys:,} keys, {provider}: export {export_s:.1f} s")
    topic = f"bench-restore-{provider}-{keys}-{time.time_ns()}"
    starting = new_records(servers, topic, keys)
    got = restore_into_aggregation(spark, work, servers, topic, starting, saved)
    say(f"{keys:,} keys, {provider}: restore {got['total']:.1f} s ({got['path']})")
    # the same restore again in this JVM (into another new checkpoint): the pair says
    # what the first one paid for being first
    again = restore_into_aggregation(spark, work, servers, topic, starting, saved, "ck-v2b")
    say(f"{keys:,} keys, {provider}: restore again {again['total']:.1f} s")
    empty = empty_start(spark, work, servers, topic, starting)
    tws = restore_into_tws(spark, work, servers, topic, starting, saved)
    python = (f"{seeded(spark, work, servers, topic, starting, saved):.1f}"
              if keys <= seeded_max else "not run")
    rate = keys / got["write"] if got["write"] else float("nan")
    row = [f"{keys:,}", provider, f"{os.getloadavg()[0]:.1f}", f"{v1_s:.1f}",
           f"{export_s:.1f}", got["path"], f"{got['bootstrap']:.1f}", f"{got['write']:.1f}",
           f"{rate:,.0f}", f"{got['total']:.1f}", f"{got['first']:.2f}", f"{empty:.2f}",
           f"{got['first'] / empty:.2f}", f"{keys / tws:,.0f}", python,
           *(f"{r['bootstrap']:.1f} / {r['write']:.1f} / {keys / r['write']:,.0f} / "
             f"{r['classes']:,.0f} / {r['jit']:.1f} / {r['gc']:.1f}" for r in (got, again))]
    rmtree(work)
    return row


HEADERS = ["keys", "v1 store", "load (1 min)", "v1 builds it s", "export s", "restore path",
           "bootstrap s", "state write s", "keys/s", "restore s", "v2 first batch s",
           "empty start first batch s", "first / empty", "into transformWithState keys/s",
           "Python path (handleInitialState) first batch s",
           "1st restore: bootstrap s / write s / keys/s / classes loaded / JIT s / GC s",
           "2nd restore, same JVM: the same"]


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100000,1000000",
                   type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--providers", default="rocksdb,hdfs", type=lambda s: s.split(","))
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--memory", default="4g", help="spark.driver.memory")
    p.add_argument("--seeded-max", type=int, default=100_000,
                   help="run the Python path (handleInitialState per key) up to this size")
    p.add_argument("--admin-url", default=None)
    p.add_argument("--work", default=None, help="work directory (default: a temporary one)")
    args = p.parse_args()
    header("Restoring a savepoint into a new checkpoint, against what it replaces", args)
    import offset_journal

    rows = []
    with postgres(args.admin_url) as server, broker() as servers, \
            tempfile.TemporaryDirectory(dir=args.work) as tmp:
        spark = session(args.memory, args.partitions)
        spark.sparkContext.setLogLevel("ERROR")
        try:
            for keys in args.sizes:
                for provider in args.providers:
                    url = journal_database(server)
                    listener = offset_journal.attach(spark, database_url=url,
                                                     spool_dir=str(Path(tmp) / "spool"))
                    try:
                        rows.append(one(spark, listener, url, servers, keys, provider,
                                        Path(tmp) / f"n{keys}" / provider, args.seeded_max))
                    finally:
                        spark.streams.removeListener(listener)
                        listener.close()
                    print(table(HEADERS, rows[-1:]), file=sys.stderr)
                rmtree(Path(tmp) / f"n{keys}")
        finally:
            spark.stop()
    print(table(HEADERS, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
