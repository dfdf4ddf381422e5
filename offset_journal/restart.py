"""Restart plans: where a query on a NEW checkpoint starts, and why.

A new checkpoint knows nothing; the journal knows every completed batch's offsets.
:func:`plan_restart` turns them into ``readStream`` options, checked against what can
go wrong: partitions added since, topics deleted, offsets deleted by retention (data
loss), a checkpoint location that is not new (Spark would ignore the options), a file
sink that would skip the new query's first batches, two runs journaling under one name.

Everything that decides is pure (:func:`compute_plan` and the helpers it uses, over
journal ``Batch`` objects and plain data) and is tested without Spark, Kafka or a
database; :func:`plan_restart` is the thin edge that gathers those inputs.

Positions a plan can start from:

* **after** a batch (default: the last journaled one; or the last one triggered at or
  before ``as_of``): that batch's END offsets. Kafka start offsets are inclusive and a
  batch's end offsets exclusive, so nothing is skipped and nothing is read twice.
* **at** a batch (``batch=(run_id, batch_id)``): that batch's START offsets, so the
  batch is processed again ("reprocess from a certain point").
* **rewind** (state-aware): the START offsets of the earliest batch that may hold a
  record of a window the old checkpoint's state had not emitted yet.

This module also imports a checkpoint's committed batches into the journal (for jobs
that ran without the listener) and compares a checkpoint with the journal.
"""

from __future__ import annotations

import json
import logging
import os
import re
import textwrap
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from .journal import (
    FLAGGED_PROBLEMS,
    Batch,
    FlaggedProblem,
    Journal,
    JournalError,
    RunBounds,
    SourceOffsets,
    SpoolLoss,
)
from .kafka import TopicState, topic_state
from .offsets import (
    EARLIEST,
    KafkaOffsets,
    PartitionOffset,
    format_kafka_offsets,
    looks_like_kafka,
    partition_offsets,
)
from .records import BatchRecord, RunRecord, SourceRecord
from .values import parse_timeout

log = logging.getLogger(__name__)

MODE_STATELESS = "stateless"
MODE_STATE_AWARE = "state-aware"
MODES = (MODE_STATELESS, MODE_STATE_AWARE)

POSITION_AFTER = "after"
POSITION_AT = "at"
POSITION_REWIND = "rewind"

KIND_KAFKA = "kafka"
KIND_DELTA = "delta"
KIND_FILE = "file"
KIND_RATE = "rate"
KIND_OTHER = "other"

class RestartError(RuntimeError):
    """No plan can be made (unknown query, checkpoint not new, bad arguments); one line."""


# --------------------------------------------------------------------------- plain inputs


@dataclass(frozen=True)
class RunSpan:
    """When a run journaled batches: [start, end], for spotting concurrent runs.

    ``start`` is the run's start event, else its first batch's trigger time; ``end`` its
    termination, else its last batch's trigger (a crashed run has no termination, and
    must not look as if it ran forever).
    """

    run_id: str
    query_id: str
    start: datetime | None
    end: datetime | None
    terminated: bool = False


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
        when = f", triggered {_iso(self.trigger_at)}" if self.trigger_at else ""
        return f"batch {self.batch_id} of run {self.run_id}{when}"

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "batch_id": self.batch_id, "query_id": self.query_id,
                "trigger_at": _iso(self.trigger_at), "watermark": _iso(self.watermark)}


# --------------------------------------------------------------------------- the plan


@dataclass
class SourcePlan:
    """How one source of the query starts on the new checkpoint.

    ``offsets`` is the Kafka start position per partition (-2 = earliest) for Kafka
    sources, None otherwise; ``journaled`` the journaled offset the plan derives from.
    """

    index: int
    description: str | None
    kind: str
    options: dict[str, str]
    offsets: KafkaOffsets | None
    journaled: Any
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def starting_offsets(self) -> str:
        """Kafka: the ``startingOffsets`` JSON. Others: the journaled offset as JSON."""
        if self.offsets is not None:
            return format_kafka_offsets(self.offsets)
        return json.dumps(self.journaled, separators=(",", ":"), sort_keys=True, default=str)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "description": self.description, "kind": self.kind,
            "options": dict(self.options),
            "starting_offsets": json.loads(self.starting_offsets()),
            "journaled": self.journaled, "notes": list(self.notes),
            "warnings": list(self.warnings), "errors": list(self.errors),
        }


@dataclass
class RestartPlan:
    """Where each source starts, and why; see the module docstring for the positions.

    ``errors`` (data loss, nothing to start from) mean the plan must not be used as is;
    ``warnings`` need a person's judgement. In a state-aware plan,
    ``event_time_cutoff`` is the watermark the old query had reached: windows ending at
    or before it are already in the sink, so the new job must drop them.
    """

    query_name: str
    mode: str
    position: str
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
            "as_of": _iso(self.as_of), "event_time_cutoff": _iso(self.event_time_cutoff),
            "window_seconds": self.window.total_seconds() if self.window else None,
            "checkpoint": self.checkpoint, "output_path": self.output_path,
            "kafka_checked": self.kafka_checked,
            "sources": [s.to_dict() for s in self.sources],
            "notes": list(self.notes), "warnings": self.warnings, "errors": self.errors,
        }

    def explain(self) -> str:
        """The plan for people: where each source starts, and the reasons."""
        out = [f"Restart plan for query {self.query_name!r} ({self.mode})", ""]
        out.append("\n\n".join(_fill(n) for n in self.notes))
        for s in self.sources:
            out.append("")
            out.append(f"Source {s.index}: {s.description or '(no description)'} [{s.kind}]")
            if s.options:
                for key, value in s.options.items():
                    out.append(f"  option {key} = {value}")
            else:
                out.append("  no readStream option to set")
            out += [_fill(n, "  - ") for n in s.notes]
        if self.errors:
            out += ["", "ERRORS (do not start the job with this plan as it is):"]
            out += [_fill(e, "  ! ") for e in self.errors]
        if self.warnings:
            out += ["", "Warnings:"]
            out += [_fill(w, "  * ") for w in self.warnings]
        return "\n".join(out).rstrip() + "\n"


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- source kinds


def source_kind(source: SourceOffsets) -> str:
    """kafka, delta, file, rate or other: from the description, else the offset's shape."""
    if source.kind == KIND_KAFKA:
        return KIND_KAFKA
    desc = (source.description or "").strip()
    offset = source.end_offset if source.end_offset is not None else source.start_offset
    if desc.startswith("DeltaSource") or (isinstance(offset, dict) and "reservoirId" in offset):
        return KIND_DELTA
    if desc.startswith("FileStreamSource") or (
        isinstance(offset, dict) and set(offset) == {"logOffset"}
    ):
        return KIND_FILE
    if desc.startswith(("RateStream", "RateSource", "RatePerMicroBatch")):
        return KIND_RATE
    if looks_like_kafka(offset):
        return KIND_KAFKA
    return KIND_OTHER


_STRATEGY = re.compile(r"\b(SubscribePattern|Subscribe|Assign)\[([^\]]*)\]")


def kafka_strategy(description: str | None) -> tuple[str, list[str]]:
    """How a Kafka source picks partitions, from Spark's description.

    ``KafkaV2[Subscribe[a, b]]`` -> ("subscribe", ["a", "b"]); SubscribePattern ->
    ("pattern", [regex]); ``Assign[t-0, t-1]`` -> ("assign", ["t-0", "t-1"]); anything
    else (other Kafka sources, imported checkpoints) -> ("unknown", []).
    """
    match = _STRATEGY.search(description or "")
    if match is None:
        return "unknown", []
    name, body = match.group(1), match.group(2)
    items = [x.strip() for x in body.split(",") if x.strip()]
    return {"Subscribe": "subscribe", "SubscribePattern": "pattern",
            "Assign": "assign"}[name], items


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _fill(text: str, first: str = "", rest: str | None = None) -> str:
    """Wrap for a terminal; JSON and long tokens are never split."""
    return textwrap.fill(text, width=100, initial_indent=first,
                         subsequent_indent=rest if rest is not None else " " * len(first),
                         break_long_words=False, break_on_hyphens=False)


