"""The retention forecast and the fleet check as pure functions (the quick tier), and the
commands' argument errors (exit 3 for check, as monitoring plugins read UNKNOWN)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from offset_journal.cli import main as cli_main
from offset_journal.health.check import (
    CheckExit,
    Threshold,
    Thresholds,
    check,
    forecast_facts,
    in_scope,
    parse_threshold,
)
from offset_journal.health.forecast import (
    RECORD_OVERHEAD,
    PartitionLog,
    TopicRetention,
    configs_unknown,
    first_loss,
    forecast,
    growth_rate,
    sentence,
    size_window,
    time_window,
    topic_retention,
)
from offset_journal.health_rows import ForecastFacts, QueryFacts
from offset_journal.journal import Batch, SourceOffsets
from offset_journal.offsets import EARLIEST, PartitionOffset
from offset_journal.restart import KafkaFacts, compute_plan
from offset_journal.restart.decide.kafka_offsets import check_against_cluster, default_start
from offset_journal.values import parse_duration

NOW = 1_800_000_000_000  # epoch ms
HOUR = 3_600_000
TIME_ONLY = TopicRetention(retention_ms=24 * HOUR, retention_bytes=None, segment_ms=HOUR,
                           segment_bytes=1 << 30, check_interval_ms=300_000)


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


# --------------------------------------------------------------------------- forecast


def test_time_retention_takes_the_record_at_its_time_plus_retention_at_the_earliest() -> None:
    stamped = NOW - 19 * HOUR
    assert time_window(stamped, TIME_ONLY) == (NOW + 5 * HOUR,
                                               NOW + 6 * HOUR + 300_000)
    f = forecast("orders-to-lake", 0, "orders", 3, 1000,
                 PartitionLog(500, 1800, first_unread_ms=stamped), TIME_ONLY, NOW)
    assert (f.status, f.basis, f.unread, f.lost) == ("at-risk", "time", 800, 0)
    assert f.seconds_left(NOW) == 5 * 3600
    assert sentence(f, NOW).startswith("partition 3 of orders loses unread records in "
                                       "about 5.0 h (time retention")
    assert sentence(f, NOW).endswith("800 records unread) unless orders-to-lake catches up")


def test_size_retention_follows_the_logs_growth() -> None:
    cfg = TopicRetention(retention_ms=None, retention_bytes=100_000, segment_ms=10_000,
                         segment_bytes=1 << 20, check_interval_ms=1000)
    # 1,000-byte records, 10 a second: the log keeps 100 records after a segment, and
    # the record at 1,000 goes once the log ends at 1,101: 51 records (5.1 s) from now.
    log = PartitionLog(900, 1050, first_unread_ms=NOW, record_bytes=1000, records_per_s=10)
    earliest, latest = size_window(1000, log, cfg, NOW)  # type: ignore[misc]
    assert earliest == NOW + 5100
    # at the latest one segment (10 s of records: 100) and one retention check later
    assert latest == NOW + 15_100 + 1000
    f = forecast("q", 0, "t", 0, 1000, log, cfg, NOW)
    assert (f.status, f.basis, f.loss_earliest) == ("at-risk", "size", NOW + 5100)
    # A log that does not grow never reaches its limit.
    assert size_window(1000, PartitionLog(900, 1050, NOW, 1000, 0.0), cfg, NOW) is None


def test_a_size_limit_already_passed_waits_for_the_records_segment() -> None:
    cfg = TopicRetention(retention_ms=None, retention_bytes=100_000, segment_ms=10_000,
                         segment_bytes=1 << 20, check_interval_ms=1000)
    # Past the limit (due at 1,101, the log ends at 1,200): at the earliest now, at the
    # latest once one more segment (10 s of records: 100) is written after the due end
    # (0.1 s) and a retention check later, not just a check later.
    log = PartitionLog(900, 1200, NOW, 1000, 10.0)
    assert size_window(1000, log, cfg, NOW) == (NOW, NOW + 100 + 1000)
    # A log that stopped growing may hold the record in its active segment, which size
    # retention never deletes: no loss foreseen, not "any moment now"...
    assert size_window(1000, PartitionLog(900, 1200, NOW, 1000, 0.0), cfg, NOW) is None
    # ...unless a full segment (1,048 records) lies after the record: then it is closed.
    assert size_window(1000, PartitionLog(900, 3000, NOW, 1000, 0.0), cfg, NOW) == (
        NOW, NOW + 1000)


def test_growth_is_measured_over_the_logs_own_span_when_younger_than_the_window() -> None:
    # 85 records written over the last 8.5 s; offsetsForTimes(now - 10 min) finds the
    # log start (0, stamped 8.5 s ago): 10 records a second, not 85 / 600.
    assert growth_rate(85, 0, NOW - 8500, 85, None, NOW) == 10.0
    # Since the first unread record (40, stamped 2 s ago) when that is faster.
    assert growth_rate(85, 0, NOW - 8500, 45, NOW - 2000, NOW) == 20.0
    # Nothing to measure over: no record found, the record just written (1 s at least).
    assert growth_rate(85, None, None, 85, None, NOW) == 0.0
    assert growth_rate(85, 84, NOW, 85, None, NOW) == 1.0
    # So the size forecast of such a young log comes when it is due: the 100 records
    # the log keeps after the record at 0 are written 10.1 s after it, 1.6 s from now.
    cfg = TopicRetention(None, 100_000, 2000, 1 << 30, check_interval_ms=1000)
    log = PartitionLog(0, 85, NOW - 8500, 1000, growth_rate(85, 0, NOW - 8500, 0,
                                                           NOW - 8500, NOW))
    f = forecast("q", 0, "t", 0, 0, log, cfg, NOW)
    assert (f.status, f.basis, f.loss_earliest) == ("at-risk", "size", NOW + 1600)


def test_the_first_limit_reached_decides() -> None:
    cfg = TopicRetention(retention_ms=HOUR, retention_bytes=100_000, segment_ms=10_000,
                         segment_bytes=1 << 20, check_interval_ms=1000)
    log = PartitionLog(0, 1050, first_unread_ms=NOW - HOUR + 2000, record_bytes=1000,
                       records_per_s=10)
    f = forecast("q", 0, "t", 0, 1000, log, cfg, NOW)
    assert (f.basis, f.loss_earliest) == ("time", NOW + 2000)


def test_what_is_not_at_risk() -> None:
    log = PartitionLog(0, 100, first_unread_ms=NOW)
    assert forecast("q", 0, "t", 0, 100, log, TIME_ONLY, NOW).status == "caught-up"
    forever = TopicRetention(None, None, HOUR, 1 << 30)
    assert forecast("q", 0, "t", 0, 50, log, forever, NOW).status == "safe"
    compacted = TopicRetention(HOUR, None, HOUR, 1 << 30, deletes=False)
    assert forecast("q", 0, "t", 0, 50, log, compacted, NOW).status == "safe"
    unread = PartitionLog(0, 100)  # the record could not be read, or has no timestamp
    assert forecast("q", 0, "t", 0, 50, unread, TIME_ONLY, NOW).status == "unknown"
    sized = TopicRetention(None, 1000, HOUR, 1 << 30)
    assert forecast("q", 0, "t", 0, 50, unread, sized, NOW).status == "unknown"
    # a size limit needs no timestamp: a record without one is still forecast by size
    assert forecast("q", 0, "t", 0, 50, PartitionLog(0, 100, None, 100, 1.0), sized,
                    NOW).status == "at-risk"
    assert forecast("q", 0, "t", 0, 50, None, None, NOW).status == "gone"
    assert forecast("q", 0, "t", 0, 150, log, TIME_ONLY, NOW).status == "beyond-end"
    assert first_loss([forecast("q", 0, "t", 0, 100, log, TIME_ONLY, NOW)]) is None


def test_records_deleted_unread_are_data_loss() -> None:
    lost = forecast("q", 1, "orders", 2, 40, PartitionLog(100, 300), TIME_ONLY, NOW)
    assert (lost.status, lost.lost, lost.seconds_left(NOW)) == ("lost", 60, 0.0)
    _offsets, found = check_against_cluster({"orders": {2: 40}}, {"orders": {2: (100, 300)}})
    assert found.errors[0].startswith("DATA LOSS: 60 records in 1 partition were deleted")
    at_risk = forecast("q", 1, "orders", 3, 100, PartitionLog(0, 300, NOW), TIME_ONLY, NOW)
    assert first_loss([at_risk, lost]) is lost


def test_the_forecast_starts_where_the_default_plan_does() -> None:
    """Partitions added since the last batch are read from 0 (a log start above it is
    DATA LOSS, as the plan says), a subscribed topic never journaled from its log
    start, offsets beyond a log end refused, a deleted topic left out: the forecast's
    next offsets and errors are the plan's."""
    ends = {"orders": {0: 100, 1: 50}, "refunds": {0: 500}, "gone": {0: 7}}
    rows = tuple(PartitionOffset(t, p, o - 10, o) for t in sorted(ends)
                 for p, o in sorted(ends[t].items()))
    src = SourceOffsets(0, "KafkaV2[Subscribe[orders, refunds, gone, fresh]]", "kafka",
                        None, {t: {str(p): o for p, o in v.items()} for t, v in ends.items()},
                        10, rows)
    batch = Batch("q", "qid", "run-1", 7, _at(NOW), 100, 10, None, None, None, (src,), pk=7)
    state = {"orders": {0: (0, 300), 1: (60, 300), 2: (5, 20)}, "refunds": {0: (0, 10)},
             "fresh": {0: (3, 9)}}
    journaled, starts, found = default_start(batch, 0, state)
    plan = compute_plan("q",
                        batch,
                        kafka=KafkaFacts(state=state)).sources[0]
    assert plan.offsets is not None
    assert {t: {p: (0 if o == EARLIEST and t == "orders" else o) for p, o in parts.items()}
            for t, parts in plan.offsets.items() if t != "fresh"} == \
        {t: parts for t, parts in starts.items() if t != "fresh"}
    assert plan.log_starts[("fresh", 0)] == starts["fresh"][0] == 3
    assert found.errors == plan.errors
    assert [e.split(":")[0] for e in found.errors] == [
        "refunds-0 starts at 500, beyond its log end 10", "DATA LOSS"]
    assert "orders-2 starts at 0 but its log starts at 5" in found.errors[1]
    assert journaled["gone"] == {0: 7} and "gone" not in starts
    status = {(t, p): forecast("q", 0, t, p, o, PartitionLog(*state[t][p], NOW), TIME_ONLY,
                               NOW).status for t, parts in starts.items()
              for p, o in parts.items()}
    assert status == {("orders", 0): "at-risk", ("orders", 1): "lost", ("orders", 2): "lost",
                      ("refunds", 0): "beyond-end", ("fresh", 0): "at-risk"}


