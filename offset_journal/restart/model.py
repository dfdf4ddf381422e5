"""What a restart plan is made of (pure data): the inputs it is decided from, the
findings each step adds, and the plan itself.

Nothing here decides anything; :mod:`offset_journal.restart.decide` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from ..errors import RestartError
from ..formatting import format_time
from ..kafka.mirror import ReplicationPolicy
from ..offsets import KafkaOffsets, format_kafka_offsets
from ..rows import Batch, BatchRef, RereadRun, SourceKind
from ..wording import count, fill, tp
from ._findings import Findings

StateDecision = Literal["seeded", "restored", "discarded", "refused", "empty"]
"""What a plan from a savepoint does with one operator's state: the new query seeds a
transformWithState with it (the Python path), the restore writes it into the new
checkpoint before its first batch (--restore, the JVM path), the person accepted losing
it (--discard-state), the plan refuses to lose it, or there was none."""

Mode = Literal["stateless", "state-aware"]
"""stateless: start after (or at) a batch; state-aware: also re-read what the old
checkpoint's state held of windows not emitted yet."""
Position = Literal["after", "at", "rewind", "from-time", "savepoint"]
"""Where a plan starts: see the package docstring."""

MODE_STATELESS: Mode = "stateless"
MODE_STATE_AWARE: Mode = "state-aware"
MODES: tuple[Mode, ...] = (MODE_STATELESS, MODE_STATE_AWARE)

POSITION_AFTER: Position = "after"
POSITION_AT: Position = "at"
POSITION_REWIND: Position = "rewind"
POSITION_FROM_TIME: Position = "from-time"
POSITION_SAVEPOINT: Position = "savepoint"
"""After a savepoint's batch: its END offsets, where the carried state stands."""
POSITIONS: tuple[Position, ...] = (POSITION_AFTER, POSITION_AT, POSITION_REWIND,
                                   POSITION_FROM_TIME, POSITION_SAVEPOINT)


# --------------------------------------------------------------------------- plain inputs


@dataclass(frozen=True)
class CheckpointState:
    """What the NEW checkpoint location holds (from checkpoint.read_checkpoint)."""

    path: str
    has_offsets: bool
    query_id: str | None = None
    last_batch_id: int | None = None


@dataclass(frozen=True)
class SinkState:
    """A file sink output path and the last batch its ``_spark_metadata`` log holds."""

    path: str
    last_batch_id: int | None


SinkKind = Literal["file", "delta"]
"""A sink that keeps a commit log keyed by batch id: Spark's file sink
(``_spark_metadata``) or a Delta table (``txn`` actions)."""
SINK_FILE: SinkKind = "file"
SINK_DELTA: SinkKind = "delta"
SinkFoundBy = Literal["given", "journaled"]
"""Where a plan got the old query's sink from: ``--sink`` (``sink=``), or the sink
description the journal holds for its last batch (``FileSink[...]``, ``DeltaSink[...]``)."""


@dataclass(frozen=True)
class SinkFacts:
    """The OLD query's sink as its own commit log says (gathered at the edge, plain data).

    ``exists``: a log of that kind is at ``path`` (``_spark_metadata``, ``_delta_log``);
    ``problem``: why it could not be read (None: it was). ``last_batch``: the highest
    batch id the sink holds for the old query: the file sink log's highest batch file,
    or the Delta ``txn`` version of ``app_id`` (the old query's id, or the ``txnAppId``
    its foreachBatch writes used); None when it holds none. ``app_ids``: every appId the
    Delta log has a ``txn`` of. ``bytes_read``: what reading the log cost."""

    kind: SinkKind
    path: str
    found_by: SinkFoundBy = "given"
    exists: bool = True
    last_batch: int | None = None
    app_id: str | None = None
    app_ids: tuple[str, ...] = ()
    problem: str | None = None
    bytes_read: int = 0

    def label(self) -> str:
        what = "file sink" if self.kind == SINK_FILE else "Delta table"
        txn = f" (txn appId {self.app_id})" if self.app_id else ""
        return f"the {what} at {self.path}{txn}"


@dataclass
class Start:
    """Where a plan starts, as decided by its first step: the position, the batches
    read again (None: none, the plan starts after the anchor), the batch journaled
    before them, and for state-aware plans the cutoff."""

    position: Position
    from_batches: list[Batch] | None
    before: Batch | None
    findings: Findings
    start_ref: BatchRef | None = None
    cutoff: datetime | None = None


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class CarriedState:
    """One old operator's state in a plan from a savepoint: what it is, how many keys,
    what the plan does with it (``decision``) and what carries it (``how``: the
    initial_state call, or why not)."""

    operator_id: int
    kind: str
    name: str
    keys: int
    decision: StateDecision
    how: str
    parts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "kind": self.kind, "name": self.name,
                "keys": self.keys, "decision": self.decision, "how": self.how,
                "parts": list(self.parts)}


