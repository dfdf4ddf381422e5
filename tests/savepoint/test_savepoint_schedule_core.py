"""Savepoints on a schedule, the pure part: when one is due, which old ones retention
deletes, what `check` and the report say of a stateful query's newest savepoint, and
the schedule's bad input (no Spark, no database)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from offset_journal.errors import ConfigError
from offset_journal.health.check import Threshold, Thresholds, check
from offset_journal.health_rows import NewestSavepoint, QueryFacts
from offset_journal.report._render import render
from offset_journal.report.model import Recovery, ReportData
from offset_journal.rows import RecordedPlan, RecordedSavepoint
from offset_journal.savepoint import SavepointSchedule, ScheduleStats
from offset_journal.savepoint.model import Manifest, SourceEnd
from offset_journal.savepoint.periodic import directory_name, scope_of
from offset_journal.savepoint.policy import Cadence, Retention, decide, within
from tests.support import Cli, one_error_line

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


# --------------------------------------------------------------------------- cadence


def test_a_savepoint_is_due_every_n_batches_counted_from_the_last_due_point():
    c = Cadence(every_batches=3)
    due = [b for b in range(10, 30) if c.due(b, 0.0)]
    assert due == [13, 16, 19, 22, 25, 28]


def test_a_due_point_skipped_moves_the_next_one_on_not_back():
    """The schedule asks once per progress event: events that coalesce (the thread was
    busy) still make one due point, and the next counts from it."""
    c = Cadence(every_batches=5)
    assert not c.due(0, 0.0)
    assert c.due(7, 0.0)  # 5 and 6 were never seen: one due point, not two
    assert not c.due(11, 0.0)
    assert c.due(12, 0.0)


def test_a_savepoint_is_due_every_interval_or_every_n_batches_whichever_first():
    c = Cadence(every_batches=100, every_seconds=60.0)
    assert not c.due(0, 1000.0)
    assert not c.due(1, 1059.0)
    assert c.due(2, 1060.0)  # the interval came first
    assert not c.due(3, 1061.0)
    assert c.due(102, 1062.0)  # then 100 batches


def test_a_query_on_a_new_checkpoint_starts_the_count_again():
    c = Cadence(every_batches=2)
    assert [b for b in (40, 41, 42) if c.due(b, 0.0)] == [42]
    assert not c.due(0, 0.0)  # batch ids from 0 again: not 'due forever', nor never
    assert [b for b in (1, 2, 3) if c.due(b, 0.0)] == [2]


# --------------------------------------------------------------------------- retention


def _row(sid: int, batch: int, *, days_old: float = 0.0, where: str = "/sp/totals",
         deleted: bool = False, forged: bool = False) -> RecordedSavepoint:
    m = Manifest(query_name="totals", run_id="run-1", query_id="qid", batch_id=batch,
                 checkpoint="/chk/v1",
                 end_offsets=(SourceEnd(0, "KafkaV2[Subscribe[t]]", "kafka", {"t": {"0": 5}}),),
                 operators=(), parts=(), created_at="2026-11-25T10:00:00.000+00:00")
    manifest: Any = m.to_dict()
    if forged:
        manifest = {**manifest, "batch_id": batch + 1}  # not a manifest of its own batch
    return RecordedSavepoint(
        id=sid, query_name="totals", created_at=NOW - timedelta(days=days_old),
        run_id="run-1", query_id="qid", batch_id=batch, checkpoint="/chk/v1",
        location=f"{where}/sp-{sid}", manifest_sha256=m.digest, manifest=manifest,
        deleted_at=NOW if deleted else None, deleted_reason="old" if deleted else None)


def _plan(pid: int, **savepoint: Any) -> RecordedPlan:
    return RecordedPlan(id=pid, query_name="totals", created_at=NOW, position="savepoint",
                        mode="default", command="plan", ok=True, kafka_offsets=(),
                        request={"savepoint": savepoint})


def _verdicts(rows: list[RecordedSavepoint], plans: list[RecordedPlan],
              retention: Retention, scope: str = "/sp/totals") -> dict[int, tuple[bool, str]]:
    return {v.savepoint.id: (v.delete, v.why) for v in decide(rows, plans, retention, scope,
                                                               NOW)}


def test_retention_keeps_the_newest_n_and_any_a_recorded_plan_starts_from():
    rows = [_row(i, 10 * i) for i in range(1, 7)]
    plans = [_plan(40, id=2, location="/sp/totals/sp-2", sha256=rows[1].manifest_sha256)]
    got = _verdicts(rows, plans, Retention(keep=2))
    assert got == {6: (False, "the newest"), 5: (False, "within the retention"),
                   4: (True, "beyond the 2 newest kept"), 3: (True, "beyond the 2 newest kept"),
                   2: (False, "restart plan 40 starts from it"),
                   1: (True, "beyond the 2 newest kept")}
    # A plan from the savepoint's directory names it by its manifest's SHA-256.
    by_digest = [_plan(41, id=None, location="/elsewhere", sha256=rows[0].manifest_sha256)]
    assert _verdicts(rows, by_digest, Retention(keep=2))[1] == (
        False, "restart plan 41 starts from it")


def test_retention_by_age_never_deletes_the_newest():
    rows = [_row(1, 10, days_old=30), _row(2, 20, days_old=9), _row(3, 30, days_old=8)]
    got = _verdicts(rows, [], Retention(max_age=timedelta(days=7)))
    assert got[3] == (False, "the newest")  # 8 days old, and still kept
    assert got[2][0] and got[2][1].startswith("older than 7 days (made 2026-11-21")
    assert got[1][0]
    both = _verdicts(rows, [], Retention(keep=5, max_age=timedelta(days=10)))
    assert both == {3: (False, "the newest"), 2: (False, "within the retention"),
                    1: (True, "older than 10 days (made 2026-10-31T12:00:00Z)")}


def test_retention_touches_only_savepoints_of_its_own_location_that_are_savepoints():
    """A savepoint made by hand elsewhere, one already deleted, and a row whose manifest
    is not of its batch (any role that may record one could point it at any directory)
    are never deleted, nor counted."""
    rows = [_row(1, 10, where="/sp/by-hand"), _row(2, 20, forged=True), _row(3, 30,
                                                                                deleted=True),
            _row(4, 40), _row(5, 50), _row(6, 60)]
    got = _verdicts(rows, [], Retention(keep=1))
    assert got == {6: (False, "the newest"), 5: (True, "beyond the 1 newest kept"),
                   4: (True, "beyond the 1 newest kept")}


def test_a_location_is_inside_a_scope_only_directly_below_it():
    assert within("/sp/totals/a", "/sp/totals")
    assert within("/sp/totals/a/", "/sp/totals/")
    assert within("/a", "/")
    assert not within("/sp/totals/by-hand/a", "/sp/totals")  # a schedule writes children
    assert not within("s3a://b/sp/totals/x/a", "s3a://b/sp/totals")
    assert not within("/sp/totals", "/sp/totals")
    assert not within("/sp/totals-old/a", "/sp/totals")  # a sibling with a longer name
    assert not within("/sp/x/../../etc", "/sp")
    assert within("s3a://b/sp/totals/a", "s3a://b/sp/totals")
    assert not within("s3://b/sp/totals/a", "s3a://b/sp/totals")
    assert not within("s3a://b/sp/totals/../other", "s3a://b/sp/totals")
    assert not within("/b/sp/totals/a", "s3a://b/sp/totals")


def test_a_scheduled_savepoint_names_its_directory_and_its_scope():
    when = datetime(2026, 11, 30, 8, 5, 9, 42_000, tzinfo=timezone.utc)
    assert directory_name("orders/v2 totals", 41, when) == \
        "orders_v2_totals-batch41-20261130T080509042Z"
    assert scope_of("s3a://b/sp/", None) == "s3a://b/sp"
    assert scope_of(None, "s3a://b/sp/totals-7") == "s3a://b/sp"
    assert scope_of(None, "/sp/totals-7/") == "/sp"


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, words", [
    ({"every": "soon"}, "every: bad duration 'soon'"),
    ({"every": 15}, "must be a duration such as '15m'"),
    ({"every_batches": 0}, "every_batches must be a whole number of 1 or more"),
    ({"every_batches": True}, "every_batches must be a whole number"),
    ({"every_batches": 5, "keep": 0}, "keep must be a whole number of 1 or more"),
    ({"every_batches": 5, "max_age": "-1d"}, "max_age: bad duration '-1d'"),
    ({"every_batches": 5, "max_age": timedelta(0)}, "max_age must be a positive duration"),
    ({}, "give every_batches=N, every='15m', or both"),
    ({"every_batches": 5, "under": " "}, "under must be a non-empty string"),
    ({"every_batches": 5, "flush_timeout": "30"}, "flush_timeout must be a number of "
                                                  "seconds, 0 or more, not '30'"),
    ({"every_batches": 5, "flush_timeout": -1}, "flush_timeout must be a number"),
])
def test_a_schedule_that_is_not_a_schedule_is_one_line(kwargs: dict[str, Any], words: str):
    args = {"checkpoint": "/chk", "under": "/sp", **kwargs}
    with pytest.raises(ConfigError) as raised:
        SavepointSchedule("totals", **args)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_an_attach_that_cannot_keep_its_schedule_is_one_line_and_attaches_nothing(
        tmp_path: Any):
    """Two schedules of one query would take two savepoints at once; a Spark without
    the State Data Source (3.5 has the listener, not savepoints) cannot take any: both
    refused in one line before a journal is opened or a thread started."""
    from offset_journal import attach
    from offset_journal.capture.listener import OffsetJournalListener

    one = SavepointSchedule("totals", checkpoint="/chk", under=str(tmp_path / "sp"),
                            every_batches=5)
    other = SavepointSchedule("totals", checkpoint="/chk", under=str(tmp_path / "sp2"),
                              every="1h")
    with pytest.raises(ConfigError, match=r"^savepoints= has more than one schedule of "
                                          r"query 'totals': give each query one"):
        OffsetJournalListener("postgresql://unused/x", spool_dir=str(tmp_path),
                              savepoints=[one, other])

    class Spark35:  # what attach() reads of a classic session on Spark 3.5
        version = "3.5.1"

    with pytest.raises(ConfigError) as refused:
        attach(Spark35(), "postgresql://unused/x", spool_dir=str(tmp_path), savepoints=one)
    text = str(refused.value)
    assert text.startswith("savepoint create needs Spark 4.0 or later") and "\n" not in text
    assert "this is Spark 3.5.1" in text
    assert not list(tmp_path.iterdir()) and one._bound is None and one._threads == []


@pytest.mark.parametrize("argv, words", [
    (["savepoint", "create", "q", "--checkpoint", "/c", "--under", "/s", "--max-age", "soon"],
     "--max-age: bad duration 'soon'"),
    (["savepoint", "create", "q", "--checkpoint", "/c", "--under", "/s", "--keep", "0"],
     "--keep: must be > 0"),
    (["savepoint", "create", "q", "--checkpoint", "/c", "--under", "/s", "--to", "/t",
      "--keep", "1"], "not allowed with argument"),
    (["savepoint", "create", "q", "--checkpoint", "/c", "--under", "/s", "--keep", "1",
      "--no-record"], "--no-record takes no --under, --keep or --max-age"),
    (["check", "--all", "--max-savepoint-age", "old"], "bad duration 'old'"),
])
def test_bad_schedule_arguments_are_one_line_and_unknown(cli: Cli, argv: list[str],
                                                         words: str):
    """Cron's form exits as `check` does: bad arguments are 3 (UNKNOWN), one line."""
    code, out, err = cli("--database-url", "postgresql://nobody@127.0.0.1:1/none", *argv)
    line = one_error_line(code, err)
    assert code == 3 and out == "" and words in line, line