def test_topic_configs_as_the_broker_describes_them() -> None:
    cfg = topic_retention({"retention.ms": "-1", "retention.bytes": "5000",
                           "segment.ms": "2000", "segment.bytes": "1048576",
                           "cleanup.policy": "compact,delete"},
                          {"log.retention.check.interval.ms": "1000"})
    assert cfg == TopicRetention(None, 5000, 2000, 1048576, True, 1000)
    assert not topic_retention({"cleanup.policy": "compact"}, {}).deletes
    assert topic_retention({}, {}).retention_ms == 7 * 24 * HOUR
    assert RECORD_OVERHEAD >= 61  # a record alone in its batch carries the batch header


# --------------------------------------------------------------------------- check


def test_thresholds_parse_with_an_optional_warning_level() -> None:
    assert parse_threshold("1000", int) == Threshold(1000)
    assert parse_threshold("1000,5000", int) == Threshold(5000, 1000)
    assert parse_threshold("6h,1h", parse_duration, minimum=True) == Threshold(
        timedelta(hours=1), timedelta(hours=6))
    for bad, minimum in (("5000,1000", False), ("1h,6h", True), ("1,2,3", False),
                         (",5", False)):
        with pytest.raises(ValueError):
            parse_threshold(bad, parse_duration if "h" in bad else int, minimum=minimum)
    t = Threshold(5000, 1000)
    assert (t.level(999), t.level(1001), t.level(5001)) == (None, "warning", "critical")


