"""Times no clock reads (-infinity, before 1970) are refused when written
(migration 0011, for every role), and a row written before that, or a plan row no
plan command wrote, is skipped by the readers instead of failing the whole command."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from offset_journal.cli import main
from offset_journal.journal.db import resolve_url
from tests.support import count_rows, journal_batches, kafka_progress


def _sql(url: str, *statements: str, **params: str) -> None:
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement), params)
    finally:
        engine.dispose()


@pytest.mark.parametrize("when", ["-infinity", "infinity", "1969-12-31T23:59:59Z"])
def test_a_batch_time_no_clock_reads_is_refused(journal_url: str, when: str) -> None:
    journal_batches(journal_url, [kafka_progress(0, None, {"orders": {"0": 10}}, minute=0)])
    with pytest.raises(sa.exc.IntegrityError, match="batches_trigger_at_finite|future"):
        _sql(journal_url, "INSERT INTO offset_journal.batches (run_id, query_id, query_name, "
                          "batch_id, trigger_at) SELECT run_id, query_id, query_name, 9, "
                          "CAST(:when AS timestamptz) FROM offset_journal.batches LIMIT 1",
             when=when)
    with pytest.raises(sa.exc.IntegrityError, match="query_runs_started_at_finite"):
        _sql(journal_url, "UPDATE offset_journal.query_runs SET started_at = '-infinity'")


def test_rows_written_before_the_check_do_not_stop_the_readers(
        journal_url: str, capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    journal_batches(journal_url, [
        kafka_progress(0, None, {"orders": {"0": 10}}, minute=0),
        kafka_progress(1, {"orders": {"0": 10}}, {"orders": {"0": 20}}, minute=1)])
    _sql(journal_url,  # as a journal from before migration 0011 could hold them
         "ALTER TABLE offset_journal.batches DROP CONSTRAINT batches_trigger_at_finite",
         "UPDATE offset_journal.batches SET trigger_at = '-infinity' WHERE batch_id = 0",
         "ALTER TABLE offset_journal.batches ADD CONSTRAINT batches_trigger_at_finite CHECK "
         "(isfinite(trigger_at) AND trigger_at >= '1970-01-01T00:00:00Z') NOT VALID",
         "INSERT INTO offset_journal.restart_plans (query_name, position, mode, command, ok, "
         "request, options, kafka_offsets) VALUES ('orders', 'after', 'stateless', 'plan', "
         """true, '{}', '{}', '[["not", "a plan row"]]')""")
    for argv in (["plan", "orders"], ["starting-offsets", "orders"], ["history", "orders"],
                 ["runs", "orders"], ["audit", "orders"],
                 ["report", "orders", "-o", str(tmp_path / "report.html")]):
        code = main(["--database-url", journal_url, *argv])
        out, err = capsys.readouterr()
        assert code == 0, (argv, out, err)
        assert "Traceback" not in err and "unexpected" not in err, (argv, err)
    assert main(["--database-url", journal_url, "starting-offsets", "orders"]) == 0
    assert capsys.readouterr().out.strip() == '{"orders":{"0":20}}'


# Offsets whose derived values overflow a bigint.

FORGED_CALL = """
SELECT offset_journal.journal_batch('run-a', 'qid-a', 'orders', true, CAST(:batch AS bigint),
    now() - CAST(:ago AS interval), 1, '{}', 1, 0, 0, NULL, NULL, NULL, NULL, NULL, 'x', 0,
    '{}', jsonb_build_array(jsonb_build_object(
        'source_index', 0, 'description', 'KafkaV2[Subscribe[orders]]', 'kind', 'kafka',
        'kafka_layout', (SELECT '\\x' || encode(kafka_layout, 'hex')
                         FROM offset_journal.batch_sources LIMIT 1),
        'end_offsets', CAST(:ends AS text), 'read_spans', CAST(:spans AS text),
        'latest_lags', CAST(:lags AS text))), NULL, false)