def _tp(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _tp_list(pairs: Iterable[tuple[str, int]], limit: int = 8) -> str:
    items = [_tp(t, p) for t, p in sorted(pairs)]
    if len(items) > limit:
        return ", ".join(items[:limit]) + f" and {len(items) - limit} more"
    return ", ".join(items)


# --------------------------------------------------------------------------- Kafka offsets


def _rows(batch: Batch, index: int) -> dict[tuple[str, int], PartitionOffset]:
    try:
        source = batch.source(index)
    except KeyError:
        return {}
    return {(p.topic, p.partition): p for p in source.partitions}


def _first_batch_of_checkpoint(batch: Batch, index: int) -> bool:
    try:
        return batch.source(index).start_offset is None
    except KeyError:
        return False


def start_offsets_from(from_batches: Sequence[Batch], before: Batch | None, index: int,
                       ) -> tuple[KafkaOffsets, list[str], list[str]]:
    """Kafka START offsets for re-reading ``from_batches`` (journal order) in full.

    Per partition tracked by the last batch: the smallest start offset over the batches.
    A partition whose first row has no start appeared during that batch (Spark read
    it from earliest) or the batch was its checkpoint's first (Spark reports no start
    then): it starts at ``before``'s end offset when that batch has one, else -2.
    Returns (offsets, notes, warnings).
    """
    notes: list[str] = []
    warnings: list[str] = []
    last = from_batches[-1]
    tracked = sorted(k for k, row in _rows(last, index).items() if row.end is not None)
    before_rows = _rows(before, index) if before is not None else {}
    out: KafkaOffsets = {}
    appeared: list[tuple[str, int]] = []
    from_before: list[tuple[str, int]] = []
    unknown: list[tuple[str, int]] = []
    for key in tracked:
        starts: list[int] = []
        first: tuple[int, PartitionOffset] | None = None
        for pos, b in enumerate(from_batches):
            row = _rows(b, index).get(key)
            if row is None:
                continue
            if first is None:
                first = (pos, row)
            if row.start is not None:
                starts.append(row.start)
        assert first is not None  # the last batch has the partition
        pos, row = first
        if row.start is not None:
            value = min(starts)
        elif pos == 0 and _first_batch_of_checkpoint(from_batches[0], index):
            prev = before_rows.get(key)
            if prev is not None and prev.end is not None:
                value = min([prev.end, *starts])
                from_before.append(key)
            else:
                value = EARLIEST
                unknown.append(key)
        else:
            value = EARLIEST
            appeared.append(key)
        out.setdefault(key[0], {})[key[1]] = value
    if appeared:
        notes.append(
            "appeared during the re-read batches, so -2 (earliest) where Spark started "
            f"them too: {_tp_list(appeared)}"
        )
    first_ref = BatchRef.of(from_batches[0]).label()
    if from_before and before is not None:
        warnings.append(
            f"{first_ref} is the first batch of its checkpoint (query id "
            f"{from_batches[0].query_id}) and Spark reports no start offsets for it: "
            f"{_tp_list(from_before)} start at the end offsets of the batch journaled "
            f"before it ({BatchRef.of(before).label()}), which is where it started if it "
            "was itself started from the journal"
        )
    if unknown:
        warnings.append(
            f"the journal does not know where {_tp_list(unknown)} started in {first_ref} "
            "(its checkpoint's first batch): -2 (earliest) re-reads all they hold"
        )
    return out, notes, warnings


def end_offsets_of(batch: Batch, index: int) -> tuple[KafkaOffsets, list[str]]:
    """A Kafka source's END offsets in ``batch``; partitions Spark stopped reporting
    (start without end: topic deleted or unsubscribed) are left out, with a note."""
    out: KafkaOffsets = {}
    gone: list[tuple[str, int]] = []
    for (topic, part), row in sorted(_rows(batch, index).items()):
        if row.end is None:
            gone.append((topic, part))
            continue
        out.setdefault(topic, {})[part] = row.end
    notes = []
    if gone:
        notes.append(
            "start offsets but no end offsets in the batch: Spark stopped reading them "
            f"(topic deleted or no longer subscribed), left out: {_tp_list(gone)}"
        )
    return out, notes


def check_against_cluster(offsets: KafkaOffsets, state: TopicState, *, strategy: str = "unknown",
                          subscribed: Sequence[str] = (),
                          ) -> tuple[KafkaOffsets, list[str], list[str], list[str]]:
    """Reconcile planned start offsets with the partitions and logs that exist now.

    Spark requires specific ``startingOffsets`` to name exactly the partitions it is
    assigned, so partitions of a deleted topic are dropped (naming them would fail the
    query's start) and, for subscriptions, partitions that exist but are not in the
    journal are added at -2 (earliest: they appeared after the journaled batch, and all
    they hold is new). A start below a partition's log start means those records were
    deleted before being read: DATA LOSS, an error. A start above the log end (recreated
    topic, other cluster, forged batch) is an error too.
    Returns (offsets, notes, warnings, errors).
    """
    notes: list[str] = []
    warnings: list[str] = []
    errors: list[str] = []
    out: KafkaOffsets = {}
    for topic in sorted(offsets):
        parts = offsets[topic]
        if topic not in state:
            warnings.append(
                f"topic {topic} (partitions {', '.join(str(p) for p in sorted(parts))}) no "
                "longer exists on the cluster: left out of startingOffsets, since Spark "
                "refuses specific offsets for partitions it is not assigned"
            )
            continue
        existing = state[topic]
        gone = sorted(p for p in parts if p not in existing)
        if gone:
            warnings.append(
                f"topic {topic} has {len(existing)} partitions now (recreated?): left out "
                f"of startingOffsets: {_tp_list((topic, p) for p in gone)}"
            )
        for part in sorted(parts):
            if part in existing:
                out.setdefault(topic, {})[part] = parts[part]
    if strategy == "assign":
        notes.append("the source assigns fixed partitions: none are added")
    else:
        candidates = set(offsets) | (set(subscribed) if strategy == "subscribe" else set())
        added: list[tuple[str, int]] = []
        new_topics: list[str] = []
        for topic in sorted(candidates):
            if topic not in offsets and topic in state:
                new_topics.append(topic)
            for part in sorted(state.get(topic, {})):
                if part not in out.get(topic, {}):
                    out.setdefault(topic, {})[part] = EARLIEST
                    if topic in offsets:
                        added.append((topic, part))
        if added:
            notes.append(
                "on the cluster but not in the journal (created after the journaled "
                f"batch), so -2 (earliest) as Spark reads new partitions: {_tp_list(added)}"
            )
        if new_topics:
            notes.append(
                "subscribed but never journaled: every partition from -2 (earliest); set "
                f"-1 instead to skip what they already hold: {', '.join(new_topics)}"
            )
        if strategy == "pattern":
            notes.append(
                "the source subscribes by pattern: topics created since that match it are "
                "not checked here; Spark refuses to start if one exists and is not named"
            )
    loss: list[str] = []
    beyond: list[str] = []
    for topic in sorted(out):
        for part, offset in sorted(out[topic].items()):
            if offset < 0 or part not in state.get(topic, {}):
                continue
            low, high = state[topic][part]
            if offset < low:
                loss.append(
                    f"{_tp(topic, part)} starts at {offset} but its log starts at {low}: "
                    f"records {offset}..{low - 1} were deleted before being read"
                )
            elif offset > high:
                beyond.append(f"{_tp(topic, part)} starts at {offset}, beyond its log end "
                              f"{high}")
    if beyond:
        # Spark would wait for offsets that may never come, or fail; a writer role's
        # forged batch looks like this too. Never handed out without being asked.
        errors.append(
            "; ".join(beyond) + ": the journal holds offsets the cluster never had (topic "
            "recreated, journal from another cluster, or a forged batch?); check, then "
            "start from another batch (--batch, --as-of) or from these (starting-offsets "
            "--force)"
        )
    if loss:
        errors.append(
            "DATA LOSS: " + "; ".join(loss)
            + " (Spark fails with failOnDataLoss=true, or skips them silently with false)"
        )
    return out, notes, warnings, errors


# --------------------------------------------------------------------------- other sources


def _non_kafka_plan(index: int, source: SourceOffsets, kind: str, offset: Any,
                    what: str) -> SourcePlan:
    plan = SourcePlan(index, source.description, kind, {}, None, offset)
    shown = json.dumps(offset, separators=(",", ":"), sort_keys=True, default=str)
    if kind == KIND_DELTA:
        if not isinstance(offset, dict) or not isinstance(offset.get("reservoirVersion"), int):
            plan.errors.append(f"the journaled Delta offset has no reservoirVersion: {shown}")
            return plan
        version = offset["reservoirVersion"]
        index_in = offset.get("index", -1)
        if offset.get("isStartingVersion"):
            plan.warnings.append(
                f"the old query was still reading the table's initial snapshot (version "
                f"{version}); no option resumes inside a snapshot: without startingVersion "
                "the whole table is read again (duplicates); startingVersion="
                f"{version + 1} would skip the rest of the snapshot"
            )
            plan.notes.append(f"journaled {what}: {shown}; no startingVersion set")
            return plan
        plan.options["startingVersion"] = str(version)
        plan.notes.append(
            f"journaled {what}: {shown}: startingVersion = reservoirVersion = {version}"
        )
        if isinstance(index_in, int) and index_in >= 0:
            plan.warnings.append(
                f"version {version} was only partly processed (files up to index "
                f"{index_in}): it is read again in full, so some of its rows come twice"
            )
        else:
            plan.notes.append(f"every version before {version} was processed in full")
        return plan
    if kind == KIND_FILE:
        plan.warnings.append(
            "the file source has no starting-position option: a new checkpoint lists the "
            "directory again and reads every file in it (the journaled logOffset "
            f"{shown} indexes the OLD checkpoint's file log); move processed files away "
            "(cleanSource) or limit with maxFileAge to avoid re-reading"
        )
        return plan
    if kind == KIND_RATE:
        plan.notes.append(
            f"the rate source generates rows from the query's start: nothing to resume "
            f"(journaled {what}: {shown})"
        )
        return plan
    plan.warnings.append(
        f"no option is known for this source; journaled {what}: {shown} (see the source's "
        "documentation for a starting-position option)"
    )
    return plan


# --------------------------------------------------------------------------- state-aware


def emitted_cutoff(chain: Sequence[Batch]) -> tuple[datetime | None, Batch | None]:
    """The watermark the last durable batch ran with, and that batch.

    In append mode a window is emitted by the batch whose watermark passed its end,
    and progress reports the watermark a batch USED (the next batch's may be higher),
    so windows ending at or before the last batch's watermark are in the sink and any
    other window lived only in the state being discarded. A last batch without a
    watermark falls back to the latest batch that has one.
    """
    for batch in reversed(chain):
        if batch.watermark is not None:
            return batch.watermark, batch
    return None, None


def rewind_index(chain: Sequence[Batch], threshold: datetime) -> int | None:
    """Index of the earliest batch whose event time max is >= ``threshold``, or that
    may hold records (row count not 0) without journaled event times (imported from a
    checkpoint): nothing says its records are older.

    Every earlier batch's records are older than ``threshold``, so their windows ended
    at or before the cutoff and were emitted: re-reading from this batch on covers
    every record of the windows still open. None when no batch has such records.
    """
    for i, batch in enumerate(chain):
        if batch.event_time_max is None:
            if batch.num_input_rows != 0:
                return i
        elif batch.event_time_max >= threshold:
            return i
    return None


# --------------------------------------------------------------------------- concurrency


def concurrent_runs(spans: Sequence[RunSpan]) -> list[tuple[RunSpan, RunSpan]]:
    """Pairs of runs whose [start, end] spans overlap (touching ends do not count)."""
    known = sorted((s for s in spans if s.start is not None and s.end is not None),
                   key=lambda s: (s.start, s.run_id))
    pairs = []
    for i, a in enumerate(known):
        for b in known[i + 1:]:
            assert a.start is not None and a.end is not None
            assert b.start is not None and b.end is not None
            if b.start >= a.end:
                break  # sorted by start: no later run starts before ``a`` ends either
            if a.start < b.end:
                pairs.append((a, b))
    return pairs


# --------------------------------------------------------------------------- the planner


def refuse_used_checkpoint(state: CheckpointState, query_id: str | None = None) -> None:
    """Raise RestartError when the NEW checkpoint location already holds offsets.

    Spark resumes from such a location and silently ignores ``startingOffsets``, so a
    plan for it would look applied and not be.
    """
    if not state.has_offsets:
        return
    which = (f"batches up to {state.last_batch_id}" if state.last_batch_id is not None
             else "offsets")
    same = (" (it is the checkpoint of the journaled query itself)"
            if state.query_id and query_id and state.query_id == query_id else "")
    raise RestartError(
        f"checkpoint location {state.path} already holds {which}{same}: Spark would "
        "resume from it and ignore startingOffsets; use a new, empty location"
    )


def _flagged(problems: Sequence[FlaggedProblem], batches: Sequence[Batch],
             ) -> dict[tuple[int, int], tuple[str, str]]:
    """(batch pk, source index) -> (the batch's label, the problem flagged on it), from
    the journal's list and from the plan's own batches' sources."""
    out: dict[tuple[int, int], tuple[str, str]] = {}
    for p in problems:
        ref = BatchRef(p.run_id, p.batch_id, p.query_id, p.trigger_at)
        out[(p.pk, p.source_index)] = (ref.label(), p.problem)
    for batch in batches:
        for src in batch.sources:
            if src.problem:
                out[(batch.pk, src.source_index)] = (BatchRef.of(batch).label(), src.problem)
    return out


def _kafka_ends(batch: Batch) -> dict[tuple[int, str, int], int]:
    return {(s.source_index, p.topic, p.partition): p.end for s in batch.sources
            if source_kind(s) == KIND_KAFKA for p in s.partitions if p.end is not None}


def check_last_batch(query_name: str, anchor: Batch, others: Sequence[Batch]) -> list[str]:
    """Check the batch the journal's own order calls last against the batches other
    orders call last (pure); returns warnings, raises RestartError when they disagree.

    The journal's order (the database's sequence, then batch ids within the run)
    cannot be skewed by a driver's clock, but a batch replayed late from a spool can
    come after batches of a later run. The offsets settle it: the last batch must have
    read every Kafka partition it shares with another candidate at least as far. If
    another candidate read further, which batch is last is not clear from the journal,
    and a person must choose (``--batch RUN:BATCH``).
    """
    warnings: list[str] = []
    mine = _kafka_ends(anchor)
    for other in others:
        if other.pk == anchor.pk:
            continue
        theirs = _kafka_ends(other)
        ahead = sorted(k for k in mine.keys() & theirs.keys() if theirs[k] > mine[k])
        ref, other_ref = BatchRef.of(anchor).label(), BatchRef.of(other).label()
        if ahead:
            sample = ", ".join(f"{_tp(t, p)} {theirs[(i, t, p)]} > {mine[(i, t, p)]}"
                               for i, t, p in ahead[:3])
            more = f" and {len(ahead) - 3} more" if len(ahead) > 3 else ""
            raise RestartError(
                f"the journal's orders disagree on the last batch of query {query_name!r}: "
                f"{ref} was journaled last, but {other_ref} read further ({sample}{more}); "
                "a batch replayed late from a spool, a driver's clock off, or two jobs "
                "under one name? Choose where to start explicitly: --batch RUN:BATCH "
                "(starts AT that batch) or --as-of TIME"
            )
        later = (other.trigger_at is not None and anchor.trigger_at is not None
                 and other.trigger_at > anchor.trigger_at)
        if later:
            shared = "; the offsets agree" if mine.keys() & theirs.keys() else (
                "; no Kafka partition in common to check it by")
            warnings.append(
                f"{other_ref} has a later trigger time than {ref}, which the journal "
                f"recorded after it: the clock of run {other.run_id}'s driver was ahead, "
                f"or of run {anchor.run_id}'s behind. The journal's own order decides"
                f"{shared}"
            )
    return warnings


def _order_key(batch: Batch) -> tuple[datetime, int, int]:
    return (batch.trigger_at or datetime.min.replace(tzinfo=timezone.utc), batch.batch_id,
            batch.pk)


def compute_plan(
    query_name: str,
    anchor: Batch,
    *,
    position: str = POSITION_AFTER,
    chain: Sequence[Batch] = (),
    before: Batch | None = None,
    kafka_state: TopicState | None = None,
    runs: Sequence[RunSpan] = (),
    checkpoint: CheckpointState | None = None,
    sink: SinkState | None = None,
    mode: str = MODE_STATELESS,
    window: timedelta | None = None,
    source: int | None = None,
    as_of: datetime | None = None,
    subscribe: Sequence[str] | None = None,
    database_now: datetime | None = None,
    problems: Sequence[FlaggedProblem] = (),
) -> RestartPlan:
    """Make a restart plan from journal data alone (pure: no I/O).

    ``anchor`` is the batch the plan is relative to: the last durable one (position
    "after"), or the one to reprocess (position "at"). For state-aware plans ``chain``
    is the anchor's checkpoint's batches in journal order ending with the anchor.
    ``before`` is the journaled batch just before the first batch re-read (the batch
    before ``anchor`` for "at", before ``chain[0]`` for state-aware); it supplies start
    offsets Spark does not report for a checkpoint's first batch. ``kafka_state`` is
    topic_state() of the cluster (None: not checked). ``subscribe`` is the NEW job's
    topic subscription when known (an upgrade may add or drop a topic); it overrides
    the one read from the old source's description, and journaled topics outside it
    are left out. ``database_now`` is the journal database's clock: a trigger time ahead
    of it is flagged (:func:`future_trigger_problems`).
    ``problems``: what the journal flagged on the query's batches when it
    wrote them (Journal.flagged_problems), with those on the plan's own batches'
    sources: an error on the batch whose end offsets the plan starts from, a warning
    on any other batch.
    """
    if mode not in MODES:
        raise RestartError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if position not in (POSITION_AFTER, POSITION_AT):
        raise RestartError(f"unknown position {position!r}")
    if mode == MODE_STATE_AWARE and position == POSITION_AT:
        raise RestartError("a state-aware plan starts after a batch: use as_of, not batch")
    if checkpoint is not None:
        refuse_used_checkpoint(checkpoint, anchor.query_id)

    anchor_ref = BatchRef.of(anchor)
    notes: list[str] = []
    warnings: list[str] = []
    errors: list[str] = []
    from_batches: list[Batch] | None = None  # batches re-read, for at/rewind
    prev: Batch | None = before
    final_position = position
    start_ref: BatchRef | None = None
    cutoff: datetime | None = None
    when = f" triggered at or before {_iso(as_of)}" if as_of is not None else ""

    flagged = _flagged(problems, [anchor, *chain])
    if mode == MODE_STATE_AWARE:
        chain = [b for b in chain if _order_key(b) <= _order_key(anchor)] or [anchor]
        if _order_key(chain[-1]) != _order_key(anchor):
            chain = [*chain, anchor]
        cutoff, cutoff_batch = emitted_cutoff(chain)
        if cutoff is None or cutoff_batch is None:
            raise RestartError(
                f"a state-aware plan needs the watermark, and no journaled batch of query "
                f"{query_name!r} (query id {anchor.query_id}) reported one: was "
                "withWatermark used?"
            )
        if cutoff_batch is not anchor:
            warnings.append(
                f"the last batch reported no watermark: using {_iso(cutoff)} from "
                f"{BatchRef.of(cutoff_batch).label()}"
            )
        threshold = cutoff - window if window is not None else cutoff
        notes.append(
            f"State-aware restart after {anchor_ref.label()} (the last journaled batch"
            f"{when}). That batch ran with watermark {_iso(cutoff)}: in append mode "
            "every window ending at or before it has been emitted to the sink; windows "
            "ending after it lived only in the old checkpoint's state, which is being "
            "discarded, so their records must be read again."
        )
        if window is None:
            warnings.append(
                "no window length given: re-reading only records at or after the cutoff; "
                "a window still open at the cutoff that began before it comes out "
                "incomplete (pass the window length)"
            )
        if not any(b.event_time_max is not None for b in chain):
            if all(b.num_input_rows == 0 for b in chain):
                k: int | None = None
            else:
                k = 0
                warnings.append(
                    "no event times are journaled for this checkpoint's batches (imported "
                    "from a checkpoint?): rewinding to its first journaled batch"
                )
        else:
            k = rewind_index(chain, threshold)
            if k is not None and chain[k].event_time_max is None:
                warnings.append(
                    f"{BatchRef.of(chain[k]).label()} has no journaled event times (imported "
                    "from a checkpoint?): rewinding to it, as it may hold records of a "
                    "window still open"
                )
        if k is None:
            notes.append(
                f"No journaled batch of this checkpoint holds event times at or after "
                f"{_iso(threshold)}: the discarded state held no window still open, so "
                "the new query starts after the last batch, at its END offsets."
            )
        else:
            final_position = POSITION_REWIND
            from_batches = list(chain[k:])
            prev = chain[k - 1] if k > 0 else before
            start_ref = BatchRef.of(chain[k])
            notes.append(
                f"Rewinding to the START offsets of {start_ref.label()}: the earliest "
                f"batch of this checkpoint with event times at or after {_iso(threshold)} "
                f"(the cutoff{' minus the window length' if window else ''}), so every "
                f"record of a window still open is read again ({len(from_batches)} "
                "batches)."
            )
        notes.append(
            f"event_time_cutoff = {_iso(cutoff)}: in the new job drop windows whose end "
            "is at or before it (e.g. .where(col('window.end') > cutoff)) so no window is "
            "written twice."
        )
        notes.append(
            "Records that came later than the watermark were dropped by the old query; "
            "the new query's watermark starts over, so it may count some of them in "
            "windows ending after the cutoff: those windows can come out slightly more "
            "complete than the old query would have written them."
        )
    elif position == POSITION_AT:
        final_position = POSITION_AT
        from_batches = [anchor]
        start_ref = anchor_ref
        notes.append(
            f"Starts AT {anchor_ref.label()}: its START offsets, so that batch and all "
            "after it are processed again (the sink receives those rows a second time "
            "unless it is idempotent)."
        )
    else:
        latest = "the last journaled batch" if as_of is None else f"the last batch{when}"
        notes.append(
            f"Starts AFTER {anchor_ref.label()} ({latest}): at its END offsets. Kafka "
            "start offsets are inclusive and a batch's end offsets exclusive, so the new "
            "query reads exactly what came after that batch"
            + (": nothing skipped, nothing read twice." if not flagged else
               ". But the journal flagged offsets that did not continue from one batch to "
               "the next (see the errors and warnings): records were skipped or read "
               "twice before this point, and starting here does not undo that.")
        )
    if as_of is not None and anchor.trigger_at is not None and anchor.batch_duration_ms:
        finished = anchor.trigger_at + timedelta(milliseconds=anchor.batch_duration_ms)
        if finished > as_of:
            notes.append(
                f"That batch was still running at {_iso(as_of)} (it finished at "
                f"{_iso(finished)}); it counts as before that time."
            )

    # An error where the plan takes the END offsets of a flagged batch (it starts
    # after it); re-read batches (at, rewind) and earlier ones get a warning: reading
    # a batch again is how a person repairs what was flagged on it.
    affected = {anchor.pk} if final_position == POSITION_AFTER else set()
    for (pk, index), (label, problem) in sorted(flagged.items(), key=lambda x: x[0]):
        if source is not None and index != source:
            continue
        if pk in affected:
            errors.append(f"the journal flagged {label}, which this plan starts from: "
                          f"source {index}: {problem}")
        else:
            warnings.append(f"the journal flagged {label}: source {index}: {problem}")

    indexes = [s.source_index for s in anchor.sources]
    if source is not None:
        if source not in indexes:
            have = ", ".join(str(i) for i in indexes) or "none"
            raise RestartError(
                f"query {query_name!r} has no source {source} in {anchor_ref.label()} "
                f"(sources: {have})"
            )
        indexes = [source]
    if not indexes:
        errors.append(f"{anchor_ref.label()} journaled no sources")

    sources: list[SourcePlan] = []
    for index in indexes:
        src = anchor.source(index)
        kind = source_kind(src)
        if kind == KIND_KAFKA:
            sources.append(_kafka_plan(src, index, anchor, from_batches, prev, kafka_state,
                                       subscribe))
        else:
            if from_batches is None:
                offset, what = src.end_offset, "end offset"
            else:
                first = from_batches[0]
                try:
                    offset = first.source(index).start_offset
                except KeyError:
                    offset = None
                what = "start offset"
                if offset is None and prev is not None:
                    try:
                        offset, what = prev.source(index).end_offset, "end offset (of the " \
                            "batch before)"
                    except KeyError:
                        offset = None
            sources.append(_non_kafka_plan(index, src, kind, offset, what))

    if kafka_state is None and any(s.kind == KIND_KAFKA for s in sources):
        warnings.append(
            "not checked against a Kafka cluster (no bootstrap servers): partitions added "
            "since, deleted topics and offsets lost to retention are unknown"
        )

    if sink is not None and sink.last_batch_id is not None:
        warnings.append(
            f"output path {sink.path} already has a file sink log (_spark_metadata, up to "
            f"batch {sink.last_batch_id}): a query on a new checkpoint numbers batches from "
            f"0 again and the sink skips batches 0..{sink.last_batch_id} as already "
            "written, silently dropping their output; write to a new output path"
        )
    elif sink is not None:
        notes.append(f"Output path {sink.path} has no file sink log: nothing will be skipped.")
    if checkpoint is not None:
        notes.append(f"New checkpoint location {checkpoint.path} holds no offsets: Spark "
                     "will honour startingOffsets there.")

    future_warnings, future_errors = future_trigger_problems(anchor, database_now)
    warnings += future_warnings
    errors += future_errors

    cutoff_time = anchor.trigger_at
    relevant = [s for s in runs if cutoff_time is None or s.start is None
                or s.start <= cutoff_time]
    for a, b in concurrent_runs(relevant):
        warnings.append(
            f"runs {a.run_id} and {b.run_id} of query {query_name!r} journaled batches at "
            f"the same time ({_iso(a.start)}..{_iso(a.end)} and {_iso(b.start)}.."
            f"{_iso(b.end)}): two jobs under one name interleave their offsets, and the "
            "last batch may belong to either"
        )

    return RestartPlan(
        query_name=query_name, mode=mode, position=final_position, anchor=anchor_ref,
        start_batch=start_ref, sources=sources, notes=notes, plan_warnings=warnings,
        plan_errors=errors, as_of=as_of, event_time_cutoff=cutoff,
        window=window if mode == MODE_STATE_AWARE else None,
        checkpoint=checkpoint.path if checkpoint else None,
        output_path=sink.path if sink else None, kafka_checked=kafka_state is not None,
    )


FUTURE_TOLERANCE = timedelta(minutes=1)
"""A driver's clock this far ahead of the database's is worth a warning."""
FUTURE_LIMIT = timedelta(days=1)
"""No driver's clock is this far ahead: a batch triggered later is forged or corrupt."""


def future_trigger_problems(anchor: Batch, database_now: datetime | None,
                            ) -> tuple[list[str], list[str]]:
    """(warnings, errors) for a batch triggered after the database's clock: trigger
    times come from the drivers' clocks, so a little ahead is clock skew (a warning:
    the order of batches may be wrong), far ahead is a batch that cannot be real."""
    when = anchor.trigger_at
    if database_now is None or when is None or when <= database_now + FUTURE_TOLERANCE:
        return [], []
    ahead = when - database_now
    label = BatchRef.of(anchor).label()
    if ahead > FUTURE_LIMIT:
        return [], [
            f"{label} was triggered at {_iso(when)}, {ahead.days} days in the future of the "
            f"database's clock ({_iso(database_now)}): no driver's clock is that wrong, so "
            "the batch is forged or corrupt and its offsets are not handed out; start "
            "from a point in time before it (--as-of now) or a batch (--batch)"
        ]
    return [
        f"{label} was triggered at {_iso(when)}, {ahead} ahead of the database's clock "
        f"({_iso(database_now)}): a driver's clock is fast, so 'last' by trigger time may "
        "not be the last batch; check `history` before using this plan"
    ], []


def _database_now(journal: Journal) -> datetime | None:
    """The journal database's clock (None when it cannot be read)."""
    import sqlalchemy as sa

    try:
        with journal.engine.connect() as conn:
            now = conn.execute(sa.select(sa.func.now())).scalar_one()
    except sa.exc.SQLAlchemyError:
        return None
    return now if isinstance(now, datetime) else None


def _kafka_plan(src: SourceOffsets, index: int, anchor: Batch, from_batches: list[Batch] | None,
                prev: Batch | None, kafka_state: TopicState | None,
                subscribe: Sequence[str] | None = None) -> SourcePlan:
    plan = SourcePlan(index, src.description, KIND_KAFKA, {}, {}, None)
    if not src.partitions:
        plan.errors.append(
            "no Kafka partition offsets are journaled for this source (unreadable payload?): "
            "nothing to start from"
        )
        plan.offsets = None
        plan.journaled = src.end_offset
        return plan
    if from_batches is None:
        offsets, notes = end_offsets_of(anchor, index)
        plan.journaled = src.end_offset
        plan.notes += notes
        warnings: list[str] = []
        back = [p for p in src.partitions
                if p.start is not None and p.end is not None and p.end < p.start]
        if back:
            # Starting at these end offsets would move the query backwards: not
            # without being asked (starting-offsets --force, or a batch/as_of).
            plan.errors.append(
                f"offsets went backwards in {BatchRef.of(anchor).label()}: "
                + ", ".join(f"{_tp(p.topic, p.partition)} from {p.start} to {p.end}"
                            for p in back[:8])
                + (f" and {len(back) - 8} more" if len(back) > 8 else "")
                + ": its end offsets would read again what the query had read (topic "
                "recreated, offsets reset?); check the topic, then start from another batch "
                "(--batch, --as-of), or from these anyway (starting-offsets --force)"
            )
    else:
        offsets, notes, warnings = start_offsets_from(from_batches, prev, index)
        first_sources = {s.source_index: s for s in from_batches[0].sources}
        plan.journaled = first_sources[index].start_offset if index in first_sources else None
        plan.notes += notes
    plan.warnings += warnings
    strategy, items = kafka_strategy(src.description)
    if subscribe:
        # The new job's subscription decides which partitions Spark assigns, and Spark
        # wants exactly those named: topics it no longer reads must go.
        strategy, items = "subscribe", sorted(set(subscribe))
        dropped = sorted(t for t in offsets if t not in items)
        if dropped:
            plan.notes.append("journaled but not subscribed by the new job, left out: "
                              + ", ".join(dropped))
            offsets = {t: p for t, p in offsets.items() if t in items}
        unknown = [t for t in items if t not in offsets]
        if unknown and kafka_state is None:
            plan.warnings.append(
                f"subscribed but never journaled ({', '.join(unknown)}), and without a "
                "cluster their partitions are unknown: Spark refuses startingOffsets that "
                "do not name them; pass bootstrap servers"
            )
    if kafka_state is not None:
        offsets, notes, warnings, errors = check_against_cluster(
            offsets, kafka_state, strategy=strategy, subscribed=items
        )
        plan.notes += notes
        plan.warnings += warnings
        plan.errors += errors
    plan.offsets = offsets
    if not offsets:
        plan.errors.append("no partition is left to start from")
    else:
        plan.options["startingOffsets"] = format_kafka_offsets(offsets)
        n = sum(len(p) for p in offsets.values())
        plan.notes.insert(0, f"startingOffsets for {_count(n, 'partition')} of "
                             f"{_count(len(offsets), 'topic')}")
    return plan


# --------------------------------------------------------------------------- the I/O edge


def kafka_topics(batches: Iterable[Batch], source: int | None = None) -> list[str]:
    """Topics to ask the cluster about: journaled ones and subscribed ones."""
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


def _batch_before(journal: Journal, query_name: str, batch: Batch) -> Batch | None:
    if batch.trigger_at is None:
        return None
    key = _order_key(batch)
    earlier = [b for b in journal.history(query_name, until=batch.trigger_at, limit=8)
               if _order_key(b) < key]
    return earlier[-1] if earlier else None


def _spool_losses(journal: Journal, query_name: str) -> list[SpoolLoss]:
    try:
        return journal.spool_losses(query_name)
    except JournalError:  # a journal not upgraded to spool_losses yet has none
        return []


def spool_loss_warning(loss: SpoolLoss) -> str:
    """A plan warning for batches a full listener spool dropped (spool_max_bytes)."""
    batches = (f"batch ids {loss.batch_id_min}..{loss.batch_id_max}"
               if loss.batch_id_min is not None else "unknown batch ids")
    runs = ", ".join(loss.run_ids[:3]) + (" ..." if len(loss.run_ids) > 3 else "")
    when = (f", triggered {_iso(loss.first_trigger_at)}..{_iso(loss.last_trigger_at)}"
            if loss.first_trigger_at is not None else "")
    parts = ", ".join(f"{_tp(t, p)} {lo}..{hi}" for _i, t, p, lo, hi in loss.partitions[:8])
    more = f" and {len(loss.partitions) - 8} more" if len(loss.partitions) > 8 else ""
    return (f"{_count(loss.events, 'batch event')} of this query were dropped from a full "
            f"listener spool (spool_max_bytes) on {loss.host or 'an unknown host'} and are "
            f"not in the journal: {batches} of run(s) {runs}{when}"
            + (f"; offsets {parts}{more}" if parts else "")
            + ". Each query's newest batch was kept; plans that start inside this range "
            "(--as-of, --batch, state-aware rewinds) cannot be checked against it")


def _run_spans(bounds: Sequence[RunBounds]) -> list[RunSpan]:
    spans = []
    for run in bounds:
        start = run.started_at or run.first_trigger_at
        end = run.terminated_at or run.last_trigger_at
        if end is None or (start is not None and end < start):
            end = start
        spans.append(RunSpan(run.run_id, run.query_id, start, end, run.terminated_at is not None))
    return spans


def _state_chain(journal: Journal, anchor: Batch, window: timedelta | None) -> list[Batch]:
    """The part of ``anchor``'s checkpoint a state-aware plan needs, in journal order,
    selected in SQL so that the history's length does not matter: the batch with the
    watermark the plan uses (emitted_cutoff), the batch rewind_index would pick and every
    batch after it up to ``anchor``, and the batch before that one. compute_plan draws
    the same conclusions from it as from the whole checkpoint: each of its rules looks
    for the last batch with a watermark, the first batch that may hold a record of an
    open window, and the batches from there on."""
    import sqlalchemy as sa

    from .schema import batches

    b = batches.c
    chain: dict[int, Batch] = {anchor.pk: anchor}
    cut = journal.checkpoint_batches(anchor, b.watermark.is_not(None), newest_first=True,
                                     limit=1)
    if not cut or cut[0].watermark is None:
        return [anchor]
    chain[cut[0].pk] = cut[0]
    threshold = cut[0].watermark - window if window is not None else cut[0].watermark
    may_be_open = sa.or_(b.event_time_max >= threshold,
                         sa.and_(b.event_time_max.is_(None),
                                 b.num_input_rows.is_distinct_from(0)))
    first = journal.checkpoint_batches(anchor, may_be_open, limit=1)
    if first:
        k = first[0]
        if k.trigger_at is not None:  # then so has every batch of the chain
            col = sa.tuple_(b.trigger_at, b.batch_id, b.id)
            key = sa.tuple_(sa.literal(k.trigger_at), sa.literal(k.batch_id),
                            sa.literal(k.pk))
        else:
            col = sa.tuple_(b.batch_id, b.id)
            key = sa.tuple_(sa.literal(k.batch_id), sa.literal(k.pk))
        for batch in (*journal.checkpoint_batches(anchor, col < key, newest_first=True,
                                                  limit=1),
                      *journal.checkpoint_batches(anchor, col >= key)):
            chain[batch.pk] = batch
    return sorted(chain.values(), key=_order_key)


def checkpoint_state(path: str) -> CheckpointState:
    """What a NEW checkpoint location holds (a missing directory holds nothing)."""
    from .checkpoint import CheckpointError, is_new_checkpoint, read_checkpoint

    if is_new_checkpoint(path):
        return CheckpointState(str(path), False)
    try:
        ckpt = read_checkpoint(path)
    except CheckpointError as exc:
        # Offsets files exist, readable or not: Spark would still resume from them.
        log.debug("checkpoint %s holds offsets but cannot be read: %s", path, exc)
        return CheckpointState(str(path), True)
    last = ckpt.batches[-1].batch_id if ckpt.batches else None
    return CheckpointState(str(path), True, ckpt.query_id, last)


def plan_restart(
    database_url: str | None,
    query_name: str,
    *,
    source: int | None = None,
    as_of: datetime | None = None,
    batch: tuple[str, int] | None = None,
    bootstrap_servers: str | None = None,
    kafka_config: Mapping[str, Any] | None = None,
    kafka_timeout: float = 10,
    checkpoint: str | None = None,
    output_path: str | None = None,
    stateful: bool = False,
    mode: str | None = None,
    window: timedelta | None = None,
    journal: Journal | None = None,
    subscribe: Sequence[str] | None = None,
) -> RestartPlan:
    """Plan how ``query_name`` starts on a new checkpoint; see the module docstring.

    ``as_of`` starts after the last batch triggered at or before it; ``batch`` =
    (run id, batch id) starts AT that batch (reprocessing it). ``bootstrap_servers``
    checks the plan against the Kafka cluster; ``checkpoint`` is refused when it already
    holds offsets; ``output_path`` is checked for a file sink log. ``stateful=True`` or
    ``mode="state-aware"`` makes the state-aware plan (``window``: the window length).
    ``subscribe``: the topics the new job subscribes to, when known; with
    ``bootstrap_servers``, partitions of those topics missing from the journal start
    at earliest.
    Raises RestartError, CheckpointError, JournalError or KafkaError.
    """
    mode = mode or (MODE_STATE_AWARE if stateful else MODE_STATELESS)
    if mode not in MODES:
        raise RestartError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if as_of is not None and batch is not None:
        raise RestartError("give as_of or batch, not both")
    if mode == MODE_STATE_AWARE and batch is not None:
        raise RestartError("a state-aware plan starts after a batch: use as_of, not batch")
    if as_of is not None and as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=timezone.utc)
    if window is not None and window <= timedelta(0):
        raise RestartError("the window length must be positive")
    try:
        kafka_timeout = parse_timeout(kafka_timeout)
    except ValueError as exc:  # a negative or NaN timeout would wait forever
        raise RestartError(str(exc)) from None

    ckpt_state = checkpoint_state(checkpoint) if checkpoint else None
    if ckpt_state is not None:
        refuse_used_checkpoint(ckpt_state)  # before anything else: changes nothing
    sink = None
    if output_path:
        from .checkpoint import file_sink_metadata

        sink = SinkState(str(output_path), file_sink_metadata(output_path))

    own = journal is None
    j = journal or Journal(database_url)
    try:
        # The default plan needs every order's last batch (check_last_batch); the
        # journal's own comes first.
        candidates = j.last_batch_candidates(query_name) if batch is None and as_of is None \
            else []
        last = candidates[0] if candidates else j.last_batch(query_name)
        if last is None:
            raise RestartError(f"no journaled batches for query {query_name!r}")
        position = POSITION_AFTER
        before: Batch | None = None
        order_warnings: list[str] = []
        if batch is not None:
            anchor = j.batch(query_name, batch[0], batch[1])
            if anchor is None:
                raise RestartError(
                    f"no journaled batch {batch[1]} of run {batch[0]} for query {query_name!r}"
                )
            position = POSITION_AT
            before = _batch_before(j, query_name, anchor)
        elif as_of is not None:
            found = j.batch_as_of(query_name, as_of)
            if found is None:
                raise RestartError(
                    f"no journaled batch of query {query_name!r} triggered at or before "
                    f"{_iso(as_of)}"
                )
            anchor = found
        else:
            anchor = last
            order_warnings = check_last_batch(query_name, anchor, candidates)
        chain: list[Batch] = []
        if mode == MODE_STATE_AWARE:
            chain = _state_chain(j, anchor, window)
            before = _batch_before(j, query_name, chain[0])
        # Runs that started after the anchor do not matter to it (compute_plan).
        spans = _run_spans(j.run_bounds(query_name, started_until=anchor.trigger_at))
        database_now = _database_now(j)
        problems = j.flagged_problems(query_name)
        if len(problems) > FLAGGED_PROBLEMS:
            problems = problems[:FLAGGED_PROBLEMS]
            order_warnings.append(
                f"the journal flagged problems on more batches than the {FLAGGED_PROBLEMS} "
                "most recent reported here: see offset_journal.batch_sources.problem")
        losses = _spool_losses(j, query_name)
    finally:
        if own:
            j.close()

    state = None
    if bootstrap_servers:
        topics = sorted(set(kafka_topics([*chain, anchor], source)) | set(subscribe or ()))
        if topics:
            state = topic_state(bootstrap_servers, topics, timeout=kafka_timeout,
                                config=kafka_config)
    plan = compute_plan(
        query_name, anchor, position=position, chain=chain, before=before, kafka_state=state,
        runs=spans, checkpoint=ckpt_state, sink=sink, mode=mode, window=window,
        source=source, as_of=as_of, subscribe=subscribe, database_now=database_now,
        problems=problems,
    )
    plan.plan_warnings += order_warnings
    plan.plan_warnings += [spool_loss_warning(loss) for loss in losses]
    for w in plan.warnings:
        log.info("restart plan for %s: %s", query_name, w)
    return plan


