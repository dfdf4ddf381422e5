"""The I/O edge of the health check and the retention forecast: read the journal and the
broker, hand plain data to :mod:`.forecast` and :mod:`.check`.

Where each query is: where the default plan starts it after its last durable batch, per
Kafka source (:meth:`Journal.last_batch`,
:func:`~offset_journal.restart.decide.kafka_offsets.default_start`: the journaled end offsets
checked against the cluster as ``plan`` checks them, partitions added since from 0).
What the broker says, through one consumer: each partition's log start and end, the
topics' retention configs and the broker's retention check interval, the first unread
record's timestamp (one small fetch per partition and offset), and for size-limited
topics the log's growth since ``rate_window`` ago (offsetsForTimes, and the timestamp of
the record found there).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from ..capture.rejected import query_of
from ..errors import OffsetJournalError, RestartError
from ..journal import Journal
from ..kafka.admin import (
    admin_client,
    offsets_for_time_with,
    record_probe,
    records_at_with,
    topic_state_with,
)
from ..kafka.configs import topic_configs
from ..restart.decide.kafka_offsets import default_start
from ..rows import KIND_KAFKA, Batch, kafka_topics, source_kind
from .check import CheckResult, Thresholds, check, forecast_facts, in_scope
from .forecast import (
    RECORD_OVERHEAD,
    Forecast,
    PartitionLog,
    TopicRetention,
    forecast,
    growth_rate,
    topic_retention,
)

RATE_WINDOW = timedelta(minutes=10)
"""How far back a size-limited log's growth is measured (records a second)."""


@dataclass
class KafkaAccess:
    """How to reach the cluster: ``--bootstrap-servers``, ``--kafka-config``,
    ``--kafka-timeout``, ``--rate-window``."""

    bootstrap_servers: str
    config: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 10.0
    rate_window: timedelta = RATE_WINDOW


@dataclass
class Forecasts:
    """Every partition's forecast, the names with no journaled batch, the time (epoch
    ms) it was made at, the topics' retention, the plan's errors per source (DATA
    LOSS, offsets beyond a log end: ``plan`` would refuse to start the query), the
    queries whose forecast failed (their partitions ``unknown``), each query's last
    batch, (run id, batch id), the forecast starts after, and the topics whose configs
    the broker would not describe (an authorizer: their partitions ``unknown``)."""

    forecasts: list[Forecast]
    missing: list[str]
    now_ms: int
    topics: dict[str, TopicRetention] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # query: why it was not forecast
    anchors: dict[str, tuple[str, int]] = field(default_factory=dict)  # query: its last batch
    # topic: why the broker would not describe its configs (its partitions unknown)
    configs_unknown: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceAt:
    """A Kafka source of a query's last journaled batch."""

    query_name: str
    batch: Batch
    index: int


def kafka_sources(journal: Journal, names: Iterable[str]) -> tuple[list[SourceAt], list[str]]:
    """The Kafka sources of each query's last batch, and the names with no journaled
    batch."""
    out: list[SourceAt] = []
    missing: list[str] = []
    for name in names:
        batch = journal.last_batch(name)
        if batch is None:
            missing.append(name)
            continue
        out += [SourceAt(name, batch, s.source_index) for s in batch.sources
                if source_kind(s) == KIND_KAFKA]
    return out, missing


def forecasts_for(journal: Journal, names: Iterable[str], kafka: KafkaAccess, *,
                  missing_ok: bool = True) -> Forecasts:
    """The retention forecast of every Kafka partition the queries ``names`` read;
    RestartError, before the cluster is asked, for a name with no journaled batch unless
    ``missing_ok``."""
    sources, missing = kafka_sources(journal, names)
    if missing and not missing_ok:
        raise RestartError(f"no journaled batches for query {missing[0]!r}")
    found = forecast_sources(sources, kafka, int(time.time() * 1000))
    found.missing = missing
    return found


