"""The old query's sink, as its own commit log says (pure): where a plan after the
journal's last batch really starts.

Spark runs a batch's sink before it writes ``commits/N``, and the listener journals the
batch after that. A driver killed in between leaves the batch in flight in the sink (a
file sink's ``_spark_metadata/N``, a Delta commit with ``txn`` version N) while the
checkpoint's commit log and the journal stop at N-1 or before. The offsets of batch N
are in the old checkpoint all the same: ``offsets/N`` is written before the batch runs.
So when the sink holds batches beyond the journal's last, the plan takes them (their end
offsets from ``offsets/N``, their start from the batch before) and starts after the
sink's last batch; the edge journals them once the plan is recorded, as ``checkpoint
import`` would. The other way round, a batch the journal (or the checkpoint) committed
that the sink does not hold is DATA LOSS, counted, unless accepted.

Refused in one line (RestartError), nothing recorded: a sink path that is not a sink,
another query's sink (the journal names another path; a Delta table with no ``txn`` of
the old query), an old checkpoint of another query, and a sink holding a batch whose
``offsets/N`` is gone or disagrees with the journal. And, for a plan after the journal's
last batch, whatever would leave a batch in flight unseen: the sink the journal names
that cannot be read (wherever it lives: the edge reads an object store as it reads a
local path), and an old checkpoint with batches beyond the journal when no sink log
says which of them the sink holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...descriptions import described_sink, is_foreach_batch_sink
from ...errors import RestartError
from ...offsets import PartitionOffset, looks_like_kafka, partition_offsets
from ...rows import KIND_KAFKA, Batch, BatchRef, SourceOffsets, source_kind
from ...wording import count, tp
from .._delta_log import same_path
from .._findings import Findings
from .._inputs import OldBatch, OldCheckpoint, PlanInputs
from ..model import MODE_STATE_AWARE, POSITION_AFTER, SINK_FILE, SinkFacts
from ..request import SINK_NONE

GIVE_SINK = "--sink PATH for a file sink, --sink delta:PATH for a Delta table"


@dataclass(frozen=True)
class SinkOutcome:
    """What the sink's log made of the plan: the batches taken from it and the old
    checkpoint (the plan starts after the last), the findings, and what is recorded."""

    taken: tuple[Batch, ...] = ()
    findings: Findings = field(default_factory=Findings)
    record: dict[str, Any] | None = None


def sink_outcome(inp: PlanInputs) -> SinkOutcome:
    """The sink step: refuse what is not the old query's sink, then compare the batch it
    holds last with the journal's last (and the old checkpoint's last commit)."""
    facts = inp.old_query.sink
    kafka = kafka_sources(inp.anchor)
    if facts is None:
        return SinkOutcome(findings=unchecked_beyond(inp, None, kafka))
    checkpoint = inp.old_query.checkpoint
    later = checkpoint is not None and continues_after(inp, checkpoint, kafka)
    unread = _unread(inp, facts, later, kafka)
    if unread is not None:
        return unread
    if checkpoint is not None and not later:
        refuse_other_checkpoint(inp, checkpoint)
    refuse_foreign_sink(inp, facts, later)
    if not _after_the_last_batch(inp):
        return SinkOutcome(findings=Findings(notes=[
            f"Sink: {facts.label()} holds batches up to {_upto(facts)}; this plan reads "
            "again on purpose (--batch, --as-of, --from-time, state-aware or a savepoint), "
            "so it does not start after what the sink holds"]))
    last = -1 if facts.last_batch is None else facts.last_batch
    j = -1 if later else inp.anchor.batch_id  # the sink's checkpoint's batch ids
    found = Findings()
    taken: tuple[Batch, ...] = ()
    if last > j:
        if checkpoint is None:
            found.errors.append(_no_checkpoint(inp, facts))
        else:
            taken = take_batches(inp, facts, checkpoint, j + 1, kafka)
            found.notes.append(_taken_note(inp, facts, taken, checkpoint, later))
    elif last < j:
        _add(found, missing_from_sink(inp, facts, kafka))
    elif later:
        found.notes.append(f"Sink: {facts.label()} holds no batch of the old query (query "
                           f"id {checkpoint.query_id if checkpoint else None}) yet: it was "
                           "stopped before its sink committed one; nothing was in flight.")
    else:
        found.notes.append(f"Sink: {facts.label()} holds batches up to {j}, the journal's "
                           "last: nothing was in flight when the old query stopped.")
    _add(found, _committed_not_in_sink(inp, facts, max(last, j)))
    return SinkOutcome(taken, found, _record(inp, facts, taken))


def _unread(inp: PlanInputs, facts: SinkFacts, later: bool, kafka: frozenset[int],
            ) -> SinkOutcome | None:
    """A sink that could not be read: refused when given, and when the journal named it
    and the plan starts after the journal's last batch (a batch the sink holds beyond it
    would be written again). A journaled one with no log where it is named (moved, or on
    another machine's disk): a warning, unless the old checkpoint has batches beyond the
    journal (:func:`unchecked_beyond`). A later checkpoint's file sink with no log yet
    (:func:`continues_after`) wrote nothing: a note."""
    if facts.problem is None and facts.exists:
        return None
    if later and facts.problem is None:
        return SinkOutcome(findings=Findings(notes=[
            f"Sink: {facts.label()} holds nothing yet (no log): the old query was stopped "
            "before its sink committed a batch; nothing was in flight."]))
    why = facts.problem or ("no _spark_metadata (a file sink's log) or _delta_log (a "
                            "Delta table's) there")
    if facts.found_by == "given":
        raise RestartError(f"--sink {facts.path} is not a sink this plan can read: {why}")
    if facts.problem is not None and _after_the_last_batch(inp):
        raise RestartError(
            f"the old query's sink, {facts.label()} (its journaled description), cannot be "
            f"read: {why}. A batch it holds beyond the journal's last (batch "
            f"{inp.anchor.batch_id}) would be written again: give the sink "
            f"where this plan can read it ({GIVE_SINK}), or plan without the check "
            "(--sink none)")
    found = Findings(warnings=[
        f"the old query's sink, {facts.label()} (its journaled description), was not "
        f"checked: {why}. A batch it holds beyond the journal's last would be written "
        "again: give the sink (--sink PATH, --sink delta:PATH) or --sink none"])
    _add(found, unchecked_beyond(inp, facts, kafka))
    return SinkOutcome(findings=found)


def kafka_sources(anchor: Batch) -> frozenset[int]:
    """The source indexes of the journal's last batch that read Kafka, told once for
    every step of the sink's (its kinds do not change between them)."""
    return frozenset(s.source_index for s in anchor.sources if source_kind(s) == KIND_KAFKA)


def _add(found: Findings, other: Findings) -> None:
    """``other``'s findings after ``found``'s, in order (what ``Findings.merge`` does,
    kept here so the sink's steps run as one chain)."""
    found.notes += other.notes
    found.warnings += other.warnings
    found.errors += other.errors


def _upto(facts: SinkFacts) -> str:
    return "none" if facts.last_batch is None else str(facts.last_batch)


def _after_the_last_batch(inp: PlanInputs) -> bool:
    return (inp.journal.position == POSITION_AFTER and inp.request.as_of is None
            and inp.mode != MODE_STATE_AWARE and inp.savepoint_facts.loaded is None)


# --------------------------------------------------------------------------- refusals


def unchecked_beyond(inp: PlanInputs, facts: SinkFacts | None, kafka: frozenset[int],
                     ) -> Findings:
    """The old checkpoint's batches beyond the journal's last when no sink log says
    which of them the sink holds (``facts``: the journaled sink with no log where it is
    named; None: no sink read). Their ``offsets/N`` were written before they ran, so
    each may be in the sink (in flight: no ``commits/N``; or committed, its event never
    journaled), and a plan after the journal's last has the new query write them again.
    Refused (RestartError), naming what to give; with ``--sink none`` (an idempotent
    sink, or one the person checked) a warning. An old checkpoint of another query, not
    started where the journal's last batch ended, is not this query's: nothing here."""
    checkpoint = inp.old_query.checkpoint
    if checkpoint is None or not _after_the_last_batch(inp):
        return Findings()
    j = inp.anchor.batch_id
    if checkpoint.query_id == inp.anchor.query_id:
        beyond = [b for b in checkpoint.batches if b.batch_id > j]
    elif continues_after(inp, checkpoint, kafka):
        beyond = list(checkpoint.batches)
    else:
        return Findings()
    if not beyond:
        return Findings()
    ids = [b.batch_id for b in beyond]
    open_ = [b.batch_id for b in beyond if not b.committed]
    shows = (f"offsets/ of {_ids(ids)}" + (f" and no commits/ of {_ids(open_)} (in flight: "
             "the driver stopped after it began them)" if open_ else "")
             + f", beyond the journal's last ({BatchRef.of(inp.anchor).label()})")
    if inp.request.old_sink == SINK_NONE:
        return Findings(warnings=[
            f"the old checkpoint {checkpoint.path} has {shows}; as asked (--sink none), no "
            f"sink says whether it holds them: this plan starts after batch {j}, and the "
            "new query reads them again and writes them to its sink (twice, unless the "
            "sink is idempotent)"])
    unread = (f"{facts.label()}, the journal's sink, has no log there" if facts is not None
              else "the journal names no file or Delta sink"
              f" ({inp.anchor.sink_description or 'no description'})")
    raise RestartError(
        f"the old checkpoint {checkpoint.path} has {shows}, and no sink log says whether "
        f"the old query's sink holds them ({unread}): a plan after batch {j} would write "
        f"them again. Give the old query's sink ({GIVE_SINK}), or read them again on "
        "purpose, for an idempotent sink (--sink none)")


def continues_after(inp: PlanInputs, checkpoint: OldCheckpoint, kafka: frozenset[int],
                    ) -> bool:
    """The old checkpoint is a LATER one than the journal's last batch's: its query
    started right after that batch (its Kafka initial offsets, ``sources/N/0``, are the
    batch's end offsets) and its run was killed before the listener journaled any of
    its batches. Its sink's batches from 0 are then the ones beyond the journal."""
    anchor = inp.anchor
    if checkpoint.query_id == anchor.query_id or not checkpoint.batches:
        return False
    initial = checkpoint.initial or ()
    ours = [s for s in anchor.sources if s.source_index in kafka]
    for source in ours:
        there = (initial[source.source_index]
                 if source.source_index < len(initial) else None) or {}
        if any(there.get(p.topic, {}).get(p.partition) != p.end for p in source.partitions):
            return False
    return bool(ours)


def refuse_foreign_sink(inp: PlanInputs, facts: SinkFacts, later: bool = False) -> None:
    """RestartError when ``facts`` is not the sink of the journal's last batch: the
    journal names another sink (path or kind), or a Delta table has no ``txn`` of the
    old query (its query id, or the txnAppId given). ``later``: the sink is a later
    checkpoint's (:func:`continues_after`), which the journal has no description of."""
    anchor = inp.anchor
    journaled = anchor.sink_description
    described = None if later else described_sink(journaled)
    ref = BatchRef.of(anchor).label()
    given = f"--sink {facts.path}" if facts.found_by == "given" else facts.label()
    if described is not None and (described[0] != facts.kind
                                  or same_path(described[1]) != same_path(facts.path)):
        raise RestartError(
            f"{given}: the journal says query {inp.request.query_name!r} wrote to "
            f"{journaled} ({ref}): another query's sink")
    if facts.kind == SINK_FILE:
        if (journaled and described_sink(journaled) is None
                and not is_foreach_batch_sink(journaled)):
            raise RestartError(f"{given}: the journal says query {inp.request.query_name!r} "
                               f"wrote to {journaled} ({ref}), not a file sink")
        return
    if facts.app_id is None:
        raise RestartError(
            f"{given}: the query's sink is {journaled or 'unknown'}: give the txnAppId its "
            "Delta writes used (--txn-app-id), which this plan looks up in the table's log")
    if facts.last_batch is None and not later:  # a later query may have written none
        others = ", ".join(facts.app_ids[:5]) or "none"
        raise RestartError(
            f"{given}: the Delta table has no txn of the old query (appId {facts.app_id}; "
            f"the appIds it has: {others}): another query's table, or not the old query's "
            "id / txnAppId")


def refuse_other_checkpoint(inp: PlanInputs, checkpoint: OldCheckpoint) -> None:
    """RestartError when the old checkpoint is not the checkpoint of the journal's last
    batch (another query id), nor one that started right after it."""
    if checkpoint.query_id != inp.anchor.query_id:
        raise RestartError(
            f"--old-checkpoint {checkpoint.path} is the checkpoint of query id "
            f"{checkpoint.query_id}, but the journal's last batch "
            f"({BatchRef.of(inp.anchor).label()}) is query id {inp.anchor.query_id}'s, and "
            "that query did not start where the batch ended: another query's checkpoint")


# --------------------------------------------------------------------------- ahead


def _no_checkpoint(inp: PlanInputs, facts: SinkFacts) -> str:
    j, last = inp.anchor.batch_id, facts.last_batch
    ref = BatchRef.of(inp.anchor).label()
    return (f"{facts.label()} holds batches {_span(j + 1, last)} of query id "
            f"{inp.anchor.query_id}, beyond the journal's last ({ref}): "
            f"the driver stopped after the sink committed them and before the journal had "
            f"them, and a plan after batch {j} would write them again. Their end offsets are "
            "in the old checkpoint's offsets/: give it (--old-checkpoint DIR) and the plan "
            f"starts after batch {last}")


def take_batches(inp: PlanInputs, facts: SinkFacts, checkpoint: OldCheckpoint, first: int,
                 kafka: frozenset[int]) -> tuple[Batch, ...]:
    """The batches ``first``.. the sink holds beyond the journal's last, as journal rows
    built from the old checkpoint (start offsets: the batch before's end; the first's:
    the journal's last batch's). RestartError when an ``offsets/N`` is gone or
    unreadable, or disagrees with the journal."""
    last = facts.last_batch
    assert last is not None
    planned = checkpoint.batches[-1].batch_id if checkpoint.batches else None
    where = f"the old checkpoint {checkpoint.path}"
    if planned is None or last > planned:
        raise RestartError(
            f"{facts.label()} holds batch {last}, but {where} has offsets up to "
            f"{'none' if planned is None else planned} only: another query's sink, or "
            "another copy of the checkpoint")
    previous = _checked_anchor(inp, checkpoint, kafka) if first else inp.anchor
    taken: list[Batch] = []
    for batch_id in range(first, last + 1):
        held = _held(checkpoint, batch_id)
        if held is None or held.problem is not None:
            why = "is gone (purged?)" if held is None else f"is unreadable ({held.problem})"
            raise RestartError(
                f"{facts.label()} holds batch {batch_id}, but offsets/{batch_id} of {where} "
                f"{why}: its end offsets are unknown; nothing is planned from the sink")
        batch = _batch_from(inp, held, previous, kafka)
        taken.append(batch)
        previous = batch
    return tuple(taken)


def _checked_anchor(inp: PlanInputs, checkpoint: OldCheckpoint, kafka: frozenset[int],
                    ) -> Batch:
    """The journal's last batch, held against the old checkpoint's ``offsets/`` of it
    when that is still there: the two must agree where the sink's batches start."""
    anchor = inp.anchor
    held = _held(checkpoint, anchor.batch_id)
    if held is None or held.problem is not None:
        return anchor
    for source in anchor.sources:
        if source.source_index not in kafka or source.source_index >= len(held.offsets):
            continue
        journal = {(p.topic, p.partition): p.end for p in source.partitions}
        there = held.kafka[source.source_index] or {}
        disagree = sorted(k for k, end in journal.items()
                          if there.get(k[0], {}).get(k[1]) != end)
        if disagree:
            t, p = disagree[0]
            raise RestartError(
                f"offsets/{anchor.batch_id} of the old checkpoint {checkpoint.path} "
                f"disagrees with the journal's {BatchRef.of(anchor).label()}: "
                f"{tp(t, p)} ends at {there.get(t, {}).get(p)} there, {journal[(t, p)]} in "
                "the journal: not this query's checkpoint, or the journal is not its")
    return anchor


def _batch_from(inp: PlanInputs, held: OldBatch, previous: Batch, kafka: frozenset[int],
                ) -> Batch:
    """Batch ``held`` of the old checkpoint as a journal row: its end offsets, the
    batch before's as its start, the journal's sources' descriptions and kinds.
    RestartError when its sources or Kafka offsets do not continue from the batch before."""
    anchor = inp.anchor
    if len(held.offsets) != len(anchor.sources):
        raise RestartError(
            f"offsets/{held.batch_id} of the old checkpoint has {len(held.offsets)} sources, "
            f"the journal's {BatchRef.of(anchor).label()} {len(anchor.sources)}: not this "
            "query's checkpoint")
    sources = []
    for index, (mine, end) in enumerate(zip(anchor.sources, held.offsets, strict=True)):
        start = previous.sources[index].end_offset
        parts: tuple[PartitionOffset, ...] = ()
        if mine.source_index in kafka and looks_like_kafka(end):
            parts = _continued(held.batch_id, previous.sources[index], start, end)
        sources.append(SourceOffsets(mine.source_index, mine.description, mine.kind, start,
                                     end, None, parts))
    run_id = inp.old_query.run_id or anchor.run_id
    query_id = inp.old_query.checkpoint.query_id if inp.old_query.checkpoint else None
    return Batch(anchor.query_name, query_id or anchor.query_id, run_id, held.batch_id,
                 held.timestamp, None, None, held.watermark, None, None, tuple(sources),
                 sink_description=anchor.sink_description)


def _continued(batch_id: int, before: SourceOffsets, start: Any, end: Any,
               ) -> tuple[PartitionOffset, ...]:
    """A Kafka source's partitions of a batch taken from the checkpoint; RestartError
    when an offset is below where the batch before ended (not this checkpoint's batch)."""
    try:
        parts = tuple(partition_offsets(start if looks_like_kafka(start) else None, end))
    except ValueError as exc:
        raise RestartError(f"offsets/{batch_id} of the old checkpoint: {exc}") from None
    ended = {(p.topic, p.partition): p.end for p in before.partitions}
    for p in parts:
        was = ended.get((p.topic, p.partition))
        if was is not None and p.end is not None and p.end < was:
            raise RestartError(
                f"offsets/{batch_id} of the old checkpoint ends {tp(p.topic, p.partition)} "
                f"at {p.end}, below {was} where the batch before it ended: the journal and "
                "the checkpoint disagree")
    return parts


def _taken_note(inp: PlanInputs, facts: SinkFacts, taken: Sequence[Batch],
                checkpoint: OldCheckpoint, later: bool) -> str:
    j = inp.anchor.batch_id
    beyond = (f"the journal's last (batch {j} of run {inp.anchor.run_id})" if not later else
              f"the journal's last (batch {j} of run {inp.anchor.run_id}): they are of the "
              f"next checkpoint, query id {checkpoint.query_id}, which started where that "
              "batch ended and was stopped before the listener journaled any batch of it")
    run_id = taken[-1].run_id
    uncommitted = [b.batch_id for b in taken
                   if (held := _held(checkpoint, b.batch_id)) is not None and not held.committed]
    why = (f" (commits/ lacks {_ids(uncommitted)}: the driver stopped after the sink "
           "committed and before Spark did)" if uncommitted else "")
    return (f"Sink: {facts.label()} holds batches {_span(taken[0].batch_id, taken[-1].batch_id)}"
            f" beyond {beyond}{why}. Their end "
            f"offsets come from the old checkpoint's offsets/ ({checkpoint.path}), and this "
            f"plan starts after batch {taken[-1].batch_id}: nothing the sink holds is written "
            f"again. Recording the plan journals {_ids([b.batch_id for b in taken])} (as "
            f"`checkpoint import` does), as run {run_id}'s.")


# --------------------------------------------------------------------------- behind


def missing_from_sink(inp: PlanInputs, facts: SinkFacts, kafka: frozenset[int]) -> Findings:
    """Batches the journal holds (so Spark committed them) that the sink does not: their
    records never reach it once the plan starts after the journal's last. DATA LOSS,
    counted, unless accepted (``allow_data_loss``)."""
    anchor = inp.anchor
    first = 0 if facts.last_batch is None else facts.last_batch + 1
    lost = _records_between(inp, facts.last_batch, anchor, kafka)
    counted = (f"{count(sum(lost.values()), 'record')} ("
               + ", ".join(f"{k} {n}" for k, n in sorted(lost.items()) if n)[:300] + ")"
               if lost is not None else "an unknown number of records")
    head = (f"{facts.label()} holds batches up to {_upto(facts)}, but batches "
            f"{_span(first, anchor.batch_id)} were committed (the journal has them, and "
            f"Spark commits a batch after its sink): the sink lacks their records, "
            f"{counted}")
    if inp.request.allow_data_loss:
        return Findings(warnings=[
            f"{head}. As asked (--allow-data-loss), this plan starts after batch "
            f"{anchor.batch_id} all the same: they never reach the sink"])
    return Findings(errors=[
        f"DATA LOSS: {head}, and a plan after batch {anchor.batch_id} never writes them. "
        f"To write them to the sink, start at the first batch it lacks (--batch "
        f"{anchor.run_id}:{first}, if that run journaled it), or accept the loss "
        "(--allow-data-loss)"])


def _records_between(inp: PlanInputs, sink_last: int | None, anchor: Batch,
                     kafka: frozenset[int]) -> dict[str, int] | None:
    """Per Kafka partition, the records between the end of the sink's last batch and the
    journal's last (None: not known: neither the journal nor the old checkpoint has the
    sink's last batch's end offsets)."""
    floor = _ends_of(inp, sink_last)
    if floor is None:
        return None
    out: dict[str, int] = {}
    for source in anchor.sources:
        if source.source_index not in kafka:
            continue
        for p in source.partitions:
            if p.end is None:
                continue
            low = floor.get((source.source_index, p.topic, p.partition))
            if low is None:
                return None
            out[tp(p.topic, p.partition)] = max(0, p.end - low)
    return out


def _ends_of(inp: PlanInputs, batch_id: int | None) -> dict[tuple[int, str, int], int] | None:
    """The Kafka end offsets of batch ``batch_id`` (None: the start of the checkpoint),
    from the old checkpoint or the journal."""
    checkpoint = inp.old_query.checkpoint
    offsets: Sequence[Any] | None = None
    if checkpoint is not None:
        if batch_id is None:
            offsets = checkpoint.initial
        elif (held := _held(checkpoint, batch_id)) is not None and held.problem is None:
            offsets = held.kafka
    if offsets is not None:
        return {(i, t, p): o for i, off in enumerate(offsets)
                for t, parts in (off or {}).items() for p, o in parts.items()}
    batch = inp.old_query.batch
    if batch is None or batch_id is None or batch.batch_id != batch_id:
        return None
    return {(s.source_index, p.topic, p.partition): p.end for s in batch.sources
            for p in s.partitions if p.end is not None}


def _committed_not_in_sink(inp: PlanInputs, facts: SinkFacts, after: int) -> Findings:
    """Batches the old checkpoint committed beyond both the sink and the journal: the
    plan starts after ``after`` and reads them again, so the new query writes them."""
    checkpoint = inp.old_query.checkpoint
    committed = checkpoint.last_committed if checkpoint is not None else None
    if committed is None or committed <= after:
        return Findings()
    first = after + 1
    return Findings(warnings=[
        f"the old checkpoint committed batches {_span(first, committed)}, which "
        f"{facts.label()} does not hold (a sink that failed after Spark's commit, or a "
        f"log cut by hand) and the journal does not have: this plan starts after batch "
        f"{after}, so the new query reads them again and writes them to its sink: none "
        "lost, none twice"])


# --------------------------------------------------------------------------- recorded


def _record(inp: PlanInputs, facts: SinkFacts, taken: Sequence[Batch]) -> dict[str, Any]:
    """What the plan keeps of the sink (``restart_plans.request.sink``): the audit reads
    a run that starts after the sink's last batch as planned, and a batch of the taken
    ones run again by Spark on the old checkpoint as one the sink skipped."""
    offsets = [[b.batch_id, s.source_index, p.topic, p.partition, p.start, p.end]
               for b in taken for s in b.sources for p in s.partitions
               if p.start is not None and p.end is not None]
    return {"kind": facts.kind, "path": facts.path, "found_by": facts.found_by,
            "app_id": facts.app_id, "last_batch": facts.last_batch,
            "journal_batch": inp.anchor.batch_id,
            "query_id": taken[0].query_id if taken else inp.anchor.query_id,
            "run_id": taken[0].run_id if taken else inp.anchor.run_id,
            "taken": [b.batch_id for b in taken],
            "offsets": offsets, "bytes_read": facts.bytes_read}


def _held(checkpoint: OldCheckpoint, batch_id: int) -> OldBatch | None:
    """The old checkpoint's batch ``batch_id`` (None: its ``offsets/N`` is not there)."""
    return next((b for b in checkpoint.batches if b.batch_id == batch_id), None)


def _span(first: int, last: int | None) -> str:
    return str(first) if last is None or first == last else f"{first}..{last}"


def _ids(ids: Sequence[int]) -> str:
    if len(ids) == 1:
        return f"batch {ids[0]}"
    return f"batches {_span(ids[0], ids[-1])}" if ids == list(range(ids[0], ids[-1] + 1)) \
        else "batches " + ", ".join(str(i) for i in ids)