NOW_DT = _at(NOW)
LIMITS = Thresholds(max_lag=Threshold(5000, 1000),
                    max_staleness=Threshold(timedelta(minutes=30), timedelta(minutes=10)),
                    min_time_to_loss=Threshold(timedelta(hours=1), timedelta(hours=6)),
                    since=NOW_DT - timedelta(days=1))


def _fresh(name: str, **kw: object) -> QueryFacts:
    base: dict[str, object] = {"last_recorded_at": NOW_DT - timedelta(seconds=30),
                               "total_lag": 10, "forecast": _foreseen()}
    base.update(kw)
    return QueryFacts(name, **base)  # type: ignore[arg-type]


def _foreseen(loss_at: datetime | None = None, part: tuple[str, int] | None = None,
              made: datetime = NOW_DT - timedelta(minutes=2), **kw: int) -> ForecastFacts:
    return ForecastFacts(made, 4, loss_at=loss_at, loss_partition=part, **kw)


def test_a_healthy_fleet_exits_0() -> None:
    result = check([_fresh("a"), _fresh("b", forecast=_foreseen(NOW_DT + timedelta(days=2),
                                                                 ("t", 1)))], LIMITS, NOW_DT)
    assert (result.exit_code, result.problems) == (CheckExit.OK, [])
    assert result.summary() == "OK: 2 queries checked, no problem"