#: Partitions named one by one in a plan's text (all of them are in its JSON).
SHOWN = 20


@dataclass(frozen=True)
class PartitionTranslation:
    """One partition's start on the replica: journaled ``topic``/``partition`` at
    ``journaled`` is ``replica_topic`` at ``offset`` (-2: the replica's earliest, no
    sync yet), reading again at most ``reread`` records (None: unbounded, earliest).
    ``sync``: the sync it was translated by (or, at earliest, the first one above the
    journaled offset). ``lost``: records from ``journaled`` on that never reached the
    replica (MM2 began copying the partition above them); ``held``: at earliest, the
    records the replica holds before that first sync's."""

    topic: str
    partition: int
    journaled: int
    replica_topic: str
    offset: int
    reread: int | None
    sync: tuple[int, int] | None = None
    lost: int = 0
    held: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition,
                "journaled": self.journaled, "replica_topic": self.replica_topic,
                "offset": self.offset, "reread_at_most": self.reread,
                "sync": list(self.sync) if self.sync else None, "not_replicated": self.lost}

    def label(self) -> str:
        bound = ("all the replica holds of it (no offset sync at or below it)"
                 if self.reread is None else count(self.reread, "record"))
        start = "earliest" if self.offset < 0 else str(self.offset)
        lost = (f"; never replicated: {self.journaled}..{self.journaled + self.lost - 1} "
                f"({count(self.lost, 'record')})" if self.lost else "")
        return (f"{tp(self.topic, self.partition)} {self.journaled} -> "
                f"{tp(self.replica_topic, self.partition)} {start}; read again at most: "
                f"{bound}{lost}")


@dataclass
class Translation:
    """A source's offsets translated to the replica, per partition."""

    alias: str
    policy: ReplicationPolicy
    partitions: list[PartitionTranslation] = field(default_factory=list)

    @property
    def reread_bound(self) -> int:
        """Records read again at most, over the partitions with a sync."""
        return sum(p.reread or 0 for p in self.partitions)

    @property
    def unsynced(self) -> list[PartitionTranslation]:
        """The partitions with no sync at or below their journaled offset (earliest)."""
        return [p for p in self.partitions if p.reread is None]

    @property
    def lost(self) -> list[PartitionTranslation]:
        """The partitions with records that never reached the replica."""
        return [p for p in self.partitions if p.lost]

    def to_dict(self) -> dict[str, Any]:
        return {"translate_from": self.alias, "replication_policy": self.policy,
                "reread_bound": self.reread_bound,
                "partitions_without_sync": len(self.unsynced),
                "not_replicated": sum(p.lost for p in self.partitions),
                "partitions": [p.to_dict() for p in self.partitions]}

    def lines(self) -> list[str]:
        shown = [p.label() for p in self.partitions[:SHOWN]]
        more = len(self.partitions) - SHOWN
        return shown + ([f"... and {more} more (the JSON plan names all)"] if more > 0 else [])


