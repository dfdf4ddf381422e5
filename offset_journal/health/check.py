"""One health check for a fleet of queries (pure): facts in, problems and an exit code out.

The facts are what the journal holds per query (its last batch, lag, problems flagged
and spool losses since a time, the last recorded retention forecast, or one made live)
and the rejected events since that time; :mod:`offset_journal.health.edge` reads them in a few
statements for the whole fleet. Each threshold is ``WARN,CRIT`` or one value (critical
alone); exit codes are the monitoring plugins' (Nagios): 0 ok, 1 warning, 2 critical,
3 unknown (the check could not be made).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import IntEnum
from fnmatch import fnmatchcase
from typing import Any, Generic, Literal, TypeVar

from ..errors import InvalidValueError
from ..formatting import cell, format_time
from ..health_rows import ForecastFacts, QueryFacts
from ..wording import count, ids_text, tp
from .forecast import Forecast, duration
from .forecast import configs_unknown as configs_unknown_line

Severity = Literal["warning", "critical", "unknown"]

T = TypeVar("T", int, timedelta)


class CheckExit(IntEnum):
    """``offset-journal check``'s exit codes, as monitoring plugins use them."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


@dataclass(frozen=True)
class Threshold(Generic[T]):
    """A limit with an optional warning level before the critical one."""

    critical: T
    warning: T | None = None

    def level(self, value: T, *, below: bool = False) -> Severity | None:
        """How bad ``value`` is against the limit (``below``: the limit is a minimum)."""
        def past(limit: T) -> bool:
            return value < limit if below else value > limit

        if past(self.critical):
            return "critical"
        if self.warning is not None and past(self.warning):
            return "warning"
        return None


@dataclass(frozen=True)
class Thresholds:
    """What ``check`` holds each query to; None: not checked."""

    max_lag: Threshold[int] | None = None
    max_staleness: Threshold[timedelta] | None = None
    min_time_to_loss: Threshold[timedelta] | None = None
    since: datetime | None = None  # problems, spool losses and rejected events from then on
    max_forecast_age: timedelta = timedelta(minutes=15)  # older recorded forecasts: unknown
    max_savepoint_age: Threshold[timedelta] | None = None  # a stateful query's newest




def _at_ms(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms is not None else None




@dataclass(frozen=True)
class Problem:
    severity: Severity
    query_name: str | None
    kind: str
    text: str

    def line(self) -> str:
        """One line whatever the names in it hold: a line break or an escape sequence in
        a query or topic name is escaped (as the tables do), so it cannot forge a line
        a monitoring system reads, nor reach a terminal."""
        return cell(f"{self.severity.upper()}: {self.text}")

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "query": self.query_name, "kind": self.kind,
                "text": self.text}


@dataclass
class CheckResult:
    queries: int
    problems: list[Problem] = field(default_factory=list)
    recovery: list[dict[str, Any]] = field(default_factory=list)  # stateful queries'

    @property
    def exit_code(self) -> CheckExit:
        found = {p.severity for p in self.problems}
        if "critical" in found:
            return CheckExit.CRITICAL
        if "unknown" in found:
            return CheckExit.UNKNOWN
        return CheckExit.WARNING if "warning" in found else CheckExit.OK

    def summary(self) -> str:
        n = {s: sum(p.severity == s for p in self.problems)
             for s in ("critical", "warning", "unknown")}
        checked = f"{self.queries} quer{'y' if self.queries == 1 else 'ies'} checked"
        if not self.problems:
            return f"OK: {checked}, no problem"
        return (f"{self.exit_code.name}: {checked}: "
                f"{n['critical']} critical, {n['warning']} warning, {n['unknown']} unknown")

    def to_json(self) -> str:
        return json.dumps({"status": self.exit_code.name.lower(),
                           "exit_code": int(self.exit_code), "queries": self.queries,
                           "problems": [p.to_dict() for p in self.problems],
                           "recovery": self.recovery}, indent=2)