def forecast_sources(sources: Sequence[SourceAt], kafka: KafkaAccess, now_ms: int,
                     ) -> Forecasts:
    """Ask the cluster (one consumer, one admin client) and forecast every partition the
    default plan would start ``sources`` at. A query whose forecast fails is its own:
    its partitions ``unknown`` and why in ``failed``, the others forecast."""
    where = kafka.bootstrap_servers
    topics = sorted({t for s in sources for t in kafka_topics([s.batch], s.index)})
    with record_probe(where, kafka.config, kafka.timeout) as consumer:
        state = topic_state_with(consumer, topics, timeout=kafka.timeout, where=where)
        described = topic_configs(admin_client(where, kafka.config), list(state),
                                  timeout=kafka.timeout, where=where)
        cfgs = {t: topic_retention(c, described.broker) for t, c in described.configs.items()}
        failed: dict[str, str] = {}
        planned = []
        for s in sources:
            try:
                planned.append((s, *default_start(s.batch, s.index, state)))
            except FORECAST_ERRORS as exc:
                failed.setdefault(s.query_name, _why(exc))
        sized = [(t, p) for t, c in cfgs.items() if c.retention_bytes is not None and c.deletes
                 for p in state[t]]
        since = offsets_for_time_with(
            consumer, sized, now_ms - int(kafka.rate_window.total_seconds() * 1000),
            timeout=kafka.timeout, where=where)
        wanted = {(t, p, o) for _s, _j, starts, _f in planned for t, parts in starts.items()
                  for p, o in parts.items() if state[t][p][0] <= o < state[t][p][1]}
        wanted |= {(t, p, o) for (t, p), o in since.items()
                   if o is not None and o < state[t][p][1]}
        records = records_at_with(consumer, wanted, timeout=kafka.timeout)
    found = forecasts_from(planned, Probed(state, cfgs, since, records), now_ms, failed)
    found.anchors = {s.query_name: (s.batch.run_id, s.batch.batch_id) for s in sources}
    found.configs_unknown = dict(described.unknown)
    return found


FORECAST_ERRORS = (OffsetJournalError, ArithmeticError, ValueError, LookupError, TypeError)
"""What forecasting one query can raise from what the journal or the broker said of it:
that query's forecast fails alone (its own UNKNOWN line), never the fleet's."""


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if not isinstance(exc, OffsetJournalError) else str(exc)


@dataclass(frozen=True)
class Probed:
    """What the broker said: each topic's partitions (log start, end), retention, the
    first offset of the rate window per size-limited partition, and the records read."""

    state: Mapping[str, Mapping[int, tuple[int, int]]]
    cfgs: Mapping[str, TopicRetention]
    since: Mapping[tuple[str, int], int | None]
    records: Mapping[tuple[str, int, int], tuple[int, int | None, int, int]]


Planned = tuple[SourceAt, Mapping[str, Mapping[int, int]], Mapping[str, Mapping[int, int]],
                Any]


def forecasts_from(planned: Sequence[Planned], probed: Probed, now_ms: int,
                   failed: dict[str, str] | None = None) -> Forecasts:
    """Each planned source's forecast (source, journaled end offsets, planned next
    offsets, the plan's findings) from what the broker said; a query whose forecast
    raises is left with its journaled partitions ``unknown`` and the error in
    ``failed``, and the others are forecast (pure)."""
    failed = dict(failed or {})
    by_query: dict[str, list[Forecast]] = {}
    errors: dict[str, list[str]] = {}
    for s, journaled, starts, found in planned:
        if s.query_name in failed:
            continue
        try:
            made = _source_forecasts(s, journaled, starts, probed, now_ms)
        except FORECAST_ERRORS as exc:
            failed[s.query_name] = _why(exc)
            continue
        by_query.setdefault(s.query_name, []).extend(made)
        errors.setdefault(s.query_name, []).extend(
            f"query {s.query_name}, source {s.index}: {e}" for e in found.errors)
    out: list[Forecast] = []
    for s, journaled, _starts, _found in planned:
        if s.query_name in failed:
            out += [Forecast(s.query_name, s.index, t, p, o, "unknown")
                    for t, parts in sorted(journaled.items()) for p, o in sorted(parts.items())]
        else:
            out += by_query.pop(s.query_name, [])
    said = [e for q, found in errors.items() if q not in failed for e in found]
    return Forecasts(out, [], now_ms, dict(probed.cfgs), said, failed=failed)


