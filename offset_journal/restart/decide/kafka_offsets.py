"""Kafka start offsets (pure): from the journal's batches, then checked against the
partitions and logs the cluster has now (:func:`check_against_cluster`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING

from ...descriptions import Strategy, kafka_strategy
from ...offsets import EARLIEST, KafkaOffsets, PartitionOffset, format_kafka_offsets
from ...rows import KIND_KAFKA, Batch, BatchRef, SourceOffsets, kafka_topics
from ...wording import count, tp, tp_list
from .._findings import Findings
from .._inputs import PlanInputs
from ..model import SourcePlan, Start
from .translate import subscription_errors, translate_offsets, translated_items

if TYPE_CHECKING:
    from ...kafka.admin import TopicState


def _rows(batch: Batch, index: int) -> dict[tuple[str, int], PartitionOffset]:
    """Source ``index``'s partitions in ``batch`` (none when the batch lacks it)."""
    return {(p.topic, p.partition): p for s in batch.sources if s.source_index == index
            for p in s.partitions}


def _first_batch_of_checkpoint(batch: Batch, index: int) -> bool:
    return any(s.source_index == index and s.start_offset is None for s in batch.sources)


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


def _below_zero(offsets: KafkaOffsets, anchor: Batch) -> list[str]:
    """An error for journaled end offsets below 0: in startingOffsets -1 means latest
    and -2 earliest, so handing one out would start the query somewhere the journal
    never was (Spark reports none; the database refuses them since migration 0015)."""
    bad = [(t, p, o) for t, parts in sorted(offsets.items())
           for p, o in sorted(parts.items()) if o < 0]
    if not bad:
        return []
    return [f"end offsets below 0 in {BatchRef.of(anchor).label()}: "
            + ", ".join(f"{tp(t, p)} at {o}" for t, p, o in bad[:8])
            + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
            + ": a row no listener wrote; start from another batch (--batch, --as-of)"]


# --------------------------------------------------------------------------- the cluster


def check_against_cluster(offsets: KafkaOffsets, state: TopicState, *,
                          strategy: Strategy = "unknown", subscribed: Sequence[str] = (),
                          allow_data_loss: bool = False,
                          recreated: Sequence[str] = ()) -> tuple[KafkaOffsets, Findings]:
    """Reconcile planned start offsets with the partitions and logs that exist now.

    Spark requires specific ``startingOffsets`` to name exactly the partitions it is
    assigned, so partitions of a deleted topic are dropped (naming them would fail the
    query's start) and, for subscriptions, partitions that exist but are not in the
    journal are added at -2 (earliest: they appeared after the journaled batch, and all
    they hold is new). A start below a partition's log start means those records were
    deleted before being read: DATA LOSS, an error, or with ``allow_data_loss`` a
    warning and a start at the log start. A start above the log end (a topic deleted
    and recreated, another cluster, a forged batch) is an error, unless the topic is in
    ``recreated``: then all its partitions start at -2 (earliest), with a warning. A
    partition added since, and a recreated topic's partitions, began at offset 0: a log
    start above 0 there is DATA LOSS too (Spark says the same of a partition it finds
    while running), since no job read what retention deleted from them.
    """
    out, found, _from_zero = _reconcile(offsets, state, strategy, subscribed, allow_data_loss,
                                        recreated)
    return out, found


def _reconcile(offsets: KafkaOffsets, state: TopicState, strategy: Strategy,
               subscribed: Sequence[str], allow_data_loss: bool, recreated: Sequence[str],
               ) -> tuple[KafkaOffsets, Findings, list[tuple[str, int]]]:
    """:func:`check_against_cluster`, and the partitions planned at -2 that begin at
    offset 0 for the job (added since, or a recreated topic's)."""
    out, dropped = drop_missing(offsets, state, recreated)
    added, new = _add_new_partitions(out, offsets, state, strategy, subscribed)
    restarted, again = _restart_recreated(out, offsets, state, recreated)
    beyond = _beyond_the_log_end(out, state)
    below = _below_the_log_start(out, state, allow_data_loss, from_zero=added + restarted)
    return out, Findings.joined(dropped, new, again, beyond, below), added + restarted


def default_start(batch: Batch, index: int, state: TopicState,
                  ) -> tuple[KafkaOffsets, KafkaOffsets, Findings]:
    """Where the default plan (``plan QUERY``: after ``batch``, the query's last, with no
    option) starts Kafka source ``index`` on the cluster in ``state``: the journaled end
    offsets, then the plan's checks against the cluster, -2 made concrete (0 for a
    partition the job would have begun at 0, else the log start: where Spark begins it).

    Returns (journaled end offsets, planned next offsets, the plan's findings for the
    source): what ``retention`` and ``check`` forecast from, the same steps as
    :func:`kafka_source_plan`'s, so that they and ``plan`` agree by construction."""
    src = batch.source(index)
    journaled, found = journaled_end(batch, src)
    strategy, items = kafka_strategy(src.description)
    out, more, from_zero = _reconcile(journaled, state, strategy, items, False, ())
    found.merge(more)
    fresh = set(from_zero)
    for topic, parts in out.items():
        for part, offset in parts.items():
            if offset == EARLIEST:
                parts[part] = 0 if (topic, part) in fresh else state[topic][part][0]
    return journaled, out, found