def test_each_threshold_warns_then_turns_critical() -> None:
    facts = [
        _fresh("lag-warn", total_lag=2000, worst=("orders", 3, 1500)),
        _fresh("lag-crit", total_lag=9000),
        _fresh("stale", last_recorded_at=NOW_DT - timedelta(minutes=15)),
        _fresh("loss-soon", forecast=_foreseen(NOW_DT + timedelta(minutes=20),
                                               ("orders", 3))),
        _fresh("loss-later", forecast=_foreseen(NOW_DT + timedelta(hours=3))),
    ]
    result = check(facts, LIMITS, NOW_DT)
    got = [(p.severity, p.query_name, p.kind) for p in result.problems]
    assert got == [("critical", "lag-crit", "lag"), ("critical", "loss-soon", "time-to-loss"),
                   ("warning", "lag-warn", "lag"), ("warning", "loss-later", "time-to-loss"),
                   ("warning", "stale", "staleness")]
    assert result.exit_code == CheckExit.CRITICAL
    line = result.problems[1].line()
    assert line.startswith("CRITICAL: loss-soon: orders-3 loses unread records to retention "
                           "in about 20 min")
    assert "furthest behind: orders-3 by 1,500" in result.problems[2].text
    assert check(facts[2:3], LIMITS, NOW_DT).exit_code == CheckExit.WARNING


