"""The sinks' own commit logs read without Spark: a file sink's
``_spark_metadata`` (compacted files included) and a Delta table's ``txn`` actions (its
checkpoints included). Hand-built logs in Spark's and Delta's formats first, then logs
real Spark and Delta wrote, read the same."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offset_journal.checkpoint import CheckpointError, read_checkpoint
from offset_journal.checkpoint.sinks import read_delta_txns, read_file_sink_log

ENTRY = ('{"path":"file:///lake/part-00000-%s.parquet","size":10,"isDir":false,'
         '"modificationTime":1,"blockReplication":1,"blockSize":33554432,"action":"add"}')


def sink_log(root: Path, batches: range, compact_every: int = 10, keep_from: int = 0) -> Path:
    """A file sink's log as FileStreamSinkLog writes it: ``v1`` and a JSON line per file,
    every ``compact_every``-th batch ``N.compact`` holding every line so far; files
    before ``keep_from`` deleted (as after a compaction, with deletion on)."""
    log = root / "_spark_metadata"
    log.mkdir(parents=True)
    lines: list[str] = []
    for b in batches:
        lines.append(ENTRY % b)
        compact = (b + 1) % compact_every == 0
        if b >= keep_from:
            name = f"{b}.compact" if compact else str(b)
            (log / name).write_text("v1\n" + "\n".join(lines if compact else lines[-1:]))
    return root


def test_a_file_sink_log_gives_its_last_batch_compacted_or_not(tmp_path):
    plain = read_file_sink_log(sink_log(tmp_path / "a", range(4)))
    assert plain is not None and plain.batches == (0, 1, 2, 3) and plain.last_batch == 3
    # 10^3 batches, compacted every 10, the old files deleted: 989.compact .. 999.compact
    compacted = read_file_sink_log(sink_log(tmp_path / "b", range(1000), keep_from=989))
    assert compacted is not None and compacted.last_batch == 999
    assert compacted.compacted == (989, 999)
    assert compacted.bytes_read < 5000  # the compacted file's head only
    (tmp_path / "b" / "_spark_metadata" / ".1000.tmp").write_text("half")
    assert read_file_sink_log(tmp_path / "b").last_batch == 999  # temp files skipped
    assert read_file_sink_log(tmp_path / "none") is None
    (tmp_path / "empty" / "_spark_metadata").mkdir(parents=True)
    assert read_file_sink_log(tmp_path / "empty").last_batch is None


def test_a_file_sink_log_that_is_not_one_is_refused(tmp_path):
    root = sink_log(tmp_path / "a", range(2))
    (root / "_spark_metadata" / "2").write_text("hello\n")
    with pytest.raises(CheckpointError, match="is not a file sink log: first line 'hello'"):
        read_file_sink_log(root)
    (root / "_spark_metadata" / "2").write_text('v1\n{"no":"path"}')
    with pytest.raises(CheckpointError, match="names no file"):
        read_file_sink_log(root)


TXN = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
META = pa.struct([("id", pa.string()), ("schemaString", pa.string())])
ADD = pa.struct([("path", pa.string()), ("size", pa.int64())])


def delta_log(root: Path, versions: int, apps: dict[str, int], checkpoint_every: int = 10,
              cleaned: bool = False) -> tuple[Path, str]:
    """A Delta log of ``versions`` commits, each adding a file with a txn of one app
    (round robin; app ``a``'s version counts its commits from ``apps[a]``), checkpoints
    every ``checkpoint_every`` versions (parquet, with Delta's txn/metaData/add
    columns) and ``_last_checkpoint``; ``cleaned``: commits before the last checkpoint
    deleted."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    table_id = str(uuid.uuid4())
    txns: dict[str, int] = {}
    adds: list[str] = []
    names = sorted(apps)
    last_checkpoint = None
    for v in range(versions):
        app = names[v % len(names)]
        txns[app] = txns.get(app, apps[app] - 1) + 1
        actions: list[dict[str, Any]] = [{"commitInfo": {"operation": "STREAMING UPDATE"}}]
        if v == 0:
            actions += [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                        {"metaData": {"id": table_id, "schemaString": "{}"}}]
        actions += [{"txn": {"appId": app, "version": txns[app], "lastUpdated": v}},
                    {"add": {"path": f"part-{v}.parquet", "size": 10}}]
        adds.append(f"part-{v}.parquet")
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions))
        if v and v % checkpoint_every == 0:
            rows = ([{"txn": {"appId": a, "version": n, "lastUpdated": v}, "metaData": None,
                      "add": None} for a, n in txns.items()]
                    + [{"txn": None, "metaData": {"id": table_id, "schemaString": "{}"},
                        "add": None}]
                    + [{"txn": None, "metaData": None, "add": {"path": p, "size": 10}}
                       for p in adds])
            table = pa.Table.from_pylist(rows, schema=pa.schema(
                [("txn", TXN), ("metaData", META), ("add", ADD)]))
            pq.write_table(table, log / f"{v:020d}.checkpoint.parquet")
            (log / "_last_checkpoint").write_text(json.dumps({"version": v, "size": len(rows)}))
            last_checkpoint = v
    if cleaned and last_checkpoint is not None:
        for v in range(last_checkpoint):
            (log / f"{v:020d}.json").unlink()
    return root, table_id


