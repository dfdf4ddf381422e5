"""Writing records and reading offsets back, on a real Postgres."""

from __future__ import annotations

from offset_journal import Journal
from offset_journal.offsets import PartitionOffset
from offset_journal.records import RunRecord, batch_from_progress
from tests.payloads import kafka_source, progress, sql_rows

RUN_A = "00000000-0000-0000-0000-00000000000a"
RUN_B = "00000000-0000-0000-0000-00000000000b"


_sql = sql_rows


def _batch(batch_id, start, end, *, run=RUN_A, ts="2024-01-01T00:00:00.000Z", name="orders"):
    return batch_from_progress(progress(batch_id, run_id=run, name=name, timestamp=ts, sources=[
        kafka_source("orders", start, end)]))


def test_same_batch_twice_leaves_one_row(journal_url):
    j = Journal(journal_url)
    rec = _batch(0, None, {"orders": {"0": 5, "1": 3}})
    assert j.record_batch(rec) is True
    assert j.record_batch(rec) is False
    assert _sql(journal_url, "select count(*) from offset_journal.batches")[0][0] == 1
    assert _sql(journal_url, "select count(*) from offset_journal.kafka_partitions")[0][0] == 2
    j.close()


def test_partition_rows_are_plain_sql(journal_url):
    j = Journal(journal_url)
    j.record_batch(_batch(0, None, {"orders": {"0": 5, "1": 3}}, ts="2024-01-01T00:00:00Z"))
    j.record_batch(_batch(1, {"orders": {"0": 5, "1": 3}}, {"orders": {"0": 9, "1": 3, "2": 1}},
                          ts="2024-01-01T00:00:10Z"))
    rows = _sql(journal_url, """
        select b.batch_id, k.topic, k.partition, k.start_offset, k.end_offset
        from offset_journal.kafka_partitions k join offset_journal.batches b on b.id = k.batch_pk
        where b.query_name = :q order by b.batch_id, k.partition""", q="orders")
    assert [tuple(r) for r in rows] == [
        (0, "orders", 0, None, 5), (0, "orders", 1, None, 3),
        (1, "orders", 0, 5, 9), (1, "orders", 1, 3, 3), (1, "orders", 2, None, 1),
    ]
    assert j.partition_history("orders", "orders", 0) == [(RUN_A, 0, None, 5), (RUN_A, 1, 5, 9)]
    j.close()


def test_last_offsets_follow_the_query_name_across_runs(journal_url):
    """A new checkpoint means a new query id and batch ids from 0 again: the last batch
    is the latest in time, not the highest batch id."""
    j = Journal(journal_url)
    j.record_run(RunRecord("q-old", RUN_A, "orders", True))
    for i in range(5):
        j.record_batch(_batch(i, {"orders": {"0": i * 10}}, {"orders": {"0": i * 10 + 10}},
                              ts=f"2024-01-01T00:00:0{i}Z"))
    j.record_batch(batch_from_progress(progress(0, query_id="q-new", run_id=RUN_B, name="orders",
                                                timestamp="2024-01-02T00:00:00Z", sources=[
                                                    kafka_source("orders", {"orders": {"0": 50}},
                                                                 {"orders": {"0": 57}})])))
    last = j.last_batch("orders")
    assert (last.run_id, last.batch_id) == (RUN_B, 0)
    (src,) = j.last_offsets("orders")
    assert src.partitions == (PartitionOffset("orders", 0, 50, 57),)
    assert src.end_offset == {"orders": {"0": 57}}
    runs = j.runs("orders")
    assert [(r.run_id, r.batches, r.last_batch_id) for r in runs] == [(RUN_A, 5, 4), (RUN_B, 1, 0)]
    assert [b.batch_id for b in j.history("orders")] == [0, 1, 2, 3, 4, 0]
    assert [b.batch_id for b in j.history("orders", limit=2)] == [4, 0]
    assert j.last_batch("nobody") is None and j.last_offsets("nobody") == []
    j.close()


def test_run_events_complete_each_other(journal_url):
    from datetime import datetime, timezone

    j = Journal(journal_url)
    j.record_batch(_batch(0, None, {"orders": {"0": 1}}))  # start event lost
    j.record_run(RunRecord("q", RUN_A, "orders", True,
                           terminated_at=datetime(2024, 1, 1, tzinfo=timezone.utc),
                           exception="boom"))
    (run,) = j.runs("orders")
    assert run.exception == "boom" and run.terminated_at is not None and run.batches == 1
    j.close()


def test_hostile_query_names_are_only_data(journal_url):
    name = "o'rders\"; DROP TABLE offset_journal.batches; -- ünïcødé 🚀"
    j = Journal(journal_url)
    j.record_batch(_batch(0, None, {"t'x": {"0": 1}}, name=name))
    assert j.last_batch(name).query_name == name
    assert j.query_names() == [name]
    assert _sql(journal_url, "select count(*) from offset_journal.batches")[0][0] == 1
    j.close()


def test_kafka_offsets_are_stored_once_and_given_back_exactly(journal_url):
    """A Kafka source's offsets live in its partition rows only (batch_sources keeps
    NULL); the API and the source_offsets view give back exactly what Spark reported.
    What the rows could not give back verbatim stays as JSON."""
    cases = [
        # (start, end, stored as rows only)
        (None, {"a": {"0": 5, "1": 3}}, True),                      # first batch
        ({"a": {"0": 5, "1": 3}}, {"a": {"0": 9, "1": 3, "2": 1}}, True),  # new partition
        ({"a": {"0": 9}, "b": {"0": 1}}, {"a": {"0": 12}}, True),   # topic b gone
        ({"a": {"01": 4}}, {"a": {"01": 6}}, False),                # not canonical
        ({"a": {}, "b": {"0": 1}}, {"a": {}, "b": {"0": 2}}, False),  # empty topic kept
    ]
    with Journal(journal_url) as j:
        for i, (start, end, _) in enumerate(cases):
            j.record_batch(batch_from_progress(progress(
                i, run_id=RUN_A, name="once", timestamp=f"2024-01-01T00:00:0{i}Z",
                sources=[kafka_source("a", start, end),
                         {"description": "Rate", "startOffset": i, "endOffset": i + 1}])))
        api = {b.batch_id: b for b in j.history("once", limit=100)}
    stored = {r[0]: r[1:] for r in _sql(journal_url, """
        select b.batch_id, s.start_offset, s.end_offset
        from offset_journal.batches b join offset_journal.batch_sources s on s.batch_pk = b.id
        where b.query_name = 'once' and s.source_index = 0""")}
    view = {(r[0], r[1]): r[2:] for r in _sql(journal_url, """
        select b.batch_id, v.source_index, v.start_offset, v.end_offset
        from offset_journal.batches b join offset_journal.source_offsets v on v.batch_pk = b.id
        where b.query_name = 'once'""")}
    for i, (start, end, rows_only) in enumerate(cases):
        assert stored[i] == ((None, None) if rows_only else (start, end)), i
        assert (api[i].source(0).start_offset, api[i].source(0).end_offset) == (start, end), i
        assert view[(i, 0)] == (start, end), i
        assert view[(i, 1)] == (i, i + 1)
        assert api[i].source(1).end_offset == i + 1
