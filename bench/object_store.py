"""Checkpoints and savepoints on S3 against the local disk, side by side in one run:
S3 requests (by kind) and wall time of

* ``checkpoint inspect`` of a checkpoint of N batches (offsets/ and commits/ holding
  every batch: minBatchesToRetain raised to keep them all, the worst case), the plan's
  new-checkpoint check of it, and the file-sink trap check of a file sink's
  ``_spark_metadata`` log of N batches compacted every 10 (deletion off: every file
  kept), next to what listing the whole log costs;
* ``savepoint create`` for K keys (groupBy().agg() state, 4 partitions), the checkpoint
  and the savepoint on S3, and both on the local disk.

The S3 server is moto's threaded server on loopback (offset_journal.local.s3: every
request authenticated, in this process); its request log gives the counts, which hold
for any S3, while its times are loopback times: a real S3 adds its latency per request
(tens of ms), so the counts are what to plan with. The hand-made checkpoint is put into
the server's store directly (making 3N objects through HTTP would take longer than
measuring them); everything measured goes through HTTP.

    .venv/bin/python bench/object_store.py [--batches 10000] [--keys 100000,1000000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import header, journal_database, postgres, table

KINDS = ("LIST", "GET", "HEAD", "PUT", "POST", "DELETE")
QUERY_ID = "ce011fdc-8762-4dcb-84eb-a77333e28109"


def checkpoint_files(batches: int) -> dict[str, bytes]:
    """A checkpoint of ``batches`` batches, every one kept, and a file sink's log of as
    many, compacted every 10 batches (``9.compact``, ``19.compact``...), as key -> bytes."""
    files = {"chk/metadata": json.dumps({"id": QUERY_ID}).encode(),
             "chk/sources/0/0": b"\x00v1\n" + json.dumps({"t": {"0": 0, "1": 0}}).encode()}
    for i in range(batches):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_704_067_200_000 + i,
                "conf": {"spark.sql.shuffle.partitions": "4"}}
        offsets = json.dumps({"t": {"0": 100 * (i + 1), "1": 100 * (i + 1)}})
        files[f"chk/offsets/{i}"] = f"v1\n{json.dumps(meta)}\n{offsets}".encode()
        files[f"chk/commits/{i}"] = b'v1\n{"nextBatchWatermarkMs":0}'
        name = f"{i}.compact" if i % 10 == 9 else str(i)
        entry = {"path": f"s3a://b/out/part-{i}.parquet", "size": 1, "isDir": False,
                 "modificationTime": 0, "blockReplication": 1, "blockSize": 1,
                 "action": "add"}
        files[f"out/_spark_metadata/{name}"] = f"v1\n{json.dumps(entry)}".encode()
    return files


def on_disk(root: Path, files: dict[str, bytes]) -> None:
    for key, data in files.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def into_server(bucket: str, files: dict[str, bytes]) -> None:
    """Put the objects into moto's store of this process, without HTTP."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for key, data in files.items():
        backend.put_object(bucket, key, data)


def measured(server: Any, what: Any) -> tuple[float, Counter[str], Any]:
    """(seconds, requests by kind, result) of ``what()``."""
    before = server.requests()
    began = time.perf_counter()
    result = what()
    seconds = time.perf_counter() - began
    return seconds, server.requests() - before, result


def inspect(url: str) -> Any:
    from offset_journal.cli import main

    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(["checkpoint", "inspect", url])
    if code != 0:
        raise SystemExit(f"checkpoint inspect {url} failed")
    return json.loads(out.getvalue())["batches"]


def counts(requests: Counter[str]) -> str:
    return ", ".join(f"{requests[k]} {k}" for k in KINDS if requests[k]) or "0"