# --------------------------------------------------------------------------- check, report


def _facts(name: str, *, stateful: bool = True, age: timedelta | None = None,
           batches: int = 40, records: int = 1_200) -> QueryFacts:
    sp = (NewestSavepoint(7, NOW - age, 120, "/sp/totals/x", batches, records)
          if age is not None else None)
    return QueryFacts(name, last_trigger_at=NOW, last_recorded_at=NOW, stateful=stateful,
                      savepoint=sp)


def test_check_says_an_old_savepoint_and_what_a_recovery_reads_again():
    limits = Thresholds(max_savepoint_age=Threshold(timedelta(hours=6), timedelta(hours=1)))
    result = check([_facts("fresh", age=timedelta(minutes=10)),
                    _facts("stale", age=timedelta(hours=2), batches=1, records=1),
                    _facts("ancient", age=timedelta(hours=7), batches=3_000,
                           records=1_500_000),
                    _facts("never"), _facts("stateless", stateful=False)], limits, NOW)
    lines = [p.line() for p in result.problems]
    assert lines == [
        "CRITICAL: ancient: its newest savepoint, 7 (batch 120), is 7.0 h old (made "
        "2026-11-30T05:00:00Z; over 60 min,6.0 h): a recovery today reads 3,000 batches "
        "(1,500,000 records) again",
        "CRITICAL: never: a stateful query with no savepoint: a lost checkpoint loses its "
        "state (take one: `offset-journal savepoint create`, or on a schedule: "
        "attach(..., savepoints=SavepointSchedule(...)))",
        "WARNING: stale: its newest savepoint, 7 (batch 120), is 2.0 h old (made "
        "2026-11-30T10:00:00Z; over 60 min,6.0 h): a recovery today reads 1 batch "
        "(1 record) again"]
    assert int(result.exit_code) == 2
    recovery = {r["query"]: r for r in json.loads(result.to_json())["recovery"]}
    assert set(recovery) == {"fresh", "stale", "ancient", "never"}  # stateful ones only
    assert recovery["never"] == {"query": "never", "savepoint": None}
    assert recovery["fresh"] == {"query": "fresh", "savepoint": 7, "batch_id": 120,
                                 "made": "2026-11-30T11:50:00Z", "age_seconds": 600.0,
                                 "location": "/sp/totals/x", "batches_again": 40,
                                 "records_again": 1200}
    # Without the threshold: no line, but the JSON still says what a recovery costs.
    quiet = check([_facts("never")], Thresholds(), NOW)
    assert quiet.problems == [] and json.loads(quiet.to_json())["recovery"] == [
        {"query": "never", "savepoint": None}]


