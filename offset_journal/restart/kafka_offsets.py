"""Kafka start offsets (pure): from the journal's batches, then checked against the
partitions and logs the cluster has now (:func:`check_against_cluster`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from ..journal import Batch, SourceOffsets
from ..offsets import EARLIEST, KafkaOffsets, PartitionOffset, format_kafka_offsets
from .model import KIND_KAFKA, BatchRef, Findings, PlanInputs, SourcePlan, Start, source_kind
from .text import count, tp, tp_list

if TYPE_CHECKING:
    from ..kafka_admin import TopicState

_STRATEGY = re.compile(r"\b(SubscribePattern|Subscribe|Assign)\[([^\]]*)\]")

Strategy = Literal["subscribe", "pattern", "assign", "unknown"]
"""How a Kafka source picks its partitions."""
_STRATEGIES: dict[str, Strategy] = {"Subscribe": "subscribe", "SubscribePattern": "pattern",
                                    "Assign": "assign"}


def kafka_strategy(description: str | None) -> tuple[Strategy, list[str]]:
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
    return _STRATEGIES[name], items


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


# --------------------------------------------------------------------------- from the journal


def start_offsets_from(from_batches: Sequence[Batch], before: Batch | None, index: int,
                       ) -> tuple[KafkaOffsets, Findings]:
    """Kafka START offsets for re-reading ``from_batches`` (journal order) in full.

    Per partition tracked by the last batch: the smallest start offset over the batches.
    A partition whose first row has no start appeared during that batch (Spark read
    it from earliest) or the batch was its checkpoint's first (Spark reports no start
    then): it starts at ``before``'s end offset when that batch has one, else -2.
    """
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
    return out, _start_findings(from_batches[0], before, (appeared, from_before, unknown))


def _start_findings(first: Batch, before: Batch | None,
                    kinds: tuple[list[tuple[str, int]], ...]) -> Findings:
    """The notes and warnings of start_offsets_from: partitions that appeared, that
    start where the batch before ended, and whose start is unknown."""
    appeared, from_before, unknown = kinds
    found = Findings()
    if appeared:
        found.notes.append(
            "appeared during the re-read batches, so -2 (earliest) where Spark started "
            f"them too: {tp_list(appeared)}"
        )
    first_ref = BatchRef.of(first).label()
    if from_before and before is not None:
        found.warnings.append(
            f"{first_ref} is the first batch of its checkpoint (query id "
            f"{first.query_id}) and Spark reports no start offsets for it: "
            f"{tp_list(from_before)} start at the end offsets of the batch journaled "
            f"before it ({BatchRef.of(before).label()}), which is where it started if it "
            "was itself started from the journal"
        )
    if unknown:
        found.warnings.append(
            f"the journal does not know where {tp_list(unknown)} started in {first_ref} "
            "(its checkpoint's first batch): -2 (earliest) re-reads all they hold"
        )
    return found


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
            f"(topic deleted or no longer subscribed), left out: {tp_list(gone)}"
        )
    return out, notes


def _went_backwards(src: SourceOffsets, anchor: Batch) -> list[str]:
    """An error when the anchor's end offsets are below its start offsets: starting
    there would move the query backwards, which is not done without being asked
    (starting-offsets --force, or a batch/as_of)."""
    back = [p for p in src.partitions
            if p.start is not None and p.end is not None and p.end < p.start]
    if not back:
        return []
    return [
        f"offsets went backwards in {BatchRef.of(anchor).label()}: "
        + ", ".join(f"{tp(p.topic, p.partition)} from {p.start} to {p.end}"
                    for p in back[:8])
        + (f" and {len(back) - 8} more" if len(back) > 8 else "")
        + ": its end offsets would read again what the query had read (topic "
        "recreated, offsets reset?); check the topic, then start from another batch "
        "(--batch, --as-of), or from these anyway (starting-offsets --force)"
    ]


# --------------------------------------------------------------------------- the cluster


def check_against_cluster(offsets: KafkaOffsets, state: TopicState, *,
                          strategy: Strategy = "unknown",
                          subscribed: Sequence[str] = ()) -> tuple[KafkaOffsets, Findings]:
    """Reconcile planned start offsets with the partitions and logs that exist now.

    Spark requires specific ``startingOffsets`` to name exactly the partitions it is
    assigned, so partitions of a deleted topic are dropped (naming them would fail the
    query's start) and, for subscriptions, partitions that exist but are not in the
    journal are added at -2 (earliest: they appeared after the journaled batch, and all
    they hold is new). A start below a partition's log start means those records were
    deleted before being read: DATA LOSS, an error. A start above the log end (recreated
    topic, other cluster, forged batch) is an error too.
    """
    out, found = _drop_missing(offsets, state)
    found.merge(_add_new_partitions(out, offsets, state, strategy, subscribed))
    found.merge(_outside_the_logs(out, state))
    return out, found


def _drop_missing(offsets: KafkaOffsets, state: TopicState) -> tuple[KafkaOffsets, Findings]:
    """Offsets of the partitions that still exist; a warning for each topic that lost some."""
    found = Findings()
    out: KafkaOffsets = {}
    for topic in sorted(offsets):
        parts = offsets[topic]
        if topic not in state:
            found.warnings.append(
                f"topic {topic} (partitions {', '.join(str(p) for p in sorted(parts))}) no "
                "longer exists on the cluster: left out of startingOffsets, since Spark "
                "refuses specific offsets for partitions it is not assigned"
            )
            continue
        existing = state[topic]
        gone = sorted(p for p in parts if p not in existing)
        if gone:
            found.warnings.append(
                f"topic {topic} has {len(existing)} partitions now (recreated?): left out "
                f"of startingOffsets: {tp_list((topic, p) for p in gone)}"
            )
        for part in sorted(parts):
            if part in existing:
                out.setdefault(topic, {})[part] = parts[part]
    return out, found


def _add_new_partitions(out: KafkaOffsets, offsets: KafkaOffsets, state: TopicState,
                        strategy: Strategy, subscribed: Sequence[str]) -> Findings:
    """Add (in place) at -2 the partitions Spark will be assigned that the journal lacks."""
    found = Findings()
    if strategy == "assign":
        found.notes.append("the source assigns fixed partitions: none are added")
        return found
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
        found.notes.append(
            "on the cluster but not in the journal (created after the journaled "
            f"batch), so -2 (earliest) as Spark reads new partitions: {tp_list(added)}"
        )
    if new_topics:
        found.notes.append(
            "subscribed but never journaled: every partition from -2 (earliest); set "
            f"-1 instead to skip what they already hold: {', '.join(new_topics)}"
        )
    if strategy == "pattern":
        found.notes.append(
            "the source subscribes by pattern: topics created since that match it are "
            "not checked here; Spark refuses to start if one exists and is not named"
        )
    return found


def _outside_the_logs(out: KafkaOffsets, state: TopicState) -> Findings:
    """Errors for starts below a log's start (data loss) or beyond its end."""
    loss: list[str] = []
    beyond: list[str] = []
    for topic in sorted(out):
        for part, offset in sorted(out[topic].items()):
            if offset < 0 or part not in state.get(topic, {}):
                continue
            low, high = state[topic][part]
            if offset < low:
                loss.append(
                    f"{tp(topic, part)} starts at {offset} but its log starts at {low}: "
                    f"records {offset}..{low - 1} were deleted before being read"
                )
            elif offset > high:
                beyond.append(f"{tp(topic, part)} starts at {offset}, beyond its log end "
                              f"{high}")
    found = Findings()
    if beyond:
        # Spark would wait for offsets that may never come, or fail; a writer role's
        # forged batch looks like this too. Never handed out without being asked.
        found.errors.append(
            "; ".join(beyond) + ": the journal holds offsets the cluster never had (topic "
            "recreated, journal from another cluster, or a forged batch?); check, then "
            "start from another batch (--batch, --as-of) or from these (starting-offsets "
            "--force)"
        )
    if loss:
        found.errors.append(
            "DATA LOSS: " + "; ".join(loss)
            + " (Spark fails with failOnDataLoss=true, or skips them silently with false)"
        )
    return found


# --------------------------------------------------------------------------- one source


def kafka_source_plan(inp: PlanInputs, start: Start, src: SourceOffsets) -> SourcePlan:
    """How a Kafka source starts: offsets from the journal, narrowed to the new job's
    subscription, then checked against the cluster when its state is known."""
    index = src.source_index
    plan = SourcePlan(index, src.description, KIND_KAFKA, {}, {}, None)
    if not src.partitions:
        plan.errors.append(
            "no Kafka partition offsets are journaled for this source (unreadable payload?): "
            "nothing to start from"
        )
        plan.offsets = None
        plan.journaled = src.end_offset
        return plan
    if start.from_batches is None:
        offsets, notes = end_offsets_of(inp.anchor, index)
        plan.journaled = src.end_offset
        plan.add(Findings(notes=notes, errors=_went_backwards(src, inp.anchor)))
    else:
        offsets, found = start_offsets_from(start.from_batches, start.before, index)
        first_sources = {s.source_index: s for s in start.from_batches[0].sources}
        plan.journaled = first_sources[index].start_offset if index in first_sources else None
        plan.add(found)
    strategy, items = kafka_strategy(src.description)
    if inp.subscribe:
        strategy, items = "subscribe", sorted(set(inp.subscribe))
        offsets = _narrow_to_subscription(plan, offsets, items, inp.kafka_state is None)
    if inp.kafka_state is not None:
        offsets, found = check_against_cluster(offsets, inp.kafka_state, strategy=strategy,
                                               subscribed=items)
        plan.add(found)
    plan.offsets = offsets
    if not offsets:
        plan.errors.append("no partition is left to start from")
    else:
        plan.options["startingOffsets"] = format_kafka_offsets(offsets)
        n = sum(len(p) for p in offsets.values())
        plan.notes.insert(0, f"startingOffsets for {count(n, 'partition')} of "
                             f"{count(len(offsets), 'topic')}")
    return plan


def _narrow_to_subscription(plan: SourcePlan, offsets: KafkaOffsets, items: list[str],
                            blind: bool) -> KafkaOffsets:
    """The new job's subscription decides which partitions Spark assigns, and Spark
    wants exactly those named: topics it no longer reads must go."""
    dropped = sorted(t for t in offsets if t not in items)
    if dropped:
        plan.notes.append("journaled but not subscribed by the new job, left out: "
                          + ", ".join(dropped))
        offsets = {t: p for t, p in offsets.items() if t in items}
    unknown = [t for t in items if t not in offsets]
    if unknown and blind:
        plan.warnings.append(
            f"subscribed but never journaled ({', '.join(unknown)}), and without a "
            "cluster their partitions are unknown: Spark refuses startingOffsets that "
            "do not name them; pass bootstrap servers"
        )
    return offsets
