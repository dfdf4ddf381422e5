"""The retention forecast and the fleet check as pure functions (the quick tier), and the
commands' argument errors (exit 3 for check, as monitoring plugins read UNKNOWN)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from offset_journal.cli import main as cli_main
from offset_journal.health.check import (
    CheckExit,
    QueryFacts,
    Threshold,
    Thresholds,
    check,
    parse_threshold,
)
from offset_journal.health.forecast import (
    RECORD_OVERHEAD,
    PartitionLog,
    TopicRetention,
    first_loss,
    forecast,
    loss_errors,
    sentence,
    size_window,
    time_window,
    topic_retention,
)
from offset_journal.restart.kafka_offsets import check_against_cluster
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
    # A log that does not grow never reaches its limit; one past it goes now.
    assert size_window(1000, PartitionLog(900, 1050, NOW, 1000, 0.0), cfg, NOW) is None
    assert size_window(1000, PartitionLog(900, 1200, NOW, 1000, 0.0), cfg, NOW) == (
        NOW, NOW + 1000)


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
    unread = PartitionLog(0, 100)  # the record could not be read
    assert forecast("q", 0, "t", 0, 50, unread, TIME_ONLY, NOW).status == "unknown"
    assert forecast("q", 0, "t", 0, 50, None, None, NOW).status == "gone"
    assert first_loss([forecast("q", 0, "t", 0, 100, log, TIME_ONLY, NOW)]) is None


def test_records_deleted_unread_are_data_loss_in_the_planners_words() -> None:
    lost = forecast("q", 1, "orders", 2, 40, PartitionLog(100, 300), TIME_ONLY, NOW)
    assert (lost.status, lost.lost, lost.seconds_left(NOW)) == ("lost", 60, 0.0)
    _offsets, found = check_against_cluster({"orders": {2: 40}}, {"orders": {2: (100, 300)}})
    assert loss_errors([lost]) == [f"query q, source 1: {found.errors[0]}"]
    assert found.errors[0].startswith("DATA LOSS: 60 records in 1 partition were deleted")
    at_risk = forecast("q", 1, "orders", 3, 100, PartitionLog(0, 300, NOW), TIME_ONLY, NOW)
    assert first_loss([at_risk, lost]) is lost


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
                               "total_lag": 10}
    base.update(kw)
    return QueryFacts(name, **base)  # type: ignore[arg-type]


def test_a_healthy_fleet_exits_0() -> None:
    result = check([_fresh("a"), _fresh("b", loss_at=NOW_DT + timedelta(days=2),
                                        loss_partition=("t", 1))], LIMITS, NOW_DT)
    assert (result.exit_code, result.problems) == (CheckExit.OK, [])
    assert result.summary() == "OK: 2 queries checked, no problem"


def test_each_threshold_warns_then_turns_critical() -> None:
    facts = [
        _fresh("lag-warn", total_lag=2000, worst=("orders", 3, 1500)),
        _fresh("lag-crit", total_lag=9000),
        _fresh("stale", last_recorded_at=NOW_DT - timedelta(minutes=15)),
        _fresh("loss-soon", loss_at=NOW_DT + timedelta(minutes=20),
               loss_partition=("orders", 3)),
        _fresh("loss-later", loss_at=NOW_DT + timedelta(hours=3)),
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
    result = check([_fresh("lost", lost_records=60, forecast_at=NOW_DT),
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
