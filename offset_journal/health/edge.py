"""The I/O edge of the health check and the retention forecast: read the journal and the
broker, hand plain data to :mod:`.forecast` and :mod:`.check`.

Where each query is: the end offsets of its last durable batch, per Kafka source, as
the planner's default plan starts it (:meth:`Journal.last_batch`,
:func:`~offset_journal.restart.kafka_offsets.end_offsets_of`). What the broker says:
each partition's log start and end, the topics' retention configs and the broker's
retention check interval, the first unread record's timestamp (one fetch per
partition), and for size-limited topics the log's growth over ``rate_window``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import RestartError
from ..journal import Journal
from ..kafka_admin import (
    admin_client,
    offsets_for_time,
    records_at,
    topic_configs,
    topic_state,
)
from ..rejected import query_of
from ..restart.kafka_offsets import end_offsets_of
from ..restart.model import KIND_KAFKA, source_kind
from .check import CheckResult, QueryFacts, Thresholds, check
from .forecast import (
    RECORD_OVERHEAD,
    Forecast,
    PartitionLog,
    TopicRetention,
    first_loss,
    forecast,
    topic_retention,
)

Position = tuple[str, int, str, int, int]
"""(query name, source index, topic, partition, next offset to read)."""

RATE_WINDOW = timedelta(minutes=10)
"""How far back a size-limited log's growth is measured (records a second)."""


@dataclass
class KafkaAccess:
    """How to reach the cluster: ``--bootstrap-servers``, ``--kafka-config``,
    ``--kafka-timeout``."""

    bootstrap_servers: str
    config: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 10.0
    rate_window: timedelta = RATE_WINDOW


@dataclass
class Forecasts:
    """Every partition's forecast, the names with no journaled batch, and the time
    (epoch ms) it was made at."""

    forecasts: list[Forecast]
    missing: list[str]
    now_ms: int
    topics: dict[str, TopicRetention] = field(default_factory=dict)


def positions(journal: Journal, names: Iterable[str]) -> tuple[list[Position], list[str]]:
    """Where each query reads next, per Kafka source and partition, and the names with
    no journaled batch."""
    out: list[Position] = []
    missing: list[str] = []
    for name in names:
        batch = journal.last_batch(name)
        if batch is None:
            missing.append(name)
            continue
        for source in batch.sources:
            if source_kind(source) != KIND_KAFKA:
                continue
            offsets, _notes = end_offsets_of(batch, source.source_index)
            out += [(name, source.source_index, t, p, o)
                    for t in sorted(offsets) for p, o in sorted(offsets[t].items())]
    return out, missing


def read_cluster(kafka: KafkaAccess, wanted: Sequence[Position], now_ms: int,
                 ) -> tuple[dict[tuple[str, int], tuple[int, int]], dict[str, TopicRetention],
                            dict[tuple[str, int, int], tuple[int, int, int, int]],
                            dict[tuple[str, int], float]]:
    """What the broker says for ``wanted``: (low, high) per partition, each topic's
    retention, the first record at each distinct (topic, partition, next offset) and the
    growth rate (records/s) of the partitions of size-limited topics."""
    topics = sorted({p[2] for p in wanted})
    state = topic_state(kafka.bootstrap_servers, topics, timeout=kafka.timeout,
                        config=kafka.config)
    ranges = {(t, p): lh for t, parts in state.items() for p, lh in parts.items()}
    admin = admin_client(kafka.bootstrap_servers, kafka.config)
    configs, broker = topic_configs(admin, list(state), timeout=kafka.timeout,
                                    where=kafka.bootstrap_servers)
    cfgs = {t: topic_retention(c, broker) for t, c in configs.items()}
    # One fetch per distinct offset; a partition read at two offsets takes two rounds.
    todo = sorted({(t, p, o) for _n, _i, t, p, o in wanted
                   if (t, p) in ranges and ranges[(t, p)][0] <= o < ranges[(t, p)][1]})
    firsts: dict[tuple[str, int, int], tuple[int, int, int, int]] = {}
    while todo:
        round_: dict[tuple[str, int], int] = {}
        rest = []
        for t, p, o in todo:
            (rest.append((t, p, o)) if (t, p) in round_ else round_.__setitem__((t, p), o))
        found = records_at(kafka.bootstrap_servers, round_, timeout=kafka.timeout,
                           config=kafka.config)
        firsts.update({(t, p, round_[(t, p)]): v for (t, p), v in found.items()})
        todo = rest
    sized = [t for t, c in cfgs.items() if c.retention_bytes is not None and c.deletes]
    rates: dict[tuple[str, int], float] = {}
    if sized:
        window = kafka.rate_window.total_seconds()
        _state, lookup = offsets_for_time(kafka.bootstrap_servers, sized,
                                          now_ms - int(window * 1000),
                                          timeout=kafka.timeout, config=kafka.config)
        for t, parts in lookup.items():
            for p, since in parts.items():
                high = ranges.get((t, p), (0, 0))[1]
                rates[(t, p)] = (high - since) / window if since is not None else 0.0
    return ranges, cfgs, firsts, rates


