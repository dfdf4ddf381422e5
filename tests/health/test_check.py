"""`offset-journal check` against a real journal: every threshold from its journal facts,
a few statements whatever the fleet's size, the recorded forecasts and who may write them."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from offset_journal.errors import JournalConstraintError, JournalPermissionError
from offset_journal.health.check import Thresholds, parse_threshold
from offset_journal.health.edge import check_fleet
from offset_journal.journal import Journal
from offset_journal.journal.db import resolve_url
from offset_journal.journal.roles import grant
from offset_journal.records import batch_from_progress
from offset_journal.restart import PlanRequest, plan_restart
from offset_journal.restart.record import plan_row
from tests import support
from tests.payloads import kafka_source, progress
from tests.support import Cli


def _now_ts(seconds_ago: float = 0) -> str:
    t = datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _batch(journal: Journal, name: str, batch_id: int, start: int | None, end: int,
           latest: int, partitions: int = 2) -> None:
    offsets = {"orders": {str(p): end + p for p in range(partitions)}}
    starts = ({"orders": {str(p): start + p for p in range(partitions)}}
              if start is not None else None)
    latests = {"orders": {str(p): latest + p * 3 for p in range(partitions)}}
    payload = progress(batch_id, sources=[kafka_source("orders", starts, offsets, latests)],
                       name=name, query_id=f"qid-{name}", run_id=f"run-{name}",
                       timestamp=_now_ts())
    assert journal.record_batch(batch_from_progress(payload))


def _fleet(journal: Journal, n: int, prefix: str = "q") -> list[str]:
    names = [f"{prefix}{i:04d}" for i in range(n)]
    for name in names:
        _batch(journal, name, 0, None, 100, 110)
        _batch(journal, name, 1, 100, 200, 205)
    return names


def _forecast_row(name: str, partition: int, status: str, **kw: Any) -> dict[str, Any]:
    row = {"query_name": name, "source_index": 0, "topic": "orders", "partition": partition,
           "status": status, "next_offset": 100, "log_start": 0, "log_end": 500,
           "unread": 400, "lost": 0, "first_unread_at": None, "loss_earliest": None,
           "loss_latest": None, "basis": None}
    row.update(kw)
    return row


def test_check_finds_each_problem_from_the_journal(journal_url: str, cli: Cli) -> None:
    soon = datetime.now(timezone.utc) + timedelta(minutes=30)
    with Journal(journal_url) as journal:
        _fleet(journal, 2, "fine")
        _batch(journal, "behind", 0, None, 100, 3100)  # 3,000 + 3,003 records behind
        _batch(journal, "gappy", 0, None, 100, 100)
        _batch(journal, "gappy", 1, 150, 200, 200)  # starts past the previous end: flagged
        _batch(journal, "at-risk", 0, None, 100, 100)
        _batch(journal, "lost", 0, None, 100, 100)
        journal.record_forecasts(["at-risk", "lost"], [
            _forecast_row("at-risk", 0, "at-risk", loss_earliest=soon, loss_latest=soon,
                          basis="time"),
            _forecast_row("at-risk", 1, "caught-up"),
            _forecast_row("lost", 0, "lost", log_start=160, lost=60)])
        with journal.engine.begin() as conn:
            journal.record_spool_losses([{"loss_id": "l1", "query_name": "fine0000",
                                          "events": 3}], conn)
        journal.record_rejected("bad", progress(7, name="behind", run_id="r", query_id="q"))
        journal.record_rejected("bad", "{not json")

    code, out, err = cli("--database-url", journal_url, "check", "--all", "--max-lag",
                         "1000,5000", "--min-time-to-loss", "6h,1h", "--max-staleness", "1h",
                         "--exclude", "gappy", "--exclude", "fine*", "--exclude", "behind")
    assert code == 2, out
    # the excluded are not checked, nor are their rejected events counted as the fleet's
    assert out.splitlines()[-1] == \
        "CRITICAL: 2 queries checked: 2 critical, 1 warning, 0 unknown", out
    assert "WARNING: 1 rejected event of no query" in out
    code, out, err = cli("--database-url", journal_url, "check", "--all", "--max-lag",
                         "1000,5000", "--min-time-to-loss", "6h,1h", "--max-staleness", "1h",
                         "--exclude", "other*")
    assert code == 2, err
    lines = out.splitlines()
    assert lines[-1] == "CRITICAL: 6 queries checked: 4 critical, 3 warning, 4 unknown"
    assert [line.split(": ")[:2] for line in lines[:4]] == [
        ["CRITICAL", "at-risk"], ["CRITICAL", "behind"], ["CRITICAL", "gappy"],
        ["CRITICAL", "lost"]]
    # --min-time-to-loss on queries with no recorded forecast: UNKNOWN, not OK
    assert [line.split(": ")[:2] for line in lines[4:8]] == [
        ["UNKNOWN", "behind"], ["UNKNOWN", "fine0000"], ["UNKNOWN", "fine0001"],
        ["UNKNOWN", "gappy"]]
    assert lines[4].endswith("behind: no retention forecast recorded: run `offset-journal "
                             "retention --record` (cron), or check with --bootstrap-servers")
    assert lines[8].startswith("WARNING: 1 rejected event of no query since ")
    assert [line.split(": ")[:2] for line in lines[9:11]] == [["WARNING", "behind"],
                                                            ["WARNING", "fine0000"]]
    text = "\n".join(lines)
    assert "behind: 6,002 records behind in its last batch (over 1,000,5,000); furthest " \
           "behind: orders-1 by 3,002" in text
    assert "gappy: 1 batch source flagged when journaled" in text
    assert "lost: DATA LOSS: 60 records deleted by retention before being read" in text
    assert "at-risk: orders-0 loses unread records to retention in about 30 min" in text
    assert "behind: 1 rejected event since" in text
    assert "fine0000: 3 batch events dropped from a full listener spool" in text

    assert cli("--database-url", journal_url, "check", "fine0001", "--max-lag", "20")[0] == 0
    assert cli("--database-url", journal_url, "check", "fine0001", "--max-lag", "10")[0] == 2
    assert cli("--database-url", journal_url, "check", "fine0000")[0] == 1  # its spool loss
    code, out, _err = cli("--database-url", journal_url, "check", "nobody", "--format", "json")
    assert code == 3
    assert json.loads(out)["problems"][0]["kind"] == "unknown-query"
    # A database that does not answer: UNKNOWN, one line.
    code, out, err = cli("--database-url", "postgresql://x@127.0.0.1:1/x", "check", "--all")
    assert (code, out) == (3, "") and len(err.splitlines()) == 1


def test_check_reads_a_fleet_in_the_same_few_statements_whatever_its_size(
        journal_url: str) -> None:
    limits = Thresholds(max_lag=parse_threshold("1000", int), since=None)
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        statements.append(statement)

    counts = []
    with Journal(journal_url) as journal:
        for size, add in ((3, 3), (30, 27)):
            _fleet(journal, add, prefix=f"s{size}-")
            statements.clear()
            sa.event.listen(journal.engine, "before_cursor_execute", seen)
            try:
                result = check_fleet(journal, None, limits)
            finally:
                sa.event.remove(journal.engine, "before_cursor_execute", seen)
            counts.append((result.queries, len(statements)))
    assert counts[0][0] == 3 and counts[1][0] == 30
    assert counts[0][1] == counts[1][1] <= 5, counts


def test_only_the_planner_and_the_owner_record_forecasts(journal_url: str, cli: Cli) -> None:
    writer, reader, planner = support.journal_roles(journal_url)

    def url(role: str) -> str:
        return support.role_url(journal_url, role)

    row = _forecast_row("q", 0, "lost", lost=5)
    with Journal(url(planner)) as j:
        j.record_forecasts(["q"], [row])
        j.record_forecasts(["q"], [row])  # replaced, not added
        assert [dict(r)["lost"] for r in j.recorded_forecasts("q")] == [5]
    for role in (writer, reader):
        with Journal(url(role)) as j:
            assert len(j.recorded_forecasts("q")) == 1
            with pytest.raises(JournalPermissionError, match="permission denied"):
                j.record_forecasts(["q"], [row])


def test_an_unreachable_cluster_or_unknown_query_is_one_line(journal_url: str,
                                                              cli: Cli) -> None:
    with Journal(journal_url) as journal:
        _fleet(journal, 1)
    far = ["--bootstrap-servers", "127.0.0.1:1", "--kafka-timeout", "1"]
    for argv, expected in ((["retention", "q0000", *far], 1),
                           (["retention", "nobody", *far], 1),
                           (["check", "q0000", *far], 3)):
        code, out, err = cli("--database-url", journal_url, *argv)
        assert (code, out) == (expected, ""), (argv, out, err)
        assert len(err.splitlines()) == 1 and err.startswith("offset-journal: error: "), err
    assert "no journaled batches for query 'nobody'" in cli(
        "--database-url", journal_url, "retention", "nobody", *far)[2]


def test_recorded_forecasts_read_past_or_too_old_are_not_trusted(journal_url: str,
                                                                  cli: Cli) -> None:
    """A forecast row whose partition the query has read past since says nothing any
    more once the job caught up, or restarted past a loss with --allow-data-loss (the
    plan, after the batch the loss was recorded after, accepted it: a recorded loss keeps a
    loss no decision covers); a recording older than --max-forecast-age is UNKNOWN (the
    cron stopped)."""
    soon = datetime.now(timezone.utc) + timedelta(minutes=5)
    with Journal(journal_url) as journal:
        for name in ("caught", "restarted"):
            _batch(journal, name, 0, None, 100, 100)
        journal.record_forecasts(["caught", "restarted"], [
            _forecast_row("caught", 0, "at-risk", loss_earliest=soon, loss_latest=soon,
                          basis="time"),
            _forecast_row("caught", 1, "caught-up", next_offset=101),
            _forecast_row("restarted", 1, "lost", next_offset=101, log_start=160, lost=59)],
            {"restarted": ("run-restarted", 0)})
    check = ["--database-url", journal_url, "check", "caught", "restarted",
             "--min-time-to-loss", "1h"]
    code, out, _err = cli(*check)
    assert code == 2, out
    assert "CRITICAL: caught: orders-0 loses unread records to retention in about 5 min" in out
    assert "CRITICAL: restarted: DATA LOSS: 59 records" in out
    # The person restarting "restarted" accepts the loss: a plan after its batch 0
    # recorded with --allow-data-loss (as the planner records it; no broker here).
    plan = plan_restart(journal_url, "restarted", record=False)
    with Journal(journal_url) as journal:
        journal.record_plan(plan_row(plan, PlanRequest("restarted", allow_data_loss=True),
                                     "starting-offsets"))
    with Journal(journal_url) as journal:
        for name in ("caught", "restarted"):  # each reads on past its rows
            _batch(journal, name, 1, 100, 200, 200)
    code, out, _err = cli(*check)
    assert (code, out.splitlines()[-1]) == (0, "OK: 2 queries checked, no problem"), out
    engine = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE offset_journal.retention_forecasts "
                             "SET recorded_at = now() - interval '20 minutes'")
    engine.dispose()
    code, out, _err = cli(*check)
    assert code == 3 and "UNKNOWN: caught: the retention forecast is 20 min old" in out, out
    assert "UNKNOWN: restarted: the retention forecast is 20 min old" in out, out
    assert cli(*check, "--max-forecast-age", "30m")[0] == 0


def test_check_errors_are_unknown_in_json_too_and_say_what_is_missing(
        journal_url: str, cli: Cli) -> None:
    code, out, err = cli("--database-url", "postgresql://x@127.0.0.1:1/x", "check", "--all",
                         "--format", "json")
    assert code == 3 and len(err.splitlines()) == 1
    found = json.loads(out)
    assert (found["status"], found["exit_code"]) == ("unknown", 3)
    assert found["error"] == err.split("error: ", 1)[1].strip()
    # A reader granted before 0017 (here: the grant on the new table taken back).
    reader = f"oj_r_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{reader}" LOGIN')
    grant(journal_url, None, reader, None)
    with engine.begin() as conn:
        revoke = f'REVOKE SELECT ON offset_journal.retention_forecasts FROM "{reader}"'  # noqa: S608
        conn.exec_driver_sql(revoke)
    engine.dispose()
    url = sa.engine.make_url(journal_url).set(username=reader).render_as_string(False)
    code, out, err = cli("--database-url", url, "check", "--all")
    assert (code, out) == (3, "") and len(err.splitlines()) == 1, err
    assert "a role granted before migration 0017 lacks retention_forecasts; grant it " \
           "again (`offset-journal db grant`" in err


def test_overlapping_recordings_wait_for_each_other(journal_url: str) -> None:
    """Two `retention --record` runs at once: the second waits for the first (an
    advisory lock) instead of failing on its rows. A trigger holds the first between
    its delete and its insert, where the second would otherwise slip in."""
    import threading
    import time

    rows = [_forecast_row("q", p, "safe") for p in range(3)]
    engine = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("""
            CREATE SCHEMA slow;
            CREATE FUNCTION slow.pause() RETURNS trigger LANGUAGE plpgsql
                SET search_path = pg_catalog, pg_temp
                AS $$ BEGIN PERFORM pg_catalog.pg_sleep(0.6); RETURN NULL; END $$;
            CREATE TRIGGER slow AFTER DELETE ON offset_journal.retention_forecasts
                FOR EACH STATEMENT EXECUTE FUNCTION slow.pause();""")
    errors: list[BaseException] = []

    def record() -> None:
        try:
            with Journal(journal_url) as j:
                j.record_forecasts(["q"], rows)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    try:
        with Journal(journal_url) as j:
            j.record_forecasts(["q"], rows)
        threads = [threading.Thread(target=record) for _ in range(2)]
        threads[0].start()
        time.sleep(0.2)  # the first is in its pause, its delete not committed
        threads[1].start()
        for t in threads:
            t.join(30)
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TRIGGER slow ON offset_journal.retention_forecasts; "
                                 "DROP SCHEMA slow CASCADE")
        engine.dispose()
    assert errors == []
    with Journal(journal_url) as j:
        assert len(j.recorded_forecasts("q")) == 3


def test_recorded_rows_must_be_consistent(journal_url: str) -> None:
    """What check believes of a row is held by the table: lost only with a count, a
    loss foreseen only with its time and limit, no negative counts."""
    with Journal(journal_url) as journal:
        for bad in (_forecast_row("q", 0, "lost"), _forecast_row("q", 0, "safe", lost=3),
                    _forecast_row("q", 0, "at-risk"), _forecast_row("q", 0, "safe", unread=-1),
                    _forecast_row("q", 0, "safe", basis="hunch")):
            with pytest.raises(JournalConstraintError, match="retention_forecasts_"):
                journal.record_forecasts(["q"], [bad])


# ---------------------------------------------------------------------------


def test_a_job_that_reads_on_but_stays_behind_stays_at_risk(journal_url: str,
                                                             cli: Cli) -> None:
    """A recorded row was dropped as soon as the query's last batch read
    past its next offset: a running job far behind (9,900 records unread, loss in 30
    min) checked OK after one more batch (100 read, 9,800 unread). Reading on moves the
    earliest loss only by the age of the records read: the recorded time stays as an
    early bound, a partition not forecast stays unknown, until the query has read all
    the recording saw unread."""
    soon = datetime.now(timezone.utc) + timedelta(minutes=30)
    with Journal(journal_url) as journal:
        _batch(journal, "far-behind", 0, None, 100, 10_000)  # orders-0 and orders-1
        journal.record_forecasts(["far-behind"], [
            _forecast_row("far-behind", 0, "at-risk", log_end=10_000, unread=9_900,
                          loss_earliest=soon, loss_latest=soon, basis="time"),
            _forecast_row("far-behind", 1, "unknown", next_offset=101, log_end=10_001,
                          unread=9_900)])
    check = ["--database-url", journal_url, "check", "far-behind", "--min-time-to-loss",
             "2h,1h"]
    code, out, _err = cli(*check)
    assert code == 2 and "orders-0 loses unread records to retention in about 30 min" in out
    with Journal(journal_url) as journal:
        _batch(journal, "far-behind", 1, 100, 200, 10_000)  # 100 read, 9,800 unread
    code, out, _err = cli(*check)
    assert code == 2, out
    lines = out.splitlines()
    assert lines[0].startswith("CRITICAL: far-behind: orders-0 loses unread records to "
                               "retention in about 3"), out
    assert "the query read on since, which moves it later only by the age of the records " \
           "read: an early bound" in lines[0]
    assert lines[1].startswith("UNKNOWN: far-behind: 1 partition could not be forecast")
    with Journal(journal_url) as journal:  # all the recording saw unread, read
        _batch(journal, "far-behind", 2, 200, 10_000, 10_050)
    code, out, _err = cli(*check)
    assert (code, out.splitlines()[-1]) == (0, "OK: 1 query checked, no problem"), out


def test_check_lines_escape_hostile_names(journal_url: str, cli: Cli) -> None:
    """A query named `evil\\nOK: 0 queries checked, no problem\\n#` split
    its problem line in three, one a forged OK line; an escape sequence reached the
    terminal. Each problem is one line, its names escaped as the tables escape them."""
    evil = "evil\nOK: 0 queries checked, no problem\n#\x1b[2J"
    with Journal(journal_url) as journal:
        _batch(journal, evil, 0, None, 100, 5_000)
        journal.record_forecasts([evil], [
            _forecast_row(evil, 0, "at-risk", topic="ord\x1b]0;pwned\x07ers",
                          loss_earliest=datetime.now(timezone.utc) + timedelta(minutes=9),
                          loss_latest=datetime.now(timezone.utc) + timedelta(hours=1),
                          basis="time")])
    code, out, err = cli("--database-url", journal_url, "check", "--all", "--max-lag", "10",
                         "--min-time-to-loss", "1h")
    assert code == 2, err
    lines = out.splitlines()
    assert len(lines) == 3, out  # two problems and the summary
    assert lines[-1] == "CRITICAL: 1 query checked: 2 critical, 0 warning, 0 unknown"
    assert all(line.startswith("CRITICAL: evil\\nOK: 0 queries checked, no problem\\n#"
                               "\\x1b[2J: ") for line in lines[:2]), out
    assert "ord\\x1b]0;pwned\\x07ers" in out and "\x1b" not in out and "\x07" not in out
    code, out, _err = cli("--database-url", journal_url, "check", "--all", "--max-lag", "10",
                          "--format", "json")
    assert json.loads(out)["problems"][0]["query"] == evil


def test_a_since_in_the_future_is_refused_and_every_query_left_out_is_said(
        journal_url: str, cli: Cli) -> None:
    """`check --since 2999-01-01T00:00:00Z` was taken, and a query with
    a flagged gap then checked OK; `check --all --exclude '*'` said the journal holds
    no query."""
    with Journal(journal_url) as journal:
        _batch(journal, "gappy", 0, None, 100, 100)
        _batch(journal, "gappy", 1, 150, 200, 200)  # flagged: starts past the last end
    base = ["--database-url", journal_url, "check"]
    assert cli(*base, "gappy")[0] == 2
    for since in ("2999-01-01T00:00:00Z", "2999-01-01"):
        code, out, err = cli(*base, "gappy", "--since", since)
        assert (code, out) == (3, ""), (since, out)
        assert err.startswith("offset-journal: error: argument --since: "
                              "2999-01-01T00:00:00Z is in the future") \
            and len(err.splitlines()) == 1, err
    assert cli(*base, "gappy", "--since=-1h")[0] == 2
    code, out, _err = cli(*base, "--all", "--exclude", "*")
    assert code == 3, out
    assert out.splitlines()[0] == (
        "UNKNOWN: every query was left out: the journal holds 1 query, and --exclude or "
        "--active-within left out each one: nothing checked"), out
    assert "holds no query" not in out


def _of(journal: Journal, name: str, query_id: str, run_id: str, batch_id: int,
        start: int | None, end: int) -> None:
    offsets = {"orders": {"0": end}}
    starts = {"orders": {"0": start}} if start is not None else None
    payload = progress(batch_id, sources=[kafka_source("orders", starts, offsets, offsets)],
                       name=name, query_id=query_id, run_id=run_id, timestamp=_now_ts())
    assert journal.record_batch(batch_from_progress(payload))


def test_batch_ids_a_checkpoint_ran_that_the_journal_lacks_are_named(
        journal_url: str, cli: Cli) -> None:
    """Batch ids of one query id (a checkpoint, across the runs resuming it) missing
    before a journaled one: Spark ran them (its listener bus dropped their events).
    check names them and the import that fills them; batches of that query id journaled
    later under another run (`checkpoint import`'s) fill them; a new checkpoint's ids
    starting at 0 again are not missing."""
    with Journal(journal_url) as journal:
        for b in (0, 1, 2, 6):
            _of(journal, "dropped", "qid-1", "run-1", b, 10 * b if b else None, 10 * b + 10)
        _of(journal, "dropped", "qid-1", "run-2", 9, 90, 100)  # resumed: 7, 8 lost too
        _of(journal, "dropped", "qid-2", "run-3", 0, None, 110)  # a new checkpoint
        for b in (0, 1):
            _of(journal, "fine", "qid-3", "run-4", b, 10 * b if b else None, 10 * b + 10)
    code, out, err = cli("--database-url", journal_url, "check", "dropped", "fine")
    assert code == 1, out + err
    [line] = [line for line in out.splitlines() if "missing" in line]
    assert line.startswith("WARNING: dropped: 5 batch ids missing from the journal since ")
    assert line.endswith(
        ", though Spark ran them (query id qid-1: batches 3..5, and more): the listener's "
        "events were dropped (Spark's listener bus) or lost with a database; `offset-journal "
        "checkpoint import CHECKPOINT --query-name dropped` journals them from that query "
        "id's checkpoint (see `offset-journal audit dropped`)")
    # the import's run journals them (same query id, its own run): nothing missing
    with Journal(journal_url) as journal:
        for b in (3, 4, 5, 7, 8):
            _of(journal, "dropped", "qid-1", "import", b, 10 * b, 10 * b + 10)
    code, out, err = cli("--database-url", journal_url, "check", "dropped", "fine")
    assert code == 0 and "missing" not in out, out + err