def test_a_delta_log_gives_each_writers_last_txn_through_its_checkpoint(tmp_path):
    root, table_id = delta_log(tmp_path / "t", 25, {"q-a": 0, "q-b": 100}, cleaned=True)
    txns = read_delta_txns(root)
    assert txns is not None and txns.checkpoint == 20 and txns.version == 24
    assert txns.table_id == table_id
    assert dict(txns.txns) == {"q-a": 12, "q-b": 111}  # 13 and 12 commits each
    assert 0 < txns.bytes_read
    no_checkpoint, _ = delta_log(tmp_path / "u", 5, {"q-a": 7})
    assert dict(read_delta_txns(no_checkpoint).txns) == {"q-a": 11}
    assert read_delta_txns(tmp_path / "none") is None


def test_a_delta_log_with_a_commit_missing_is_refused(tmp_path):
    root, _ = delta_log(tmp_path / "t", 25, {"q-a": 0}, cleaned=True)
    (root / "_delta_log" / f"{22:020d}.json").unlink()
    with pytest.raises(CheckpointError, match=r"commit 00000000000000000022\.json is missing"):
        read_delta_txns(root)


def test_an_unreadable_last_checkpoint_hint_falls_back_to_the_newest(tmp_path):
    root, _ = delta_log(tmp_path / "t", 25, {"q-a": 0}, cleaned=True)
    (root / "_delta_log" / "_last_checkpoint").write_text("{not json")
    assert read_delta_txns(root).txns["q-a"] == 24


# --------------------------------------------------------------------------- real logs


def _run_batches(query: Any, batches: int) -> None:
    deadline = time.monotonic() + 180
    while (query.lastProgress is None or query.lastProgress["batchId"] < batches - 1) \
            and time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        time.sleep(0.2)
    query.stop()


@pytest.mark.spark
def test_logs_spark_and_delta_wrote_are_read_as_their_sinks_skip(delta_spark, tmp_path):
    """A file sink compacting every 3 batches and a Delta sink checkpointing every 2
    versions, from one rate stream; and a Delta table written with txnAppId/txnVersion:
    the readers give the batch each sink holds last, as Spark's and Delta's own skip
    checks see it (the file sink's highest log file, Delta's txn of the query id)."""
    spark = delta_spark
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "3")
    spark.conf.set("spark.databricks.delta.properties.defaults.checkpointInterval", "2")
    try:
        rate = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
        files = (rate.writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "ck-f"))
                 .trigger(processingTime="200 milliseconds").start())
        delta = (rate.writeStream.format("delta").option("path", str(tmp_path / "tbl"))
                 .option("checkpointLocation", str(tmp_path / "ck-d"))
                 .trigger(processingTime="200 milliseconds").start())
        _run_batches(files, 7)
        _run_batches(delta, 5)
        for i in range(5):
            (spark.range(i, i + 1).write.format("delta").mode("append")
             .option("txnAppId", "app-1").option("txnVersion", i)
             .save(str(tmp_path / "txn")))
    finally:
        spark.conf.unset("spark.sql.streaming.fileSink.log.compactInterval")
        spark.conf.unset("spark.databricks.delta.properties.defaults.checkpointInterval")

    # A query stopped mid-batch may have its sink ahead of its commits by that batch.
    log = read_file_sink_log(tmp_path / "out")
    committed = read_checkpoint(tmp_path / "ck-f").last_committed
    assert log is not None and committed is not None
    assert log.last_batch in (committed.batch_id, committed.batch_id + 1)
    assert 2 in log.compacted and 5 in log.compacted, log

    ck = read_checkpoint(tmp_path / "ck-d")
    txns = read_delta_txns(tmp_path / "tbl")
    assert txns is not None and txns.checkpoint is not None, sorted(
        p.name for p in (tmp_path / "tbl" / "_delta_log").iterdir())
    assert txns.txns[ck.query_id] - ck.last_committed.batch_id in (0, 1)
    written = read_delta_txns(tmp_path / "txn")
    assert written.txns == {"app-1": 4} and written.checkpoint is not None