# --------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True)
class ImportResult:
    """What :func:`import_checkpoint` did."""

    path: str
    query_name: str
    query_id: str
    run_id: str
    imported: int
    already: int
    skipped: list[str]


_RUN_NAMESPACE = uuid.UUID("6f1d2a5e-2f3b-5c7a-9d8e-0f1e2d3c4b5a")


def _normalized_path(path: str) -> str:
    text = os.fspath(path)
    if re.match(r"[A-Za-z][A-Za-z0-9+.\-]+:/", text):
        return text.rstrip("/")
    return os.path.abspath(text)


def checkpoint_run_id(query_id: str, path: str) -> str:
    """A run id for an imported checkpoint: the same checkpoint always gets the same
    one, so importing it twice leaves one row per batch."""
    return str(uuid.uuid5(_RUN_NAMESPACE, f"checkpoint:{query_id}:{_normalized_path(path)}"))


def _ms(value: int | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value / 1000, tz=timezone.utc)


def records_from_checkpoint(ckpt: Any, query_name: str,
                            ) -> tuple[RunRecord, list[BatchRecord], list[str]]:
    """Journal records for a checkpoint's committed batches (pure).

    A batch's start offsets are the previous batch's end offsets (for batch 0: the
    source's initial offsets, when the checkpoint kept them); trigger time and
    watermark come from the offsets file's batchTimestampMs and batchWatermarkMs.
    Returns (run, batches, skipped-batch explanations).
    """
    query_id = ckpt.query_id or str(uuid.uuid5(_RUN_NAMESPACE,
                                               f"query:{_normalized_path(ckpt.path)}"))
    run_id = checkpoint_run_id(query_id, ckpt.path)
    skipped: list[str] = []
    records: list[BatchRecord] = []
    for b in ckpt.batches:
        if not b.committed:
            skipped.append(f"batch {b.batch_id}: not committed (unfinished)")
            continue
        if not b.readable:
            skipped.append(f"batch {b.batch_id}: {b.problem}")
            continue
        starts = ckpt.start_offsets_of(b.batch_id)
        sources = []
        for i, end in enumerate(b.offsets):
            start = starts[i] if starts is not None and i < len(starts) else None
            kafka = looks_like_kafka(end)
            parts: tuple[PartitionOffset, ...] = ()
            problem = None
            if kafka:
                try:
                    parts = tuple(partition_offsets(start if looks_like_kafka(start) else None,
                                                    end))
                except ValueError as exc:
                    problem = str(exc)
            sources.append(SourceRecord(
                index=i, description=None, kind=KIND_KAFKA if kafka else KIND_OTHER,
                start_offset=start, end_offset=end, latest_offset=None, num_input_rows=None,
                partitions=parts, problem=problem,
            ))
        records.append(BatchRecord(
            query_id=query_id, run_id=run_id, query_name=query_name, named=True,
            batch_id=b.batch_id, trigger_at=_ms(b.batch_timestamp_ms), batch_duration_ms=None,
            durations_ms={}, num_input_rows=None, input_rows_per_second=None,
            processed_rows_per_second=None, watermark=_ms(b.batch_watermark_ms),
            event_time_min=None, event_time_max=None, event_time_avg=None,
            state_operators=[], sink_description=None, num_output_rows=None,
            sources=tuple(sources),
        ))
    first = records[0].trigger_at if records else None
    run = RunRecord(query_id=query_id, run_id=run_id, query_name=query_name, named=True,
                    started_at=first)
    return run, records, skipped


