"""What the journal checks as it writes (pure): offsets that do not continue from the
previous batch, and a batch that arrives twice with different offsets."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from ..offsets import PartitionOffset, Side, as_kafka_offsets, offsets_json
from ..records import BatchRecord, SourceRecord


def stored_offsets(source: SourceRecord) -> tuple[Any, Any]:
    """The start and end offsets JSON a batch_sources row keeps.

    A Kafka source's offsets are its partition rows; keeping them a second time as
    JSONB cost about a fifth of a 10,000-partition batch's write (bench/journal_write.py).
    So a side the rows rebuild exactly is stored as NULL, and read back from the rows
    (:meth:`Journal._batches_where <offset_journal.journal.Journal>`, the ``source_offsets``
    view). Anything the rows
    would not give back verbatim (a malformed or unusual payload) is kept as it came.
    """
    start, end = source.start_offset, source.end_offset
    if source.kind != "kafka" or not source.partitions or source.problem:
        return start, end
    if source.offsets_rebuildable:  # the parser saw them in offsets_json's form
        return None, None
    if start is not None and start == offsets_json(source.partitions, use="start"):
        start = None
    if end is not None and end == offsets_json(source.partitions, use="end"):
        end = None
    return start, end


def partition_latests(source: SourceRecord) -> list[int | None]:
    """The latest offset Spark saw (``latestOffset``) for each of ``source.partitions``, in
    their order; None where it gave none (no latest, or not in Kafka's shape). When the
    query keeps up, latest is the end: no lookup then."""
    parts = source.partitions
    latest = source.latest_offset
    if not parts or latest is None:
        return [None] * len(parts)
    if latest == source.end_offset:
        return [p.end for p in parts]
    shaped = as_kafka_offsets(latest)
    if shaped is None:
        return [None] * len(parts)
    return [shaped.get(p.topic, {}).get(p.partition) for p in parts]


@dataclass(frozen=True)
class PartitionEnds:
    """One Kafka source's offsets on one side of a batch (the ends a batch wrote, or the
    starts of the batch after it), as parallel lists in the batch's partition order:
    kept from a batch to the next without building a dict of 10,000 keys."""

    topics: tuple[str, ...]
    partitions: tuple[int, ...]
    offsets: list[int | None]

    @classmethod
    def of(cls, parts: Sequence[PartitionOffset], side: Side) -> PartitionEnds:
        return cls(tuple(map(itemgetter(0), parts)), tuple(map(itemgetter(1), parts)),
                   list(map(itemgetter(2 if side == "start" else 3), parts)))

    def same_partitions(self, parts: Sequence[PartitionOffset]) -> bool:
        """The same partitions in the same order as ``parts`` (compared in C)."""
        return (len(self.partitions) == len(parts)
                and self.partitions == tuple(map(itemgetter(1), parts))
                and self.topics == tuple(map(itemgetter(0), parts)))

    def mapping(self) -> dict[tuple[str, int], int]:
        return {(t, p): o for t, p, o in zip(self.topics, self.partitions, self.offsets,
                                             strict=True) if o is not None}


def continuity_problem(source: SourceRecord, prev_batch_id: int,
                       prev: PartitionEnds) -> str | None:
    """What is wrong between the previous batch's end offsets and this source's start
    offsets, partition by partition (partitions in only one of them are not compared:
    they appeared or went away)."""
    parts = source.partitions
    # The common case first, at C speed (10,000 partitions): the same partitions, every
    # start the end before.
    if prev.offsets == list(map(itemgetter(2), parts)) and prev.same_partitions(parts):
        return None
    ends = prev.mapping()
    pairs = [(p.topic, p.partition, ends.get((p.topic, p.partition)), p.start)
             for p in parts]
    return _discontinuity(pairs, f"after batch {prev_batch_id}", "ended at {end} there and "
                          "starts at {start} here")


def successor_problem(source: SourceRecord, next_batch_id: int,
                      following: PartitionEnds) -> str | None:
    """What is wrong between this source's end offsets and the start offsets of the
    run's next batch, journaled before this one (a batch replayed late from a spool)."""
    starts = following.mapping()
    pairs = [(p.topic, p.partition, p.end, starts.get((p.topic, p.partition)))
             for p in source.partitions]
    return _discontinuity(pairs, f"before batch {next_batch_id}", "ends at {end} here and "
                          f"starts at {{start}} in batch {next_batch_id}")


def _discontinuity(pairs: list[tuple[str, int, int | None, int | None]], where: str,
                   shape: str) -> str | None:
    """The gap and backwards phrases for (topic, partition, end before, start after)."""
    gaps: list[tuple[str, int, int, int]] = []
    back: list[tuple[str, int, int, int]] = []
    for topic, part, end, start in pairs:
        if start is None or end is None or start == end:
            continue
        (gaps if start > end else back).append((topic, part, end, start))
    out = []
    if gaps:
        out.append(f"gap {where}: " + ", ".join(
            f"{t}-{n} " + shape.format(end=end, start=start)
            + f", records {end}..{start - 1} never read" for t, n, end, start in gaps[:5])
            + (f" and {len(gaps) - 5} more" if len(gaps) > 5 else ""))
    if back:
        verb = "from" if where.startswith("after") else "to"
        out.append(f"offsets went backwards {verb} {where.split(' ', 1)[1]}: " + ", ".join(
            f"{t}-{n} " + shape.format(end=end, start=start)
            + f", records {start}..{end - 1} read twice" for t, n, end, start in back[:5])
            + (f" and {len(back) - 5} more" if len(back) > 5 else ""))
    return "; ".join(out) or None


def _offsets_of_record(rec: BatchRecord) -> dict[int, Any]:
    return {s.index: (sorted((p.topic, p.partition, p.start, p.end) for p in s.partitions)
                      if s.partitions else stored_offsets(s)) for s in rec.sources}


def duplicate_problem(have: dict[int, Any], rec: BatchRecord) -> str | None:
    """Why ``rec`` differs from the copy journaled first (``have``: source index ->
    sorted (topic, partition, start, end) rows, else (start, end) offsets); None when
    it is the same batch again (a spool replay)."""
    mine = _offsets_of_record(rec)
    if have == mine:
        return None
    diffs = []
    for index in sorted(set(have) | set(mine)):
        old, new = have.get(index), mine.get(index)
        if old == new:
            continue
        if isinstance(old, list) and isinstance(new, list):
            olds = {(t, p): (a, z) for t, p, a, z in old}
            news = {(t, p): (a, z) for t, p, a, z in new}
            changed = [f"{t}-{p} {olds.get((t, p))} then {news.get((t, p))}"
                       for t, p in sorted(set(olds) | set(news))
                       if olds.get((t, p)) != news.get((t, p))]
            diffs.append(f"source {index}: " + ", ".join(changed[:3])
                         + (f" and {len(changed) - 3} more" if len(changed) > 3 else ""))
        else:
            diffs.append(f"source {index}: {dumps(old)[:200]} then {dumps(new)[:200]}")
    return (f"batch {rec.batch_id} of run {rec.run_id} (query {rec.query_name}) arrived "
            f"again with different offsets ({'; '.join(diffs)} as (start, end)); the "
            "first copy is kept in the journal, this one is here")


def dumps(value: Any) -> str:
    """JSON for a rejected event's payload and a duplicate's message (sorted keys)."""
    return json.dumps(value, default=str, sort_keys=True)


