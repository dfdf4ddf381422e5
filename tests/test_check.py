"""`offset-journal check` against a real journal: every threshold from its journal facts,
a few statements whatever the fleet's size, the recorded forecasts and who may write them."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from offset_journal.db import resolve_url
from offset_journal.health.check import Thresholds, parse_threshold
from offset_journal.health.edge import check_fleet
from offset_journal.journal import Journal
from offset_journal.records import batch_from_progress
from offset_journal.roles import grant
from tests import support
from tests.payloads import kafka_source, progress
from tests.support import Cli

cli = support.cli


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
            _forecast_row("at-risk", 0, "at-risk", loss_earliest=soon, basis="time"),
            _forecast_row("at-risk", 1, "caught-up"),
            _forecast_row("lost", 0, "lost", log_start=160, lost=60)])
        with journal.engine.begin() as conn:
            journal.record_spool_losses([{"loss_id": "l1", "query_name": "fine0000",
                                          "events": 3}], conn)
        journal.record_rejected("bad", progress(7, name="behind", run_id="r", query_id="q"))
        journal.record_rejected("bad", "{not json")

    code, out, err = cli("--database-url", journal_url, "check", "--all", "--max-lag",
                         "1000,5000", "--min-time-to-loss", "6h,1h", "--max-staleness", "1h")
    assert code == 2, err
    lines = out.splitlines()
    assert lines[-1] == "CRITICAL: 6 queries checked: 4 critical, 3 warning, 0 unknown"
    assert [line.split(": ")[:2] for line in lines[:4]] == [
        ["CRITICAL", "at-risk"], ["CRITICAL", "behind"], ["CRITICAL", "gappy"],
        ["CRITICAL", "lost"]]
    assert lines[4].startswith("WARNING: 1 rejected event of no query since ")
    assert [line.split(": ")[:2] for line in lines[5:7]] == [["WARNING", "behind"],
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
    suffix = uuid.uuid4().hex[:8]
    writer, reader, planner = (f"oj_w_{suffix}", f"oj_r_{suffix}", f"oj_p_{suffix}")
    engine = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        for role in (writer, reader, planner):
            conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
    engine.dispose()
    grant(journal_url, writer, reader, planner)

    def url(role: str) -> str:
        return sa.engine.make_url(journal_url).set(username=role).render_as_string(False)

    row = _forecast_row("q", 0, "lost", lost=5)
    with Journal(url(planner)) as j:
        j.record_forecasts(["q"], [row])
        j.record_forecasts(["q"], [row])  # replaced, not added
        assert [dict(r)["lost"] for r in j.recorded_forecasts("q")] == [5]
    for role in (writer, reader):
        with Journal(url(role)) as j:
            assert len(j.recorded_forecasts("q")) == 1
            with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
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
