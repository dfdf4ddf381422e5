"""What the journal checks as it writes (pure): offsets that do not continue from the
previous batch, and a batch that arrives twice with different offsets."""

from __future__ import annotations

import json
from typing import Any

from .offsets import as_kafka_offsets, offsets_json
from .records import BatchRecord, SourceRecord


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


def continuity_problem(source: SourceRecord, prev_batch_id: int,
                        prev: dict[tuple[str, int], int]) -> str | None:
    """What is wrong between the previous batch's end offsets and this source's start
    offsets, partition by partition (partitions in only one of them are not compared:
    they appeared or went away)."""
    gaps: list[tuple[str, int, int, int]] = []  # topic, partition, previous end, start
    back: list[tuple[str, int, int, int]] = []
    for p in source.partitions:
        end = prev.get((p.topic, p.partition))
        if p.start is None or end is None or p.start == end:
            continue
        (gaps if p.start > end else back).append((p.topic, p.partition, end, p.start))
    out = []
    if gaps:
        out.append(f"gap after batch {prev_batch_id}: " + ", ".join(
            f"{t}-{n} ended at {end} there and starts at {start} here, "
            f"records {end}..{start - 1} never read" for t, n, end, start in gaps[:5])
            + (f" and {len(gaps) - 5} more" if len(gaps) > 5 else ""))
    if back:
        out.append(f"offsets went backwards from batch {prev_batch_id}: " + ", ".join(
            f"{t}-{n} ended at {end} there and starts at {start} here, "
            f"records {start}..{end - 1} read twice" for t, n, end, start in back[:5])
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


