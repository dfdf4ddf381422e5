"""Record-time restarts (pure): each partition starts at the first record whose
timestamp is at or after a time, as ``kafka-consumer-groups --reset-offsets
--to-datetime`` does (Kafka's offsetsForTimes); a partition without such a record
starts at its log end. The journal says what that reads again.

The times looked up are the records' own timestamps (CreateTime set by producers, or
LogAppendTime set by the broker: the topic's ``message.timestamp.type``): when the data
happened, not when a batch of the old query ran (that is ``as_of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from ...formatting import format_time
from ...offsets import KafkaOffsets, format_kafka_offsets
from ...rows import KIND_KAFKA, RereadRun, SourceOffsets
from ...wording import count, tp, tp_list
from .._findings import Findings
from .._inputs import PlanInputs
from ..model import SourcePlan
from .kafka_offsets import (
    PATTERN_NOTE,
    drop_missing,
    end_offsets_of,
    kafka_strategy,
    unsubscribed_note,
)

if TYPE_CHECKING:
    from ...kafka.admin import TimeLookup, TopicState

SHOWN = 8
"""Partitions and runs named one by one in a note; the rest are counted."""


def epoch_millis(when: datetime) -> int:
    """Kafka's timestamps: milliseconds since the epoch (UTC)."""
    return int(when.timestamp() * 1000)


def chosen_offsets(lookup: TimeLookup, state: TopicState) -> KafkaOffsets:
    """Per partition the looked-up offset, or the log end when it has no record at or
    after the time (as kafka-consumer-groups does)."""
    out: KafkaOffsets = {}
    for topic in sorted(lookup):
        for part, offset in sorted(lookup[topic].items()):
            if offset is None:
                offset = state.get(topic, {}).get(part, (0, 0))[1]
            out.setdefault(topic, {})[part] = offset
    return out


def records_again(journaled_end: KafkaOffsets, start: KafkaOffsets) -> KafkaOffsets:
    """Per partition of ``start``: journaled end - start, never negative (0 for a
    partition the journal does not have)."""
    return {topic: {part: max(0, journaled_end.get(topic, {}).get(part, offset) - offset)
                    for part, offset in parts.items()}
            for topic, parts in start.items()}


def from_time_offsets(journaled_end: KafkaOffsets, lookup: TimeLookup, state: TopicState,
                      when: datetime) -> tuple[KafkaOffsets, KafkaOffsets, Findings]:
    """(start offsets, records read again per partition, findings) of a record-time plan
    over the partitions in ``lookup``."""
    start = chosen_offsets(lookup, state)
    again = records_again(journaled_end, start)
    found = Findings()
    pairs = [(t, p) for t in start for p in start[t]]
    at_end = [(t, p) for t, p in pairs if lookup[t][p] is None]
    new = [(t, p) for t, p in pairs if p not in journaled_end.get(t, {})]
    skipped = [(t, p, journaled_end[t][p], start[t][p]) for t, p in pairs
               if (t, p) not in new and start[t][p] > journaled_end[t][p]]
    found.notes.append(_again_note(again, start, journaled_end))
    if at_end:
        found.notes.append(f"no record at or after {format_time(when)}, so at the log end "
                           f"(only records written from now on are read): {tp_list(at_end)}")
    if new:
        found.notes.append("not in the journal (added since, or never read by the query): "
                           f"started at their first record at or after the time too: "
                           f"{tp_list(new)}")
    if skipped:
        found.warnings.append(_skipped_warning(skipped, state, when))
    beyond = [(t, p) for t, p in pairs if (t, p) not in new
              and journaled_end[t][p] > state.get(t, {}).get(p, (0, 0))[1]]
    if beyond:
        found.warnings.append(
            "the journal's end offsets lie beyond the log end of "
            f"{tp_list(beyond)} (topic deleted and recreated, or another cluster?): the "
            "journaled records there are not these records, and the counts of records "
            "read again do not apply to them")
    return start, again, found