@dataclass
class SourcePlan:
    """How one source of the query starts on the new checkpoint.

    ``offsets`` is the Kafka start position per partition (-2 = earliest) for Kafka
    sources, None otherwise; ``journaled`` the journaled offset the plan derives from.
    """

    index: int
    description: str | None
    kind: SourceKind
    options: dict[str, str]
    offsets: KafkaOffsets | None
    journaled: Any
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    records_again: KafkaOffsets | None = None
    """Record-time plans: per partition, journaled records read again (end - start, >= 0)."""
    by_timestamp: dict[str, dict[str, int]] | None = None
    """Record-time plans: Spark's ``startingOffsetsByTimestamp`` value (epoch millis)."""
    translation: Translation | None = None
    """Translated plans: per partition, the journaled offset, the replica's, and the
    records read again at most (:mod:`~offset_journal.restart.translate`)."""
    log_starts: dict[tuple[str, int], int] = field(default_factory=dict)
    """Kafka, with the cluster asked: the log start, when the plan was made, of each
    partition it starts at -2 (earliest), by (topic, partition). Recorded with the plan:
    the audit holds a run no job linked to it to start exactly there."""

    def add(self, found: Findings) -> None:
        """Append a step's findings to this source's."""
        self.notes += found.notes
        self.warnings += found.warnings
        self.errors += found.errors

    def starting_offsets(self) -> str:
        """Kafka: the ``startingOffsets`` JSON. Others: the journaled offset as JSON."""
        if self.offsets is not None:
            return format_kafka_offsets(self.offsets)
        return json.dumps(self.journaled, separators=(",", ":"), sort_keys=True, default=str)

    def by_timestamp_options(self) -> dict[str, str]:
        """Record-time plans, for Spark to resolve the time itself: the
        ``startingOffsetsByTimestamp`` option (every partition named, as Spark requires)
        with ``startingOffsetsByTimestampStrategy=latest`` (a partition without a record
        at or after the time starts at its end, as in this plan; Spark's default,
        "error", fails the query). Empty for other plans."""
        if self.by_timestamp is None:
            return {}
        return {"startingOffsetsByTimestamp": json.dumps(self.by_timestamp,
                                                         separators=(",", ":")),
                "startingOffsetsByTimestampStrategy": "latest"}

    def to_dict(self) -> dict[str, Any]:
        out = {
            "index": self.index, "description": self.description, "kind": self.kind,
            "options": dict(self.options),
            "starting_offsets": json.loads(self.starting_offsets()),
            "journaled": self.journaled, "notes": list(self.notes),
            "warnings": list(self.warnings), "errors": list(self.errors),
        }
        if self.records_again is not None:
            out["records_again"] = {t: {str(p): n for p, n in sorted(parts.items())}
                                    for t, parts in sorted(self.records_again.items())}
            out["records_again_total"] = sum(n for parts in self.records_again.values()
                                             for n in parts.values())
        if self.by_timestamp is not None:
            out["starting_offsets_by_timestamp"] = self.by_timestamp_options()
        if self.translation is not None:
            out["translation"] = self.translation.to_dict()
        return out


