"""Delta Lake sources with real Delta Lake (delta-spark's jars on the shared session):
a ``readStream.format("delta")`` query is journaled, stopped, the table grows, and a
query on a NEW checkpoint starts from the plan's ``startingVersion``. What both sinks
hold is checked row by row: exactly once where Delta's offsets allow it, and exactly the
rows the plan says where they do not (a version or the initial snapshot partly read).
Jobs whose foreachBatch writes Delta idempotently (txnAppId/txnVersion) lose the new
query's rows under the old txnAppId, and keep them under a new one, as the plan says."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from offset_journal.cli import main
from offset_journal.journal.db import ENV_URL
from tests.payloads import sql_rows

pytestmark = pytest.mark.spark


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _append(spark: Any, table: Path, ids: range, files: int = 1) -> None:
    """One commit (table version) adding ``files`` data files holding ``ids``."""
    (spark.range(ids.start, ids.stop, 1, files).selectExpr("id")
     .write.format("delta").mode("append").save(str(table)))


def _reader(spark: Any, table: Path, **options: Any) -> Any:
    reader = spark.readStream.format("delta")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(str(table))


def _drain(listener: Any, df: Any, name: str, checkpoint: Path) -> list[int]:
    """Run ``df`` to what is there now (availableNow) into a memory sink; its ids."""
    q = (df.writeStream.format("memory").queryName(name)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)
    return [r[0] for r in df.sparkSession.table(name).collect()]


def _one_batch(listener: Any, df: Any, name: str, checkpoint: Path) -> list[int]:
    """Run ``df`` until its first batch is committed, then stop it: an old job stopped
    with part of the table unread (maxFilesPerTrigger)."""
    q = (df.writeStream.format("memory").queryName(name)
         .option("checkpointLocation", str(checkpoint))
         .trigger(processingTime="1 hour").start())
    deadline = time.monotonic() + 180
    while not q.recentProgress and time.monotonic() < deadline and q.isActive:
        q.awaitTermination(0.2)
    assert q.recentProgress, q.exception()
    q.stop()
    assert listener.wait_terminated(q.runId, 60)
    return [r[0] for r in df.sparkSession.table(name).collect()]


def _plan(name: str, checkpoint: Path, capsys: Any) -> tuple[dict[str, Any], str]:
    """``offset-journal plan`` as JSON and as text."""
    code = main(["plan", name, "--checkpoint", str(checkpoint), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert main(["plan", name, "--checkpoint", str(checkpoint)]) == 0
    text, _ = capsys.readouterr()
    return json.loads(out), text


def _journaled_delta_offsets(url: str, name: str) -> list[tuple[Any, ...]]:
    return sql_rows(url, """
        select b.batch_id, s.kind, s.description, s.end_offset, b.sink_description
        from offset_journal.batches b
        join offset_journal.batch_sources s on s.batch_pk = b.id
        where b.query_name = :q order by b.batch_id""", q=name)


def test_delta_restart_on_a_new_checkpoint_is_exactly_once(
        journaled_spark, delta_spark, journal_url, tmp_path, capsys, monkeypatch):
    spark, listener = journaled_spark
    table = tmp_path / "events"
    for v in range(3):  # versions 0, 1, 2: ids 0..29
        _append(spark, table, range(10 * v, 10 * v + 10))
    name = _name("delta_v1")
    # v1 starts without startingVersion: it reads the table's snapshot (version 2)
    old = _drain(listener, _reader(spark, table), name, tmp_path / "ck-v1")
    assert sorted(old) == list(range(30))

    (batch_id, kind, description, end, _sink), = _journaled_delta_offsets(journal_url, name)
    assert kind == "other" and description.startswith("DeltaSource[")
    # Delta's own offset JSON: the snapshot was read to its end, so the offset moved on
    # to the next version's base index (-1), out of the snapshot.
    assert set(end) == {"sourceVersion", "reservoirId", "reservoirVersion", "index",
                        "isStartingVersion"}
    assert (end["reservoirVersion"], end["index"], end["isStartingVersion"]) == (3, -1, False)

    # v1 is down; two more versions are committed
    _append(spark, table, range(30, 40))
    _append(spark, table, range(40, 50), files=2)
    monkeypatch.setenv(ENV_URL, journal_url)
    plan, text = _plan(name, tmp_path / "ck-v2", capsys)
    assert plan["sources"][0]["kind"] == "delta"
    assert plan["sources"][0]["options"] == {"startingVersion": "3"}
    assert plan["warnings"] == [] and plan["errors"] == []
    assert "option startingVersion = 3" in text

    new = _drain(listener, _reader(spark, table, **plan["sources"][0]["options"]),
                 name, tmp_path / "ck-v2")
    both = Counter(old + new)
    assert sorted(both) == list(range(50))
    assert set(both.values()) == {1}, "a row came twice"


@pytest.mark.parametrize("starting", ["0", None], ids=["mid-version", "mid-snapshot"])
def test_delta_partly_read_version_reads_exactly_the_rows_the_plan_names_twice(
        journaled_spark, delta_spark, journal_url, tmp_path, capsys, monkeypatch, starting):
    spark, listener = journaled_spark
    table = tmp_path / "events"
    _append(spark, table, range(0, 40), files=4)  # version 0: four files of 10 rows
    name = _name("delta_partial")
    first = {"startingVersion": starting} if starting else {}
    old = _one_batch(listener, _reader(spark, table, maxFilesPerTrigger=3, **first), name,
                     tmp_path / "ck-v1")
    assert len(old) == 30  # three of version 0's four files
    (_b, _k, _d, end, _s), = _journaled_delta_offsets(journal_url, name)
    assert (end["reservoirVersion"], end["index"]) == (0, 2)
    assert end["isStartingVersion"] is (starting is None)

    _append(spark, table, range(40, 50))  # version 1, while the job is down
    monkeypatch.setenv(ENV_URL, journal_url)
    plan, _text = _plan(name, tmp_path / "ck-v2", capsys)
    options = plan["sources"][0]["options"]
    warning = " ".join(plan["warnings"])
    if starting:
        assert options == {"startingVersion": "0"}
        assert "files 0..2" in warning and "3 file(s)" in warning
    else:
        assert options == {}
        assert "initial snapshot" in warning and "3 file(s)" in warning

    new = _drain(listener, _reader(spark, table, **options), name, tmp_path / "ck-v2")
    both = Counter(old + new)
    assert sorted(both) == list(range(50)), "a row is missing"
    # exactly the rows of the files the plan names come twice, nothing else
    assert {i for i, n in both.items() if n == 2} == set(old)
    assert max(both.values()) == 2


def _txn_writer(target: Path, app_id: str) -> Any:
    def write(df: Any, batch_id: int) -> None:
        (df.write.format("delta").mode("append").option("txnAppId", app_id)
         .option("txnVersion", batch_id).save(str(target)))
    return write


def _run_foreach(listener: Any, df: Any, name: str, checkpoint: Path, writer: Any) -> None:
    q = (df.writeStream.foreachBatch(writer).queryName(name)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)


def test_foreach_batch_delta_idempotent_writes_need_a_new_txn_app_id(
        journaled_spark, delta_spark, journal_url, tmp_path, capsys, monkeypatch):
    spark, listener = journaled_spark
    source, target = tmp_path / "source", tmp_path / "target"
    _append(spark, source, range(0, 10))
    _append(spark, source, range(10, 20))
    name = _name("delta_txn")

    def target_ids() -> list[int]:
        return sorted(r[0] for r in spark.read.format("delta").load(str(target)).collect())

    # v1: two batches (one file each), written with txnVersion = batch id 0 and 1
    _run_foreach(listener, _reader(spark, source, maxFilesPerTrigger=1), name,
                 tmp_path / "ck-v1", _txn_writer(target, "orders-app"))
    assert target_ids() == list(range(20))
    journaled = _journaled_delta_offsets(journal_url, name)
    assert [b for b, *_ in journaled] == [0, 1]
    assert {sink for *_, sink in journaled} == {"ForeachBatchSink"}

    _append(spark, source, range(20, 30))  # version 2, while the job is down
    monkeypatch.setenv(ENV_URL, journal_url)
    plan, text = _plan(name, tmp_path / "ck-v2", capsys)
    options = plan["sources"][0]["options"]
    assert options == {"startingVersion": "2"}
    assert any("NEW txnAppId" in w for w in plan["warnings"])
    assert "NEW txnAppId" in " ".join(text.split())

    # the same txnAppId on a new checkpoint: batch 0 again, txnVersion 0 <= 1, and Delta
    # skips the write without a word
    _run_foreach(listener, _reader(spark, source, **options), name, tmp_path / "ck-v2",
                 _txn_writer(target, "orders-app"))
    assert target_ids() == list(range(20)), "Delta did not skip the write"
    # as the plan says: a new txnAppId for the new checkpoint
    _run_foreach(listener, _reader(spark, source, **options), name, tmp_path / "ck-v3",
                 _txn_writer(target, "orders-app-ck-v3"))
    assert target_ids() == list(range(30))


def test_a_delta_table_recreated_at_the_same_path_is_refused_then_read_from_its_start(
        journaled_spark, delta_spark, journal_url, tmp_path, capsys, monkeypatch):
    """The table was deleted and created again at the same path with 50
    rows (versions 0..4). startingVersion=3 from the old table would skip 30 of them: the
    plan refuses, naming both table ids; with --restart-recreated-table the new query
    reads the new table from its start, every row once."""
    import shutil

    from offset_journal.restart._delta_log import delta_table_id

    spark, listener = journaled_spark
    table = tmp_path / "events"
    for v in range(3):
        _append(spark, table, range(10 * v, 10 * v + 10))
    old_id = delta_table_id(str(table))
    name = _name("delta_recreated")
    assert sorted(_drain(listener, _reader(spark, table), name, tmp_path / "ck-v1")) == \
        list(range(30))
    shutil.rmtree(table)
    for v in range(5):  # the new table: versions 0..4, ids 100..149
        _append(spark, table, range(100 + 10 * v, 110 + 10 * v))
    new_id = delta_table_id(str(table))
    assert new_id is not None and new_id != old_id

    monkeypatch.setenv(ENV_URL, journal_url)
    assert main(["plan", name, "--checkpoint", str(tmp_path / "ck-v2")]) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert f"holds table {new_id} now, not the journaled {old_id}" in said
    assert "--restart-recreated-table" in said

    (description,) = {r[2] for r in _journaled_delta_offsets(journal_url, name)}
    path = description[len("DeltaSource["):-1]
    code = main(["plan", name, "--checkpoint", str(tmp_path / "ck-v2"), "--format", "json",
                 "--restart-recreated-table", path])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    plan = json.loads(out)
    assert plan["sources"][0]["options"] == {}
    assert any("reads it from its start" in w for w in plan["warnings"])
    new = _drain(listener, _reader(spark, table, **plan["sources"][0]["options"]),
                 name, tmp_path / "ck-v2")
    assert sorted(new) == list(range(100, 150)) and len(new) == 50
