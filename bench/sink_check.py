"""What the sink check adds to a restart plan: reading the old query's sink log
and its old checkpoint, side by side with the same plan without them.

Built on disk, in the formats Spark and Delta write (tests/checkpoint/test_sink_logs.py reads real
ones the same way):

* a file sink's ``_spark_metadata`` of ``--batches`` batches (10^4), one output file per
  batch, compacted every 10 batches (``N.compact`` holding every earlier line: 2 MB at
  10^4); two layouts: Spark's default (older log files deleted after each compaction,
  ``fileSink.log.deletion``) and every file kept (deletion off);
* a Delta table of ``--batches`` versions, each a streaming commit (``commitInfo``,
  ``txn`` of the query, ``add``), a checkpoint every 10 versions (the last three written
  as parquet with Delta's columns and every ``add`` of the table; the reader opens only
  the newest), ``_last_checkpoint``;
* the old checkpoint of each query: the 100 batches Spark retains
  (``minBatchesToRetain``), ``commits/`` one short of ``offsets/``: the driver died after
  the sink committed the last batch, which the plan takes;
* a journal (Postgres) holding each query's 100 batches before that one.

Timed, in rounds (median and range): ``plan_restart`` (record=False: nothing journaled)
with ``--sink none`` (the plan without the check) and with the sink and the old
checkpoint; and each sink reader alone, with the bytes it read against the log's bytes.

    .venv/bin/python bench/sink_check.py [--batches 10000 --rounds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import (
    QUERY_ID,
    dir_bytes,
    header,
    journal_database,
    kafka_offsets,
    kafka_progress,
    minmax,
    postgres,
    quantile,
    rmtree,
    table,
)

PARTITIONS = 10
DELTA_QUERY_ID = "de17a000-4f50-6172-8394-a5b6c7d8e9f0"
ENTRY = ('{"path":"file:///lake/out/part-00000-%s-c000.snappy.parquet","size":4711,'
         '"isDir":false,"modificationTime":1767225600000,"blockReplication":1,'
         '"blockSize":33554432,"action":"add"}')


def file_sink(root: Path, batches: int, deletion: bool) -> Path:
    """The ``_spark_metadata`` FileStreamSinkLog leaves after ``batches`` batches."""
    log = root / "_spark_metadata"
    log.mkdir(parents=True)
    lines: list[str] = []
    keep_from = max(0, (batches - 100) // 10 * 10 - 1) if deletion else 0
    for b in range(batches):
        lines.append(ENTRY % uuid.UUID(int=b))
        compact = (b + 1) % 10 == 0
        if b >= keep_from:
            body = "\n".join(lines) if compact else lines[-1]
            (log / (f"{b}.compact" if compact else str(b))).write_text("v1\n" + body)
    return root


def delta_table(root: Path, batches: int, app_id: str) -> Path:
    """A Delta log of ``batches`` streaming commits of ``app_id`` (txn version = batch)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    log = root / "_delta_log"
    log.mkdir(parents=True)
    meta = {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
            "schemaString": '{"type":"struct","fields":[]}', "partitionColumns": [],
            "configuration": {}, "createdTime": 1767225600000}
    adds = []
    last = (batches - 1) // 10 * 10
    for v in range(batches):
        add = {"path": f"part-{v:05d}-{uuid.UUID(int=v)}.snappy.parquet", "partitionValues": {},
               "size": 4711, "modificationTime": 1767225600000 + v, "dataChange": True,
               "stats": '{"numRecords":1000,"minValues":{"offset":0},"maxValues":'
                        '{"offset":999},"nullCount":{"offset":0}}'}
        adds.append(add)
        actions: list[dict[str, Any]] = [{"commitInfo": {
            "timestamp": 1767225600000 + v, "operation": "STREAMING UPDATE",
            "operationParameters": {"outputMode": "Append", "queryId": app_id,
                                    "epochId": str(v)}}}]
        if v == 0:
            actions += [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                        {"metaData": meta}]
        actions += [{"txn": {"appId": app_id, "version": v, "lastUpdated": 1767225600000 + v}},
                    {"add": add}]
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions))
        if v and v % 10 == 0 and v >= last - 20:  # one action per row, the rest null
            size = len(adds) + 3  # (empty maps left out: pyarrow infers them as empty structs)
            flat = [{k: x for k, x in a.items() if x != {}} for a in adds]
            meta_row = {"id": meta["id"], "format": {"provider": "parquet"},
                        "schemaString": meta["schemaString"], "partitionColumns": [],
                        "createdTime": meta["createdTime"]}
            columns = {
                "txn": [{"appId": app_id, "version": v, "lastUpdated": v}] + [None] * (size - 1),
                "metaData": [None, meta_row] + [None] * (size - 2),
                "protocol": [None, None, {"minReaderVersion": 1, "minWriterVersion": 2}]
                + [None] * (size - 3),
                "add": [None, None, None, *flat]}
            pq.write_table(pa.table({k: pa.array(c) for k, c in columns.items()}),
                           log / f"{v:020d}.checkpoint.parquet")
            (log / "_last_checkpoint").write_text(json.dumps({"version": v, "size": size}))
    return root