def _source_forecasts(s: SourceAt, journaled: Mapping[str, Mapping[int, int]],
                      starts: Mapping[str, Mapping[int, int]], probed: Probed, now_ms: int,
                      ) -> list[Forecast]:
    """One source's forecasts: each partition it starts at, and its journaled partitions
    the cluster no longer has (gone)."""
    out = []
    for t, parts in sorted(starts.items()):
        for p, o in sorted(parts.items()):
            low, high = probed.state[t][p]
            first = probed.records.get((t, p, o))
            at = probed.since.get((t, p))
            rate = growth_rate(high, at, _stamp(probed.records, t, p, at), o,
                               first[1] if first else None, now_ms)
            log = PartitionLog(
                low, high, first_unread_ms=first[1] if first else None,
                record_bytes=first[3] / first[2] + RECORD_OVERHEAD if first else None,
                records_per_s=rate)
            out.append(forecast(s.query_name, s.index, t, p, o, log, probed.cfgs.get(t),
                                now_ms))
    out += [forecast(s.query_name, s.index, t, p, o, None, None, now_ms)
            for t, parts in sorted(journaled.items()) for p, o in sorted(parts.items())
            if p not in starts.get(t, {})]
    return out


def _stamp(records: Mapping[tuple[str, int, int], tuple[int, int | None, int, int]],
           topic: str, partition: int, offset: int | None) -> int | None:
    found = records.get((topic, partition, offset)) if offset is not None else None
    return found[1] if found else None


def fleet_names(journal: Journal, exclude: Sequence[str] = (),
                active_within: timedelta | None = None) -> list[str]:
    """``--all``: every journaled query, less those :func:`~.check.in_scope` leaves out."""
    if not exclude and active_within is None:
        return journal.query_names()
    now = journal.database_now() or datetime.now(timezone.utc)
    return [f.query_name for f in in_scope(journal.check_facts(None, None), exclude,
                                           active_within, now)]


def check_fleet(journal: Journal, names: Sequence[str] | None, limits: Thresholds,
                kafka: KafkaAccess | None = None, *, exclude: Sequence[str] = (),
                active_within: timedelta | None = None) -> CheckResult:
    """``offset-journal check``: every query's facts in a few statements (with
    ``names`` None, those :func:`~.check.in_scope` of ``exclude`` and ``active_within``),
    the forecast live from the broker when ``kafka`` is given (else as last recorded),
    then :func:`~.check.check`."""
    facts = journal.check_facts(names, limits.since)
    now = journal.database_now() or datetime.now(timezone.utc)
    if names is None:
        everyone = {f.query_name for f in facts}
        facts = in_scope(facts, exclude, active_within, now)
        left_out = everyone - {f.query_name for f in facts}
    else:
        left_out = set()
    if kafka is not None:
        asked = [f.query_name for f in facts if f.exists]
        sources, _missing = kafka_sources(journal, asked)
        live = forecast_sources(sources, kafka, int(time.time() * 1000))
        made = datetime.fromtimestamp(live.now_ms / 1000, tz=timezone.utc)
        reading = {s.query_name for s in sources}
        by_query: dict[str, list[Forecast]] = {}
        for x in live.forecasts:
            by_query.setdefault(x.query_name, []).append(x)
        facts = [replace(f, live=True, reads_kafka=f.query_name in reading,
                         forecast=forecast_facts(by_query.get(f.query_name, []), made,
                                                 live.configs_unknown),
                         forecast_error=live.failed.get(f.query_name))
                 for f in facts]
    total, payloads = journal.rejected_since(limits.since)
    checked = {f.query_name for f in facts}
    per_query: dict[str, int] = {}
    # Events of no query (or past the ones read) are the fleet's: said for --all only;
    # those of a query left out of --all are left out with it.
    unattributed = total - len(payloads) if names is None else 0
    for payload in payloads:
        name = query_of(payload)
        if name is not None and name in checked:
            per_query[name] = per_query.get(name, 0) + 1
        elif names is None and name not in left_out:
            unattributed += 1
    facts = [replace(f, rejected=per_query.get(f.query_name, 0)) for f in facts]
    return check(facts, limits, now, unattributed, left_out=len(left_out))