@dataclass(frozen=True)
class RestartPlan:
    """Where each source starts, and why; see the package docstring for the positions.

    ``errors`` (data loss, nothing to start from) mean the plan must not be used as is;
    ``warnings`` need a person's judgement. In a state-aware plan,
    ``event_time_cutoff`` is the watermark the old query had reached: windows ending at
    or before it are already in the sink, so the new job must drop them.

    Frozen: recording it (:func:`~.record.record`) gives a new plan with its id
    (``dataclasses.replace``), so a plan handed out is never changed behind its reader.
    """

    query_name: str
    mode: Mode
    position: Position
    anchor: BatchRef
    start_batch: BatchRef | None
    sources: list[SourcePlan]
    notes: list[str] = field(default_factory=list)
    plan_warnings: list[str] = field(default_factory=list)
    plan_errors: list[str] = field(default_factory=list)
    as_of: datetime | None = None
    event_time_cutoff: datetime | None = None
    window: timedelta | None = None
    checkpoint: str | None = None
    output_path: str | None = None
    kafka_checked: bool = False
    plan_id: int | None = None
    """The plan's id in the journal's ``restart_plans`` once recorded (None: not
    recorded; ``record_problem`` says why when recording failed)."""
    record_problem: str | None = None
    from_time: datetime | None = None
    reread: list[RereadRun] = field(default_factory=list)
    kafka_cluster_id: str | None = None
    """The id of the cluster at the plan's bootstrap servers (None: not asked)."""
    journaled_cluster_id: str | None = None
    """The id of the cluster the anchor's run read (None: not journaled)."""
    savepoint_id: int | None = None
    """A plan from a savepoint: its id in the journal (None: not recorded there)."""
    savepoint_location: str | None = None
    savepoint_sha256: str | None = None
    """A plan from a savepoint: its manifest's SHA-256, which ``initial_state``
    (``expect_sha256=``) holds the manifest it reads against, so the state comes from the
    manifest the offsets were checked with."""
    state: list[CarriedState] = field(default_factory=list)
    """A plan from a savepoint: each old operator's state and what becomes of it."""
    real_time: dict[str, Any] | None = None
    """The anchor's run ran in real-time mode: the rows of a batch stopped mid-way may be
    written again (run_id, after_batch, stopped_by, bound: records at most, None when
    not counted; by_partition)."""
    sink: dict[str, Any] | None = None
    """The old query's sink as its own log says, and what the plan did with it (kind,
    path, app_id, last_batch, journal_batch, taken: the batches it took from the sink
    and the old checkpoint, with their offsets); recorded with the plan."""
    sink_batches: list[Batch] = field(default_factory=list)
    """The batches the sink holds beyond the journal, built from the old checkpoint's
    offsets: the plan starts after the last, and journals them when it is recorded."""
    recovery: dict[str, Any] | None = None
    """A recovery from a savepoint (``state recover``): the old batches read again into
    state after it and the new checkpoint's batches that ran them; recorded with the
    plan, which the audit explains those runs by."""

    @property
    def warnings(self) -> list[str]:
        return self.plan_warnings + [
            f"source {s.index}: {w}" for s in self.sources for w in s.warnings
        ]

    @property
    def errors(self) -> list[str]:
        return self.plan_errors + [f"source {s.index}: {e}" for s in self.sources for e in s.errors]

    @property
    def ok(self) -> bool:
        return not self.errors

    def source(self, source_index: int = 0) -> SourcePlan:
        for s in self.sources:
            if s.index == source_index:
                return s
        have = ", ".join(str(s.index) for s in self.sources) or "none"
        raise RestartError(
            f"query {self.query_name!r} has no source {source_index} in this plan "
            f"(sources: {have})"
        )

    def options(self, source_index: int = 0) -> dict[str, str]:
        """Options for ``readStream.options(**plan.options())`` of that source."""
        return dict(self.source(source_index).options)

    def starting_offsets(self, source_index: int = 0) -> str:
        """The ``startingOffsets`` JSON of that source (see SourcePlan.starting_offsets)."""
        return self.source(source_index).starting_offsets()

    def to_dict(self) -> dict[str, Any]:
        return {
            "query_name": self.query_name, "mode": self.mode, "position": self.position,
            "anchor": self.anchor.to_dict(),
            "start_batch": self.start_batch.to_dict() if self.start_batch else None,
            "as_of": format_time(self.as_of),
            "event_time_cutoff": format_time(self.event_time_cutoff),
            "window_seconds": self.window.total_seconds() if self.window else None,
            "checkpoint": self.checkpoint, "output_path": self.output_path,
            "kafka_checked": self.kafka_checked, "plan_id": self.plan_id,
            "record_problem": self.record_problem,
            "from_time": format_time(self.from_time),
            "reprocessed_batches": [r.to_dict() for r in self.reread],
            "kafka_cluster_id": self.kafka_cluster_id,
            "journaled_kafka_cluster_id": self.journaled_cluster_id,
            "sources": [s.to_dict() for s in self.sources],
            "savepoint": ({"id": self.savepoint_id, "location": self.savepoint_location,
                           "sha256": self.savepoint_sha256}
                          if self.savepoint_location is not None else None),
            "state": [c.to_dict() for c in self.state],
            "real_time": self.real_time, "sink": self.sink,
            "notes": list(self.notes), "warnings": self.warnings, "errors": self.errors,
        }

    def explain(self) -> str:
        """The plan for people: where each source starts, and the reasons."""
        out = [f"Restart plan for query {self.query_name!r} ({self.mode})", ""]
        out.append("\n\n".join(fill(n) for n in self.notes))
        for s in self.sources:
            out.append("")
            out.append(f"Source {s.index}: {s.description or '(no description)'} [{s.kind}]")
            if s.options:
                for key, value in s.options.items():
                    out.append(f"  option {key} = {value}")
            else:
                out.append("  no readStream option to set")
            if s.by_timestamp is not None:
                out.append("  or, for Spark to look the time up itself (instead of "
                           "startingOffsets):")
                out += [f"  option {k} = {v}" for k, v in s.by_timestamp_options().items()]
            out += [fill(n, "  - ") for n in s.notes]
            if s.translation is not None:
                out.append("  translated, per partition (journaled -> replica):")
                out += [f"    {line}" for line in s.translation.lines()]
        if self.savepoint_location is not None:
            which = (f"savepoint {self.savepoint_id}" if self.savepoint_id is not None
                     else "savepoint")
            out += ["", f"State ({which} at {self.savepoint_location}):"]
            if not self.state:
                out.append("  none: the old query had no stateful operator")
            for c in self.state:
                out.append(f"  operator {c.operator_id} ({c.kind}, {c.name}): "
                           f"{c.keys:,} keys, {c.decision}")
                out.append(fill(c.how, "    "))
        if self.errors:
            out += ["", "ERRORS (do not start the job with this plan as it is):"]
            out += [fill(e, "  ! ") for e in self.errors]
        if self.warnings:
            out += ["", "Warnings:"]
            out += [fill(w, "  * ") for w in self.warnings]
        if self.plan_id is not None:
            out += ["", f"Recorded in the journal as plan {self.plan_id} (restart_plans)."]
        elif self.record_problem is None:
            out += ["", fill("Not recorded in the journal: a preview. The plan a job starts "
                             "from is recorded when it is handed out (`starting-offsets`, a "
                             "job's --from-journal, `plan --record`).")]
        else:
            out += ["", fill(f"Not recorded: {self.record_problem}")]
        return "\n".join(out).rstrip() + "\n"
