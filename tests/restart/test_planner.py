"""Restart offsets that stay right under skewed clocks, integrity problems, long
histories and re-imports: against the real journal in Postgres."""

from __future__ import annotations

import json
import logging
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from offset_journal.checkpoint.importing import import_checkpoint
from offset_journal.cli import main
from offset_journal.journal import Batch, Journal, SourceOffsets
from offset_journal.journal.db import ENV_URL
from offset_journal.offsets import PartitionOffset
from offset_journal.records import batch_from_progress
from offset_journal.restart import RestartError, plan_restart
from offset_journal.restart.decide.checks import check_last_batch
from tests.payloads import sql_rows
from tests.support import journal_batches, kafka_progress, write_checkpoint


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
    with Journal(journal_url) as journal:
        first = import_checkpoint(journal, str(ck), "legacy")
        assert first.imported == 2
        before = journal_counts(journal_url)
        with pytest.raises(RestartError, match="already journaled .* 'legacy'"):
            import_checkpoint(journal, str(ck), "other-name")
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
    with Journal(journal_url) as journal, pytest.raises(RestartError, match="'orders'"):
        import_checkpoint(journal, str(ck), "renamed")
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


# --------------------------------------------------------------------------- item 8


def problems_of(url: str) -> dict[tuple[str, int], str]:
    return {(run, batch): problem for run, batch, problem in sql_rows(url, """
        SELECT b.run_id, b.batch_id, s.problem FROM offset_journal.batch_sources s
        JOIN offset_journal.batches b ON b.id = s.batch_pk WHERE s.problem IS NOT NULL""")}


def test_the_same_batch_with_other_offsets_is_rejected_loudly(
        journal_url: str, caplog: pytest.LogCaptureFixture) -> None:
    first = kafka_progress(0, None, {"orders": {"0": 10}}, minute=0)
    journal_batches(journal_url, [first])
    with Journal(journal_url) as journal:
        with caplog.at_level(logging.WARNING):
            # The same payload again (a spool replay): nothing to say.
            assert not journal.record_batch(batch_from_progress(first))
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert sql_rows(journal_url, "SELECT count(*) FROM offset_journal.rejected_events"
                            ) == [(0,)]
            other = kafka_progress(0, None, {"orders": {"0": 99}}, minute=0)
            assert not journal.record_batch(batch_from_progress(other))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("batch 0 of run run-a" in m and "different offsets" in m for m in warned), warned
    rejected = sql_rows(journal_url, "SELECT reason, payload FROM offset_journal.rejected_events")
    assert len(rejected) == 1
    assert "batch 0 of run run-a" in rejected[0][0] and "different offsets" in rejected[0][0]
    assert "orders-0" in rejected[0][0] and '"99"' not in rejected[0][0]
    assert "99" in rejected[0][1]  # the second copy, kept for a person to look at
    # The first copy stays.
    assert plan_restart(journal_url, "orders").starting_offsets() == '{"orders":{"0":10}}'


def gap_and_backwards(url: str) -> None:
    journal_batches(url, [
        kafka_progress(0, None, {"orders": {"0": 10, "1": 10}}, minute=0),
        # orders-0 starts at 15, not at 10: records 10..14 never read (a gap).
        kafka_progress(1, {"orders": {"0": 15, "1": 10}}, {"orders": {"0": 20, "1": 12}},
                       minute=1),
        kafka_progress(2, {"orders": {"0": 20, "1": 12}}, {"orders": {"0": 25, "1": 14}},
                       minute=2),
        # orders-1 starts at 8, not at 14: 8..13 read twice (backwards).
        kafka_progress(3, {"orders": {"0": 25, "1": 8}}, {"orders": {"0": 30, "1": 16}},
                       minute=3),
    ])