def _refuse_negative_offsets(path: str, records: Sequence[BatchRecord]) -> None:
    """A checkpoint's offsets log holds positions in Kafka's logs, never below 0 (-1
    and -2 mean latest/earliest in startingOffsets only): such a file is not Spark's."""
    for rec in records:
        for source in rec.sources:
            for p in source.partitions:
                bad = [v for v in (p.start, p.end) if v is not None and v < 0]
                if bad:
                    raise RestartError(
                        f"checkpoint {path}: batch {rec.batch_id} has offset {bad[0]} for "
                        f"{_tp(p.topic, p.partition)}, below 0: not a Kafka position; "
                        "nothing imported")


def import_checkpoint(database_url: str | None, path: str, query_name: str, *,
                      journal: Journal | None = None) -> ImportResult:
    """Journal a checkpoint's committed batches, for a job that never had the listener.

    Idempotent: the synthetic run id depends only on the checkpoint's query id and
    path. Batches the listener already journaled for the same query id are left alone.
    Everything goes in one transaction; a malformed checkpoint changes nothing.
    """
    from .checkpoint import read_checkpoint
    from .journal import record_all
    from .values import check_name

    try:
        check_name(query_name, "the query name")
    except ValueError as exc:
        raise RestartError(str(exc)) from None
    ckpt = read_checkpoint(path)
    if not ckpt.batches:
        raise RestartError(f"checkpoint {path} holds no batches to import")
    run, records, skipped = records_from_checkpoint(ckpt, query_name)
    if not records:
        raise RestartError(f"checkpoint {path} holds no committed batch to import")
    _refuse_negative_offsets(path, records)
    own = journal is None
    j = journal or Journal(database_url)
    try:
        listener_batches: set[int] = set()
        for r in j.runs(query_name):
            if r.query_id == run.query_id and r.run_id != run.run_id and r.batches:
                listener_batches.update(b.batch_id for b in j.history(query_name,
                                                                     run_id=r.run_id))
        todo = [r for r in records if r.batch_id not in listener_batches]
        if len(todo) < len(records):
            skipped.append(f"{len(records) - len(todo)} batches already journaled by the "
                           "listener for this query id")
        with j.engine.begin() as conn:
            _refuse_other_name(conn, run, path)
            new = record_all(j, [run, *todo], conn)
    finally:
        if own:
            j.close()
    log.info("imported %d batches of %s as run %s", new, path, run.run_id)
    return ImportResult(str(path), query_name, run.query_id, run.run_id, new,
                        len(todo) - new, skipped)


