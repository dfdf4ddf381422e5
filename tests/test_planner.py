"""Restart offsets that stay right under skewed clocks, integrity problems, long
histories and re-imports (issue 11, items 7-10): against the real journal in Postgres."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from offset_journal.cli import main
from offset_journal.db import ENV_URL
from offset_journal.journal import Journal
from offset_journal.records import batch_from_progress
from offset_journal.restart import RestartError, import_checkpoint, plan_restart
from tests.payloads import sql_rows
from tests.test_restart import journal_batches, kafka_progress, write_checkpoint


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("offset-journal: error: ") and "Traceback" not in err
    return lines[0]


def journal_counts(url: str) -> tuple[Any, ...]:
    return sql_rows(url, """
        SELECT (SELECT count(*) FROM offset_journal.query_runs),
               (SELECT string_agg(run_id || '=' || query_name, ',' ORDER BY run_id)
                  FROM offset_journal.query_runs),
               (SELECT count(*) FROM offset_journal.batches),
               (SELECT string_agg(DISTINCT query_name, ',') FROM offset_journal.batches),
               (SELECT count(*) FROM offset_journal.kafka_partitions)""")[0]


# --------------------------------------------------------------------------- item 10


def test_import_under_a_second_name_is_refused(journal_url: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ck = write_checkpoint(tmp_path / "ck", "qid-ck", [
        ([{"orders": {"0": 10}}], True), ([{"orders": {"0": 15}}], True)])
    first = import_checkpoint(journal_url, str(ck), "legacy")
    assert first.imported == 2
    before = journal_counts(journal_url)
    with pytest.raises(RestartError, match="already journaled .* 'legacy'"):
        import_checkpoint(journal_url, str(ck), "other-name")
    assert journal_counts(journal_url) == before
    monkeypatch.setenv(ENV_URL, journal_url)
    code, out, err = run_cli(capsys, "checkpoint", "import", str(ck), "--query-name", "again")
    assert code == 1 and out == ""
    line = one_error_line(err)
    assert "'legacy'" in line and "--query-name legacy" in line
    assert journal_counts(journal_url) == before
    # The journaled name still plans as before.
    assert plan_restart(journal_url, "legacy").starting_offsets() == '{"orders":{"0":15}}'


def test_import_of_a_checkpoint_the_listener_journaled_under_another_name(
        journal_url: str, tmp_path: Path) -> None:
    journal_batches(journal_url, [
        kafka_progress(0, None, {"orders": {"0": 10}}, minute=0, query_id="qid-ck"),
    ])
    ck = write_checkpoint(tmp_path / "ck", "qid-ck", [
        ([{"orders": {"0": 10}}], True), ([{"orders": {"0": 12}}], True)])
    before = journal_counts(journal_url)
    with pytest.raises(RestartError, match="'orders'"):
        import_checkpoint(journal_url, str(ck), "renamed")
    assert journal_counts(journal_url) == before


# --------------------------------------------------------------------------- item 7


def skewed_history(url: str) -> None:
    """Run A (its driver's clock an hour fast) read orders-0 up to 1000, then run B on a
    new checkpoint took over at 1000 and read to 2000 with a right clock."""
    journal_batches(url, [
        kafka_progress(0, None, {"orders": {"0": 500}}, minute=60, run_id="run-a",
                       query_id="qid-a"),
        kafka_progress(1, {"orders": {"0": 500}}, {"orders": {"0": 1000}}, minute=61,
                       run_id="run-a", query_id="qid-a"),
        kafka_progress(0, {"orders": {"0": 1000}}, {"orders": {"0": 1500}}, minute=10,
                       run_id="run-b", query_id="qid-b"),
        kafka_progress(1, {"orders": {"0": 1500}}, {"orders": {"0": 2000}}, minute=11,
                       run_id="run-b", query_id="qid-b"),
    ])


def test_a_fast_clock_does_not_pick_the_last_batch(journal_url: str) -> None:
    skewed_history(journal_url)
    plan = plan_restart(journal_url, "orders")
    assert (plan.anchor.run_id, plan.anchor.batch_id) == ("run-b", 1)
    assert plan.starting_offsets() == '{"orders":{"0":2000}}'
    # The disagreement of the clocks is said, not hidden.
    assert any("clock" in w and "run-a" in w for w in plan.warnings), plan.warnings
    with Journal(journal_url) as journal:
        last = journal.last_batch("orders")
        assert last is not None and (last.run_id, last.batch_id) == ("run-b", 1)


def late_replay_history(url: str) -> None:
    """Run A's last batch reaches the journal (a late spool replay) after run B, which
    already read further: the database's order says A is last, the offsets disagree."""
    journal_batches(url, [
        kafka_progress(0, None, {"orders": {"0": 500}}, minute=0, run_id="run-a",
                       query_id="qid-a"),
        kafka_progress(0, {"orders": {"0": 1000}}, {"orders": {"0": 1500}}, minute=10,
                       run_id="run-b", query_id="qid-b"),
        kafka_progress(1, {"orders": {"0": 500}}, {"orders": {"0": 1000}}, minute=1,
                       run_id="run-a", query_id="qid-a"),
    ])


def test_orders_that_disagree_are_refused_with_the_way_out(
        journal_url: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    late_replay_history(journal_url)
    with pytest.raises(RestartError, match="--batch RUN:BATCH"):
        plan_restart(journal_url, "orders")
    monkeypatch.setenv(ENV_URL, journal_url)
    for command in ("plan", "starting-offsets"):
        code, out, err = run_cli(capsys, command, "orders")
        assert code == 1 and out == ""
        line = one_error_line(err)
        assert "run-a" in line and "run-b" in line and "--batch RUN:BATCH" in line
    # Chosen explicitly: AT run-b's batch 0 (its start offsets)...
    code, out, _ = run_cli(capsys, "starting-offsets", "orders", "--batch", "run-b:0")
    assert code == 0 and out.strip() == '{"orders":{"0":1000}}'
    # ... and an as-of plan picks by time, as asked.
    plan = plan_restart(journal_url, "orders", as_of=plan_restart(
        journal_url, "orders", batch=("run-b", 0)).anchor.trigger_at)
    assert plan.starting_offsets() == '{"orders":{"0":1500}}'


def test_last_batch_lookup_uses_an_index(journal_url: str) -> None:
    skewed_history(journal_url)
    seen: list[tuple[str, Any]] = []
    with Journal(journal_url) as journal:
        import sqlalchemy as sa

        def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                   executemany: bool) -> None:
            seen.append((statement, parameters))

        sa.event.listen(journal.engine, "before_cursor_execute", before)
        journal.last_batch("orders")
        sa.event.remove(journal.engine, "before_cursor_execute", before)
        first = seen[0]
        with journal.engine.connect() as conn:
            conn.exec_driver_sql("SET enable_seqscan = off")
            plan = "\n".join(r[0] for r in conn.exec_driver_sql(
                "EXPLAIN " + first[0], first[1]).all())
    assert "batches_query_order_idx" in plan, plan
    assert "Sort" not in plan, plan


def test_logging_is_quiet_for_a_plain_history(journal_url: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        journal_batches(journal_url, [
            kafka_progress(0, None, {"orders": {"0": 5}}, minute=0),
            kafka_progress(1, {"orders": {"0": 5}}, {"orders": {"0": 9}}, minute=1),
        ])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    plan = plan_restart(journal_url, "orders", as_of=None)
    assert plan.ok and not [w for w in plan.warnings if "clock" in w]
    assert plan.anchor.batch_id == 1