def old_checkpoint(root: Path, query_id: str, batches: int) -> Path:
    """The last 100 batches' offsets, committed but for the last."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": query_id}))
    for b in range(max(0, batches - 100), batches):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1767225600000 + b * 1000,
                "conf": {"spark.sql.shuffle.partitions": "4"}}
        end = kafka_offsets(PARTITIONS, (b + 1) * 1000)
        (root / "offsets" / str(b)).write_text(
            "v1\n" + json.dumps(meta) + "\n" + json.dumps(end, separators=(",", ":")))
        if b < batches - 1:
            (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


def journal_query(url: str, name: str, query_id: str, sink: str, batches: int) -> None:
    """The query's 100 batches before the last the sink holds, journaled."""
    from offset_journal.journal import Journal
    from offset_journal.records import batch_from_progress

    with Journal(url) as journal:
        for b in range(max(0, batches - 101), batches - 1):
            body = json.loads(kafka_progress(b, PARTITIONS, name=name, query_id=query_id,
                                             run_id=f"run-{name}"))
            body["sink"]["description"] = sink
            assert journal.record_batch(batch_from_progress(json.dumps(body)))


def timed(fn: Any, rounds: int) -> tuple[list[float], Any]:
    fn()  # warm: imports, the first connection
    times, out = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def main(args: argparse.Namespace) -> None:
    from offset_journal.checkpoint.sinks import read_delta_txns, read_file_sink_log
    from offset_journal.journal import Journal
    from offset_journal.restart import plan_restart

    header("What the sink check adds to a restart plan", args)
    work = Path(tempfile.mkdtemp(prefix="oj-bench-sink-"))
    n = args.batches
    t0 = time.perf_counter()
    sinks = {"file sink, old logs deleted (Spark's default)": file_sink(work / "out-d", n, True),
             "file sink, every log file kept": file_sink(work / "out-k", n, False)}
    table_dir = delta_table(work / "table", n, DELTA_QUERY_ID)
    print(f"built in {time.perf_counter() - t0:.1f} s", flush=True)
    rows, reads = [], []
    with postgres(args.admin_url) as server:
        url = journal_database(server, "oj_bench_sink")
        cases: list[tuple[str, str, str, Path]] = []
        for label, out in sinks.items():
            name = f"bench_file_{len(cases)}"
            journal_query(url, name, QUERY_ID, f"FileSink[{out}]", n)
            cases.append((label, name, str(out), old_checkpoint(work / f"ck-{name}", QUERY_ID,
                                                                 n)))
        journal_query(url, "bench_delta", DELTA_QUERY_ID, f"DeltaSink[{table_dir}]", n)
        cases.append((f"Delta table, {n:,} versions, a checkpoint every 10", "bench_delta",
                      f"delta:{table_dir}", old_checkpoint(work / "ck-delta", DELTA_QUERY_ID, n)))
        with Journal(url) as journal:
            for label, name, sink, ck in cases:
                rows += _plans(journal, label, name, sink, ck, args.rounds, plan_restart)
        for label, _name, sink, _ck in cases:
            reads.append(_read_alone(label, sink, args.rounds, read_delta_txns,
                                     read_file_sink_log))
    rmtree(work)
    print(f"\n{n:,} batches; the journal holds the 100 before the sink's last, the old "
          f"checkpoint the last 100 (one uncommitted); {args.rounds} rounds.\n")
    print(table(["sink", "plan", "median ms", "min-max ms", "batches taken", "target < 1 s"],
                rows))
    print()
    print(table(["sink log read alone", "median ms", "min-max ms", "bytes read",
                 "bytes in the log", "files listed"], reads))


def _read_alone(label: str, sink: str, rounds: int, read_delta: Any, read_file: Any,
                ) -> list[str]:
    delta = sink.startswith("delta:")
    path = Path(sink.removeprefix("delta:"))
    log = path / ("_delta_log" if delta else "_spark_metadata")
    times, got = timed(lambda: (read_delta if delta else read_file)(path), rounds)
    return [label, f"{quantile(times, .5) * 1000:.1f}",
            minmax([t * 1000 for t in times], "{:.1f}"), f"{got.bytes_read:,}",
            f"{dir_bytes(log):,}", f"{len(os.listdir(log)):,}"]


def _plans(journal: Any, label: str, name: str, sink: str, ck: Path, rounds: int,
           plan_restart: Any) -> list[list[str]]:
    out = []
    for what, extra in (("without the sink check (--sink none)", {"old_sink": "none"}),
                        ("with it (--sink, --old-checkpoint)",
                         {"old_sink": sink, "old_checkpoint": str(ck)})):
        times, plan = timed(lambda extra=extra: plan_restart(
            None, name, journal=journal, record=False, **extra), rounds)
        assert plan.ok, plan.errors
        med = quantile(times, .5)
        out.append([label, what, f"{med * 1000:.1f}", minmax([t * 1000 for t in times],
                                                            "{:.1f}"),
                    str(len(plan.sink_batches)), "yes" if med < 1 else "**no**"])
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    main(p.parse_args())
