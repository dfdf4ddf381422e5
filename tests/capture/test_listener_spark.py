"""The listener on real local Spark: every batch of every source, checked in SQL."""

from __future__ import annotations

import json
import time

import pytest

from offset_journal import Journal
from tests.payloads import progress_offset, sql_rows

pytestmark = pytest.mark.spark


_rows = sql_rows


_j = progress_offset


def _wait_batches(query, n, timeout=60.0):
    deadline = time.monotonic() + timeout
    while len(query.recentProgress) < n:
        assert time.monotonic() < deadline, f"{query.name}: fewer than {n} batches"
        assert query.exception() is None, query.exception()
        time.sleep(0.1)


def test_rate_source_every_batch(journaled_spark, journal_url):
    spark, listener = journaled_spark
    q = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
         .writeStream.format("noop").queryName("rate_q")
         .trigger(processingTime="300 milliseconds").start())
    _wait_batches(q, 4)
    q.stop()
    progress = [p for p in q.recentProgress]
    assert listener.wait_terminated(q.runId)
    rows = _rows(journal_url, """
        select b.batch_id, s.end_offset, b.num_input_rows, b.run_id, b.query_id
        from offset_journal.batches b join offset_journal.batch_sources s on s.batch_pk = b.id
        where b.query_name = 'rate_q' order by b.batch_id""")
    expected = [(p["batchId"], _j(p["sources"][0]["endOffset"]), p["numInputRows"],
                 str(q.runId), str(q.id)) for p in progress]
    assert rows[:len(expected)] == expected
    (run,) = Journal(journal_url).runs("rate_q")
    assert run.started_at is not None and run.terminated_at is not None and run.exception is None


def test_file_source_with_available_now(journaled_spark, journal_url, tmp_path):
    spark, listener = journaled_spark
    src = tmp_path / "in"
    src.mkdir()
    for i in range(3):
        lines = (json.dumps({"n": i * 10 + k}) for k in range(5))
        (src / f"part-{i}.json").write_text("\n".join(lines))
    df = spark.readStream.schema("n long").option("maxFilesPerTrigger", 1).json(str(src))
    q = (df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ckpt")).queryName("files_q")
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert listener.wait_terminated(q.runId)
    rows = _rows(journal_url, """
        select b.batch_id, s.kind, s.end_offset, b.num_input_rows
        from offset_journal.batches b join offset_journal.batch_sources s on s.batch_pk = b.id
        where b.query_name = 'files_q' order by b.batch_id""")
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (0, "other", {"logOffset": 0}, 5), (1, "other", {"logOffset": 1}, 5),
        (2, "other", {"logOffset": 2}, 5)]


@pytest.mark.needs_spark("4.0", "the Python data source API (pyspark.sql.datasource)")
def test_kafka_shaped_python_source_gets_partition_rows(journaled_spark, journal_url, tmp_path):
    from tests.kafka_shaped_source import KafkaShapedSource

    spark, listener = journaled_spark
    spark.dataSource.register(KafkaShapedSource)
    q = (spark.readStream.format("kafka_shaped").option("batches", "3").load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .queryName("shaped_q").trigger(processingTime="100 milliseconds").start())
    try:
        _wait_batches(q, 3)
    finally:  # a query left running would be journaled by the next test's listener
        q.stop()
    assert listener.wait_terminated(q.runId)
    progress = q.recentProgress
    assert progress, "the query ran no batch"
    rows = _rows(journal_url, """
        select b.batch_id, k.topic, k.partition, k.start_offset, k.end_offset
        from offset_journal.kafka_partitions k join offset_journal.batches b on b.id = k.batch_pk
        where b.query_name = 'shaped_q' order by b.batch_id, k.topic, k.partition""")
    expected = []
    for p in progress:
        s = p["sources"][0]
        start, end = _j(s["startOffset"]) or {}, _j(s["endOffset"])
        for topic in sorted(end):
            for part in sorted(end[topic], key=int):
                expected.append((p["batchId"], topic, int(part),
                                 start.get(topic, {}).get(part), end[topic][part]))
    assert rows == expected
    # partition 2 of "events" appears in the second batch: no start offset there
    assert any(r[2] == 2 and r[3] is None for r in rows), (rows, progress)
    last = Journal(journal_url).last_offsets("shaped_q")[0]
    assert last.end_offset == _j(progress[-1]["sources"][0]["endOffset"])


def test_unnamed_query_is_journaled_under_its_id(journaled_spark, journal_url, tmp_path, caplog):
    spark, listener = journaled_spark
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_text('{"n": 1}\n')
    with caplog.at_level("WARNING", logger="offset_journal"):
        q = (spark.readStream.schema("n long").json(str(src)).writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert listener.wait_terminated(q.runId)
    assert any("has no name" in r.message for r in caplog.records)
    rows = _rows(journal_url, "select query_name, named from offset_journal.query_runs")
    assert rows == [(str(q.id), False)]


def test_stopping_a_query_flushes_the_journal(journaled_spark, journal_url):
    spark, listener = journaled_spark
    q = (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
         .writeStream.format("noop").queryName("flush_q")
         .trigger(processingTime="200 milliseconds").start())
    _wait_batches(q, 2)
    q.stop()
    last = q.recentProgress[-1]["batchId"]
    # termination flushes: the terminated run and its last batch are there without flush()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rows = _rows(journal_url, "select max(b.batch_id), bool_and(r.terminated_at is not null) "
                                  "from offset_journal.batches b join offset_journal.query_runs r "
                                  "using (run_id) where b.query_name = 'flush_q'")
        if rows[0] == (last, True):
            break
        time.sleep(0.1)
    assert rows[0] == (last, True)


def _window_bytes(spool) -> int:
    """The failover window's bytes on disk (a segment deleted while looked at: none)."""
    size = 0
    for path in spool.glob("recent-*.jsonl"):
        try:
            size += path.stat().st_size
        except FileNotFoundError:
            continue
    return size


def test_attach_caps_the_failover_window_on_disk(spark, journal_url, tmp_path, caplog):
    """``failover_window_max_bytes`` is an attach() option, and a cap
    on disk while a query runs, whatever the window's length; what it drops is counted
    and said."""
    from offset_journal import attach

    cap = 16 * 1024
    spool = tmp_path / "spool"
    listener = attach(spark, database_url=journal_url, spool_dir=str(spool),
                      failover_window=3600.0, failover_window_max_bytes=cap)
    largest = 0
    try:
        q = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
             .writeStream.format("noop").queryName("capped_q")
             .trigger(processingTime="50 milliseconds").start())
        deadline = time.monotonic() + 120
        while listener.stats().unprotected == 0:  # until the window had to drop some
            assert time.monotonic() < deadline, "the window never reached its cap"
            assert q.exception() is None, q.exception()
            largest = max(largest, _window_bytes(spool))
            time.sleep(0.02)
        q.stop()
        assert listener.wait_terminated(q.runId)
        largest = max(largest, _window_bytes(spool))
    finally:
        spark.streams.removeListener(listener)
        listener.close()
    assert 0 < largest <= cap
    assert any("is full" in r.getMessage() for r in caplog.records), caplog.text
    batches = {p["batchId"] for p in q.recentProgress}
    journaled = {r[0] for r in _rows(journal_url, "select batch_id from offset_journal.batches "
                                                  "where query_name = 'capped_q'")}
    assert batches <= journaled and listener.stats().lost == 0
