"""One health check for a fleet of queries (pure): facts in, problems and an exit code out.

The facts are what the journal holds per query (its last batch, lag, problems flagged
and spool losses since a time, the last recorded retention forecast) and the rejected
events since that time; :mod:`offset_journal.health.edge` reads them in a few
statements for the whole fleet. Each threshold is ``WARN,CRIT`` or one value (critical
alone); exit codes are the monitoring plugins' (Nagios): 0 ok, 1 warning, 2 critical,
3 unknown (the check could not be made).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Any, Generic, Literal, TypeVar

from ..formatting import format_time
from ..restart.text import count, tp
from .forecast import duration

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


@dataclass(frozen=True)
class QueryFacts:
    """What the journal says of one query (all from indexed lookups)."""

    query_name: str
    last_trigger_at: datetime | None = None
    last_recorded_at: datetime | None = None
    total_lag: int | None = None
    worst: tuple[str, int, int] | None = None  # (topic, partition, lag) furthest behind
    flagged: int = 0  # batches' sources with a problem flagged since ``since``
    flagged_example: str | None = None
    spool_lost_events: int = 0
    rejected: int = 0
    loss_at: datetime | None = None  # earliest recorded loss of an unread record
    loss_partition: tuple[str, int] | None = None
    lost_records: int = 0
    forecast_at: datetime | None = None  # when the forecast was recorded
    exists: bool = True


@dataclass(frozen=True)
class Problem:
    severity: Severity
    query_name: str | None
    kind: str
    text: str

    def line(self) -> str:
        return f"{self.severity.upper()}: {self.text}"

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "query": self.query_name, "kind": self.kind,
                "text": self.text}


@dataclass
class CheckResult:
    queries: int
    problems: list[Problem] = field(default_factory=list)

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
                           "problems": [p.to_dict() for p in self.problems]}, indent=2)


def parse_threshold(text: str, parse: Any, *, minimum: bool = False) -> Threshold[Any]:
    """``CRIT`` or ``WARN,CRIT`` with ``parse`` for each value; ValueError when the
    warning level is not before the critical one."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"bad threshold {text!r}: use CRITICAL or WARNING,CRITICAL")
    values = [parse(p) for p in parts]
    if len(values) == 1:
        return Threshold(values[0])
    warning, critical = values
    if (warning < critical) if minimum else (warning > critical):
        order = "above" if minimum else "below"
        raise ValueError(f"bad threshold {text!r}: the warning level must be {order} the "
                         "critical one")
    return Threshold(critical, warning)


def check(facts: list[QueryFacts], limits: Thresholds, now: datetime,
          rejected_unattributed: int = 0) -> CheckResult:
    """Every problem of every query, worst first (then by query name)."""
    out: list[Problem] = []
    if not facts:
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
    return CheckResult(len(facts), out)


def _since(limits: Thresholds) -> str:
    return format_time(limits.since) or "ever"


def _query_problems(q: QueryFacts, limits: Thresholds, now: datetime) -> list[Problem]:
    name = q.query_name
    if not q.exists:
        return [Problem("unknown", name, "unknown-query",
                        f"{name}: no batch journaled under this name")]
    out: list[Problem] = []

    def add(level: Severity | None, kind: str, text: str) -> None:
        if level is not None:
            out.append(Problem(level, name, kind, f"{name}: {text}"))

    if q.lost_records:
        add("critical", "data-loss",
            f"DATA LOSS: {count(q.lost_records, 'record')} deleted by retention before "
            f"being read (forecast recorded {format_time(q.forecast_at)}; see "
            f"`offset-journal retention {name}`)")
    elif limits.min_time_to_loss is not None and q.loss_at is not None:
        left = max(q.loss_at - now, timedelta(0))
        part = tp(*q.loss_partition) if q.loss_partition else "a partition"
        add(limits.min_time_to_loss.level(left, below=True), "time-to-loss",
            f"{part} loses unread records to retention in about "
            f"{duration(left.total_seconds())} (at the earliest {format_time(q.loss_at)}, "
            f"as forecast {format_time(q.forecast_at)}; under {_td(limits.min_time_to_loss)})")
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
    if q.rejected:
        add("warning", "rejected",
            f"{count(q.rejected, 'rejected event')} since {_since(limits)} (see "
            "`offset-journal rejected list`)")
    return out


def _td(t: Threshold[timedelta]) -> str:
    parts = ([t.warning] if t.warning is not None else []) + [t.critical]
    return ",".join(duration(p.total_seconds()) for p in parts)


def _num(t: Threshold[int]) -> str:
    return ",".join(f"{v:,}" for v in ([t.warning] if t.warning is not None else [])
                    + [t.critical])
