"""Batch ids missing inside a run, as the walk (:mod:`._core`) meets them (pure).

A batch whose id is more than one past the highest walked id of its query id (its
checkpoint, across the runs that resume it) shows that the ids in between were not
journaled before it: a :class:`Claim`. Its gaps are
findings until the walk is over. Spark starts a batch only after it committed the one
before to the query's checkpoint, so the ids a claim holds were run and are in that
checkpoint's ``offsets/`` log (while Spark keeps them:
``spark.sql.streaming.minBatchesToRetain``, 100 by default). A batch of the same query
id with one of those ids journaled later (replayed from a listener's spool, or
journaled by ``offset-journal checkpoint import`` under the checkpoint's own run) fills
its part of the gaps instead of reading as an overlap: a gap wholly filled is no
finding, a note says it was journaled late.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..rows import AuditBatch
from ..wording import ids_text
from ..wording import tp as tp_label
from .model import Finding, HistoryRef


def fill_hint(query_name: str, query_id: str) -> str:
    """How to journal a query id's missing batches from its checkpoint."""
    return (f"`offset-journal checkpoint import CHECKPOINT --query-name {query_name}` "
            f"(CHECKPOINT: the location of query id {query_id}) journals them from its "
            "offsets log, while Spark keeps them there (spark.sql.streaming."
            "minBatchesToRetain, 100 by default)")


@dataclass
class Hole:
    """One partition's gap a claim left: its finding (kept out of the report on a
    standby), where it was seen, and the offsets later batches filled."""

    finding: Finding
    context: str
    filled: list[tuple[int, int]] = field(default_factory=list)

    def fits(self, start: int, end: int) -> bool:
        f = self.finding
        return f.first is not None and f.end is not None and f.first <= start < end <= f.end

    def unfilled(self) -> list[tuple[int, int]]:
        """The offsets of the gap no later batch filled, in order."""
        f = self.finding
        assert f.first is not None and f.end is not None
        out, at = [], f.first
        for a, b in sorted(self.filled):
            if a > at:
                out.append((at, a))
            at = max(at, b)
        if at < f.end:
            out.append((at, f.end))
        return out

    def text(self, first: int, end: int) -> str:
        f = self.finding
        return (f"offsets {first}..{end - 1} of {tp_label(f.topic, f.partition)} were "
                f"never processed: {self.context}; ")


@dataclass
class Claim:
    """Batch ids ``first``..``last`` of ``query_id``, not journaled before ``ref`` (a
    batch of run ``run_id``): the gaps they left, and the ids that showed up further
    on."""

    run_id: str
    query_id: str
    first: int
    last: int
    ref: HistoryRef
    holes: dict[tuple[str, int], Hole] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)

    def unseen(self) -> list[int]:
        return [i for i in range(self.first, self.last + 1) if i not in self.seen]

    def holds(self, batch: AuditBatch) -> bool:
        return (batch.query_id == self.query_id and self.first <= batch.batch_id <= self.last
                and batch.batch_id not in self.seen)

    def fill(self, batch: AuditBatch) -> bool:
        """``batch`` (one of the claim's ids) fills its part of the gaps when each
        partition it read lies inside one: True, and nothing else is walked for it."""
        spans: list[tuple[Hole, int, int]] = []
        for p in (p for s in batch.sources for p in s.partitions):
            if p.end is None or p.start == p.end:
                continue  # read nothing there: it left no gap
            hole = self.holes.get((p.topic, p.partition))
            if p.start is None or hole is None or not hole.fits(p.start, p.end):
                return False
            spans.append((hole, p.start, p.end))
        for hole, start, end in spans:
            hole.filled.append((start, end))
        return True

    def cause(self, query_name: str) -> str:
        """Why the ids were not there, now that the walk is over."""
        unseen = self.unseen()
        late = (f" ({ids_text(self.seen)} came later)" if self.seen else "")
        verb = "is" if len(unseen) == 1 else "are"
        return (f"journal rows lost: {ids_text(unseen)} of query id {self.query_id} {verb} "
                f"not in the journal{late} (its database failed over to a server that "
                "lacked them, or Spark's listener bus dropped their events: see the Deploy "
                "page); Spark ran them, so the offsets were most likely processed, but the "
                f"journal cannot show it: {fill_hint(query_name, self.query_id)}")

    def settle(self, query_name: str, standby: str | None,
               ) -> tuple[list[Finding], list[str]]:
        """Say why each of the claim's gaps is left; return those to drop (filled, or
        on a standby) and the claim's notes."""
        keep: list[Finding] = []
        drop: list[Finding] = []
        for hole in self.holes.values():
            left = hole.unfilled()
            if not left or standby is not None:
                drop.append(hole.finding)
                continue
            f = hole.finding
            f.first, f.end = left[0][0], left[-1][1]
            f.reason = hole.text(f.first, f.end) + self.cause(query_name)
            keep.append(f)
        notes = []
        unseen = self.unseen()
        if standby is not None and unseen:
            where = ", ".join(f"offsets {a}..{b - 1} of {tp_label(*key)}"
                              for key, h in self.holes.items() for a, b in h.unfilled())
            notes.append(f"{ids_text(unseen)} of query id {self.query_id} (before "
                         f"{self.ref.label()}; {where}) are not on this standby: {standby}; "
                         "they may only not be replayed yet: audit the primary to know "
                         "whether they are lost")
        elif self.seen and not keep:
            notes.append(f"{ids_text(self.seen)} of query id {self.query_id} were "
                         f"journaled only after {self.ref.label()} "
                         "(from a listener's spool, or `checkpoint import`): they fill the "
                         "offsets their absence left")
        return drop, notes