def parse_threshold(text: str, parse: Any, *, minimum: bool = False) -> Threshold[Any]:
    """``CRIT`` or ``WARN,CRIT`` with ``parse`` for each value; ValueError when the
    warning level is not before the critical one."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) > 2 or not all(parts):
        raise InvalidValueError(f"bad threshold {text!r}: use CRITICAL or WARNING,CRITICAL")
    values = [parse(p) for p in parts]
    if len(values) == 1:
        return Threshold(values[0])
    warning, critical = values
    if (warning < critical) if minimum else (warning > critical):
        order = "above" if minimum else "below"
        raise InvalidValueError(f"bad threshold {text!r}: the warning level must be {order} the "
                         "critical one")
    return Threshold(critical, warning)


def forecast_facts(forecasts: Sequence[Forecast], made_at: datetime,
                   configs_unknown: Mapping[str, str] | None = None) -> ForecastFacts:
    """The facts of one query's live forecasts; ``configs_unknown``: the topics whose
    configs the broker would not describe (topic: why), said for those it reads."""
    risky = [f for f in forecasts if f.status == "at-risk" and f.loss_earliest is not None]
    first = min(risky, key=lambda f: (f.loss_earliest or 0, f.topic, f.partition),
                default=None)

    def n(status: str) -> int:
        return sum(f.status == status for f in forecasts)

    refused = {f.topic: (configs_unknown or {})[f.topic] for f in forecasts
               if f.status == "unknown" and f.topic in (configs_unknown or {})}

    return ForecastFacts(made_at, len(forecasts),
                         loss_at=_at_ms(first.loss_earliest) if first is not None else None,
                         loss_partition=(first.topic, first.partition) if first else None,
                         lost=sum(f.lost for f in forecasts), beyond_end=n("beyond-end"),
                         unknown=n("unknown"), gone=n("gone"),
                         lost_partitions=tuple((f.source_index, f.topic, f.partition,
                                                f.next_offset)
                                               for f in forecasts if f.status == "lost"),
                         unknown_why=configs_unknown_line(refused) if refused else None)


def in_scope(facts: Iterable[QueryFacts], exclude: Sequence[str] = (),
             active_within: timedelta | None = None, now: datetime | None = None,
             ) -> list[QueryFacts]:
    """The queries ``check --all`` holds to its thresholds: not matching an ``exclude``
    pattern (shell-style, ``retired-*``), and with ``active_within``, with a batch
    journaled within that time of ``now`` (a retired query is not stale forever)."""
    out = []
    for q in facts:
        if any(fnmatchcase(q.query_name, p) for p in exclude):
            continue
        if active_within is not None and now is not None and (
                q.last_recorded_at is None or now - q.last_recorded_at > active_within):
            continue
        out.append(q)
    return out


def check(facts: list[QueryFacts], limits: Thresholds, now: datetime,
          rejected_unattributed: int = 0, left_out: int = 0) -> CheckResult:
    """Every problem of every query, worst first (then by query name). ``left_out``:
    the journaled queries ``--all`` left out (``--exclude``, ``--active-within``)."""
    out: list[Problem] = []
    if not facts and left_out:
        out.append(Problem("unknown", None, "none-in-scope",
                           f"every query was left out: the journal holds {left_out} "
                           f"quer{'y' if left_out == 1 else 'ies'}, and --exclude or "
                           "--active-within left out each one: nothing checked"))
    elif not facts:
        out.append(Problem("unknown", None, "no-queries", "the journal holds no query: is a "
                           "listener writing to this database?"))
    for q in facts:
        out += _query_problems(q, limits, now)
    if rejected_unattributed:
        out.append(Problem("warning", None, "rejected",
                           f"{count(rejected_unattributed, 'rejected event')} of no query "
                           f"since {_since(limits)} (see `offset-journal rejected list`)"))
    order = {"critical": 0, "unknown": 1, "warning": 2}
    out.sort(key=lambda p: (order[p.severity], p.query_name or "", p.kind))
    return CheckResult(len(facts), out, [recovery(q, now) for q in facts if q.stateful])


def recovery(q: QueryFacts, now: datetime) -> dict[str, Any]:
    """What a recovery of a stateful query from its newest savepoint costs today: the
    batches journaled after the savepoint's batch, and the records they read, are read
    again (``check --format json``'s ``recovery``)."""
    sp = q.savepoint
    if sp is None:
        return {"query": q.query_name, "savepoint": None}
    return {"query": q.query_name, "savepoint": sp.id, "batch_id": sp.batch_id,
            "made": format_time(sp.created_at),
            "age_seconds": round(max((now - sp.created_at).total_seconds(), 0.0), 3),
            "location": sp.location, "batches_again": sp.batches_after,
            "records_again": sp.records_after}


def _savepoint_problems(q: QueryFacts, limits: Thresholds, now: datetime) -> list[Problem]:
    """``--max-savepoint-age``: a stateful query whose newest savepoint is older than
    the limit, with what a recovery from it reads again today; one with none at all is
    critical (a lost checkpoint loses its state)."""
    wanted = limits.max_savepoint_age
    if wanted is None or not q.stateful:
        return []
    name, sp = q.query_name, q.savepoint
    if sp is None:
        return [Problem("critical", name, "no-savepoint",
                        f"{name}: a stateful query with no savepoint: a lost checkpoint "
                        "loses its state (take one: `offset-journal savepoint create`, or "
                        "on a schedule: attach(..., savepoints=SavepointSchedule(...)))")]
    age = now - sp.created_at
    level = wanted.level(age)
    if level is None:
        return []
    return [Problem(level, name, "savepoint-age",
                    f"{name}: its newest savepoint, {sp.id} (batch {sp.batch_id}), is "
                    f"{duration(max(age.total_seconds(), 0))} old (made "
                    f"{format_time(sp.created_at)}; over {_td(wanted)}): a recovery today "
                    f"reads {_again(sp.batches_after, sp.records_after)} again")]


def _again(batches: int, records: int) -> str:
    return (f"{batches:,} batch{'' if batches == 1 else 'es'} ({records:,} "
            f"record{'' if records == 1 else 's'})")


def _since(limits: Thresholds) -> str:
    return format_time(limits.since) or "ever"


def _query_problems(q: QueryFacts, limits: Thresholds, now: datetime) -> list[Problem]:
    name = q.query_name
    if not q.exists:
        return [Problem("unknown", name, "unknown-query",
                        f"{name}: no batch journaled under this name")]
    out: list[Problem] = []
    add = _adder(name, out)
    out += _forecast_problems(q, limits, now)
    out += _loss_problems(q)
    out += _savepoint_problems(q, limits, now)
    if limits.max_lag is not None and q.total_lag is not None:
        worst = (f"; furthest behind: {tp(q.worst[0], q.worst[1])} by {q.worst[2]:,}"
                 if q.worst else "")
        add(limits.max_lag.level(q.total_lag), "lag",
            f"{q.total_lag:,} records behind in its last batch (over "
            f"{_num(limits.max_lag)}){worst}")
    if limits.max_staleness is not None:
        last = q.last_recorded_at
        age = now - last if last is not None else None
        if age is not None:
            add(limits.max_staleness.level(age), "staleness",
                f"last batch journaled {duration(max(age.total_seconds(), 0))} ago "
                f"({format_time(last)}; over {_td(limits.max_staleness)})")
    if q.flagged:
        add("critical", "flagged",
            f"{count(q.flagged, 'batch source')} flagged when journaled since "
            f"{_since(limits)}" + (f" (latest: {q.flagged_example})" if q.flagged_example
                                   else "") + f"; see `offset-journal audit {name}`")
    if q.spool_lost_events:
        add("warning", "spool-loss",
            f"{count(q.spool_lost_events, 'batch event')} dropped from a full listener "
            f"spool since {_since(limits)} (not journaled)")
    if q.missing_batches:
        add("warning", "missing-batches", _missing_text(q, limits))
    if q.rejected:
        add("warning", "rejected",
            f"{count(q.rejected, 'rejected event')} since {_since(limits)} (see "
            "`offset-journal rejected list`)")
    return out


def _missing_text(q: QueryFacts, limits: Thresholds) -> str:
    """Batch ids Spark ran that the journal lacks, and how to journal them."""
    query_id, _, ids = (q.missing_example or "").rpartition(":")
    first, _, last = ids.partition("..")
    which = ids_text(range(int(first), int(last) + 1))
    return (f"{count(q.missing_batches, 'batch id')} missing from the journal since "
            f"{_since(limits)}, though Spark ran them (query id {query_id}: {which}"
            f"{', and more' if q.missing_batches > int(last) - int(first) + 1 else ''}): "
            "the listener's events were dropped (Spark's listener bus) or lost with a "
            f"database; `offset-journal checkpoint import CHECKPOINT --query-name "
            f"{q.query_name}` journals them from that query id's checkpoint (see "
            f"`offset-journal audit {q.query_name}`)")


def _adder(name: str, out: list[Problem]) -> Callable[[Severity | None, str, str], None]:
    """``add(level, kind, text)``: a problem of query ``name`` into ``out`` (None: none)."""
    def add(level: Severity | None, kind: str, text: str) -> None:
        if level is not None:
            out.append(Problem(level, name, kind, f"{name}: {text}"))

    return add


def _forecast_problems(q: QueryFacts, limits: Thresholds, now: datetime) -> list[Problem]:
    """What the retention forecast says: DATA LOSS and a plan refused always; with
    ``--min-time-to-loss``, the time left, and unknown when there is no forecast to
    go by (none recorded, too old, a partition not forecast), a warning for a gone
    partition."""
    name, f = q.query_name, q.forecast
    out: list[Problem] = []
    add = _adder(name, out)
    made = ("forecast now" if q.live else
            f"forecast recorded {format_time(f.made_at)}" if f is not None else "")
    see = f"see `offset-journal retention {name}`"
    if f is not None and f.lost:
        add("critical", "data-loss",
            f"DATA LOSS: {count(f.lost, 'record')} deleted by retention before being read "
            f"({made}; {see})")
    if f is not None and f.beyond_end:
        add("critical", "beyond-end",
            f"{count(f.beyond_end, 'partition')} to read from beyond the log end: `plan` "
            f"refuses to start there (topic deleted and recreated?) ({made}; {see})")
    if q.forecast_error is not None:
        add("unknown", "forecast-failed",
            f"its retention could not be forecast ({q.forecast_error}); {see}")
        return out
    wanted = limits.min_time_to_loss
    if wanted is None or not q.reads_kafka:
        return out
    if f is None:
        add("unknown", "no-forecast",
            "no retention forecast recorded: run `offset-journal retention --record` "
            "(cron), or check with --bootstrap-servers")
        return out
    age = now - f.made_at
    if not q.live and age > limits.max_forecast_age:
        add("unknown", "old-forecast",
            f"the retention forecast is {duration(max(age.total_seconds(), 0))} old "
            f"({made}; over --max-forecast-age {duration(limits.max_forecast_age.total_seconds())})"
            ": is `retention --record` still running?")
        return out
    if f.unknown:
        why = f.unknown_why or ("its first unread record not readable or without a "
                                "timestamp, or the query's forecast failed")
        add("unknown", "unknown-forecast",
            f"{count(f.unknown, 'partition')} could not be forecast ({why}) ({made}; {see})")
    if f.gone:
        add("warning", "gone",
            f"{count(f.gone, 'partition')} it read no longer on the cluster (topic "
            f"deleted?) ({made}; {see})")
    if f.loss_at is not None and not f.lost:
        left = max(f.loss_at - now, timedelta(0))
        part = tp(*f.loss_partition) if f.loss_partition else "a partition"
        bound = ("; the query read on since, which moves it later only by the age of the "
                 "records read: an early bound" if f.read_on else "")
        add(wanted.level(left, below=True), "time-to-loss",
            f"{part} loses unread records to retention in about "
            f"{duration(left.total_seconds())} (at the earliest {format_time(f.loss_at)}, "
            f"{made}{bound}; under {_td(wanted)})")
    return out


def _loss_problems(q: QueryFacts) -> list[Problem]:
    """Recorded losses no one has acknowledged (nor a plan accepted): critical, also
    once the query has read on past them (a job with failOnDataLoss=false), until a
    person acknowledges them. One the forecast still says (the query's next offset is
    where it begins) is said by the forecast's DATA LOSS line alone."""
    current = set(q.forecast.lost_partitions) if q.forecast is not None else set()
    open_ = [loss for loss in q.losses if loss.unacknowledged > 0 and (
        loss.source_index, loss.topic, loss.partition, loss.first_offset) not in current]
    if not open_:
        return []
    first = open_[0]
    where = (f"{tp(first.topic, first.partition)} offsets {first.open_from:,}.."
             f"{first.end_offset - 1:,}")
    more = len({(x.source_index, x.topic, x.partition) for x in open_}) - 1
    where += f" and {count(more, 'more partition')}" if more > 0 else ""
    since = min(x.first_recorded_at for x in open_)
    records = sum(x.unacknowledged for x in open_)
    return [Problem("critical", q.query_name, "recorded-loss",
                    f"{q.query_name}: DATA LOSS: {count(records, 'record')} deleted by "
                    f"retention before being read, recorded since {format_time(since)} "
                    f"({where}) and not acknowledged; once dealt with: `offset-journal "
                    f"losses acknowledge {q.query_name} --reason TEXT` (see `offset-journal "
                    f"audit {q.query_name}`)")]


def _td(t: Threshold[timedelta]) -> str:
    parts = ([t.warning] if t.warning is not None else []) + [t.critical]
    return ",".join(duration(p.total_seconds()) for p in parts)


def _num(t: Threshold[int]) -> str:
    return ",".join(f"{v:,}" for v in ([t.warning] if t.warning is not None else [])
                    + [t.critical])
