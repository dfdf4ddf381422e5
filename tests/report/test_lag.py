"""Lag and freshness in SQL: each partition row keeps the latest offset Spark saw, and the
views partition_lag and batch_freshness answer from it (migration 0010_partition_latest)."""

from __future__ import annotations

from datetime import datetime, timezone

from offset_journal import Journal
from offset_journal.journal._checks import partition_latests
from offset_journal.records import batch_from_progress
from tests import support
from tests.payloads import kafka_source, progress, sql_execute, sql_rows
from tests.support import Secure, denied

secure = support.secure  # the least-privilege roles, shared with test_security


def _batch(batch_id: int, start, end, latest, **kw) -> str:  # type: ignore[no-untyped-def]
    return progress(batch_id, sources=[kafka_source("orders", start, end, latest)], **kw)


def test_partition_rows_keep_latest_and_the_view_gives_lag(journal_url):
    j = Journal(journal_url)
    try:
        j.record_batch(batch_from_progress(_batch(
            0, None, {"orders": {"0": 10, "1": 5}}, {"orders": {"0": 40, "1": 5}},
            timestamp="2026-11-23T10:00:00.000Z")))
        j.record_batch(batch_from_progress(_batch(
            1, {"orders": {"0": 10, "1": 5}}, {"orders": {"0": 30, "1": 9}},
            {"orders": {"0": 70, "1": 9}}, timestamp="2026-11-23T10:00:10.000Z",
            event_time={"max": "2026-11-23T10:00:07.500Z", "min": "2026-11-23T09:59:00.000Z",
                        "avg": "2026-11-23T10:00:00.000Z",
                        "watermark": "2026-11-23T09:58:00.000Z"})))
    finally:
        j.close()
    rows = sql_rows(journal_url, "SELECT batch_id, topic, partition, end_offset, latest_offset, "
                    "lag FROM offset_journal.partition_lag ORDER BY batch_id, partition")
    assert rows == [(0, "orders", 0, 10, 40, 30), (0, "orders", 1, 5, 5, 0),
                    (1, "orders", 0, 30, 70, 40), (1, "orders", 1, 9, 9, 0)]
    fresh = sql_rows(journal_url, "SELECT batch_id, freshness_seconds, freshness "
                     "FROM offset_journal.batch_freshness ORDER BY batch_id")
    assert fresh[0][1] is None  # no event time: nothing to say
    assert fresh[1][1] == 2.5 and fresh[1][2].total_seconds() == 2.5


def test_a_latest_below_the_end_is_no_lag(journal_url):
    """Real-time mode (trigger(realTime=...)) takes latestOffset when a batch starts and
    reads on past it: latest < end. The journal keeps the latest as Spark gave it; lag,
    in the view and the report, is never below zero."""
    from offset_journal.report import gather

    with Journal(journal_url) as j:
        j.record_batch(batch_from_progress(_batch(
            0, {"orders": {"0": 0, "1": 0}}, {"orders": {"0": 30, "1": 12}},
            {"orders": {"0": 21, "1": 15}}, timestamp="2026-11-25T10:00:00.000Z")))
        rows = sql_rows(journal_url, "SELECT partition, end_offset, latest_offset, lag "
                        "FROM offset_journal.partition_lag ORDER BY partition")
        assert rows == [(0, 30, 21, 0), (1, 12, 15, 3)]
        data = gather(j, "myQuery")
    assert data.current_lag == 3
    assert [(s.partition, s.max_lag) for s in data.top_partitions] == [(1, 3), (0, 0)]


def test_latest_per_partition_is_none_where_spark_gave_none():
    rec = batch_from_progress(_batch(3, {"t": {"0": 1, "1": 1}}, {"t": {"0": 2, "1": 3}},
                                     {"t": {"1": 8}}))
    assert partition_latests(rec.sources[0]) == [None, 8]
    same = batch_from_progress(_batch(3, {"t": {"0": 1}}, {"t": {"0": 2}}, None))
    assert partition_latests(same.sources[0]) == [2]  # the payload's latest is its end
    odd = batch_from_progress(progress(3, sources=[{
        **kafka_source("t", {"t": {"0": 1}}, {"t": {"0": 2}}), "latestOffset": {"t": "x"}}]))
    assert partition_latests(odd.sources[0]) == [None]