def test_gaps_and_backwards_offsets_are_flagged_when_written(
        journal_url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        gap_and_backwards(journal_url)
    problems = problems_of(journal_url)
    assert set(problems) == {("run-a", 1), ("run-a", 3)}
    assert "gap" in problems[("run-a", 1)] and "orders-0" in problems[("run-a", 1)]
    assert "10..14" in problems[("run-a", 1)]
    assert "backwards" in problems[("run-a", 3)] and "orders-1" in problems[("run-a", 3)]
    assert "8..13" in problems[("run-a", 3)]
    warned = " | ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "batch 1 of run run-a" in warned and "batch 3 of run run-a" in warned
    # The offsets read back are the ones Spark reported.
    with Journal(journal_url) as journal:
        last = journal.last_batch("orders")
        assert last is not None and last.source(0).start_offset == {"orders": {"0": 25, "1": 8}}


def test_plan_reports_flagged_problems(journal_url: str, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    gap_and_backwards(journal_url)
    # The restart batch itself went backwards: an error.
    plan = plan_restart(journal_url, "orders")
    assert not plan.ok
    assert any("batch 3 of run run-a" in e and "backwards" in e for e in plan.errors)
    assert any("batch 1 of run run-a" in w and "gap" in w for w in plan.warnings)
    text = " ".join(plan.explain().split())
    assert "nothing skipped" not in text
    monkeypatch.setenv(ENV_URL, journal_url)
    code, out, _ = run_cli(capsys, "plan", "orders")
    assert code == 1 and "nothing skipped" not in " ".join(out.split())
    # Restarting after batch 2: the gap before it is a warning, the plan stands.
    earlier = plan_restart(journal_url, "orders", as_of=plan_restart(
        journal_url, "orders", batch=("run-a", 2)).anchor.trigger_at)
    assert earlier.ok, earlier.errors
    assert any("batch 1 of run run-a" in w and "gap" in w for w in earlier.warnings)
    assert "nothing skipped" not in " ".join(earlier.explain().split())


# --------------------------------------------------------------------------- item 9

BIG = 70_000  # more than Postgres' 65,535 bind parameters
BIG_T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def bulk_load(url: str, n: int, *, run_id: str = "run-big", query_id: str = "qid-big") -> None:
    """``n`` batches of query 'big', one second apart, one run, two partitions of 'ev'
    each reading 100 records; watermark 10 minutes behind, event times up to the trigger
    time. In SQL (generate_series), as bench/restart_planning.py loads its histories."""
    import sqlalchemy as sa

    from offset_journal.journal.db import resolve_url

    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    params = {"n": n, "run": run_id, "qid": query_id, "t0": BIG_T0}
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO offset_journal.query_runs (run_id, query_id, query_name, named, "
            "started_at) VALUES (:run, :qid, 'big', true, :t0)"), params)
        conn.execute(sa.text("""
            INSERT INTO offset_journal.batches (run_id, query_id, query_name, batch_id,
                trigger_at, batch_duration_ms, num_input_rows, watermark, event_time_min,
                event_time_max)
            SELECT :run, :qid, 'big', g, :t0 + g * interval '1 second', 800, 200,
                   :t0 + (g - 600) * interval '1 second',
                   :t0 + (g - 2) * interval '1 second', :t0 + g * interval '1 second'
            FROM generate_series(0, :n - 1) g"""), params)
        conn.execute(sa.text("""
            INSERT INTO offset_journal.batch_sources (batch_pk, source_index, description,
                kind, num_input_rows)
            SELECT id, 0, 'KafkaV2[Subscribe[ev]]', 'kafka', 200
            FROM offset_journal.batches WHERE run_id = :run"""), params)
        conn.execute(sa.text("""
            INSERT INTO offset_journal.kafka_partitions (batch_pk, source_index, topic,
                partition, start_offset, end_offset)
            SELECT b.id, 0, 'ev', p, b.batch_id * 100, (b.batch_id + 1) * 100
            FROM offset_journal.batches b, generate_series(0, 1) p
            WHERE b.run_id = :run"""), params)
        conn.execute(sa.text("ANALYZE offset_journal.batches"))
    engine.dispose()


@pytest.fixture(scope="module")
def big_template(journal_server: Any) -> Any:
    """The long history, migrated and loaded once for the module (about 20 s of
    INSERT ... SELECT and ANALYZE) in a database no test connects to."""
    from offset_journal.journal.db import upgrade

    url = journal_server.create_database("oj_big_template")
    upgrade(url)
    bulk_load(url, BIG)
    yield url
    journal_server.drop_database(url)


@pytest.fixture
def big_journal(journal_server: Any, big_template: str) -> Any:
    """Each test's own copy of the long history (CREATE DATABASE ... TEMPLATE: a copy of
    the template's files, statistics included), dropped after it: what one test writes
    (a recorded plan) no other test sees, as when each loaded its own."""
    import sqlalchemy as sa

    from offset_journal.journal.db import resolve_url

    template = sa.engine.make_url(big_template).database
    url = journal_server.create_database("oj_big")
    name = sa.engine.make_url(url).database
    admin = sa.create_engine(resolve_url(journal_server.admin_url),
                             isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE "{name}"')
        conn.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    admin.dispose()
    yield url
    journal_server.drop_database(url)


# Runs the console script given as its first argument, as `offset-journal ...` does, and
# writes the process's peak resident memory (VmHWM: this process's own, never its
# parent's, as the rusage of a forked child can be) to stderr as it exits.
_PEAK_MEMORY = """
import atexit, runpy, sys
def peak():
    with open("/proc/self/status") as f:
        sys.stderr.write("\\n" + next(l for l in f if l.startswith("VmHWM:")).strip())
atexit.register(peak)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_cli_process(*argv: str) -> tuple[int, str, str, int]:
    """``offset-journal argv`` in a process of its own: exit code, stdout, stderr and
    its peak resident memory in bytes."""
    import subprocess
    import sys

    exe = Path(sys.executable).with_name("offset-journal")
    done = subprocess.run([sys.executable, "-c", _PEAK_MEMORY, str(exe), *argv],
                          capture_output=True, text=True, timeout=300, check=False)
    err, _, peak = done.stderr.rpartition("\n")
    assert peak.startswith("VmHWM:") and peak.endswith("kB"), done.stderr[-3000:]
    return done.returncode, done.stdout, err, int(peak.split()[1]) * 1024


def test_history_beyond_the_bind_parameter_limit_streams(
        big_journal: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, big_journal)
    code, out, err, peak = run_cli_process("history", "big", "--format", "csv")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == BIG + 1
    assert lines[1].split(",")[:2] == ["run-big", "0"]
    assert lines[-1].split(",")[:2] == ["run-big", str(BIG - 1)]
    assert '""ev"":{""0"":7000000' in lines[-1]
    # Bounded memory, in a process of its own that writes its output to a pipe: no more
    # than 40 MiB above the same command's peak for three batches (imports, a
    # connection). Measured: 57 MB for three batches, 65 MB streaming all 70,000, and
    # 349 MB for `--limit 70000`, which holds them all at once as objects. (Measured
    # with tracemalloc in-process, as before, the command took six times as long.)
    code, _, err, small = run_cli_process("history", "big", "--limit", "3")
    assert code == 0, err
    assert peak < small + 40 * 2**20, (peak, small)
    code, out, _ = run_cli(capsys, "history", "big", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == BIG and rows[-1]["batch_id"] == BIG - 1
    code, out, _ = run_cli(capsys, "history", "big")
    assert code == 0 and len(out.splitlines()) == BIG + 1
    with Journal(big_journal) as journal:
        assert [b.batch_id for b in journal.history("big", limit=3)] == [BIG - 3, BIG - 2,
                                                                        BIG - 1]


def test_state_aware_plan_beyond_the_bind_parameter_limit(big_journal: str) -> None:
    tracemalloc.start()
    try:
        plan = plan_restart(big_journal, "big", mode="state-aware", window=timedelta(minutes=1))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    last = BIG - 1
    assert plan.anchor.batch_id == last
    # Watermark: 600 s behind the last batch; minus the 60 s window: the first batch
    # whose event times reach it is batch last - 660, whose start is where to rewind.
    assert plan.start_batch is not None and plan.start_batch.batch_id == last - 660
    assert plan.starting_offsets() == json.dumps(
        {"ev": {"0": (last - 660) * 100, "1": (last - 660) * 100}}, separators=(",", ":"))
    assert plan.event_time_cutoff == BIG_T0 + timedelta(seconds=last - 600)
    assert peak < 40 * 2**20, peak  # the rewound stretch, not the whole history


def _discarded(plan: dict[str, Any]) -> int:
    """Rows an EXPLAIN (ANALYZE, FORMAT JSON) plan node and those below it read and
    threw away (by filter, or by a lossy bitmap's recheck)."""
    own = plan.get("Rows Removed by Filter", 0) + plan.get("Rows Removed by Index Recheck", 0)
    return own * plan.get("Actual Loops", 1) + sum(map(_discarded, plan.get("Plans", [])))


def test_state_aware_plan_reads_no_history_it_does_not_use(big_journal: str) -> None:
    """The search for the first batch whose event times reach the
    threshold walked the history in journal order from its start, discarding every
    batch before the 661 it rewinds to (69,339 here, 999,339 at 10^6 batches). Every
    statement the plan issues, run under EXPLAIN ANALYZE, now discards fewer rows than
    it rewinds over."""
    import sqlalchemy as sa

    seen: list[tuple[str, Any]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        seen.append((statement, parameters))

    with Journal(big_journal) as journal:
        sa.event.listen(journal.engine, "before_cursor_execute", before)
        plan = plan_restart(None, "big", journal=journal, mode="state-aware",
                            window=timedelta(minutes=1), record=False)
        sa.event.remove(journal.engine, "before_cursor_execute", before)
        assert plan.start_batch is not None and plan.start_batch.batch_id == BIG - 1 - 660
        discarded = {}
        with journal.engine.connect() as conn:
            for statement, params in seen:
                if statement.lstrip().upper().startswith("SELECT 1"):
                    continue
                (explained,) = conn.exec_driver_sql(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params).scalar_one()
                discarded[" ".join(statement.split())] = _discarded(explained["Plan"])
    assert any("event_time_max >=" in s for s in discarded), list(discarded)
    assert max(discarded.values()) < 661, {s: n for s, n in discarded.items() if n >= 661}


def _ends_batch(batch_id: int, end: dict[tuple[str, int], int], *, run: str, minute: int,
                pk: int) -> Batch:
    parts = tuple(PartitionOffset(t, p, None, e) for (t, p), e in sorted(end.items()))
    return Batch(query_name="q", query_id="qid-" + run, run_id=run, batch_id=batch_id,
                 trigger_at=BIG_T0 + timedelta(minutes=minute), batch_duration_ms=1,
                 num_input_rows=1, watermark=None, event_time_min=None, event_time_max=None,
                 sources=(SourceOffsets(0, "KafkaV2[Subscribe[t]]", "kafka", None, None, 1,
                                        parts),), pk=pk)


def test_check_last_batch_is_decided_by_offsets_only_when_they_are_shared() -> None:
    anchor = _ends_batch(5, {("t", 0): 100}, run="b", minute=1, pk=20)
    fast_clock = _ends_batch(9, {("t", 0): 50}, run="a", minute=60, pk=10)
    warnings = check_last_batch("q", anchor, [anchor, fast_clock])
    assert len(warnings) == 1 and "clock" in warnings[0] and "the offsets agree" in warnings[0]
    # Nothing in common to compare: the journal's order stands, with a warning.
    other_topic = _ends_batch(9, {("u", 0): 500}, run="a", minute=60, pk=10)
    warnings = check_last_batch("q", anchor, [anchor, other_topic])
    assert len(warnings) == 1 and "no Kafka partition in common" in warnings[0]
    # The same offsets are no disagreement; read further is, whatever the trigger time.
    assert check_last_batch("q", anchor, [_ends_batch(1, {("t", 0): 100}, run="c",
                                                      minute=0, pk=5)]) == []
    ahead = _ends_batch(1, {("t", 0): 101}, run="c", minute=0, pk=5)
    with pytest.raises(RestartError, match=r"t-0 101 > 100.*--batch RUN:BATCH"):
        check_last_batch("q", anchor, [ahead])


def test_prune_keeps_the_batch_the_planner_starts_after(journal_url: str) -> None:
    skewed_history(journal_url)
    before = plan_restart(journal_url, "orders").starting_offsets()
    with Journal(journal_url) as journal:
        journal.prune(BIG_T0.replace(year=2024) + timedelta(minutes=30))
    assert plan_restart(journal_url, "orders").starting_offsets() == before


def test_continuity_is_checked_across_writers(journal_url: str) -> None:
    """A run's next batch written by another Journal (a new driver replaying a spool, a
    restarted writer) is checked against the batch in the database."""
    for payload in (kafka_progress(0, None, {"orders": {"0": 10}}, minute=0),
                    kafka_progress(1, {"orders": {"0": 12}}, {"orders": {"0": 20}}, minute=1),
                    kafka_progress(2, {"orders": {"0": 20}}, {"orders": {"0": 30}}, minute=2)):
        journal_batches(journal_url, [payload])
    problems = problems_of(journal_url)
    assert list(problems) == [("run-a", 1)] and "10..11 never read" in problems[("run-a", 1)]


def _ends_chain(n: int) -> list[str]:
    """Batches 0..n-1 of run-a, each reading 10 records of orders-0 on from the last."""
    return [kafka_progress(i, None if i == 0 else {"orders": {"0": 10 * i}},
                           {"orders": {"0": 10 * (i + 1)}}, minute=i) for i in range(n)]


def test_batches_another_writer_journaled_in_between_are_no_gap(
        journal_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Driver A journals batch 0, driver B replays A's spooled batches
    1..5 (a shared spool), then A journals batch 6. A's own memory says its last batch
    was 0; the journal says 5: no "records 10..59 never read", and the plan starts."""
    chain = _ends_chain(7)
    a = Journal(journal_url)
    try:
        assert a.record_batch(batch_from_progress(chain[0]))
        journal_batches(journal_url, chain[1:6])  # driver B
        assert a.record_batch(batch_from_progress(chain[6]))
    finally:
        a.close()
    assert problems_of(journal_url) == {}
    assert plan_restart(journal_url, "orders").ok


def test_a_batch_journaled_after_its_successor_is_checked_against_it(journal_url: str) -> None:
    """Out of order (a spool replayed after the run's next batch was journaled): no false
    gap for the early one, and a real discontinuity with the successor is still flagged,
    on the late batch."""
    chain = _ends_chain(4)
    journal_batches(journal_url, [chain[0], chain[2], chain[1], chain[3]])
    assert problems_of(journal_url) == {}

    def run_b(batch_id: int, start: int | None, end: int) -> str:
        return kafka_progress(batch_id, None if start is None else {"orders": {"0": start}},
                              {"orders": {"0": end}}, minute=batch_id, run_id="run-b",
                              query_id="qid-b")

    journal_batches(journal_url, [run_b(0, None, 10), run_b(2, 20, 30)])
    assert problems_of(journal_url) == {}  # batch 1 is not journaled yet: nothing to say
    journal_batches(journal_url, [run_b(1, 10, 15)])  # late; 15..19 were never read
    problems = problems_of(journal_url)
    assert list(problems) == [("run-b", 1)]
    assert ("gap before batch 2: orders-0 ends at 15 here and starts at 20 in batch 2, "
            "records 15..19 never read") == problems[("run-b", 1)]


def test_reading_a_flagged_batch_again_is_a_warning(journal_url: str) -> None:
    gap_and_backwards(journal_url)
    at = plan_restart(journal_url, "orders", batch=("run-a", 3))
    assert at.ok, at.errors
    assert any("batch 3 of run run-a" in w and "backwards" in w for w in at.warnings)
    assert at.starting_offsets() == '{"orders":{"0":25,"1":8}}'