"""


def _two_good_batches(url: str) -> None:
    journal_batches(url, [
        kafka_progress(0, None, {"orders": {"0": 10}}, minute=0),
        kafka_progress(1, {"orders": {"0": 10}}, {"orders": {"0": 40}}, minute=1)])


@pytest.mark.parametrize(("ends", "spans", "lags"), [
    ("{-1}", "{0}", "{0}"),  # -1 is "latest" in startingOffsets
    ("{-9223372036854775808}", "{1}", "{0}"),  # start = end - 1
    ("{9223372036854775807}", "{-1}", "{0}"),  # start = end + 1
    ("{9223372036854775800}", "{0}", "{100}"),  # latest = end + 100
    ("{9223372036854775800}", "{-100}", "{0}"),
])
def test_offsets_whose_derived_values_overflow_are_refused(
        journal_url: str, ends: str, spans: str, lags: str) -> None:
    _two_good_batches(journal_url)
    with pytest.raises(sa.exc.IntegrityError, match="batch_sources offsets out of range"):
        _sql(journal_url, FORGED_CALL, ends=ends, spans=spans, lags=lags, batch="2",
             ago="1 minute")
    # The largest values that fit are taken.
    _sql(journal_url, FORGED_CALL, ends="{9223372036854775807}", spans="{1}", lags="{0}",
         batch="2", ago="1 minute")
    _sql(journal_url, FORGED_CALL, ends="{9223372036854775800}", spans="{-7}", lags="{7}",
         batch="3", ago="1 minute")
    with pytest.raises(sa.exc.IntegrityError, match="kafka_partition_rows_offsets_fit"):
        _sql(journal_url,
             "INSERT INTO offset_journal.kafka_partitions (batch_pk, source_index, topic, "
             "partition, start_offset, end_offset, latest_offset) SELECT batch_pk, "
             "source_index, 'orders', 1, 1, -9223372036854775808, NULL FROM "
             "offset_journal.batch_sources LIMIT 1")


def test_a_row_whose_offsets_overflow_is_skipped_and_reported_by_every_reader(
        journal_url: str, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture, tmp_path) -> None:
    _two_good_batches(journal_url)
    # As a journal from before migration 0015 could hold them: batch 2 in the arrays,
    # batch 3 (of another run) in the rows of a previous release's listener.
    _sql(journal_url,
         "ALTER TABLE offset_journal.batch_sources DISABLE TRIGGER batch_sources_fit_layout")
    _sql(journal_url, FORGED_CALL, ends="{-9223372036854775808}", spans="{1}", lags="{0}",
         batch="2", ago="1 minute")
    _sql(journal_url, FORGED_CALL, ends="{-1}", spans="{0}", lags="{0}", batch="3",
         ago="50 seconds")  # -1: "latest"
    _sql(journal_url, FORGED_CALL, ends="{20}", spans="{21}", lags="{0}", batch="4",
         ago="40 seconds")  # a start of -1
    _sql(journal_url,
         "ALTER TABLE offset_journal.batch_sources ENABLE TRIGGER batch_sources_fit_layout",
         "ALTER TABLE offset_journal.kafka_partition_rows "
         "DROP CONSTRAINT IF EXISTS kafka_partition_rows_offsets_fit")
    journal_batches(journal_url, [kafka_progress(
        0, None, {"orders": {"0": 40}}, minute=3, run_id="run-b")])
    _sql(journal_url,
         "UPDATE offset_journal.batches SET trigger_at = now() - interval '30 seconds' "
         "WHERE run_id = 'run-b'",
         "INSERT INTO offset_journal.kafka_partition_rows (batch_pk, source_index, topic, "
         "partition, start_offset, end_offset, latest_offset) SELECT b.id, 0, 'orders', 1, "
         "9223372036854775807, -2, 9223372036854775807 FROM offset_journal.batches b "
         "WHERE b.run_id = 'run-b'")
    for argv in (["plan", "orders"], ["starting-offsets", "orders"], ["history", "orders"],
                 ["runs", "orders"], ["audit", "orders"],
                 ["starting-offsets", "orders", "--batch", "run-a:1"],
                 ["report", "orders", "-o", str(tmp_path / "report.html")]):
        code = main(["--database-url", journal_url, *argv])
        out, err = capsys.readouterr()
        assert code in (0, 3), (argv, out, err)  # audit: 3, the journal has holes
        assert "Traceback" not in err and "unexpected" not in err, (argv, err)
        assert "out of range" not in err, (argv, err)
    caplog.clear()
    assert main(["--database-url", journal_url, "starting-offsets", "orders"]) == 0
    assert capsys.readouterr().out.strip() == '{"orders":{"0":40}}'  # batch 1's end
    warned = "\n".join(r.getMessage() for r in caplog.records)
    for batch_id in (2, 3, 4):
        assert f"batch {batch_id} of run run-a (query orders) is skipped" in warned
    assert "batch 0 of run run-b (query orders) is skipped" in warned
    # The views read it without error too (what the cookbook and the dashboard query).
    engine = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        lags = conn.execute(sa.text(
            "SELECT batch_id, lag FROM offset_journal.partition_lag ORDER BY batch_pk, "
            "partition")).all()
        conn.execute(sa.text("SELECT * FROM offset_journal.source_offsets")).all()
        flagged = conn.execute(sa.text(
            "SELECT count(*) FROM offset_journal.kafka_partitions WHERE out_of_range"
        )).scalar_one()
    engine.dispose()
    assert flagged == 4 and (2, None) in lags


def test_values_no_listener_writes_in_other_columns_do_not_stop_plan_or_report(
        journal_url: str, capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """A source's metrics and a run's async progress interval, both the writer role's to
    write, as no Spark reports them: the report's and the plan's arithmetic on them
    must not fail their query's commands."""
    _two_good_batches(journal_url)
    _sql(journal_url,
         "UPDATE offset_journal.batch_sources SET metrics = "
         """'{"maxOffsetsBehindLatest": 1e400}'""",
         "UPDATE offset_journal.query_runs SET execution = "
         "'AsyncProgressTrackingMicroBatchExecution', "
         "async_interval_ms = 9223372036854775807")
    for argv in (["plan", "orders"], ["starting-offsets", "orders"],
                 ["report", "orders", "-o", str(tmp_path / "report.html")]):
        code = main(["--database-url", journal_url, *argv])
        out, err = capsys.readouterr()
        assert code == 0, (argv, out, err)
        assert "Traceback" not in err and "unexpected" not in err, (argv, err)