def test_upgrade_fills_latest_in_from_the_sources_json(empty_database_url):
    """Rows journaled before the migration get their latest from batch_sources' JSON."""
    from alembic import command

    from offset_journal.journal.db import alembic_config

    command.upgrade(alembic_config(empty_database_url), "0007_source_metrics")
    sql_execute(empty_database_url, """
        WITH r AS (INSERT INTO offset_journal.query_runs (run_id, query_id, query_name, named)
                   VALUES ('r1', 'q1', 'old', true) RETURNING run_id),
        b AS (INSERT INTO offset_journal.batches (run_id, query_id, query_name, batch_id,
                                                  trigger_at)
              SELECT run_id, 'q1', 'old', 0, :t FROM r RETURNING id),
        s AS (INSERT INTO offset_journal.batch_sources (batch_pk, source_index, kind,
                                                        latest_offset)
              SELECT id, 0, 'kafka', '{"t": {"0": 50, "1": "junk"}}'::jsonb FROM b
              RETURNING batch_pk)
        INSERT INTO offset_journal.kafka_partitions (batch_pk, source_index, topic, partition,
                                                     start_offset, end_offset)
        SELECT batch_pk, 0, 't', p, 0, 20 FROM s, generate_series(0, 2) p""",
        t=datetime(2026, 11, 23, tzinfo=timezone.utc))
    command.upgrade(alembic_config(empty_database_url), "head")
    assert sql_rows(empty_database_url, "SELECT partition, latest_offset, lag FROM "
                    "offset_journal.partition_lag ORDER BY partition") == [
        (0, 50, 30), (1, None, None), (2, None, None)]
    command.downgrade(alembic_config(empty_database_url), "0007_source_metrics")
    assert sql_rows(empty_database_url, "SELECT count(*) FROM information_schema.columns "
                    "WHERE table_name = 'kafka_partitions' AND column_name = 'latest_offset'"
                    ) == [(0,)]


def test_the_writer_role_writes_latest_and_the_reader_reads_the_views(granted: Secure) -> None:
    """The writer's INSERT grant and the history guard (migration 0004) cover the new
    column; the reader's SELECT covers the views; neither can rewrite a latest offset."""
    with Journal(granted.writer_url) as j:
        assert j.record_batch(batch_from_progress(_batch(
            0, None, {"lagq": {"0": 10}}, {"lagq": {"0": 25}}, name="lag_roles_q")))
    rows = sql_rows(granted.reader_url, "SELECT latest_offset, lag FROM "
                    "offset_journal.partition_lag WHERE query_name = 'lag_roles_q'")
    assert rows == [(25, 15)]
    assert sql_rows(granted.reader_url, "SELECT count(*) FROM offset_journal.batch_freshness "
                    "WHERE query_name = 'lag_roles_q'") == [(1,)]
    for url in (granted.writer_url, granted.reader_url):
        assert "permission denied" in denied(
            url, "UPDATE offset_journal.batch_sources SET latest_lags = NULL")
        assert "permission denied" in denied(
            url, "UPDATE offset_journal.kafka_partition_rows SET latest_offset = 0")


def test_a_real_time_batchs_lag_is_clamped_per_partition_before_it_is_summed(
        journal_url: str, cli: support.Cli) -> None:
    """`check` summed latest - end over partitions without clamping each
    at 0, while the partition_lag view clamps: one real-time batch with orders-0 end 1000
    / latest 500 and orders-1 end 0 / latest 600 is 600 records behind, not 100. Every
    sum of lag says 600: check, the report, the Grafana panels and the cookbook."""
    import json

    from offset_journal.report import gather
    from tests.journal.test_cookbook import cookbook
    from tests.journal.test_grafana import _dashboard, _run, _sql, expand

    name = "orders-to-lake"
    with Journal(journal_url) as j:
        j.record_batch(batch_from_progress(_batch(
            0, {"orders": {"0": 0, "1": 0}}, {"orders": {"0": 1000, "1": 0}},
            {"orders": {"0": 500, "1": 600}}, name=name,
            timestamp="2024-01-01T00:30:00.000Z")))  # in the Grafana test's time range
        assert gather(j, name).current_lag == 600
    check = ["--database-url", journal_url, "check", name, "--max-lag"]
    code, out, _err = cli(*check, "500")
    assert code == 2, out
    code, out, _err = cli(*check, "50", "--format", "json")
    [problem] = json.loads(out)["problems"]
    assert problem["text"] == (f"{name}: 600 records behind in its last batch (over 50); "
                               "furthest behind: orders-1 by 600")
    dash = _dashboard()
    _cols, [(now,)] = _run(journal_url, expand(_sql(dash, "Total lag now"), {"query": name}))
    assert now == 600
    _cols, rows = _run(journal_url, expand(_sql(dash, "Total lag"), {"query": name}))
    assert [r[1] for r in rows] == [600]
    over_time = sql_rows(journal_url, cookbook()["lag over time"])
    assert [r[1] for r in over_time] == [600]
