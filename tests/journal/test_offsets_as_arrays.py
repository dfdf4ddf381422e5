"""Offsets stored as per-source arrays over shared layouts (migration
0013); the kafka_partitions view reads as the table did; the upgrade converts a journal
in place and the downgrade gives the rows back."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa
from alembic import command

from offset_journal.journal import Journal
from offset_journal.journal._arrays import Layout, encode, layout_id
from offset_journal.journal.db import alembic_config
from offset_journal.offsets import PartitionOffset
from offset_journal.records import batch_from_progress
from tests.payloads import kafka_source, progress, sql_execute, sql_rows

VIEW_ROWS = ("SELECT batch_pk, source_index, topic, partition, start_offset, end_offset, "
             "latest_offset FROM offset_journal.kafka_partitions "
             "ORDER BY batch_pk, source_index, topic, partition")
SOURCE_JSON = ("SELECT batch_pk, source_index, start_offset, end_offset, latest_offset "
               "FROM offset_journal.source_offsets ORDER BY batch_pk, source_index")
BIG = 2 ** 40  # a span beyond 4 bytes: the first batch of a huge partition


# A journal as releases before 0013 wrote it: one row per partition; the latestOffset JSON
# kept in the source row. Source 0 of batch 0: what the arrays hold; source 1: a span of
# 2^40 (kept as rows); batch 1, source 0: a partition without an end (kept as rows) and a
# latest JSON with a partition the rows lack (kept as JSON).
_OLD_JOURNAL = """
WITH r AS (INSERT INTO offset_journal.query_runs (run_id, query_id, query_name, named)
           VALUES ('r1', 'q1', 'old', true) RETURNING run_id),
     b AS (INSERT INTO offset_journal.batches (run_id, query_id, query_name, batch_id, trigger_at)
           SELECT run_id, 'q1', 'old', n, :t FROM r, generate_series(0, 1) n
           RETURNING id, batch_id)
INSERT INTO offset_journal.batch_sources (batch_pk, source_index, kind, latest_offset)
SELECT b.id, s.i, 'kafka', CASE
    WHEN b.batch_id = 0 AND s.i = 0 THEN '{"t": {"0": 25, "1": 20, "2": 31}}'::jsonb
    WHEN b.batch_id = 1 AND s.i = 0 THEN '{"t": {"0": 40, "9": 1}}'::jsonb END
FROM b, generate_series(0, 1) s(i)
"""
_OLD_ROWS = """
INSERT INTO offset_journal.kafka_partitions
    (batch_pk, source_index, topic, partition, start_offset, end_offset, latest_offset)
SELECT b.id, v.source_index, v.topic, v.partition, v.start_offset, v.end_offset, v.latest
FROM offset_journal.batches b
JOIN (VALUES (0, 0, 't', 0, 0::bigint, 20::bigint, 25::bigint),
             (0, 0, 't', 1, NULL, 20, 20), (0, 0, 't', 2, 10, 30, 31),
             (0, 1, 'u', 0, 0, :big, NULL),
             (1, 0, 't', 0, 20, 40, 40), (1, 0, 't', 1, 20, NULL, NULL),
             (1, 1, 'u', 0, :big, :big + 5, :big + 9))
    AS v(batch_id, source_index, topic, partition, start_offset, end_offset, latest)
  ON v.batch_id = b.batch_id
