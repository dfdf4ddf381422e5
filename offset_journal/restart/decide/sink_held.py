"""What the old query's sink holds against the journal (pure), once the sink step
(:mod:`.sink`) has found it is the old query's and readable: batches beyond the
journal's last, rebuilt from the old checkpoint's ``offsets/N`` (the plan starts after
the last of them), or batches the journal (or the checkpoint) committed that the sink
lacks (DATA LOSS, counted), and what the plan records of it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import RestartError
from ...offsets import PartitionOffset, looks_like_kafka, partition_offsets
from ...rows import Batch, BatchRef, SourceOffsets
from ...wording import count, ids_text, tp
from .._findings import Findings
from .._inputs import OldBatch, OldCheckpoint, PlanInputs
from ..model import SinkFacts


@dataclass(frozen=True)
class SinkOutcome:
    """What the sink's log made of the plan: the batches taken from it and the old
    checkpoint (the plan starts after the last), the findings, and what is recorded."""

    taken: tuple[Batch, ...] = ()
    findings: Findings = field(default_factory=Findings)
    record: dict[str, Any] | None = None


def held_outcome(inp: PlanInputs, facts: SinkFacts, later: bool, kafka: frozenset[int],
                 after: bool) -> SinkOutcome:
    """Compare the batch the sink (read, and the old query's) holds last with the
    journal's last and the old checkpoint's last commit; ``later``: the old checkpoint
    is a later one of the query; ``after``: the plan starts after the journal's last
    batch (any other start reads again on purpose, and only says what the sink holds)."""
    if not after:
        return SinkOutcome(findings=Findings(notes=[
            f"Sink: {facts.label()} holds batches up to {_upto(facts)}; this plan reads "
            "again on purpose (--batch, --as-of, --from-time, state-aware or a savepoint), "
            "so it does not start after what the sink holds"]))
    checkpoint = inp.old_query.checkpoint
    last = -1 if facts.last_batch is None else facts.last_batch
    j = -1 if later else inp.anchor.batch_id  # the sink's checkpoint's batch ids
    found = Findings()
    taken: tuple[Batch, ...] = ()
    missing = Findings()
    if last > j:
        if checkpoint is None:
            found.errors.append(_no_checkpoint(inp, facts))
        else:
            taken = take_batches(inp, facts, checkpoint, j + 1, kafka)
            found.notes.append(_taken_note(inp, facts, taken, checkpoint, later))
    elif last < j:
        missing = missing_from_sink(inp, facts, kafka)
    elif later:
        found.notes.append(f"Sink: {facts.label()} holds no batch of the old query (query "
                           f"id {checkpoint.query_id if checkpoint else None}) yet: it was "
                           "stopped before its sink committed one; nothing was in flight.")
    else:
        found.notes.append(f"Sink: {facts.label()} holds batches up to {j}, the journal's "
                           "last: nothing was in flight when the old query stopped.")
    committed = _committed_not_in_sink(inp, facts, max(last, j))
    record = _record(inp, facts, taken)
    return SinkOutcome(taken, Findings.joined(found, missing, committed), record)


def _upto(facts: SinkFacts) -> str:
    return "none" if facts.last_batch is None else str(facts.last_batch)


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
    why = (f" (commits/ lacks {ids_text(uncommitted)}: the driver stopped after the sink "
           "committed and before Spark did)" if uncommitted else "")
    return (f"Sink: {facts.label()} holds batches {_span(taken[0].batch_id, taken[-1].batch_id)}"
            f" beyond {beyond}{why}. Their end "
            f"offsets come from the old checkpoint's offsets/ ({checkpoint.path}), and this "
            f"plan starts after batch {taken[-1].batch_id}: nothing the sink holds is written "
            f"again. Recording the plan journals {ids_text([b.batch_id for b in taken])} (as "
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
