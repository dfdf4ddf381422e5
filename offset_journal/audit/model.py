"""What the continuity audit works on and finds (plain data, no I/O).

Inputs: :class:`AuditBatch` (one journaled batch's Kafka offsets, in the journal's
order) and :class:`~offset_journal.rows.RecordedPlan` (the restart plans
handed out). Output: :class:`AuditReport`, made of :class:`Finding` (a gap, an
overlap, or a start the journal cannot place) and :class:`RunStart` (how each run
began). Each has ``to_dict()``: plain JSON types only (times as ISO 8601 strings), the
shape the command's ``--format json`` prints and the HTML report renders.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ..formatting import format_time
from ..rows import AuditBatch

FindingKind = Literal["gap", "overlap", "unknown-start", "unexplained-start"]
"""gap: offsets no batch processed. overlap: offsets processed twice. unknown-start: a
run's first batch whose start the journal cannot know (a new checkpoint, no plan, and
records in several partitions), so neither can be ruled out. unexplained-start: a
partition's first appearance starting above offset 0 that no plan asked for."""
Status = Literal["planned", "unexplained"]
"""planned: a recorded plan asked for it (a deliberate rewind, or skip); unexplained:
nothing did, a defect to look at."""
StartKind = Literal["checkpoint", "plan", "no-plan", "origin"]
"""How a run began: resumed an existing checkpoint (Spark reports where), from a
recorded plan, on a new checkpoint from no recorded plan, or the first run audited."""
LinkKind = Literal["recorded", "matched"]
"""How a run is tied to its plan: the job said so (plan_runs), or the audit matched the
plan's offsets to the run's first batch."""

GAP: FindingKind = "gap"
OVERLAP: FindingKind = "overlap"
UNKNOWN_START: FindingKind = "unknown-start"
UNEXPLAINED_START: FindingKind = "unexplained-start"
PLANNED: Status = "planned"
UNEXPLAINED: Status = "unexplained"

EXIT_CLEAN = 0
"""Every partition contiguous, or discontinuous only where a recorded plan said so."""
EXIT_FINDINGS = 3
"""At least one unexplained finding."""






@dataclass(frozen=True)
class HistoryRef:
    """A batch named as people find it again: ``offset-journal history``'s columns."""

    pk: int
    run_id: str
    batch_id: int
    trigger_at: datetime | None

    @classmethod
    def of(cls, batch: AuditBatch) -> HistoryRef:
        return cls(batch.pk, batch.run_id, batch.batch_id, batch.trigger_at)

    def label(self) -> str:
        return f"{self.run_id}:{self.batch_id}"

    def to_dict(self) -> dict[str, Any]:
        return {"pk": self.pk, "run_id": self.run_id, "batch_id": self.batch_id,
                "trigger_at": format_time(self.trigger_at)}


MAX_REFS = 8
"""How many batches a finding names on each side (the rest are counted)."""


@dataclass
class Finding:
    """A discontinuity of one (topic, partition).

    The offsets ``first`` (inclusive) to ``end`` (exclusive) were never processed (a
    gap) or processed again (an overlap); ``records`` = end - first (None when an
    end is unknown: an unknown or unexplained start). ``batches``: the batches of
    ``run_id`` that show it, the first one first (``batch_count`` of them in all);
    ``earlier``: the batches that processed the offsets before (an overlap), or the one
    that ended where the gap begins. ``plan_id``: the recorded plan the run started
    from, if any. ``reason``: one sentence for people.
    """

    kind: FindingKind
    status: Status
    topic: str
    partition: int
    first: int | None
    end: int | None
    run_id: str
    batches: list[HistoryRef]
    earlier: list[HistoryRef] = field(default_factory=list)
    plan_id: int | None = None
    reason: str = ""
    batch_count: int = 1

    @property
    def records(self) -> int | None:
        if self.first is None or self.end is None:
            return None
        return self.end - self.first

    def add_batch(self, ref: HistoryRef) -> None:
        self.batch_count += 1
        if len(self.batches) < MAX_REFS:
            self.batches.append(ref)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "status": self.status, "topic": self.topic,
                "partition": self.partition, "first_offset": self.first,
                "end_offset": self.end, "records": self.records, "run_id": self.run_id,
                "batches": [b.to_dict() for b in self.batches],
                "batch_count": self.batch_count,
                "earlier": [b.to_dict() for b in self.earlier], "plan_id": self.plan_id,
                "reason": self.reason}


@dataclass(frozen=True)
class RunStart:
    """How a run began: ``how`` (a :data:`StartKind`), the plan and how it is tied to
    the run (``link``), and the plan's position."""

    run_id: str
    query_id: str
    first_batch: HistoryRef
    how: StartKind
    plan_id: int | None = None
    link: LinkKind | None = None
    position: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "query_id": self.query_id,
                "first_batch": self.first_batch.to_dict(), "how": self.how,
                "plan_id": self.plan_id, "link": self.link, "position": self.position}


@dataclass
class AuditReport:
    """The audit of one query name. ``findings`` in the order they showed (journal
    order); ``runs`` in the order they began; ``notes`` for people (not defects);
    ``concurrent``: pairs of runs that journaled batches at the same time; ``ignored``:
    a note per field of a recorded plan left out as no plan command writes it (a row
    written by hand: it explains nothing by that field)."""

    query_name: str
    since: datetime | None
    batches: int
    partitions: int
    runs: list[RunStart]
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    concurrent: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    @property
    def unexplained(self) -> list[Finding]:
        return [f for f in self.findings if f.status == UNEXPLAINED]

    @property
    def planned(self) -> list[Finding]:
        return [f for f in self.findings if f.status == PLANNED]

    @property
    def ok(self) -> bool:
        """Contiguous, or discontinuous only where a recorded plan said so."""
        return not self.unexplained

    @property
    def exit_code(self) -> int:
        return EXIT_CLEAN if self.ok else EXIT_FINDINGS

    def to_dict(self) -> dict[str, Any]:
        return {"query_name": self.query_name, "since": format_time(self.since),
                "ok": self.ok, "exit_code": self.exit_code, "batches": self.batches,
                "partitions": self.partitions,
                "unexplained": len(self.unexplained), "planned": len(self.planned),
                "runs": [r.to_dict() for r in self.runs],
                "findings": [f.to_dict() for f in self.findings],
                "concurrent_runs": [list(pair) for pair in self.concurrent],
                "notes": list(self.notes), "ignored": list(self.ignored)}