def test_data_loss_flagged_batches_and_unknown_queries() -> None:
    result = check([_fresh("lost", forecast=_foreseen(lost=60)),
                    _fresh("gappy", flagged=2, flagged_example="r:5: gap"),
                    _fresh("spooled", spool_lost_events=3, rejected=1),
                    QueryFacts("nobody", exists=False)], Thresholds(), NOW_DT,
                   rejected_unattributed=4)
    kinds = [(p.severity, p.query_name, p.kind) for p in result.problems]
    assert kinds == [("critical", "gappy", "flagged"), ("critical", "lost", "data-loss"),
                     ("unknown", "nobody", "unknown-query"), ("warning", None, "rejected"),
                     ("warning", "spooled", "rejected"), ("warning", "spooled", "spool-loss")]
    assert "DATA LOSS: 60 records deleted by retention before being read" in \
        result.problems[1].text
    assert result.exit_code == CheckExit.CRITICAL
    # Without a critical problem, an unknown query makes the whole check UNKNOWN (3).
    assert check([QueryFacts("nobody", exists=False), _fresh("a", rejected=1)],
                 Thresholds(), NOW_DT).exit_code == CheckExit.UNKNOWN
    assert '"exit_code": 3' in check([QueryFacts("x", exists=False)], Thresholds(),
                                     NOW_DT).to_json()
    # --all on a journal with no query at all: not "ok"
    assert check([], Thresholds(), NOW_DT).exit_code == CheckExit.UNKNOWN


def test_batch_ids_the_journal_lacks_are_a_warning_that_says_how_to_fill_them() -> None:
    [one] = check([_fresh("q", missing_batches=1, missing_example="qid:4..4")], Thresholds(),
                  NOW_DT).problems
    assert (one.severity, one.kind) == ("warning", "missing-batches")
    assert "1 batch id missing from the journal since " in one.text
    assert "(query id qid: batch 4): " in one.text
    assert "`offset-journal checkpoint import CHECKPOINT --query-name q`" in one.text
    [more] = check([_fresh("q", missing_batches=7, missing_example="a:b:3..5")],
                   Thresholds(), NOW_DT).problems
    assert "7 batch ids missing" in more.text and "(query id a:b: batches 3..5, and more)" \
        in more.text


def test_no_forecast_to_go_by_is_unknown_and_a_gone_partition_a_warning() -> None:
    """--min-time-to-loss passes only on a forecast: a query with none recorded, one
    older than --max-forecast-age, or a partition not forecast is UNKNOWN; a partition
    of a deleted topic a warning; offsets beyond the log end critical, as plan refuses."""
    facts = [
        _fresh("none", forecast=None),
        _fresh("old", forecast=_foreseen(made=NOW_DT - timedelta(minutes=16))),
        _fresh("unreadable", forecast=_foreseen(unknown=1)),
        _fresh("gone", forecast=_foreseen(gone=2)),
        _fresh("recreated", forecast=_foreseen(beyond_end=1)),
        _fresh("read-on", forecast=ForecastFacts(NOW_DT, 0)),  # rows read past: fine
        _fresh("no-kafka", forecast=None, reads_kafka=False),
    ]
    result = check(facts, LIMITS, NOW_DT)
    got = [(p.severity, p.query_name, p.kind) for p in result.problems]
    assert got == [("critical", "recreated", "beyond-end"), ("unknown", "none", "no-forecast"),
                   ("unknown", "old", "old-forecast"),
                   ("unknown", "unreadable", "unknown-forecast"), ("warning", "gone", "gone")]
    assert "16 min old" in result.problems[2].text
    assert "`plan` refuses to start there" in result.problems[0].text
    assert check(facts[:1], LIMITS, NOW_DT).exit_code == CheckExit.UNKNOWN
    # Without --min-time-to-loss none of it is asked, but beyond the log end still is.
    quiet = Thresholds(max_lag=Threshold(5000))
    assert [p.query_name for p in check(facts, quiet, NOW_DT).problems] == ["recreated"]
    # A live forecast is as old as the check.
    live = _fresh("live", live=True, forecast=_foreseen(made=NOW_DT - timedelta(hours=1)))
    assert check([live], LIMITS, NOW_DT).problems == []


