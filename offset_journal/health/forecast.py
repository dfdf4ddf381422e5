"""When Kafka's retention deletes the first record a job has not read (pure).

Kafka deletes a partition's log a whole segment at a time, every
``log.retention.check.interval.ms``:

* by time, a segment goes once its *newest* record is older than ``retention.ms``
  (the active segment too: the broker rolls a new one first). The segment holding the
  first unread record has a newest record no older than that record, so the record
  lives at least until its own timestamp + ``retention.ms`` (the forecast, at the
  earliest) and at most until then + one segment's span (``segment.ms``: a segment is
  rolled when its records span that long) + one check interval (the latest);
* by size, the oldest segments go while the log without them still holds at least
  ``retention.bytes`` (never the active segment). The record's segment goes once the
  log holds ``retention.bytes`` *after* that segment: at the earliest when the records
  written after the first unread one weigh ``retention.bytes`` (its segment ending
  right after it), at the latest one segment later. When that happens follows from the
  log's growth rate (:func:`growth_rate`). Sizes are taken as uncompressed records,
  each alone in its batch: on a compressed topic, or one written in large batches, the
  log holds more records than that and the forecast comes early.

Which offset is the first unread is the planner's (:func:`~offset_journal.restart.
kafka_offsets.default_start`): where ``plan QUERY`` would start the job.

Everything here is arithmetic over plain values the edge reads
(:mod:`offset_journal.health.edge`): offsets, one record's timestamp, the topic's
configs. Times are epoch milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..formatting import cell, format_time, from_epoch_ms

Status = Literal["lost", "at-risk", "safe", "caught-up", "unknown", "gone", "beyond-end"]
"""A partition's state: records already deleted unread; unread records retention will
delete (when: ``loss_earliest``); unread records no retention deletes (no time or size
limit, one that deletes nothing before the last time that can be said, or a log that
does not grow); nothing unread; not knowable (a record that could
not be read, or has no timestamp); the partition is not on the cluster; the next offset
lies beyond the log end (the topic recreated?): ``plan`` refuses to start there."""

Basis = Literal["time", "size", ""]
"""Which limit deletes the first unread record first ("" when none does)."""

RECORD_OVERHEAD = 70
"""Bytes a record takes on disk beyond its key, value and headers, at most: its own
framing (about 10) and, when it is alone in its batch, the batch header (61). Taking the
most makes a size forecast early rather than late."""


@dataclass(frozen=True)
class TopicRetention:
    """A topic's retention settings (its configs, the broker's defaults filled in).
    ``None``: no limit (Kafka's -1)."""

    retention_ms: int | None
    retention_bytes: int | None
    segment_ms: int
    segment_bytes: int
    deletes: bool = True  # cleanup.policy holds "delete" (a compact-only topic never deletes)
    check_interval_ms: int = 300_000  # the broker's log.retention.check.interval.ms

    def to_dict(self) -> dict[str, Any]:
        return {"retention_ms": self.retention_ms, "retention_bytes": self.retention_bytes,
                "segment_ms": self.segment_ms, "segment_bytes": self.segment_bytes,
                "deletes": self.deletes, "check_interval_ms": self.check_interval_ms}


DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000  # Kafka's segment.ms / log.roll.ms default
DEFAULT_SEGMENT_BYTES = 1 << 30  # Kafka's segment.bytes default
DEFAULT_CHECK_INTERVAL_MS = 300_000  # Kafka's log.retention.check.interval.ms default


def topic_retention(configs: Mapping[str, str], broker: Mapping[str, str]) -> TopicRetention:
    """A topic's :class:`TopicRetention` from its configs as the broker describes them
    (strings; a negative limit is none) and the broker's
    ``log.retention.check.interval.ms``."""
    def number(name: str, default: int | None) -> int | None:
        try:
            value = int(configs[name])
        except (KeyError, ValueError):
            return default
        return None if value < 0 else value

    policy = configs.get("cleanup.policy", "delete")
    try:
        interval = int(broker.get("log.retention.check.interval.ms", ""))
    except ValueError:
        interval = DEFAULT_CHECK_INTERVAL_MS
    return TopicRetention(
        retention_ms=number("retention.ms", 7 * 24 * 3600 * 1000),
        retention_bytes=number("retention.bytes", None),
        segment_ms=number("segment.ms", DEFAULT_SEGMENT_MS) or DEFAULT_SEGMENT_MS,
        segment_bytes=number("segment.bytes", DEFAULT_SEGMENT_BYTES) or DEFAULT_SEGMENT_BYTES,
        deletes="delete" in [p.strip() for p in policy.split(",")],
        check_interval_ms=interval)


@dataclass(frozen=True)
class PartitionLog:
    """What the broker says of one partition now.

    ``first_unread_ms``: the timestamp of the first record at or after the job's next
    offset (None: not read, or nothing unread); ``record_bytes``: a record's size on
    disk, estimated from the records read (None: none read); ``records_per_s``: how
    fast the log grows (records a second over a recent window)."""

    log_start: int
    log_end: int
    first_unread_ms: int | None = None
    record_bytes: float | None = None
    records_per_s: float = 0.0


@dataclass(frozen=True)
class Forecast:
    """One partition a query reads: where it is, what is unread, when retention takes
    the first unread record (``loss_earliest``..``loss_latest``, epoch ms)."""

    query_name: str
    source_index: int
    topic: str
    partition: int
    next_offset: int
    status: Status
    log_start: int | None = None
    log_end: int | None = None
    unread: int = 0
    lost: int = 0
    first_unread_ms: int | None = None
    loss_earliest: int | None = None
    loss_latest: int | None = None
    basis: Basis = ""

    def seconds_left(self, now_ms: int) -> float | None:
        """Seconds until the earliest loss (0 once due or lost; None: none foreseen)."""
        if self.status == "lost":
            return 0.0
        if self.loss_earliest is None:
            return None
        return max(0.0, (self.loss_earliest - now_ms) / 1000)

    def row(self) -> dict[str, Any]:
        """The ``retention_forecasts`` row (``retention --record``)."""
        return {"query_name": self.query_name, "source_index": self.source_index,
                "topic": self.topic, "partition": self.partition, "status": self.status,
                "next_offset": self.next_offset, "log_start": self.log_start,
                "log_end": self.log_end, "unread": self.unread, "lost": self.lost,
                "first_unread_at": from_epoch_ms(self.first_unread_ms),
                "loss_earliest": from_epoch_ms(self.loss_earliest),
                "loss_latest": from_epoch_ms(self.loss_latest), "basis": self.basis or None}

    def to_dict(self, now_ms: int) -> dict[str, Any]:
        return {
            "query": self.query_name, "source": self.source_index, "topic": self.topic,
            "partition": self.partition, "status": self.status,
            "next_offset": self.next_offset, "log_start": self.log_start,
            "log_end": self.log_end, "unread": self.unread, "lost": self.lost,
            "first_unread_at": _iso(self.first_unread_ms),
            "loss_earliest": _iso(self.loss_earliest), "loss_latest": _iso(self.loss_latest),
            "seconds_left": self.seconds_left(now_ms), "basis": self.basis or None,
        }


def _iso(ms: int | None) -> str | None:
    return format_time(from_epoch_ms(ms), "milliseconds")


MAX_TIME_MS = 253_402_300_799_999
"""The last instant a time can be said at (9999-12-31T23:59:59.999Z, Python's last):
a limit that deletes nothing before it is no limit (``retention.ms`` of Long.MAX, as
Debezium's schema-history topic has, and a common way to say "forever")."""


def _window(earliest: float, latest: float) -> tuple[int, int] | None:
    """(earliest, latest) as epoch ms, None when the earliest lies beyond any time that
    can be said; a latest beyond it is that last time (``segment.ms`` of Long.MAX: a
    segment that never rolls by time)."""
    if earliest > MAX_TIME_MS:
        return None
    return int(earliest), int(min(math.ceil(latest), MAX_TIME_MS))


def time_window(first_unread_ms: int, cfg: TopicRetention) -> tuple[int, int] | None:
    """(earliest, latest) epoch ms at which time retention deletes a record stamped
    ``first_unread_ms`` (None: no time limit, or none before :data:`MAX_TIME_MS`)."""
    if cfg.retention_ms is None or not cfg.deletes:
        return None
    earliest = first_unread_ms + cfg.retention_ms
    return _window(earliest, earliest + cfg.segment_ms + cfg.check_interval_ms)


def size_window(next_offset: int, log: PartitionLog, cfg: TopicRetention,
                now_ms: int) -> tuple[int, int] | None:
    """(earliest, latest) epoch ms at which size retention deletes the record at
    ``next_offset`` (None: no size limit, no size known, a log that does not grow
    and may hold the record in its active segment, which size retention never deletes,
    or none before :data:`MAX_TIME_MS`).

    The latest is when the log end is one segment past the earliest's: the record's
    segment is closed by then, also when the limit is already passed."""
    if cfg.retention_bytes is None or not cfg.deletes or not log.record_bytes:
        return None
    kept = cfg.retention_bytes / log.record_bytes  # records the log keeps after a segment
    full = cfg.segment_bytes / log.record_bytes  # records in a full segment
    rate = log.records_per_s
    segment = min(full, rate * cfg.segment_ms / 1000) if rate > 0 else full
    due = next_offset + 1 + kept  # the log end at which the record can go
    if rate <= 0:
        # No growth: no segment rolls, so the record goes only if a full segment already
        # lies after it (it is not in the active one) and the limit is passed.
        if due <= log.log_end and log.log_end - next_offset > full:
            return _window(now_ms, now_ms + cfg.check_interval_ms)
        return None
    earliest = now_ms + max(0.0, due - log.log_end) / rate * 1000
    latest = now_ms + max(0.0, due + segment - log.log_end) / rate * 1000
    return _window(earliest, math.ceil(latest) + cfg.check_interval_ms)


MIN_SPAN_MS = 1000
"""The shortest span a growth rate is measured over (a record written a moment ago
would make any rate)."""


def growth_rate(log_end: int, since: int | None, since_ms: int | None, next_offset: int,
                first_unread_ms: int | None, now_ms: int) -> float:
    """Records a second the log grows by: over the recent window, from the first record
    at or after its start (``since``, stamped ``since_ms``: a log younger than the window
    starts there, so the span is that record's age, not the window's), or since the first
    unread record was written, whichever is faster (a forecast early rather than late).
    0.0 when neither can be measured."""
    rates = [0.0]
    for offset, stamped in ((since, since_ms), (next_offset, first_unread_ms)):
        if offset is not None and stamped is not None and log_end > offset:
            rates.append((log_end - offset) * 1000 / max(now_ms - stamped, MIN_SPAN_MS))
    return max(rates)


def forecast(query_name: str, source_index: int, topic: str, partition: int,
             next_offset: int, log: PartitionLog | None, cfg: TopicRetention | None,
             now_ms: int) -> Forecast:
    """The forecast for one partition a query reads from ``next_offset``."""
    base = Forecast(query_name, source_index, topic, partition, next_offset, "gone")
    if log is None:
        return base
    base = replace(base, log_start=log.log_start, log_end=log.log_end)
    if next_offset < log.log_start:
        return replace(base, status="lost", lost=log.log_start - next_offset,
                       unread=log.log_end - log.log_start)
    if next_offset > log.log_end:
        return replace(base, status="beyond-end")
    unread = log.log_end - next_offset
    if unread == 0:
        return replace(base, status="caught-up")
    stamped = log.first_unread_ms
    if stamped is not None and not 0 <= stamped <= MAX_TIME_MS:
        stamped = None  # a timestamp no time can say: as without one
    log = replace(log, first_unread_ms=stamped)
    base = replace(base, unread=unread, first_unread_ms=stamped)
    if cfg is None:
        return replace(base, status="unknown")
    windows: list[tuple[int, int, Basis]] = []
    if cfg.deletes and cfg.retention_ms is not None:
        if log.first_unread_ms is None:
            return replace(base, status="unknown")
        by_time = time_window(log.first_unread_ms, cfg)
        if by_time is not None:
            windows.append((*by_time, "time"))
    if cfg.deletes and cfg.retention_bytes is not None:
        if not log.record_bytes:
            return replace(base, status="unknown")
        by_size = size_window(next_offset, log, cfg, now_ms)
        if by_size is not None:
            windows.append((*by_size, "size"))
    if not windows:
        return replace(base, status="safe")
    earliest, _latest, basis = min(windows)
    return replace(base, status="at-risk", loss_earliest=earliest,
                   loss_latest=min(w[1] for w in windows), basis=basis)


def duration(seconds: float) -> str:
    """A duration for people: ``45 s``, ``12 min``, ``5.2 h``, ``3.1 days``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def sentence(f: Forecast, now_ms: int) -> str:
    """What to tell a person about one partition at risk (a lost one: the planner's
    own error, :func:`offset_journal.restart.decide.kafka_offsets.default_start`), on one line:
    control characters in the query's or topic's name escaped, as in the tables."""
    left = f.seconds_left(now_ms)
    assert left is not None
    when = "any moment now" if left == 0 else f"in about {duration(left)}"
    return cell(f"partition {f.partition} of {f.topic} loses unread records {when} "
                f"({f.basis} retention, at the earliest {_iso(f.loss_earliest)}; "
                f"{f.unread:,} record{'' if f.unread == 1 else 's'} unread) unless "
                f"{f.query_name} catches up")


def configs_unknown(unknown: Mapping[str, str]) -> str:
    """One line for the topics whose configs the broker would not describe (topic: why):
    the first with its reason, up to four others by name; control characters escaped."""
    first, *rest = sorted(unknown)
    if not rest:
        what = f"topic {first} could not be read ({unknown[first]}): its partitions'"
    else:
        named = ", ".join(rest[:4]) + (f" and {len(rest) - 4} more" if len(rest) > 4 else "")
        what = (f"{len(unknown)} topics could not be read ({first}: {unknown[first]}; "
                f"also {named}): their partitions'")
    return cell(f"the retention configs of {what} time to loss is unknown")


def first_loss(forecasts: list[Forecast]) -> Forecast | None:
    """The partition that loses records first (a lost one before any at risk)."""
    found = [f for f in forecasts if f.status in ("lost", "at-risk")]
    if not found:
        return None
    return min(found, key=lambda f: (f.status != "lost", f.loss_earliest or 0))