def _report(recovery: Recovery | None) -> str:
    return render(ReportData("totals", NOW, NOW, NOW, 1.0, 1, 1, 1, 1, recovery=recovery))


def test_the_report_says_what_a_recovery_reads_again():
    page = _report(Recovery(7, NOW, 120, "/sp/totals/<x>", 3_000, 1_500_000))
    assert "<h2>Recovery</h2>" in page
    assert ("Newest savepoint: 7 (batch 120, made 2026-11-30T12:00:00Z, at "
            "<code>/sp/totals/&lt;x&gt;</code>). A recovery from it today reads "
            "<b>3,000</b> batches (<b>1,500,000</b> records) again.") in page
    assert "No savepoint: a lost or broken checkpoint loses" in _report(Recovery())
    assert "<h2>Recovery</h2>" not in _report(None)  # a stateless query


def test_another_querys_events_never_hide_a_due_batch(tmp_path: Any):
    """Events of two queries handed over faster than the schedule's thread reads them:
    each of the schedule's query is read (its cadence sees batch 3), none lost behind
    the other query's newer one. Nothing falls due, so nothing is taken."""
    schedule = SavepointSchedule("totals", checkpoint="/chk", under=str(tmp_path / "sp"),
                                 every_batches=100)
    schedule.bind(object(), None, lambda _timeout: True)  # type: ignore[arg-type]
    try:
        with schedule._lock:  # the schedule's thread waits until all are handed over
            for batch in range(4):
                schedule.on_progress(json.dumps({"name": "totals", "batchId": batch}))
                schedule.on_progress(json.dumps({"name": "other", "batchId": 50 + batch}))
        deadline = time.monotonic() + 30
        while schedule._cadence._last_batch != 3:
            assert time.monotonic() < deadline, schedule._cadence
            time.sleep(0.01)
        assert schedule._cadence._next_batch == 100  # armed at batch 0, its first
        assert schedule.stats() == ScheduleStats()
    finally:
        assert schedule.close(30)