def test_topics_whose_configs_were_refused_are_said_in_one_line_with_why() -> None:
    """A topic the broker would not describe (an authorizer): its partitions unknown,
    the check's UNKNOWN line says which topic and why (the generic reasons otherwise)."""
    refused = {"shut": "Topic authorization failed; the principal lacks DescribeConfigs "
                       "on it"}
    assert configs_unknown(refused) == (
        "the retention configs of topic shut could not be read (Topic authorization "
        "failed; the principal lacks DescribeConfigs on it): its partitions' time to loss "
        "is unknown")
    many = configs_unknown({f"t{i}\n": "no" for i in range(7)})
    assert many.startswith("the retention configs of 7 topics could not be read (t0\\n: "
                           "no; also t1\\n, t2\\n, t3\\n, t4\\n and 2 more): their ")
    assert "\n" not in many
    log = PartitionLog(0, 10, first_unread_ms=NOW)
    made = [forecast("q", 0, "shut", 0, 0, log, None, NOW),
            forecast("q", 0, "open", 0, 0, log, TIME_ONLY, NOW)]
    facts = forecast_facts(made, NOW_DT, {**refused, "other": "x"})
    assert (facts.unknown, facts.unknown_why) == (1, configs_unknown(refused))
    assert forecast_facts(made[1:], NOW_DT, refused).unknown_why is None
    [problem] = check([_fresh("q", live=True, forecast=facts)], LIMITS, NOW_DT).problems
    assert problem.line() == (f"UNKNOWN: q: 1 partition could not be forecast "
                              f"({configs_unknown(refused)}) (forecast now; see "
                              "`offset-journal retention q`)")


def test_all_leaves_out_excluded_and_retired_queries() -> None:
    facts = [_fresh("orders"), _fresh("retired-2024"),
             _fresh("stopped", last_recorded_at=NOW_DT - timedelta(days=30)),
             QueryFacts("never")]
    assert [q.query_name for q in in_scope(facts, ("retired-*",))] == [
        "orders", "stopped", "never"]
    assert [q.query_name for q in in_scope(facts, (), timedelta(days=7), NOW_DT)] == [
        "orders", "retired-2024"]


