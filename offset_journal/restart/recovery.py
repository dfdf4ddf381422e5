"""A lost or broken checkpoint of a stateful query recovered with its state
(:func:`recover`): the newest usable savepoint restored into a new checkpoint, the old
query's batches since read again into the state (:mod:`offset_journal.state.recover`
says why batch by batch), the decision recorded as a plan the audit explains.

The last batch read again (L) is the sink-aware plan's: the journal's last batch, or
the last one the old query's sink holds when that is later (its offsets from the old
checkpoint's ``offsets/N``). Each replayed batch is one ``Trigger.Once`` run of the new
query on the new checkpoint, whose ``offsets/N`` this module writes; its sink is
``noop`` unless ``reread_sink`` (an idempotent or ``foreachBatch`` sink that may see
them again). The new query, started afterwards on the checkpoint, reads after L.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import RestartError, RestoreError, SavepointError
from ..formatting import first_line
from ..state.recover import Candidate, Replay, choose, explain, replays
from ..wording import ids_text

if TYPE_CHECKING:
    from ..journal import Journal
    from ..rows import Batch, RecordedSavepoint
    from ..savepoint import Savepoint
    from ..state import Bootstrap, Restored
    from .model import RestartPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovered:
    """A recovery done: the savepoint's restore, the old batches read again, the plan
    (recorded unless asked not to), the replay runs (journaled), and the warnings of
    the bookkeeping."""

    restored: Restored
    replayed: tuple[Replay, ...]
    plan: RestartPlan
    runs: tuple[Bootstrap, ...]
    reread_sink: bool
    warnings: tuple[str, ...] = ()

    @property
    def decision(self) -> str:
        sp = self.restored.savepoint
        return explain(sp.id, sp.manifest.batch_id, self.replayed, self.reread_sink)

    def explain(self) -> str:
        return "\n".join([self.restored.explain(), self.decision])


def recover(spark: Any, journal: Journal, query_name: str, checkpoint: str,
            query: Callable[[Sequence[str]], Any], *, savepoint: int | str | None = None,
            bootstrap_servers: str | None = None, reread_sink: bool = False,
            partitions: int | None = None, record: bool = True) -> Recovered:
    """Recover query ``query_name``'s state into the NEW checkpoint ``checkpoint``: the
    newest usable savepoint (or ``savepoint``: an id or directory) restored, the old
    batches after its batch read again one by one, the plan recorded with the decision
    and linked to the restore's run, the runs journaled. RestoreError (one line) when no
    savepoint is usable (nothing journaled) or the restore or a replay fails (the new
    checkpoint removed; the plan, recorded before the restore's run started, then
    explains no finished recovery). ``partitions``: the new query's shuffle
    partitions (default: the old query's, as its savepoint says).

    ``query(starting_offsets)`` returns the new query's ``DataStreamWriter``, not started:
    checkpointLocation ``checkpoint``, each source's ``startingOffsets`` as given (in
    source order: the savepoint's end offsets, where the restore's own batch reads
    nothing). It is called for that batch and once per replayed batch (and once before anything
    with ``reread_sink``, whose writer must not be a file sink's); start the query
    for real on the checkpoint afterwards (it then resumes after the last replayed
    batch, whatever offsets it is given)."""
    from ..state import old_batches
    from .edge import plan_restart
    from .request import PlanRequest

    found = _chosen(journal, query_name, savepoint)
    m = found.manifest
    ref = found.id if found.id is not None else found.location
    request = PlanRequest(query_name, savepoint=ref, restore=True, checkpoint=checkpoint,
                          bootstrap_servers=bootstrap_servers).checked()
    plan = _ok(plan_restart(None, request, journal=journal, record=False,
                            command="state-recover"))
    old = old_batches(m)
    todo = replays(m.batch_id, _after(journal, query_name, found, bootstrap_servers),
                   {i: (b.batch_watermark_ms, b.batch_timestamp_ms) for i, b in old.items()},
                   {i: b.offsets for i, b in old.items()})
    decision = explain(found.id, m.batch_id, todo, reread_sink)
    if reread_sink and todo:
        _reread_refused(spark, checkpoint, lambda: query([plan.starting_offsets(s.index)
                                                          for s in plan.sources]), todo)
    plan = replace(plan, notes=[*plan.notes, decision],
                   recovery=_recorded(found, todo, decision, reread_sink))
    # Recorded before the restore's run starts: a session with the journal's listener
    # journals its batch at once, and a plan recorded after it explains no run.
    plan = _record(journal, plan, request, record)
    warnings = [plan.record_problem] if plan.plan_id is None and plan.record_problem else []
    shuffle = partitions or max((o.partitions for o in m.operators), default=0)
    restored, runs = _run(spark, journal, found, plan, checkpoint,
                          lambda: query([plan.starting_offsets(s.index) for s in plan.sources]),
                          todo, reread_sink, shuffle, warnings)
    done = Recovered(restored, todo, plan, runs, reread_sink)
    warnings += _journal_runs(journal, done)
    log.info("%s", done.explain())
    return replace(done, warnings=tuple(warnings))


def _run(spark: Any, journal: Journal, found: Savepoint, plan: RestartPlan, checkpoint: str,
         build: Callable[[], Any], todo: Sequence[Replay], reread_sink: bool, shuffle: int,
         warnings: list[str]) -> tuple[Restored, tuple[Bootstrap, ...]]:
    """The restore (its run linked to ``plan`` as it starts) and the replays, in
    ``shuffle`` partitions; a replay that fails removes the new checkpoint."""
    from ..savepoint.spark import session_conf
    from ..state import (
        discard_checkpoint,
        file_sink_of,
        replay_batch,
        restore_savepoint,
    )
    from ..state.offsets import concrete_ends

    def linked(run_id: str) -> None:
        if plan.plan_id is None:
            return
        try:
            journal.link_plan(plan.plan_id, run_id)
        except Exception as exc:  # the recovery goes on: the link is bookkeeping
            warnings.append(f"plan {plan.plan_id} was not linked to the restore's run "
                            f"{run_id}: {first_line(exc)}")

    with session_conf(spark, "spark.sql.shuffle.partitions", str(shuffle) if shuffle else None):
        restored = restore_savepoint(spark, found, checkpoint, build,
                                     ends=concrete_ends(plan.sources), journal=journal,
                                     expect_sha256=plan.savepoint_sha256, verify=False,
                                     on_start=linked)
        sink = file_sink_of(restored.bootstrap.progress if restored.bootstrap else ())
        try:
            if sink is not None and reread_sink and todo:  # its writer did not say
                raise RestoreError(_reread_file_sink(sink, todo))
            runs = tuple(replay_batch(spark, checkpoint, build, r, reread_sink,
                                      restored.query_id, sink) for r in todo)
        except BaseException:
            discard_checkpoint(spark, checkpoint)
            raise
    return restored, runs





def _reread_refused(spark: Any, checkpoint: str, build: Callable[[], Any],
                    todo: Sequence[Replay]) -> None:
    """``reread_sink`` refused before anything is written or recorded when the new
    query's writer is a file sink's: the new query's own sink is what the replays would
    write to (the old query's, as the journal names it, may not be the new one's)."""
    from ..state import writer_file_sink

    sink = writer_file_sink(spark, build, checkpoint)
    if sink is not None:
        raise RestoreError(_reread_file_sink(sink, todo))


def _reread_file_sink(sink: str, todo: Sequence[Replay]) -> str:
    return (f"--reread-sink: the query's sink is a file sink ({sink}), which would hold "
            f"{ids_text(r.old_batch_id for r in todo)} of the old query a second time; "
            "leave the catch-up to noop (without --reread-sink)")


def _chosen(journal: Journal, query_name: str, ref: int | str | None) -> Savepoint:
    """The savepoint ``ref`` names, checked as a recovery needs it, else the newest
    usable one of the query (:func:`~.recover.choose`)."""
    from ..savepoint import load_savepoint

    if ref is not None:
        found = load_savepoint(ref, journal, query_name=query_name, verify=True)
        problem = _unjournaled(journal, found.manifest)
        if problem is not None:
            raise RestoreError(f"{found.label()} cannot be recovered from: {problem}")
        return found
    looked: list[Candidate] = []
    rows: Sequence[RecordedSavepoint] = journal.savepoints(query_name)
    for row in sorted(rows, key=lambda r: (r.batch_id, r.id), reverse=True):
        try:
            found = load_savepoint(row.id, journal, query_name=query_name, verify=True)
            problem = _unjournaled(journal, found.manifest)
        except SavepointError as exc:
            problem = _reason(str(exc), row)
        looked.append(Candidate(row.id, row.batch_id, problem))
        if problem is None:
            return found
    choose(query_name, looked)  # raises: none usable
    raise AssertionError("unreachable")


def _reason(message: str, row: RecordedSavepoint) -> str:
    """Why a savepoint is unusable, without its own name again."""
    if row.deleted_at is not None:
        return "was deleted by retention" + (f" ({row.deleted_reason})"
                                             if row.deleted_reason else "")
    return f"is unusable: {message}"


def _unjournaled(journal: Journal, manifest: Any) -> str | None:
    batch = journal.batch(manifest.query_name, manifest.run_id, manifest.batch_id)
    if batch is None:
        return (f"is unusable: its batch {manifest.batch_id} (run {manifest.run_id}) is not "
                "in the journal, so where the records after it begin is not known")
    return None


def _ok(plan: RestartPlan) -> RestartPlan:
    if not plan.ok:
        raise RestartError("restart plan has errors: " + "; ".join(plan.errors))
    return plan


def _after(journal: Journal, query_name: str, found: Savepoint,
           bootstrap_servers: str | None) -> list[Batch]:
    """The old checkpoint's batches after the savepoint's, up to the sink-aware plan's
    last: the journal's, and those the sink holds beyond it (taken by the plan). A
    later checkpoint of the query that read records refuses the recovery; one whose
    only batch is an empty batch 0 is a recovery that did not finish (its restore's
    run journaled, its checkpoint removed), and is passed over."""
    from .edge import plan_restart
    from .request import PlanRequest

    m = found.manifest
    latest = journal.last_batch(query_name)
    taken: list[Batch] = []
    if latest is not None and latest.query_id != m.query_id:
        if latest.batch_id != 0 or latest.num_input_rows:
            raise RestoreError(
                f"the journal's last batch of query {query_name!r} is of query id "
                f"{latest.query_id}, not of the savepoint's checkpoint ({m.query_id}): "
                f"another checkpoint ran after {found.label()}; its batches are not the "
                "savepoint's to read again")
    else:
        request = PlanRequest(query_name, bootstrap_servers=bootstrap_servers).checked()
        taken = _ok(plan_restart(None, request, journal=journal, record=False)).sink_batches
    ids = journal.journaled_batch_ids(query_name, m.query_id)
    newest = max(ids, default=m.batch_id)
    last = journal.batch(query_name, ids[newest], newest) if newest in ids else None
    count = max(newest - m.batch_id, 0)
    held = (journal.checkpoint_batches(last, newest_first=True, limit=count)
            if last is not None and count else [])
    return [*held, *taken]






def _recorded(found: Savepoint, todo: Sequence[Replay], decision: str,
              reread_sink: bool) -> dict[str, Any]:
    """What the plan records of the recovery: the audit reads the batches of the run's
    checkpoint that replayed old ones (``new_batches``) as planned."""
    return {"savepoint_id": found.id, "savepoint_batch": found.manifest.batch_id,
            "old_batches": [r.old_batch_id for r in todo],
            "new_batches": [r.new_batch_id for r in todo],
            "reread_sink": reread_sink, "note": decision}


def _record(journal: Journal, plan: RestartPlan, request: Any, record: bool) -> RestartPlan:
    """``plan`` as recorded (unchanged when ``record`` is False)."""
    from .record import record as recorded

    return recorded(journal, plan, request, "state-recover").onto(plan) if record else plan


def _journal_runs(journal: Journal, done: Recovered) -> list[str]:
    """The restore's run and every replay run journaled from their progress (a session
    with the journal's listener journaled them already: the journal keeps one copy)."""
    from ..state import journal_bootstrap

    warnings = []
    first = (done.restored.bootstrap,) if done.restored.bootstrap is not None else ()
    for run in (*first, *done.runs):
        problem = journal_bootstrap(journal, run, done.plan.query_name)
        if problem is not None:
            warnings.append(f"run {run.run_id} of the recovery was not journaled: {problem}")
    return warnings