def journaled_end(anchor: Batch, src: SourceOffsets) -> tuple[KafkaOffsets, Findings]:
    """A Kafka source's end offsets in ``anchor`` (where a plan after it starts), with
    the notes on partitions left out and the errors that refuse them (offsets that went
    backwards, offsets below 0)."""
    offsets, notes = end_offsets_of(anchor, src.source_index)
    return offsets, Findings(notes=notes, errors=_went_backwards(src, anchor)
                             + _below_zero(offsets, anchor))


def drop_missing(offsets: KafkaOffsets, state: TopicState,
                  recreated: Sequence[str] = ()) -> tuple[KafkaOffsets, Findings]:
    """Offsets of the partitions that still exist; a warning for each topic that lost some."""
    found = Findings()
    out: KafkaOffsets = {}
    for topic in sorted(offsets):
        parts = offsets[topic]
        if topic not in state:
            if topic not in recreated:  # else _restart_recreated says more
                found.warnings.append(gone_topic_warning(topic, parts))
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


def gone_topic_warning(topic: str, parts: dict[int, int]) -> str:
    """What a plan says of a journaled topic the cluster no longer has."""
    journaled = ", ".join(f"{tp(topic, p)}: {o}" for p, o in sorted(parts.items())[:8])
    return (
        f"topic {topic} (partitions {', '.join(str(p) for p in sorted(parts))}) no longer "
        f"exists on the cluster: it was deleted and not created again. Its journaled "
        f"offsets ({journaled}) are left out of startingOffsets, since Spark refuses "
        f"specific offsets for partitions it is not assigned. Subscribe the new job without "
        f"{topic} (and plan with --subscribe): Spark fails a query subscribed to a missing "
        "topic (UnknownTopicOrPartitionException)"
    )


def _add_new_partitions(out: KafkaOffsets, offsets: KafkaOffsets, state: TopicState,
                        strategy: Strategy, subscribed: Sequence[str],
                        ) -> tuple[list[tuple[str, int]], Findings]:
    """Add (in place) at -2 the partitions Spark will be assigned that the journal lacks;
    returns the partitions added to journaled topics (the job would have read them from
    offset 0) and what to say."""
    found = Findings()
    if strategy == "assign":
        found.notes.append("the source assigns fixed partitions: none are added")
        return [], found
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
        found.notes.append(PATTERN_NOTE)
    return added, found


def _restart_recreated(out: KafkaOffsets, offsets: KafkaOffsets, state: TopicState,
                       recreated: Sequence[str]) -> tuple[list[tuple[str, int]], Findings]:
    """Start every partition of the topics named as recreated at -2 (earliest), in place:
    the journal's offsets belong to the topic before it was deleted. Returns the
    partitions so restarted (a new topic began at offset 0) and what to say.

    A journaled topic is taken as recreated only when its offsets now lie below the
    journal's somewhere (a journaled offset beyond a log end): otherwise it is the same
    log, the flag is refused, and the plan's other checks (DATA LOSS at the log start)
    apply to it as to any topic."""
    found = Findings()
    restarted: list[tuple[str, int]] = []
    for topic in sorted(set(recreated)):
        if topic not in state:
            found.errors.append(
                f"topic {topic} was named as recreated (--restart-recreated-topic) but does "
                "not exist on the cluster: create it first, or leave it out of the new "
                "job's subscription"
            )
            continue
        if topic not in out and topic not in offsets:
            continue  # not read by this source (or not by the new job)
        parts = state[topic]
        old = offsets.get(topic, {})
        if old and not any(p in parts and o > parts[p][1] for p, o in old.items()):
            found.errors.append(_not_recreated(topic, old, parts))
            continue
        out[topic] = {p: EARLIEST for p in sorted(parts)}
        restarted += [(topic, p) for p in sorted(parts)]
        held = sum(high - low for low, high in parts.values())
        text = (
            f"topic {topic} starts at -2 (earliest) in all {count(len(parts), 'partition')}, "
            "as asked (--restart-recreated-topic): the "
            f"{count(held, 'record')} it holds now are read from its start"
        )
        if old:
            text += ("; the journal's offsets ("
                     + ", ".join(f"{tp(topic, p)}: {o}" for p, o in sorted(old.items())[:8])
                     + ") belong to the topic as it was before it was deleted")
        found.warnings.append(text)
    return restarted, found