def checkpoint_rows(server: Any, batches: int, work: Path) -> list[list[Any]]:
    from offset_journal.checkpoint import file_sink_metadata, is_new_checkpoint

    files = checkpoint_files(batches)
    on_disk(work / "disk", files)
    server.create_bucket("bench-chk")
    into_server("bench-chk", files)
    rows = []
    cases = (("checkpoint inspect", inspect, "chk", batches),
             ("new-checkpoint check (plan)", is_new_checkpoint, "chk", False),
             ("file-sink trap check (plan, job)", file_sink_metadata, "out", batches - 1))
    for label, what, where, expect in cases:
        local_s, _, local = measured(server, lambda w=where, f=what: f(str(work / "disk" / w)))
        s3_s, requests, remote = measured(server, lambda w=where, f=what: f(f"s3a://bench-chk/{w}"))
        if not local == remote == expect:
            raise SystemExit(f"{label}: {local!r} on disk, {remote!r} on S3, {expect!r} expected")
        rows.append([label, f"{batches:,}", f"{local_s * 1000:.0f}", f"{s3_s * 1000:.0f}",
                     sum(requests.values()), counts(requests)])
    pages = -(-batches // 1000)
    rows.append(["(a listing of the whole sink log)", f"{batches:,}", "", "", pages,
                 f"{pages} LIST"])
    return rows


def savepoint_rows(server: Any, spark: Any, pg: Any, keys: int, work: Path) -> list[list[Any]]:
    import offset_journal
    from offset_journal import Journal
    from offset_journal.savepoint import create_savepoint

    bucket = f"bench-sp-{keys}"
    server.create_bucket(bucket)
    rows = []
    for where, base in (("local disk", str(work / f"sp{keys}")), ("S3", f"s3a://{bucket}")):
        url = journal_database(pg)
        listener = offset_journal.attach(spark, database_url=url,
                                         spool_dir=str(work / f"spool-{keys}-{len(rows)}"))
        try:
            name = f"bench_sp_{keys}_{len(rows)}"
            v1_s, v1_requests, run_id = measured(server,
                                                 lambda b=base, n=name: v1(spark, b, keys, n))
            listener.wait_terminated(run_id, timeout=120)  # journaled after the query ends
            with Journal(url) as journal:
                create_s, requests, made = measured(server, lambda b=base, n=name: (
                    create_savepoint(spark, journal, n, f"{b}/ck-v1", f"{b}/savepoint")))
            saved = sum(f.size for p in made.manifest.parts for f in p.files)
        finally:
            spark.streams.removeListener(listener)
            listener.close()
        rows.append([f"{keys:,}", where, f"{v1_s:.1f}", sum(v1_requests.values()),
                     f"{create_s:.1f}", f"{saved / 2**20:.1f}", sum(requests.values()),
                     counts(requests)])
        print(table(["keys", "where", "v1 s", "v1 requests", "create s", "MiB", "requests",
                     "by kind"], rows[-1:]), file=sys.stderr, flush=True)
    return rows


def v1(spark: Any, base: str, keys: int, name: str) -> Any:
    """groupBy(key).agg(count, max, sum) over ``keys`` keys, one batch, its checkpoint
    under ``base``; its run id."""
    from pyspark.sql import functions as F

    source = f"{base}/in"
    spark.range(keys).select(F.col("id").alias("key"), (F.col("id") % 97).alias("v")) \
        .write.parquet(source)
    agg = (spark.readStream.schema("key long, v long").parquet(source).groupBy("key")
           .agg(F.count("*").alias("n"), F.max("v").alias("mx"), F.sum("v").alias("total")))
    query = (agg.writeStream.format("noop").outputMode("update").queryName(name)
             .option("checkpointLocation", f"{base}/ck-v1").trigger(availableNow=True).start())
    query.awaitTermination()
    return query.runId


def session(server: Any, memory: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from offset_journal.local.jars import s3a_spark_jars_value

    builder = (SparkSession.builder.master("local[2]").appName("bench-object-store")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.memory", memory)
               .config("spark.jars", s3a_spark_jars_value()))
    for key, value in server.hadoop_conf().items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    return builder.getOrCreate()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=10_000)
    p.add_argument("--keys", default="100000,1000000",
                   type=lambda s: [int(x) for x in s.split(",") if x])
    p.add_argument("--memory", default="3g", help="spark.driver.memory")
    p.add_argument("--admin-url", default=None)
    args = p.parse_args()
    header("Checkpoints and savepoints on S3 (moto on loopback) against the local disk", args)
    from offset_journal.local.s3 import start_s3

    server = start_s3()
    os.environ.update(server.environ())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = checkpoint_rows(server, args.batches, Path(tmp))
            print(table(["what", "batches", "local disk ms", "S3 ms", "S3 requests",
                         "by kind"], rows))
            if args.keys:
                with postgres(args.admin_url) as pg:
                    spark = session(server, args.memory)
                    spark.sparkContext.setLogLevel("ERROR")
                    try:
                        sp_rows = [r for keys in args.keys
                                   for r in savepoint_rows(server, spark, pg, keys, Path(tmp))]
                    finally:
                        spark.stop()
                print()
                print(table(["keys", "checkpoint and savepoint on", "v1 s", "v1 S3 requests",
                             "savepoint create s", "savepoint MiB", "create S3 requests",
                             "by kind"], sp_rows))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
