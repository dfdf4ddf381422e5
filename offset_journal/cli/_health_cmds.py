"""The commands that look ahead: ``retention`` (when Kafka deletes what a query has
not read) and ``check`` (one fleet check, with monitoring plugins' exit codes)."""

from __future__ import annotations

import argparse
import json
import logging
from datetime import datetime, timezone
from typing import Any

from ..formatting import cell, from_epoch_ms, table
from ._edge import (
    EXIT_OK,
    EXIT_RUNTIME,
    complain,
    iso,
    open_journal,
    say,
)
from .parser import UsageError

log = logging.getLogger(__name__)


def _kafka_access(args: argparse.Namespace) -> Any:
    from ..health.edge import RATE_WINDOW, KafkaAccess

    return KafkaAccess(args.bootstrap_servers, dict(args.kafka_config or []),
                       args.kafka_timeout, getattr(args, "rate_window", None) or RATE_WINDOW)


def _names(args: argparse.Namespace, given: list[str]) -> list[str] | None:
    """The queries asked about (None: --all)."""
    if args.all and given:
        raise UsageError("name queries or --all, not both")
    if not args.all and not given:
        raise UsageError("name a query, or --all")
    return None if args.all else given


def cmd_retention(args: argparse.Namespace) -> int:
    """Exit 1 when ``plan`` would refuse a query (lost records, offsets beyond the log
    end), or a query or a topic's configs could not be forecast (the others are, and
    recorded)."""
    from ..health.edge import fleet_names, forecasts_for
    from ..health.forecast import configs_unknown, sentence

    names = _names(args, [args.query] if args.query else [])
    if names is not None and (args.exclude or args.active_within):
        raise UsageError("--exclude and --active-within narrow --all, not a named query")
    with open_journal(args) as journal:
        asked = (fleet_names(journal, args.exclude or (), args.active_within)
                 if names is None else names)
        if not asked:  # --all selected nothing: the broker has nothing to be asked
            return _nothing_to_forecast(args, len(journal.query_names()))
        found = forecasts_for(journal, asked, _kafka_access(args), missing_ok=names is None)
        if args.record:
            journal.record_forecasts([n for n in asked if n not in found.missing],
                                     [f.row() for f in found.forecasts], found.anchors)
    now = found.now_ms
    losses, failed = found.errors, [f"query {name}: its retention could not be forecast "
                                    f"({why})" for name, why in sorted(found.failed.items())]
    if found.configs_unknown:
        failed.append(configs_unknown(found.configs_unknown))
    code = EXIT_RUNTIME if losses or failed else EXIT_OK
    if args.format == "json":
        say(json.dumps({"now": iso(from_epoch_ms(now)),
                         "topics": {t: c.to_dict() for t, c in sorted(found.topics.items())},
                         "partitions": [f.to_dict(now) for f in found.forecasts],
                         "data_loss": losses, "not_forecast": dict(found.failed),
                         "configs_unknown": dict(sorted(found.configs_unknown.items()))},
                        indent=2))
        return code
    from ..health.forecast import duration

    rows = []
    for f in found.forecasts:
        left = f.seconds_left(now)
        rows.append([f.query_name, f.source_index, f.topic, f.partition, f.next_offset,
                     cell(f.log_start), cell(f.log_end), f.unread, f.lost or "",
                     iso(from_epoch_ms(f.first_unread_ms)),
                     duration(left) if left is not None and f.status == "at-risk" else "",
                     f.basis, f.status])
    say(table(["QUERY", "SOURCE", "TOPIC", "PARTITION", "NEXT", "LOG START", "LOG END",
                "UNREAD", "LOST", "FIRST UNREAD AT", "LOSS IN", "BY", "STATUS"], rows))
    for error in losses + failed:
        complain("error", error)
    for f in found.forecasts:
        if f.status == "at-risk":
            say(sentence(f, now))
    if args.record:
        say(f"recorded {len(found.forecasts)} partition forecasts")
    return code


def _nothing_to_forecast(args: argparse.Namespace, held: int) -> int:
    """``--all`` selected no query: said, and exit 1, as a query not forecast is. A cron
    job that forecasts (and records) nothing is as blind as one whose forecast failed:
    filters leaving out every query, or a journal no listener writes to."""
    if held:
        given = [o for o, v in (("--exclude", args.exclude), ("--active-within",
                                                              args.active_within)) if v]
        why = (f"every query was left out: the journal holds {held} "
               f"quer{'y' if held == 1 else 'ies'}, and "
               f"{' and '.join(given)} left out each one: nothing forecast")
    else:
        why = ("the journal holds no query: nothing forecast (is a listener writing to "
               "this database?)")
    if args.format == "json":
        say(json.dumps({"now": iso(datetime.now(timezone.utc)), "topics": {},
                        "partitions": [], "data_loss": [], "not_forecast": {},
                        "configs_unknown": {}}, indent=2))
    complain("error", why)
    return EXIT_RUNTIME


def cmd_check(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from ..health.check import Thresholds
    from ..health.edge import check_fleet

    names = _names(args, list(args.queries))
    if names is not None and (args.exclude or args.active_within):
        raise UsageError("--exclude and --active-within narrow --all, not named queries")
    since = args.since or datetime.now(timezone.utc) - timedelta(days=1)
    limits = Thresholds(args.max_lag, args.max_staleness, args.min_time_to_loss, since,
                        args.max_forecast_age, args.max_savepoint_age)
    kafka = _kafka_access(args) if args.bootstrap_servers else None
    with open_journal(args) as journal:
        result = check_fleet(journal, names, limits, kafka, exclude=args.exclude or (),
                             active_within=args.active_within)
    if args.format == "json":
        say(result.to_json())
    else:
        for problem in result.problems:
            say(problem.line())
        say(result.summary())
    return int(result.exit_code)