def _refuse_other_name(conn: Any, run: RunRecord, path: str) -> None:
    """Raise RestartError when the checkpoint (its import run, or its query id through
    the listener) is already journaled under another query name.

    Importing it again would move the run row to the new name and leave its batches
    under the old one. Runs the check in the import's transaction, the run rows locked,
    so nothing is changed when it refuses.
    """
    import sqlalchemy as sa

    from .schema import query_runs

    r = query_runs.c
    found = conn.execute(
        sa.select(r.run_id, r.query_name)
        .where(sa.or_(r.run_id == run.run_id, r.query_id == run.query_id),
               r.query_name != run.query_name)
        .order_by(r.run_id != run.run_id, r.run_id).limit(1).with_for_update()
    ).first()
    if found is None:
        return
    run_id, name = found
    what = (f"as run {run_id}" if run_id == run.run_id
            else f"by the listener (query id {run.query_id}, run {run_id})")
    raise RestartError(
        f"checkpoint {path} is already journaled {what} under query name {name!r}: "
        f"import it with --query-name {name}, or not at all; nothing was changed"
    )


@dataclass(frozen=True)
class OffsetComparison:
    """One Kafka partition's offset in a checkpoint and in the journal."""

    source_index: int
    topic: str
    partition: int
    checkpoint: int | None
    journal: int | None

    @property
    def ahead(self) -> str:
        if self.checkpoint is None:
            return "journal only"
        if self.journal is None:
            return "checkpoint only"
        if self.checkpoint == self.journal:
            return "equal"
        return "checkpoint" if self.checkpoint > self.journal else "journal"


