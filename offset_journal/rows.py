"""What the journal returns (plain data): runs, batches and their sources' offsets.

:class:`~offset_journal.journal.Journal` reads these; restart plans and the command
line take them. Importable from :mod:`offset_journal.journal` too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from ._moved import moved_name
from .descriptions import described_source, kafka_strategy
from .errors import UnknownSourceError
from .formatting import format_time
from .offsets import PartitionOffset, looks_like_kafka


@dataclass(frozen=True)
class Run:
    query_name: str
    query_id: str
    run_id: str
    named: bool
    started_at: datetime | None
    terminated_at: datetime | None
    exception: str | None
    host: str | None
    pid: int | None
    batches: int
    first_batch_id: int | None
    last_batch_id: int | None
    last_trigger_at: datetime | None


@dataclass(frozen=True)
class RunBounds:
    """When a run started and ended, as far as the journal knows, without counting its
    batches: ``first_trigger_at`` (its lowest batch id's trigger time) only when it has no
    start time, ``last_trigger_at`` (its highest batch id's) only when no termination."""

    run_id: str
    query_id: str
    started_at: datetime | None
    terminated_at: datetime | None
    first_trigger_at: datetime | None
    last_trigger_at: datetime | None


@dataclass(frozen=True)
class SavepointKeep:
    """Batches :meth:`Journal.prune` kept for a recorded savepoint, old enough to go
    otherwise: the savepoint's batch (``batch_id`` of ``run_id``) and the
    ``batches - 1`` its run journaled after it (only whole prefixes of a run go)."""

    savepoint_id: int
    query_name: str
    run_id: str
    batch_id: int
    batches: int


@dataclass(frozen=True)
class PruneResult:
    """What :meth:`Journal.prune` removed (or, on a dry run, would remove), and what it
    kept for savepoints."""

    batches: int
    partition_rows: int
    kept_newest: int  # query names whose newest batch was older than the cut-off, kept
    kept_for_savepoints: tuple[SavepointKeep, ...] = ()


@dataclass(frozen=True)
class ServerState:
    """The server a read ran on: the host and port connected to, and, on a standby
    (``in_recovery``), how far behind its primary it may be: the last transaction it
    replayed (when the primary committed it), how long before the read that was, and
    the WAL it received and has not replayed yet (bytes)."""

    host: str | None
    port: str | None
    in_recovery: bool
    replayed_at: datetime | None = None
    replayed_ago_s: float | None = None
    unreplayed_bytes: int | None = None

    def describe(self) -> str:
        where = f"{self.host}:{self.port}" if self.host else "the database"
        if not self.in_recovery:
            return f"{where}, a primary"
        if self.replayed_at is None:
            return f"{where}, a standby that has replayed no transaction yet"
        behind = (f"; {self.unreplayed_bytes:,} bytes of WAL received and not replayed yet"
                  if self.unreplayed_bytes else "")
        return (f"{where}, a standby whose last replayed transaction was committed on the "
                f"primary at {self.replayed_at:%Y-%m-%d %H:%M:%S} UTC, "
                f"{self.replayed_ago_s or 0:.1f} s before this read{behind}")


HISTORY_PAGE = 1000
"""How many batches :meth:`Journal.iter_history` reads per statement."""


@dataclass(frozen=True)
class SpoolLoss:
    """Batch events a full listener spool dropped (spool_max_bytes) for one query: the
    journal has no rows for them. ``partitions``: (source index, topic, partition,
    lowest start offset, highest end offset) of the dropped batches."""

    query_name: str
    events: int
    run_ids: tuple[str, ...]
    batch_id_min: int | None
    batch_id_max: int | None
    first_trigger_at: datetime | None
    last_trigger_at: datetime | None
    partitions: tuple[tuple[int, str, int, int | None, int | None], ...]
    host: str | None
    recorded_at: datetime


RECENT_RUNS = 1000
"""How many of a query's most recent runs :meth:`Journal.run_bounds` returns by default."""


@dataclass(frozen=True)
class SourceOffsets:
    """One source's offsets in one journaled batch."""

    source_index: int
    description: str | None
    kind: str
    start_offset: Any
    end_offset: Any
    num_input_rows: int | None
    partitions: tuple[PartitionOffset, ...] = ()
    problem: str | None = None  # flagged when journaled (malformed, gap, backwards)


@dataclass(frozen=True)
class FlaggedProblem:
    """A problem the journal flagged on one source of one batch when it wrote it."""

    run_id: str
    batch_id: int
    query_id: str
    trigger_at: datetime | None
    source_index: int
    problem: str
    pk: int


FLAGGED_PROBLEMS = 20
"""How many of a query's most recently journaled problems a restart plan reports."""


@dataclass(frozen=True)
class Batch:
    query_name: str
    query_id: str
    run_id: str
    batch_id: int
    trigger_at: datetime | None
    batch_duration_ms: int | None
    num_input_rows: int | None
    watermark: datetime | None
    event_time_min: datetime | None
    event_time_max: datetime | None
    sources: tuple[SourceOffsets, ...] = field(default_factory=tuple)
    pk: int = 0
    sink_description: str | None = None

    def source(self, index: int) -> SourceOffsets:
        for s in self.sources:
            if s.source_index == index:
                return s
        raise UnknownSourceError(
            f"batch {self.batch_id} of run {self.run_id} has no source {index}")


@dataclass(frozen=True)
class RecordedPlan:
    """A restart plan as the journal recorded it when it was handed out
    (``restart_plans``; migration 0008_decisions).

    ``position``: after, at, as-of, rewind or from-time. ``kafka_offsets``: the Kafka
    start offsets handed out, (source index, topic, partition, offset; -2 = earliest).
    ``run_ids``: the runs a job said started from this plan (``plan_runs``), and
    ``linked_at`` when the database recorded each link. ``created_at`` and ``linked_at``
    are the database's clock (no role may set them). ``request``: what was asked (the
    ``request`` column: as_of, batch, from_time, allow_data_loss, recreated_topics, ...),
    the plan's warnings (``warnings``) and the log starts its earliest offsets stood for
    (``log_starts``). ``ignored``: a note per field of the row left out as no plan
    command writes it (a row written by hand; journal/_plan_rows.py).
    """

    id: int
    query_name: str
    created_at: datetime
    position: str
    mode: str
    command: str
    ok: bool
    kafka_offsets: tuple[tuple[int, str, int, int], ...]
    options: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    host: str | None = None
    os_user: str | None = None
    anchor_run_id: str | None = None
    anchor_batch_id: int | None = None
    run_ids: tuple[str, ...] = ()
    request: dict[str, Any] = field(default_factory=dict)
    linked_at: dict[str, datetime] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()

    @property
    def deliberate(self) -> bool:
        """A plan meant to read again (or skip) on purpose: every position but "after"."""
        return self.position != "after"

    @property
    def upgrade(self) -> dict[str, Any] | None:
        """How an upgrade in one call ended, when this row journals that (``command``
        ``upgrade-result``): outcome (upgraded, rolled-back, refused), the plan v2
        started from, the reasons, v1's checkpoint, the savepoint's batch."""
        found = self.request.get("upgrade")
        return found if isinstance(found, dict) else None

    @property
    def rolled_back(self) -> bool:
        """A roll back to v1 on its own checkpoint: its offsets are where v1 resumes."""
        return (self.upgrade or {}).get("outcome") == "rolled-back" and bool(self.kafka_offsets)

    @property
    def translated_from(self) -> str | None:
        """The MM2 alias of the cluster whose journaled offsets the plan translated to a
        replica's (--translate-from): its run reads another cluster, a new log."""
        alias = self.request.get("translate_from")
        return alias if isinstance(alias, str) else None

    @property
    def not_replicated(self) -> dict[tuple[str, int], tuple[str, int, int, int]]:
        """A translated plan's partitions with records that never reached the replica:
        (replica topic, partition) -> (journaled topic, partition, journaled offset,
        records lost from it). Rows not as the planner writes them are left out."""
        out: dict[tuple[str, int], tuple[str, int, int, int]] = {}
        rows = self.request.get("translation")
        for row in rows if isinstance(rows, list) else ():
            if not isinstance(row, list) or len(row) < 8:
                continue  # recorded before the never-replicated count, or not by the planner
            _index, topic, part, journaled, replica, _offset, _reread, lost = row[:8]
            if (isinstance(topic, str) and isinstance(replica, str)
                    and all(type(v) is int for v in (part, journaled, lost)) and lost > 0):
                out[(replica, part)] = (topic, part, journaled, lost)
        return out

    @property
    def real_time(self) -> dict[str, Any] | None:
        """A plan made after a run in real-time mode: that run, its last journaled batch
        and the records a batch it stopped mid-way may have written that the new run
        writes again (``bound``; None: not counted)."""
        found = self.request.get("real_time")
        return found if isinstance(found, dict) else None

    @property
    def sink(self) -> dict[str, Any] | None:
        """The old query's sink as the plan read its log (kind, path, last_batch,
        journal_batch, query_id, run_id), and the batches it took from it (``taken``)
        with their offsets (``offsets``: [batch id, source, topic, partition, start,
        end]): the plan started after the sink's last batch."""
        found = self.request.get("sink")
        return found if isinstance(found, dict) else None

    def sink_offsets(self) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
        """The batches the plan took from the sink, per (topic, partition): (batch id,
        start, end) in batch order; empty when it took none."""
        out: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for row in (self.sink or {}).get("offsets") or ():
            batch, _source, topic, part, start, end = row
            out.setdefault((str(topic), int(part)), []).append((int(batch), int(start),
                                                                int(end)))
        for rows in out.values():
            rows.sort()
        return out

    @property
    def accepted_cluster(self) -> str | None:
        """The cluster the plan was made for although the journal said its runs read
        another (--accept-cluster): a person overruled the cluster check."""
        cid = self.request.get("accept_cluster")
        return cid if isinstance(cid, str) else None

    @property
    def allow_data_loss(self) -> bool:
        """The plan started partitions whose planned offsets were deleted at their log
        start (--allow-data-loss): the records in between were lost on purpose."""
        return bool(self.request.get("allow_data_loss"))

    @property
    def recreated_topics(self) -> tuple[str, ...]:
        """Topics the plan read from their start as deleted and created again
        (--restart-recreated-topic)."""
        return tuple(str(t) for t in self.request.get("recreated_topics") or ())

    @property
    def warnings(self) -> tuple[str, ...]:
        """The warnings the plan was handed out with."""
        return tuple(str(w) for w in self.request.get("warnings") or ())

    @property
    def log_starts(self) -> dict[tuple[str, int], int]:
        """Where each partition the plan starts at -2 (earliest) began on the cluster
        when the plan was made: its log start then, by (topic, partition). Empty when
        the plan did not ask the cluster (no bootstrap servers) or was recorded before
        plans kept them."""
        return {(str(t), int(p)): int(o) for t, p, o in self.request.get("log_starts") or ()}


@dataclass(frozen=True)
class RecordedSavepoint:
    """A savepoint as the journal recorded it (``savepoints``; migration 0018): the
    query, the run, query id and batch whose state it holds, the checkpoint it was read
    from, where it was written, its manifest and the manifest's SHA-256 (``created_at``:
    the database's clock), and when and why retention deleted its files (0022)."""

    id: int
    query_name: str
    created_at: datetime
    run_id: str
    query_id: str
    batch_id: int
    checkpoint: str
    location: str
    manifest_sha256: str
    manifest: Any
    host: str | None = None
    os_user: str | None = None
    deleted_at: datetime | None = None
    deleted_reason: str | None = None


SourceKind = Literal["kafka", "delta", "file", "rate", "other"]
KIND_KAFKA: SourceKind = "kafka"
KIND_DELTA: SourceKind = "delta"
KIND_FILE: SourceKind = "file"
KIND_RATE: SourceKind = "rate"
KIND_OTHER: SourceKind = "other"


def source_kind(source: SourceOffsets) -> SourceKind:
    """kafka, delta, file, rate or other: from the description, else the offset's shape."""
    if source.kind == KIND_KAFKA:
        return KIND_KAFKA
    described = described_source(source.description)
    offset = source.end_offset if source.end_offset is not None else source.start_offset
    if described == KIND_DELTA or (isinstance(offset, dict) and "reservoirId" in offset):
        return KIND_DELTA
    if described == KIND_FILE or (isinstance(offset, dict) and set(offset) == {"logOffset"}):
        return KIND_FILE
    if described == KIND_RATE:
        return KIND_RATE
    if looks_like_kafka(offset):
        return KIND_KAFKA
    return KIND_OTHER


def kafka_topics(batches: Iterable[Batch], source: int | None = None) -> list[str]:
    """The topics the Kafka sources of ``batches`` name (those of source ``source``
    only, when given): journaled and subscribed; what a plan asks the cluster about."""
    topics: set[str] = set()
    for batch in batches:
        for s in batch.sources:
            if (source is not None and s.source_index != source) or source_kind(s) != KIND_KAFKA:
                continue
            topics.update(p.topic for p in s.partitions)
            strategy, items = kafka_strategy(s.description)
            if strategy == "subscribe":
                topics.update(items)
    return sorted(topics)


@dataclass(frozen=True)
class AsyncTail:
    """A run Spark executed with async progress tracking: its offset log is written at
    most every ``interval_ms``, so its last batches (``batches``: those triggered within
    that interval, plus the last batch's duration, of its last journaled batch; oldest
    first) may not be in its checkpoint."""

    run_id: str
    interval_ms: int
    batches: tuple[BatchRef, ...]


@dataclass(frozen=True)
class RealTimeTail:
    """The anchor's run ran in real-time mode (``trigger(realTime=...)``): a batch after
    its last journaled one (``last``) may have been stopped mid-way, its rows written to
    the sink but never journaled (no progress event, offsets entry or commit). Such a
    batch ran no later than ``stopped_by``: the run's termination, else (killed) the
    last journaled batch's end plus one more batch."""

    run_id: str
    last: BatchRef
    stopped_by: datetime | None
    terminated: bool


@dataclass(frozen=True)
class RereadRun:
    """The journaled batches of one run that a record-time plan processes again: those
    that read past the plan's start offset of some partition (from the journal, one
    row per run, so that a long history stays one short list)."""

    run_id: str
    query_id: str
    first_batch: int
    last_batch: int
    batches: int
    first_trigger: datetime | None = None
    last_trigger: datetime | None = None

    def label(self) -> str:
        ids = (f"batch {self.first_batch}" if self.first_batch == self.last_batch
               else f"batches {self.first_batch}..{self.last_batch}")
        when = (f", triggered {format_time(self.first_trigger)}.."
                f"{format_time(self.last_trigger)}" if self.first_trigger else "")
        return f"{ids} of run {self.run_id} ({self.batches} journaled{when})"

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "query_id": self.query_id,
                "first_batch": self.first_batch, "last_batch": self.last_batch,
                "batches": self.batches, "first_trigger": format_time(self.first_trigger),
                "last_trigger": format_time(self.last_trigger)}


@dataclass(frozen=True)
class BatchRef:
    """A journaled batch, by what a person needs to find it again."""

    run_id: str
    batch_id: int
    query_id: str
    trigger_at: datetime | None
    watermark: datetime | None = None

    @classmethod
    def of(cls, batch: Batch) -> BatchRef:
        return cls(batch.run_id, batch.batch_id, batch.query_id, batch.trigger_at,
                   batch.watermark)

    def label(self) -> str:
        when = f", triggered {format_time(self.trigger_at)}" if self.trigger_at else ""
        return f"batch {self.batch_id} of run {self.run_id}{when}"

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "batch_id": self.batch_id, "query_id": self.query_id,
                "trigger_at": format_time(self.trigger_at),
                "watermark": format_time(self.watermark)}


def order_key(batch: Batch) -> tuple[datetime, int, int]:
    """Batches by trigger time, then batch id, then the journal's own order."""
    return (batch.trigger_at or datetime.min.replace(tzinfo=timezone.utc), batch.batch_id,
            batch.pk)


@dataclass(frozen=True)
class AuditSource:
    """One Kafka source of a batch: its record count and its partition rows (``start``
    None: Spark did not report one, as for a new checkpoint's first batch or a
    partition that appeared in this batch)."""

    index: int
    num_input_rows: int | None
    partitions: tuple[PartitionOffset, ...]


@dataclass(frozen=True)
class AuditBatch:
    """A journaled batch, by what the audit needs. ``pk`` is the journal's sequence
    (``batches.id``): the audit's processing order. ``recorded_at``: when the journal
    wrote it (the database's clock), used to match a run to a plan made before it."""

    pk: int
    run_id: str
    query_id: str
    batch_id: int
    trigger_at: datetime | None
    recorded_at: datetime | None
    sources: tuple[AuditSource, ...]


def __getattr__(name: str) -> Any:
    """The health check's rows moved to :mod:`offset_journal.health_rows`: their old names
    here still answer, with a DeprecationWarning, until 0.3.0."""
    return moved_name(__name__, name)