def _not_recreated(topic: str, old: dict[int, int], parts: dict[int, tuple[int, int]]) -> str:
    """The error for --restart-recreated-topic on a topic whose log still holds the
    journal's offsets: restarting it at earliest would read records again or hide a loss."""
    shown = "; ".join(f"{tp(topic, p)} journaled {o}, log {parts[p][0]}..{parts[p][1]}"
                      for p, o in sorted(old.items())[:8] if p in parts)
    return (
        f"topic {topic} was named as recreated (--restart-recreated-topic), but no "
        f"journaled offset lies beyond its log end ({shown}): nothing shows it was "
        "deleted and created again, so its journaled offsets still apply. Plan without "
        f"--restart-recreated-topic {topic}; if it was recreated and has grown past the "
        "journaled offsets since, start it from explicit offsets (starting-offsets --force)"
    )


def _beyond_the_log_end(out: KafkaOffsets, state: TopicState) -> Findings:
    """An error per topic with starts beyond a partition's log end: the topic was most
    likely deleted and recreated (its offsets begin at 0 again)."""
    found = Findings()
    for topic in sorted(out):
        planned = {p: o for p, o in out[topic].items()
                   if o >= 0 and p in state.get(topic, {})}
        beyond = {p: o for p, o in planned.items() if o > state[topic][p][1]}
        if not beyond:
            continue
        every = " in every partition" if len(beyond) == len(planned) else ""
        # Spark would wait for offsets that may never come, or fail; a writer role's
        # forged batch looks like this too. Never handed out without being asked.
        found.errors.append(
            "; ".join(f"{tp(topic, p)} starts at {o}, beyond its log end {state[topic][p][1]}"
                      for p, o in sorted(beyond.items()))
            + f": the journal holds offsets topic {topic} does not have{every} (journaled "
            "start vs log end above). The topic was probably deleted and recreated (a new "
            "topic's offsets start at 0 again), or the journal is from another cluster, or "
            "a batch is forged. Not handed out: the new job would skip the new topic's "
            f"records or wait for offsets that never come. If {topic} was recreated, read "
            f"the new topic from its start: --restart-recreated-topic {topic}; otherwise "
            "check, then start from another batch (--batch, --as-of) or from these "
            "(starting-offsets --force)"
        )
    return found


def _below_the_log_start(out: KafkaOffsets, state: TopicState, allow_data_loss: bool,
                         from_zero: Sequence[tuple[str, int]] = ()) -> Findings:
    """DATA LOSS: starts below a log's start (retention or DeleteRecords removed records
    the journal says were not read yet). An error; with ``allow_data_loss`` a warning,
    and those partitions start at their log start (in place).

    ``from_zero``: partitions planned at -2 that began at offset 0 for this job (added
    since the journaled batch, or a recreated topic's): what lies below their log start
    was deleted before any job read it, so they count as planned at 0."""
    fresh = set(from_zero)
    lost: list[tuple[str, int, int, int]] = []
    for topic in sorted(out):
        for part, offset in sorted(out[topic].items()):
            if offset == EARLIEST and (topic, part) in fresh:
                offset = 0
            if offset >= 0 and part in state.get(topic, {}) and offset < state[topic][part][0]:
                lost.append((topic, part, offset, state[topic][part][0]))
    if not lost:
        return Findings()
    total = sum(low - offset for _t, _p, offset, low in lost)
    head = (f"{count(total, 'record')} in {count(len(lost), 'partition')} were deleted "
            "(retention or DeleteRecords) before being read")
    if allow_data_loss:
        for topic, part, _offset, low in lost:
            out[topic][part] = low
        return Findings(warnings=[
            f"DATA LOSS accepted (--allow-data-loss): {head}: "
            + "; ".join(f"{tp(t, p)} starts at its log start {low}, not at "
                        f"{_planned(t, p, o, fresh, 'the journaled')}: records {o}..{low - 1} "
                        f"({count(low - o, 'record')}) are lost"
                        for t, p, o, low in lost)
        ])
    return Findings(errors=[
        f"DATA LOSS: {head}: "
        + "; ".join(f"{tp(t, p)} starts at {o} but its log starts at {low}: records "
                    f"{o}..{low - 1} were deleted before being read "
                    f"({_planned(t, p, o, fresh, 'journaled offset')}, log start {low}, "
                    f"{count(low - o, 'record')} lost)"
                    for t, p, o, low in lost)
        + " (Spark fails with failOnDataLoss=true, or skips them silently with false). "
        "To start those partitions at their log start and accept the loss: "
        "--allow-data-loss"
    ])