def _again_note(again: KafkaOffsets, start: KafkaOffsets, journaled_end: KafkaOffsets) -> str:
    total = sum(n for parts in again.values() for n in parts.values())
    rows = [(t, p) for t in sorted(again) for p in sorted(again[t]) if again[t][p] > 0]
    parts = ", ".join(
        f"{tp(t, p)} {again[t][p]} (offsets {start[t][p]}..{journaled_end[t][p] - 1})"
        for t, p in rows[:SHOWN])
    more = f" and {len(rows) - SHOWN} more partitions" if len(rows) > SHOWN else ""
    if not total:
        return "No journaled record is read again: every partition starts at or after " \
               "the journal's end offsets."
    return (f"{count(total, 'journaled record')} will be processed again (journaled end "
            f"- start, per partition): {parts}{more}.")


def _skipped_warning(skipped: Sequence[tuple[str, int, int, int]], state: TopicState,
                     when: datetime) -> str:
    items = []
    for t, p, end, start in skipped[:SHOWN]:
        low = state.get(t, {}).get(p, (0, 0))[0]
        deleted = (f", of which {end}..{low - 1} were deleted (retention) before being read"
                   if low > end else "")
        items.append(f"{tp(t, p)} {end}..{start - 1} ({count(start - end, 'record')}{deleted})")
    more = f" and {len(skipped) - SHOWN} more" if len(skipped) > SHOWN else ""
    return (f"starting at {format_time(when)} skips records the query never processed "
            f"(the journal ends before them, and they are not at or after that time): "
            f"{'; '.join(items)}{more}; use an earlier time, or the default plan (after "
            "the last journaled batch), to read them")


def by_timestamp(start: KafkaOffsets, when: datetime) -> dict[str, dict[str, int]]:
    """Spark's ``startingOffsetsByTimestamp`` value: every partition at ``when``."""
    millis = epoch_millis(when)
    return {t: {str(p): millis for p in sorted(start[t])} for t in sorted(start)}


def reread_note(runs: Sequence[RereadRun]) -> str:
    """Which journaled batches the plan processes again."""
    if not runs:
        return "No journaled batch is processed again."
    total = sum(r.batches for r in runs)
    shown = "; ".join(r.label() for r in runs[:SHOWN])
    more = f"; and {len(runs) - SHOWN} more runs" if len(runs) > SHOWN else ""
    return (f"Processed again: {count(total, 'journaled batch')} that read records at or "
            f"after the start offsets: {shown}{more}. The sink receives their rows a "
            "second time unless it is idempotent.")


def time_source_plan(inp: PlanInputs, src: SourceOffsets) -> SourcePlan:
    """How a Kafka source starts at record time ``inp.request.from_time``."""
    index = src.source_index
    plan = SourcePlan(index, src.description, KIND_KAFKA, {}, None, src.end_offset)
    state, lookup, when = inp.kafka.state, inp.kafka.time_lookup, inp.request.from_time
    if state is None or lookup is None or when is None:
        plan.errors.append("a record-time plan needs the Kafka cluster (bootstrap servers) "
                           "to look the time up")
        return plan
    journaled, notes = end_offsets_of(inp.anchor, index)
    plan.add(Findings(notes=notes))
    strategy, items = kafka_strategy(src.description)
    topics = set(journaled) | (set(items) if strategy == "subscribe" else set())
    if inp.request.subscribe:
        topics = set(inp.request.subscribe)
        note = unsubscribed_note(journaled, topics)
        if note:
            plan.notes.append(note)
    _kept, gone = drop_missing({t: journaled[t] for t in journaled if t in topics}, state)
    plan.add(gone)
    mine = {t: dict(lookup[t]) for t in sorted(topics) if t in lookup}
    if strategy == "pattern":
        plan.notes.append(PATTERN_NOTE)
    if strategy == "assign":  # fixed partitions: only those the query was assigned
        mine = {t: {p: o for p, o in parts.items() if p in journaled.get(t, {})}
                for t, parts in mine.items()}
    offsets, again, found = from_time_offsets(journaled, mine, state, when)
    plan.add(found)
    plan.offsets, plan.records_again = offsets, again
    if not offsets:
        plan.errors.append("no partition is left to start from")
        return plan
    plan.options["startingOffsets"] = format_kafka_offsets(offsets)
    plan.by_timestamp = by_timestamp(offsets, when)
    n = sum(len(p) for p in offsets.values())
    plan.notes.insert(0, f"startingOffsets for {count(n, 'partition')} of "
                         f"{count(len(offsets), 'topic')}, from record time "
                         f"{format_time(when)} ({epoch_millis(when)} ms)")
    return plan