def compare_offsets(checkpoint_offsets: Mapping[int, KafkaOffsets],
                    journal_offsets: Mapping[int, KafkaOffsets]) -> list[OffsetComparison]:
    """Pair a checkpoint's and the journal's Kafka offsets per source and partition."""
    rows = []
    for index in sorted(set(checkpoint_offsets) | set(journal_offsets)):
        c, j = checkpoint_offsets.get(index, {}), journal_offsets.get(index, {})
        for topic in sorted(set(c) | set(j)):
            for part in sorted(set(c.get(topic, {})) | set(j.get(topic, {}))):
                rows.append(OffsetComparison(index, topic, part, c.get(topic, {}).get(part),
                                             j.get(topic, {}).get(part)))
    return rows


def comparison_verdict(rows: Sequence[OffsetComparison]) -> str:
    """One word for the whole comparison: checkpoint/journal ahead, same, mixed, disjoint."""
    kinds = {r.ahead for r in rows}
    if not rows:
        return "nothing to compare"
    if kinds == {"equal"}:
        return "same"
    if kinds <= {"equal", "checkpoint", "checkpoint only"}:
        return "checkpoint ahead"
    if kinds <= {"equal", "journal", "journal only"}:
        return "journal ahead"
    if "equal" not in kinds and kinds <= {"checkpoint only", "journal only"}:
        return "disjoint"
    return "mixed"