@pytest.mark.parametrize("argv", [
    ["check"],  # neither queries nor --all
    ["check", "--all", "q"],
    ["check", "--all", "--max-lag", "5000,1000"],
    ["check", "--all", "--min-time-to-loss", "1h,6h"],
    ["check", "--all", "--max-staleness", "soon"],
])
def test_check_argument_errors_are_unknown_3_in_one_line(
        argv: list[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFSET_JOURNAL_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/x")
    assert cli_main(argv) == 3
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("offset-journal: error: ")


def test_retention_argument_errors_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["retention", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert cli_main(["retention", "q", "--all", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert cli_main(["retention", "q"]) == 2  # no --bootstrap-servers
    _out, err = capsys.readouterr()
    assert len(err.splitlines()) == 3


# ---------------------------------------------------------------------------

LONG_MAX = 9_223_372_036_854_775_807  # Kafka's Long.MAX: "forever" (Debezium's history topic)


def test_a_limit_of_long_max_is_no_limit_never_an_overflow() -> None:
    """A retention.ms (or retention.bytes) of Long.MAX deletes nothing
    before the last time that can be said: safe, and every time it prints is a time
    (the loss time overflowed a datetime: `retention` exited 1, the fleet with it)."""
    forever = topic_retention({"retention.ms": str(LONG_MAX)}, {})
    log = PartitionLog(0, 100, first_unread_ms=NOW - HOUR, record_bytes=100,
                       records_per_s=10.0)
    f = forecast("q", 0, "t", 0, 50, log, forever, NOW)
    assert (f.status, f.loss_earliest, f.loss_latest) == ("safe", None, None)
    assert f.row()["first_unread_at"] == _at(NOW - HOUR)
    assert f.to_dict(NOW)["status"] == "safe"
    by_size = topic_retention({"retention.ms": "-1", "retention.bytes": str(LONG_MAX)}, {})
    assert forecast("q", 0, "t", 0, 50, log, by_size, NOW).status == "safe"
    # segment.ms of Long.MAX: a segment never rolls by time; the loss still comes at its
    # earliest, and its latest is the last time that can be said.
    rolls_never = topic_retention({"retention.ms": str(HOUR), "segment.ms": str(LONG_MAX)},
                                  {})
    at_risk = forecast("q", 0, "t", 0, 50, log, rolls_never, NOW)
    assert (at_risk.status, at_risk.loss_earliest) == ("at-risk", NOW)
    assert at_risk.row()["loss_latest"].date() == datetime(9999, 12, 31).date()
    assert "at the earliest" in sentence(at_risk, NOW) and at_risk.to_dict(NOW)
    # A first unread record stamped beyond any time (a producer's own CreateTime): as a
    # record without a timestamp, unknown, never an overflow.
    odd = PartitionLog(0, 100, first_unread_ms=LONG_MAX // 2)
    stamped = forecast("q", 0, "t", 0, 50, odd, TIME_ONLY, NOW)
    assert (stamped.status, stamped.row()["first_unread_at"]) == ("unknown", None)


def test_one_query_that_cannot_be_forecast_leaves_the_others_forecast() -> None:
    """What the broker said of one query's partition that the forecast
    cannot take (here a record sample of no record) fails that query alone: its
    partitions unknown and why, the other query forecast as usual."""
    from offset_journal.health.edge import Probed, SourceAt, forecasts_from
    from offset_journal.restart.decide.kafka_offsets import Findings

    def source(name: str, topic: str) -> tuple[SourceAt, dict, dict, Findings]:
        src = SourceOffsets(0, f"KafkaV2[Subscribe[{topic}]]", "kafka", None,
                            {topic: {"0": 50}}, 10, (PartitionOffset(topic, 0, 40, 50),))
        batch = Batch(name, "qid", f"run-{name}", 3, _at(NOW), 10, 10, None, None, None,
                      (src,))
        return SourceAt(name, batch, 0), {topic: {0: 50}}, {topic: {0: 50}}, Findings()

    probed = Probed(state={"good": {0: (0, 100)}, "odd": {0: (0, 100)}},
                    cfgs={"good": TIME_ONLY, "odd": TIME_ONLY}, since={},
                    records={("good", 0, 50): (50, NOW - HOUR, 1, 100),
                             ("odd", 0, 50): (50, NOW - HOUR, 0, 0)})
    found = forecasts_from([source("fine", "good"), source("broken", "odd")], probed, NOW)
    assert [(f.query_name, f.status) for f in found.forecasts] == [("fine", "at-risk"),
                                                                   ("broken", "unknown")]
    assert list(found.failed) == ["broken"] and "ZeroDivisionError" in found.failed["broken"]
    # check gives it its own UNKNOWN line, whatever the thresholds asked
    result = check([_fresh("fine"), _fresh("broken", live=True,
                                           forecast_error=found.failed["broken"])],
                   Thresholds(), NOW_DT)
    assert [(p.severity, p.query_name, p.kind) for p in result.problems] == [
        ("unknown", "broken", "forecast-failed")]


def _loss(first: int, end: int, acked: int | None = None, **kw: object) -> Any:
    from offset_journal.health_rows import RecordedLoss

    base: dict[str, object] = {"id": 1, "query_name": "q", "source_index": 0,
                               "topic": "orders", "partition": 1, "first_offset": first,
                               "end_offset": end, "first_recorded_at": NOW_DT,
                               "acknowledged_end": acked}
    base.update(kw)
    return RecordedLoss(**base)  # type: ignore[arg-type]


def test_a_recorded_loss_stays_critical_until_acknowledged() -> None:
    """A loss recorded by `retention --record` is critical once the
    query has read on past it (its forecast no longer says it), until acknowledged; said
    once while the forecast still says it (the query's next offset is its first)."""
    read_on = _fresh("q", forecast=_foreseen(), losses=(_loss(100, 160),))
    [problem] = check([read_on], Thresholds(), NOW_DT).problems
    assert (problem.severity, problem.kind) == ("critical", "recorded-loss")
    assert problem.text.startswith("q: DATA LOSS: 60 records deleted by retention before "
                                   "being read, recorded since ")
    assert "(orders-1 offsets 100..159) and not acknowledged; once dealt with: " \
           "`offset-journal losses acknowledge q --reason TEXT`" in problem.text
    # acknowledged up to 130: the 30 after still open; up to its end: nothing to say
    part = check([replace(read_on, losses=(_loss(100, 160, 130),))], Thresholds(), NOW_DT)
    assert "30 records" in part.problems[0].text and "offsets 130..159" in \
        part.problems[0].text
    assert check([replace(read_on, losses=(_loss(100, 160, 160),))], Thresholds(),
                 NOW_DT).problems == []
    # still where it was lost: the forecast's DATA LOSS line says it, once
    stuck = _fresh("q", forecast=_foreseen(lost=60, lost_partitions=((0, "orders", 1, 100),)),
                   losses=(_loss(100, 160),))
    assert [p.kind for p in check([stuck], Thresholds(), NOW_DT).problems] == ["data-loss"]


def test_a_forecast_read_on_keeps_its_time_as_an_early_bound() -> None:
    """The time of a recorded at-risk row the query has read past is
    kept (an early bound) and the line says so."""
    behind = _fresh("q", forecast=_foreseen(NOW_DT + timedelta(minutes=30), ("orders", 0),
                                            read_on=True))
    [problem] = check([behind], LIMITS, NOW_DT).problems
    assert (problem.severity, problem.kind) == ("critical", "time-to-loss")
    assert "the query read on since, which moves it later only by the age of the " \
           "records read: an early bound" in problem.text


def test_problem_lines_escape_what_names_hold() -> None:
    """A query or topic name holding line breaks or escape sequences
    cannot split a problem line into forged ones, nor reach a terminal."""
    evil = "evil\nOK: 0 queries checked, no problem\n#\x1b[2J"
    facts = [_fresh(evil, total_lag=9000, worst=("t\x1b[31m\n", 0, 9000),
                    forecast=_foreseen(NOW_DT + timedelta(minutes=5), ("or\nders", 2)))]
    result = check(facts, LIMITS, NOW_DT)
    lines = [p.line() for p in result.problems]
    assert len(lines) == 2 and all(len(x.splitlines()) == 1 for x in lines)
    assert not any("\x1b" in x for x in lines)
    assert lines[0].startswith("CRITICAL: evil\\nOK: 0 queries checked, no problem\\n#"
                               "\\x1b[2J: ")
    assert json.loads(result.to_json())["problems"][0]["query"] == evil  # exact in JSON
    f = forecast(evil, 0, "orders", 3, 1000, PartitionLog(500, 1800, NOW - 19 * HOUR),
                 TIME_ONLY, NOW)
    said = sentence(f, NOW)
    assert len(said.splitlines()) == 1 and "\x1b" not in said
    assert said.endswith("unless evil\\nOK: 0 queries checked, no problem\\n#\\x1b[2J "
                         "catches up")


def test_every_query_left_out_is_not_an_empty_journal() -> None:
    """`check --all --exclude '*'` said the journal holds no query."""
    [problem] = check([], Thresholds(), NOW_DT, left_out=3).problems
    assert (problem.severity, problem.kind) == ("unknown", "none-in-scope")
    assert problem.text.startswith("every query was left out: the journal holds 3 queries")
    assert "holds no query" not in problem.text
    assert check([], Thresholds(), NOW_DT).problems[0].kind == "no-queries"
