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

from ...descriptions import described_sink, is_foreach_batch_sink
from ...errors import RestartError
from ...rows import KIND_KAFKA, Batch, BatchRef, source_kind
from ...wording import ids_text
from .._delta_log import same_path
from .._findings import Findings
from .._inputs import OldCheckpoint, PlanInputs
from ..model import MODE_STATE_AWARE, POSITION_AFTER, SINK_FILE, SinkFacts
from ..request import SINK_NONE
from .sink_held import SinkOutcome, held_outcome

GIVE_SINK = "--sink PATH for a file sink, --sink delta:PATH for a Delta table"


def sink_outcome(inp: PlanInputs) -> SinkOutcome:
    """The sink step: refuse what is not the old query's sink, then compare the batch it
    holds last with the journal's last (and the old checkpoint's last commit)."""
    facts = inp.old_query.sink
    kafka = kafka_sources(inp.anchor)
    if facts is None:
        return SinkOutcome(findings=Findings(warnings=unchecked_beyond(inp, None, kafka)))
    checkpoint = inp.old_query.checkpoint
    later = checkpoint is not None and continues_after(inp, checkpoint, kafka)
    unread = _unread(inp, facts, later, kafka)
    if unread is not None:
        return unread
    if checkpoint is not None and not later:
        refuse_other_checkpoint(inp, checkpoint)
    refuse_foreign_sink(inp, facts, later)
    return held_outcome(inp, facts, later, kafka, _after_the_last_batch(inp))


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
    return SinkOutcome(findings=Findings(warnings=[
        f"the old query's sink, {facts.label()} (its journaled description), was not "
        f"checked: {why}. A batch it holds beyond the journal's last would be written "
        "again: give the sink (--sink PATH, --sink delta:PATH) or --sink none",
        *unchecked_beyond(inp, facts, kafka)]))


def kafka_sources(anchor: Batch) -> frozenset[int]:
    """The source indexes of the journal's last batch that read Kafka, told once for
    every step of the sink's (its kinds do not change between them)."""
    return frozenset(s.source_index for s in anchor.sources if source_kind(s) == KIND_KAFKA)


def _after_the_last_batch(inp: PlanInputs) -> bool:
    return (inp.journal.position == POSITION_AFTER and inp.request.as_of is None
            and inp.mode != MODE_STATE_AWARE and inp.savepoint_facts.loaded is None)


# --------------------------------------------------------------------------- refusals


def unchecked_beyond(inp: PlanInputs, facts: SinkFacts | None, kafka: frozenset[int],
                     ) -> list[str]:
    """The old checkpoint's batches beyond the journal's last when no sink log says
    which of them the sink holds (``facts``: the journaled sink with no log where it is
    named; None: no sink read). Their ``offsets/N`` were written before they ran, so
    each may be in the sink (in flight: no ``commits/N``; or committed, its event never
    journaled), and a plan after the journal's last has the new query write them again.
    Refused (RestartError), naming what to give; with ``--sink none`` (an idempotent
    sink, or one the person checked) a warning, returned. An old checkpoint of another query, not
    started where the journal's last batch ended, is not this query's: nothing here."""
    checkpoint = inp.old_query.checkpoint
    if checkpoint is None or not _after_the_last_batch(inp):
        return []
    j = inp.anchor.batch_id
    if checkpoint.query_id == inp.anchor.query_id:
        beyond = [b for b in checkpoint.batches if b.batch_id > j]
    elif continues_after(inp, checkpoint, kafka):
        beyond = list(checkpoint.batches)
    else:
        return []
    if not beyond:
        return []
    ids = [b.batch_id for b in beyond]
    open_ = [b.batch_id for b in beyond if not b.committed]
    shows = (f"offsets/ of {ids_text(ids)}"
             + (f" and no commits/ of {ids_text(open_)} (in flight: the driver stopped "
                "after it began them)" if open_ else "")
             + f", beyond the journal's last ({BatchRef.of(inp.anchor).label()})")
    if inp.request.old_sink == SINK_NONE:
        return [
            f"the old checkpoint {checkpoint.path} has {shows}; as asked (--sink none), no "
            f"sink says whether it holds them: this plan starts after batch {j}, and the "
            "new query reads them again and writes them to its sink (twice, unless the "
            "sink is idempotent)"]
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