def journal_kafka_offsets(batch: Batch) -> dict[int, KafkaOffsets]:
    """Source index -> END offsets, for a batch's Kafka sources."""
    out = {}
    for s in batch.sources:
        if source_kind(s) == KIND_KAFKA:
            out[s.source_index] = end_offsets_of(batch, s.source_index)[0]
    return out


def group_offsets(batch: Batch, source: int | None = None) -> KafkaOffsets:
    """The offsets to commit for a consumer group: a batch's Kafka end offsets.

    With several Kafka sources reading one topic-partition at different offsets, the
    caller must pick a source.
    """
    merged: KafkaOffsets = {}
    for index, offsets in journal_kafka_offsets(batch).items():
        if source is not None and index != source:
            continue
        for topic, parts in offsets.items():
            for part, off in parts.items():
                have = merged.get(topic, {}).get(part)
                if have is not None and have != off:
                    raise RestartError(
                        f"sources read {topic}-{part} at different offsets ({have}, {off}): "
                        "choose one with --source"
                    )
                merged.setdefault(topic, {})[part] = off
    if not merged:
        which = f"source {source}" if source is not None else "any Kafka source"
        raise RestartError(f"{BatchRef.of(batch).label()} has no Kafka offsets for {which}")
    return merged


__all__ = [
    "BatchRef",
    "CheckpointState",
    "ImportResult",
    "MODE_STATELESS",
    "MODE_STATE_AWARE",
    "OffsetComparison",
    "RestartError",
    "RestartPlan",
    "RunSpan",
    "SinkState",
    "SourcePlan",
    "check_against_cluster",
    "check_last_batch",
    "checkpoint_run_id",
    "compare_offsets",
    "comparison_verdict",
    "compute_plan",
    "concurrent_runs",
    "emitted_cutoff",
    "group_offsets",
    "import_checkpoint",
    "journal_kafka_offsets",
    "kafka_strategy",
    "plan_restart",
    "records_from_checkpoint",
    "refuse_used_checkpoint",
    "rewind_index",
    "source_kind",
    "start_offsets_from",
]
