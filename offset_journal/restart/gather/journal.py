"""What the journal says around a plan's batch (I/O: reads the journal, writes nothing):
the anchor, the batches around it, the runs, the clock, what the journal flagged."""

from __future__ import annotations

from dataclasses import replace

from ...errors import JournalError, RestartError
from ...formatting import format_time
from ...journal import FLAGGED_PROBLEMS, Batch, Journal, SpoolLoss
from ...overlap import span_of
from ...rows import order_key
from .._inputs import JournalFacts, SavepointFacts
from ..model import MODE_STATE_AWARE, POSITION_AT, POSITION_SAVEPOINT
from ..request import PlanRequest


def journal_facts(journal: Journal, request: PlanRequest,
                  savepoint: SavepointFacts) -> JournalFacts:
    """The anchor and the batches around it (:func:`journal_anchor`), then the
    journal's facts around it: the runs started by its time (later ones do not matter
    to it), the database's clock, the problems flagged (the most recent
    FLAGGED_PROBLEMS), the anchor's run's async and real-time tails, the spool's
    losses."""
    found = journal_anchor(journal, request, savepoint)
    name, anchor = request.query_name, found.anchor
    problems = journal.flagged_problems(name)
    return replace(
        found,
        runs=[span_of(b) for b in journal.run_bounds(name, started_until=anchor.trigger_at)],
        database_now=journal.database_now(),
        problems=problems[:FLAGGED_PROBLEMS], problems_cut=len(problems) > FLAGGED_PROBLEMS,
        async_tail=journal.async_tail(anchor), real_time=journal.real_time_tail(anchor),
        spool_losses=_spool_losses(journal, name))


def journal_anchor(journal: Journal, request: PlanRequest,
                   savepoint: SavepointFacts | None = None) -> JournalFacts:
    """The anchor (a savepoint's batch, the batch asked for, the last one at ``as_of``,
    or the last one), the batch before what is re-read, and a state-aware plan's
    chain."""
    name = request.query_name
    if savepoint is not None and savepoint.loaded is not None:
        return savepoint_anchor(journal, name, savepoint)
    # The default plan needs every order's last batch (check_last_batch); the
    # journal's own comes first.
    default = request.batch is None and request.as_of is None
    candidates = journal.last_batch_candidates(name) if default else []
    last = candidates[0] if candidates else journal.last_batch(name)
    if last is None:
        raise RestartError(f"no journaled batches for query {name!r}")
    if request.batch is not None:
        run_id, batch_id = request.batch
        anchor = journal.batch(name, run_id, batch_id)
        if anchor is None:
            raise RestartError(
                f"no journaled batch {batch_id} of run {run_id} for query {name!r}")
        found = JournalFacts(anchor, POSITION_AT, before=batch_before(journal, name, anchor))
    elif request.as_of is not None:
        at = journal.batch_as_of(name, request.as_of)
        if at is None:
            raise RestartError(f"no journaled batch of query {name!r} triggered at or before "
                               f"{format_time(request.as_of)}")
        found = JournalFacts(at)
    else:  # after it, or from a record time
        found = JournalFacts(last, request.position, last_candidates=candidates)
    if request.mode == MODE_STATE_AWARE:
        chain = journal.state_chain(found.anchor, request.window)
        found = replace(found, chain=chain, before=batch_before(journal, name, chain[0]))
    return found


def savepoint_anchor(journal: Journal, name: str, savepoint: SavepointFacts) -> JournalFacts:
    """A plan from a savepoint: its batch as the anchor. RestartError when the journal
    no longer has it (its end offsets cannot be checked)."""
    assert savepoint.loaded is not None
    m = savepoint.loaded.manifest
    anchor = journal.batch(name, m.run_id, m.batch_id)
    if anchor is None:
        raise RestartError(f"batch {m.batch_id} of run {m.run_id}, the batch of "
                           f"{savepoint.loaded.label()}, is no longer in the journal "
                           "(pruned?): its end offsets cannot be checked")
    return JournalFacts(anchor, POSITION_SAVEPOINT, before=batch_before(journal, name, anchor))


def batch_before(journal: Journal, query_name: str, batch: Batch) -> Batch | None:
    """The batch journaled just before ``batch`` (by trigger time; None without one)."""
    if batch.trigger_at is None:
        return None
    key = order_key(batch)
    earlier = [b for b in journal.history(query_name, until=batch.trigger_at, limit=8)
               if order_key(b) < key]
    return earlier[-1] if earlier else None


def _spool_losses(journal: Journal, query_name: str) -> list[SpoolLoss]:
    try:
        return journal.spool_losses(query_name)
    except JournalError:  # a journal not upgraded to spool_losses yet has none
        return []


__all__ = ["batch_before", "journal_anchor", "journal_facts", "savepoint_anchor"]
