"""What a report shows, as plain data: gathered from the journal (_gather.py), drawn by
_render.py. Nothing here reads a database or writes HTML."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

FindingKind = Literal["gap", "overlap", "planned", "unexplained", "flagged", "spool-loss"]
"""gap/overlap/planned/unexplained come from a continuity audit; flagged (a problem the
journal flagged when it wrote a batch) and spool-loss (batch events a full listener spool
dropped) from the journal itself."""


@dataclass(frozen=True)
class ReportFinding:
    """One thing a person should look at: where (topic, partition, offset range), how
    many records, which runs and batches, and what it means (``message``)."""

    kind: str
    message: str
    topic: str | None = None
    partition: int | None = None
    offset_from: int | None = None
    offset_to: int | None = None  # exclusive
    records: int | None = None
    runs: tuple[str, ...] = ()
    batches: tuple[str, ...] = ()  # "RUN:BATCH"
    at: datetime | None = None
    defect: bool = True  # False for what is expected (a planned rewind)
    partition_count: int = 0
    partitions: tuple[str, ...] = ()
    """One line per partition (``partition_count`` in all) when the finding groups several
    (an audit finding of one restart across every partition): shown folded, so 1,000
    partitions are one row."""


@dataclass(frozen=True)
class RestartMarker:
    """A point on the timeline where the query (re)started: today a run's start; with
    recorded restart plans, the plan handed out (``plan``: its position and options)."""

    at: datetime
    run_id: str
    query_id: str
    label: str
    plan: str | None = None


@dataclass(frozen=True)
class RunBar:
    """One run of the query, as a bar on the timeline (``query_id``: its checkpoint)."""

    run_id: str
    query_id: str
    start: datetime | None
    end: datetime | None  # terminated_at, else its last batch's trigger time
    terminated: bool
    failed: bool
    host: str | None
    batches: int
    first_batch_id: int | None
    last_batch_id: int | None


@dataclass(frozen=True)
class TimeBucket:
    """The query's batches in one time bucket."""

    bucket: int
    batches: int
    input_rows: int
    avg_duration_ms: float | None
    max_duration_ms: int | None
    max_freshness_s: float | None
    max_behind: float | None = None  # Spark's maxOffsetsBehindLatest, highest of the bucket


@dataclass(frozen=True)
class PartitionSeries:
    """One of the top partitions by lag: per bucket (index into the buckets), its lag and
    its end and latest offsets at the bucket's last batch."""

    topic: str
    partition: int
    max_lag: int | None
    points: tuple[tuple[int, int | None, int | None, int | None], ...]  # bucket, lag, end, latest


@dataclass(frozen=True)
class OthersBand:
    """The partitions not drawn one by one: per bucket (its last batch), their lowest and
    highest lag."""

    partitions: int
    points: tuple[tuple[int, int | None, int | None], ...]  # bucket, min lag, max lag


@dataclass(frozen=True)
class RetentionRow:
    """One partition's retention forecast as ``retention --record`` last kept it."""

    source_index: int
    topic: str
    partition: int
    status: str
    next_offset: int
    log_start: int | None
    log_end: int | None
    unread: int
    lost: int
    loss_earliest: datetime | None
    basis: str | None
    recorded_at: datetime


@dataclass(frozen=True)
class Recovery:
    """A stateful query's newest savepoint (None: none) and what a recovery from it
    reads again today: the batches journaled after its batch and their records."""

    savepoint_id: int | None = None
    made_at: datetime | None = None
    batch_id: int | None = None
    location: str | None = None
    batches_again: int = 0
    records_again: int = 0


@dataclass(frozen=True)
class ReportData:
    """Everything one report shows; times are UTC."""

    query_name: str
    generated_at: datetime
    first_trigger: datetime | None
    last_trigger: datetime | None
    bucket_seconds: float
    buckets: int
    total_batches: int
    total_runs: int
    partitions: int
    runs: tuple[RunBar, ...] = ()
    runs_shown_limit: int = 0
    restarts: tuple[RestartMarker, ...] = ()
    batch_buckets: tuple[TimeBucket, ...] = ()
    top_partitions: tuple[PartitionSeries, ...] = ()
    others: OthersBand | None = None
    current_lag: int | None = None
    current_freshness_s: float | None = None
    findings: tuple[ReportFinding, ...] = field(default_factory=tuple)
    since: datetime | None = None
    retention: tuple[RetentionRow, ...] = ()
    recovery: Recovery | None = None  # None: a stateless query (or not known)