def forecasts_for(journal: Journal, names: Iterable[str], kafka: KafkaAccess, *,
                  missing_ok: bool = True) -> Forecasts:
    """The retention forecast of every Kafka partition the queries ``names`` read;
    RestartError, before the cluster is asked, for a name with no journaled batch unless
    ``missing_ok``."""
    wanted, missing = positions(journal, names)
    if missing and not missing_ok:
        raise RestartError(f"no journaled batches for query {missing[0]!r}")
    now_ms = int(time.time() * 1000)
    ranges, cfgs, firsts, rates = read_cluster(kafka, wanted, now_ms)
    out = []
    for name, index, t, p, o in wanted:
        if (t, p) not in ranges:
            out.append(forecast(name, index, t, p, o, None, None, now_ms))
            continue
        low, high = ranges[(t, p)]
        first = firsts.get((t, p, o))
        log = PartitionLog(
            low, high, first_unread_ms=first[1] if first else None,
            record_bytes=first[3] / first[2] + RECORD_OVERHEAD if first else None,
            records_per_s=rates.get((t, p), 0.0))
        out.append(forecast(name, index, t, p, o, log, cfgs.get(t), now_ms))
    return Forecasts(out, missing, now_ms, cfgs)


def check_fleet(journal: Journal, names: Sequence[str] | None, limits: Thresholds,
                kafka: KafkaAccess | None = None) -> CheckResult:
    """``offset-journal check``: every query's facts in a few statements, the forecast
    live from the broker when ``kafka`` is given (else as last recorded), then
    :func:`~.check.check`."""
    facts = journal.check_facts(names, limits.since)
    now = journal.database_now() or datetime.now(timezone.utc)
    if kafka is not None:
        live = forecasts_for(journal, [f.query_name for f in facts if f.exists], kafka)
        facts = [_with_forecast(f, live) for f in facts]
    total, payloads = journal.rejected_since(limits.since)
    checked = {f.query_name for f in facts}
    per_query: dict[str, int] = {}
    # Events of no query (or past the ones read) are the fleet's: said for --all only.
    unattributed = total - len(payloads) if names is None else 0
    for payload in payloads:
        name = query_of(payload)
        if name is not None and name in checked:
            per_query[name] = per_query.get(name, 0) + 1
        elif names is None:
            unattributed += 1
    facts = [replace(f, rejected=per_query.get(f.query_name, 0)) for f in facts]
    return check(facts, limits, now, unattributed)


def _with_forecast(facts: QueryFacts, live: Forecasts) -> QueryFacts:
    mine = [f for f in live.forecasts if f.query_name == facts.query_name]
    first = first_loss(mine)
    when = (datetime.fromtimestamp(first.loss_earliest / 1000, tz=timezone.utc)
            if first is not None and first.loss_earliest is not None else None)
    return replace(facts, loss_at=when,
                   loss_partition=(first.topic, first.partition) if first else None,
                   lost_records=sum(f.lost for f in mine),
                   forecast_at=datetime.fromtimestamp(live.now_ms / 1000, tz=timezone.utc))