def _forge_before_0015(url: str, **call: str) -> None:
    """A source row as a journal from before migration 0015 could hold it."""
    _sql(url, "ALTER TABLE offset_journal.batch_sources DISABLE TRIGGER batch_sources_fit_layout")
    try:
        _sql(url, FORGED_CALL, **call)
    finally:
        _sql(url,
             "ALTER TABLE offset_journal.batch_sources ENABLE TRIGGER batch_sources_fit_layout")


def test_reads_page_past_rows_they_skip_and_fall_back_in_the_journals_own_order(
        journal_url: str) -> None:
    from offset_journal import Journal
    from offset_journal.audit._edge import iter_audit_batches
    from offset_journal.records import batch_from_progress

    # run-b first (journaled first, but triggered later by its driver's clock), then
    # run-a's batches 0, 1 and a forged 2: the journal's last is run-a's, whose last
    # readable batch is 1.
    journal_batches(journal_url, [kafka_progress(0, None, {"orders": {"0": 77}}, minute=9,
                                                 run_id="run-b")])
    _two_good_batches(journal_url)
    _forge_before_0015(journal_url, ends="{-1}", spans="{0}", lags="{0}", batch="2",
                       ago="0 seconds")
    _sql(journal_url, "UPDATE offset_journal.batches SET trigger_at = '2024-01-01T00:01:30Z' "
                      "WHERE batch_id = 2")
    journal_batches(journal_url, [kafka_progress(3, {"orders": {"0": 40}}, {"orders": {"0": 45}},
                                                 minute=2)])
    journal = Journal(journal_url)
    try:
        last = journal.last_batch("orders")
        assert last is not None and (last.run_id, last.batch_id) == ("run-a", 3)
        _sql(journal_url, "DELETE FROM offset_journal.batches WHERE batch_id = 3")
        last = journal.last_batch("orders")
        assert last is not None and (last.run_id, last.batch_id) == ("run-a", 1)
        journal_batches(journal_url, [kafka_progress(
            3, {"orders": {"0": 40}}, {"orders": {"0": 45}}, minute=2)])
        for page in (1, 2):  # the skipped batch on a page boundary, and inside a page
            assert [(b.run_id, b.batch_id) for b in journal.iter_history("orders", page=page)] == [
                ("run-a", 0), ("run-a", 1), ("run-a", 3), ("run-b", 0)]
            assert [(b.run_id, b.batch_id) for b in iter_audit_batches(
                journal, "orders", page=page)] == [("run-b", 0), ("run-a", 0), ("run-a", 1),
                                                   ("run-a", 3)]
        assert [b.batch_id for b in journal.history("orders", limit=2)] == [3, 0]
        # The real batch 2, replayed late: its journaled copy is not it.
        assert not journal.record_batch(batch_from_progress(kafka_progress(
            2, {"orders": {"0": 40}}, {"orders": {"0": 40}}, minute=1.5)))
    finally:
        journal.close()
    assert count_rows(journal_url, "rejected_events") == 1