"""


def test_the_upgrade_converts_a_journal_in_place_and_the_downgrade_gives_it_back(
        empty_database_url: str) -> None:
    url = empty_database_url
    command.upgrade(alembic_config(url), "0012_kafka_cluster")
    sql_execute(url, _OLD_JOURNAL, t=datetime(2026, 11, 1, tzinfo=timezone.utc))
    sql_execute(url, _OLD_ROWS, big=BIG)
    sql_execute(url, "UPDATE offset_journal.batch_sources s SET latest_offset = "
             "jsonb_build_object('u', jsonb_build_object('0', :latest)) FROM "
             "offset_journal.batches b WHERE b.id = s.batch_pk AND b.batch_id = 1 "
             "AND s.source_index = 1", latest=BIG + 9)
    before_rows, before_json = sql_rows(url, VIEW_ROWS), sql_rows(url, SOURCE_JSON)
    assert len(before_rows) == 7

    command.upgrade(alembic_config(url), "head")
    assert sql_rows(url, VIEW_ROWS) == before_rows
    assert sql_rows(url, SOURCE_JSON) == before_json
    # Converted: batch 0's source 0 (arrays, latest JSON dropped) and batch 1's source 1.
    stored = sql_rows(url, "SELECT b.batch_id, s.source_index, s.end_offsets, "
                           "coalesce(s.read_spans::int[], s.read_spans_wide), "
                           "coalesce(s.latest_lags::int[], s.latest_lags_wide), "
                           "s.latest_offset IS NULL FROM "
                           "offset_journal.batch_sources s JOIN offset_journal.batches b "
                           "ON b.id = s.batch_pk ORDER BY 1, 2")
    assert stored == [(0, 0, [20, 20, 30], [20, None, 20], [5, 0, 1], True),
                      (0, 1, None, None, None, True),
                      (1, 0, None, None, None, False),
                      (1, 1, [BIG + 5], [5], [4], True)]
    assert sql_rows(url, "SELECT topic, partition FROM offset_journal.kafka_partition_rows "
                         "ORDER BY 1, 2") == [("t", 0), ("t", 1), ("u", 0)]
    assert sql_rows(url, "SELECT count(*) FROM offset_journal.kafka_layouts") == [(2,)]

    command.downgrade(alembic_config(url), "0012_kafka_cluster")
    assert sql_rows(url, VIEW_ROWS) == before_rows
    assert sql_rows(url, SOURCE_JSON) == before_json
    assert sql_rows(url, "SELECT count(*) FROM information_schema.tables WHERE "
                         "table_name = 'kafka_partitions' AND table_type = 'BASE TABLE'") == [(1,)]


def _source_rows(url: str, query: str) -> list[tuple[object, ...]]:
    return sql_rows(url, "SELECT s.kafka_layout IS NOT NULL, s.latest_offset IS NULL "
                         "FROM offset_journal.batch_sources s JOIN offset_journal.batches b "
                         "ON b.id = s.batch_pk WHERE b.query_name = :q ORDER BY b.batch_id",
                    q=query)


def test_the_writer_stores_arrays_and_falls_back_to_rows_where_they_cannot_hold_it(
        journal_url: str) -> None:
    """Two queries on the same partitions share one layout; a span beyond 4 bytes is
    written as rows; either way the view, the plan and the latest JSON read the same."""
    batches = [
        ("a", 0, {"t": {"0": 0, "1": 5}}, {"t": {"0": 10, "1": 8}}, {"t": {"0": 12, "1": 8}}),
        ("a", 1, {"t": {"0": 10, "1": 8}}, {"t": {"0": BIG, "1": 9}}, None),
        ("b", 0, {"t": {"0": 3, "1": 4}}, {"t": {"0": 7, "1": 6}}, {"t": {"0": 7, "1": 6}}),
        # a span beyond 2 bytes: the 4-byte columns
        ("b", 1, {"t": {"0": 7, "1": 6}}, {"t": {"0": 50007, "1": 7}}, None),
    ]
    with Journal(journal_url) as j:
        for name, n, start, end, latest in batches:
            assert j.record_batch(batch_from_progress(progress(
                n, name=name, run_id=f"run-{name}", query_id=f"q-{name}",
                timestamp=f"2026-11-01T00:00:0{n}.000Z",
                sources=[kafka_source("t", start, end, latest)])))
        assert [s.end_offset for s in j.last_offsets("a")] == [{"t": {"0": BIG, "1": 9}}]
    assert _source_rows(journal_url, "a") == [(True, True), (False, False)]
    assert sql_rows(journal_url, "SELECT count(*) FROM offset_journal.kafka_layouts") == [(1,)]
    assert sql_rows(journal_url, "SELECT read_spans, read_spans_wide, latest_lags FROM "
                    "offset_journal.batch_sources ORDER BY batch_pk") == [
        ([10, 3], None, [2, 0]), (None, None, None), ([4, 2], None, [0, 0]),
        (None, [50000, 1], [0, 0])]
    assert sql_rows(journal_url, "SELECT start_offset, end_offset FROM offset_journal."
                    "kafka_partitions WHERE batch_pk = (SELECT max(id) FROM "
                    "offset_journal.batches) ORDER BY partition") == [(7, 50007), (6, 7)]
    assert sql_rows(journal_url, "SELECT topic, partition, start_offset, end_offset, "
                    "latest_offset FROM offset_journal.partition_lag WHERE query_name = 'a' "
                    "ORDER BY batch_id, partition") == [
        ("t", 0, 0, 10, 12), ("t", 1, 5, 8, 8), ("t", 0, 10, BIG, BIG), ("t", 1, 8, 9, 9)]
    assert sql_rows(journal_url, "SELECT o.latest_offset FROM offset_journal.source_offsets o "
                    "JOIN offset_journal.batches b ON b.id = o.batch_pk "
                    "WHERE b.query_name = 'a' AND b.batch_id = 0") == [
        ({"t": {"0": 12, "1": 8}},)]


@pytest.mark.parametrize("statement, refusal", [
    # a layout under another list's key: it would give other jobs' offsets its topics
    ("INSERT INTO offset_journal.kafka_layouts (layout_id, topics, partitions) "
     "VALUES (:other, ARRAY['evil'], ARRAY[0])", "kafka_layouts_id_check"),
    # arrays of another length than their layout
    ("WITH b AS (INSERT INTO offset_journal.batches (run_id, query_id, query_name, batch_id) "
     "VALUES ('r', 'q', 'n', 0) RETURNING id) "
     "INSERT INTO offset_journal.batch_sources (batch_pk, source_index, kind, kafka_layout, "
     "end_offsets, read_spans, latest_lags) SELECT id, 0, 'kafka', :known, ARRAY[1, 2]::bigint[], "
     "ARRAY[1, 1]::smallint[], ARRAY[0, 0]::smallint[] FROM b", "do not match their Kafka layout"),
    # a span in both widths
    ("WITH b AS (INSERT INTO offset_journal.batches (run_id, query_id, query_name, batch_id) "
     "VALUES ('r', 'q', 'n', 0) RETURNING id) "
     "INSERT INTO offset_journal.batch_sources (batch_pk, source_index, kind, kafka_layout, "
     "end_offsets, read_spans, read_spans_wide, latest_lags) SELECT id, 0, 'kafka', :known, "
     "ARRAY[1]::bigint[], ARRAY[1]::smallint[], ARRAY[1], ARRAY[0]::smallint[] FROM b",
     "batch_sources_offsets_check"),
])
def test_layouts_and_arrays_that_do_not_agree_are_refused(
        journal_url: str, statement: str, refusal: str) -> None:
    known = layout_id(Layout(("t",), (0,)))
    sql_execute(journal_url, "INSERT INTO offset_journal.query_runs (run_id, query_id, "
             "query_name, named) VALUES ('r', 'q', 'n', true)")
    sql_execute(journal_url, "INSERT INTO offset_journal.kafka_layouts (layout_id, topics, "
             "partitions) VALUES (:k, ARRAY['t'], ARRAY[0])", k=known)
    with pytest.raises(sa.exc.IntegrityError, match=refusal):
        sql_execute(journal_url, statement, other=layout_id(Layout(("t",), (1,))), known=known)


def test_the_database_and_the_library_compute_the_same_layout_key(journal_url: str) -> None:
    pairs = (("orders", 0), ("orders", 1), ("ünïcode.tópic", 12), ("a:b", 3))
    got = sql_rows(journal_url, "SELECT offset_journal.kafka_layout_id(:t, :p)",
                   t=[t for t, _ in pairs], p=[p for _, p in pairs])
    assert got == [(layout_id(Layout(*zip(*pairs, strict=True))),)]


def test_encode_keeps_ends_and_differences_and_refuses_what_four_bytes_cannot_hold() -> None:
    """The arrays the kafka_partitions view reads back (start = end - span, latest = end
    + lag; the writer's round trip through the view is tested above)."""
    parts = [PartitionOffset("t", 0, 5, 9), PartitionOffset("t", 1, None, 3)]
    arrays = encode(parts, [12, None])
    assert arrays is not None
    assert arrays.layout == (("t", "t"), (0, 1))
    assert (arrays.end_offsets, arrays.read_spans, arrays.latest_lags) == (
        [9, 3], [4, None], [3, None])
    assert arrays.spans_narrow and arrays.lags_narrow
    assert encode([PartitionOffset("t", 0, 0, 2 ** 31)], [None]) is None
    assert encode([PartitionOffset("t", 0, 0, 5)], [5 + 2 ** 31]) is None
    assert encode([PartitionOffset("t", 0, 0, None)], [None]) is None
    assert json.dumps(arrays.read_spans) == "[4, null]"


def test_a_layout_remembered_but_gone_is_sent_again_not_refused(
        journal_url: str, tmp_path) -> None:
    """A layout the writer remembers as stored may be missing (a commit that failed
    after SQLAlchemy's commit event, a journal emptied and re-created): the batch is
    retried with the layout, never sent to rejected_events."""
    from offset_journal.capture.writer import Writer, WriterConfig
    from offset_journal.records import PROGRESS, STARTED

    def event(i: int) -> dict[str, object]:
        return {"type": PROGRESS, "json": progress(
            i, name="gone_q", run_id="run-gone", query_id="q-gone",
            timestamp=f"2026-11-01T00:00:0{i}.000Z",
            sources=[kafka_source("t", {"t": {"0": i}}, {"t": {"0": i + 1}})])}

    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), retry_initial=0.05,
                            retry_max=0.2))
    w.start()
    w.submit({"type": STARTED, "query_id": "q-gone", "run_id": "run-gone", "name": "gone_q",
              "timestamp": "2026-11-01T00:00:00.000Z"})
    w.submit(event(0))
    assert w.flush(timeout=30) is True
    sql_execute(journal_url, "TRUNCATE offset_journal.query_runs, offset_journal.batches, "
             "offset_journal.batch_sources, offset_journal.kafka_layouts CASCADE")
    w.submit(event(1))
    assert w.flush(timeout=30) is True
    stats = w.stats()
    w.close()
    assert (stats.rejected, stats.lost) == (0, 0)
    assert sql_rows(journal_url, "SELECT b.batch_id, k.end_offset FROM offset_journal.batches b "
                    "JOIN offset_journal.kafka_partitions k ON k.batch_pk = b.id") == [(1, 2)]