def _planned(topic: str, part: int, offset: int, fresh: set[tuple[str, int]],
             journaled: str) -> str:
    """Where a lost range's planned start came from, for the DATA LOSS message."""
    if (topic, part) in fresh:
        return ("a partition the journal never read begins at 0" if journaled.endswith("offset")
                else "0, where a partition the journal never read begins")
    return f"{journaled} {offset}"


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
        offsets, found = journaled_end(inp.anchor, src)
        plan.journaled = src.end_offset
        plan.add(found)
    else:
        offsets, found = start_offsets_from(start.from_batches, start.before, index)
        first_sources = {s.source_index: s for s in start.from_batches[0].sources}
        plan.journaled = first_sources[index].start_offset if index in first_sources else None
        plan.add(found)
    strategy, items = kafka_strategy(src.description)
    if inp.kafka.mirror is not None:  # the rest of the plan is about the replica
        if inp.request.subscribe:
            plan.errors += subscription_errors(tuple(inp.request.subscribe), inp.kafka.mirror,
                                               list(offsets))
        offsets, plan.translation, found = translate_offsets(
            offsets, inp.kafka.mirror, inp.kafka.state, inp.request.allow_data_loss)
        plan.add(found)
        items = translated_items(items, inp.kafka.mirror, strategy)
    if inp.request.subscribe:
        strategy, items = "subscribe", sorted(set(inp.request.subscribe))
        offsets = _narrow_to_subscription(plan, offsets, items, inp.kafka.state is None)
    if inp.kafka.state is not None:
        offsets, found = check_against_cluster(
            offsets, inp.kafka.state, strategy=strategy, subscribed=items,
            allow_data_loss=inp.request.allow_data_loss, recreated=inp.request.recreated_topics)
        plan.add(found)
    if inp.request.subscribe and inp.kafka.state is not None:
        plan.errors += missing_subscribed(inp.request.subscribe, inp.kafka.state)
    plan.offsets = offsets
    plan.log_starts = log_starts_of(offsets, inp.kafka.state or {})
    if not offsets:
        plan.errors.append("no partition is left to start from")
    else:
        plan.options["startingOffsets"] = format_kafka_offsets(offsets)
        n = sum(len(p) for p in offsets.values())
        plan.notes.insert(0, f"startingOffsets for {count(n, 'partition')} of "
                             f"{count(len(offsets), 'topic')}")
    return plan


def log_starts_of(offsets: KafkaOffsets, state: TopicState) -> dict[tuple[str, int], int]:
    """Where each partition planned at -2 (earliest) begins on the cluster now: its log
    start, by (topic, partition); partitions the cluster state lacks are left out."""
    return {(t, p): state[t][p][0] for t, parts in offsets.items()
            for p, o in parts.items() if o == EARLIEST and p in state.get(t, {})}


def missing_subscribed(subscribe: Sequence[str], state: TopicState) -> list[str]:
    """An error for topics the new job subscribes to that the cluster does not have."""
    missing = sorted(set(subscribe) - set(state))
    if not missing:
        return []
    return [f"the new job subscribes to {', '.join(missing)}, which the cluster does not "
            "have (deleted, or a typo?): Spark fails a query subscribed to a missing topic "
            "(UnknownTopicOrPartitionException); create it or subscribe without it"]


PATTERN_NOTE = ("the source subscribes by pattern: topics created since that match it are "
                "not named here; Spark refuses to start if one exists and is not named")


def unsubscribed_note(journaled: Iterable[str], subscribed: Collection[str]) -> str | None:
    """The note for journaled topics the new job no longer subscribes to (left out)."""
    dropped = sorted(t for t in journaled if t not in subscribed)
    return ("journaled but not subscribed by the new job, left out: " + ", ".join(dropped)
            if dropped else None)


def _narrow_to_subscription(plan: SourcePlan, offsets: KafkaOffsets, items: list[str],
                            blind: bool) -> KafkaOffsets:
    """The new job's subscription decides which partitions Spark assigns, and Spark
    wants exactly those named: topics it no longer reads must go."""
    note = unsubscribed_note(offsets, items)
    if note:
        plan.notes.append(note)
        offsets = {t: p for t, p in offsets.items() if t in items}
    unknown = [t for t in items if t not in offsets]
    if unknown and blind:
        plan.warnings.append(
            f"subscribed but never journaled ({', '.join(unknown)}), and without a "
            "cluster their partitions are unknown: Spark refuses startingOffsets that "
            "do not name them; pass bootstrap servers"
        )
    return offsets


__all__ = ["PATTERN_NOTE", "Findings", "KafkaOffsets", "Strategy", "check_against_cluster",
           "default_start", "drop_missing", "end_offsets_of", "gone_topic_warning",
           "journaled_end", "kafka_source_plan", "kafka_strategy", "kafka_topics",
           "log_starts_of", "missing_subscribed", "start_offsets_from", "unsubscribed_note"]
