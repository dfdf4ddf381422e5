"""A lost or broken checkpoint of a stateful query recovered with its state
(:func:`recover`): the newest usable savepoint restored into a new checkpoint, the old
query's batches since read again into the state (:mod:`.recover` says why batch by
batch), the decision recorded as a plan the audit explains.

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
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ...errors import OffsetJournalError, RestartError, RestoreError, SavepointError
from ...formatting import first_line
from .recover import Candidate, Replay, choose, explain, offsets_file, replays

if TYPE_CHECKING:
    from ...journal import Journal
    from ...restart.model import RestartPlan
    from ...rows import Batch, RecordedSavepoint
    from ..model import Savepoint
    from ._bootstrap import Bootstrap
    from ._write import Restored

log = logging.getLogger(__name__)

REPLAY_TIMEOUT_S = 600


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
            query: Callable[[], Any], *, savepoint: int | str | None = None,
            bootstrap_servers: str | None = None, reread_sink: bool = False,
            record: bool = True) -> Recovered:
    """Recover query ``query_name``'s state into the NEW checkpoint ``checkpoint``: the
    newest usable savepoint (or ``savepoint``: an id or directory) restored, the old
    batches after its batch read again one by one, the plan recorded with the decision
    and linked to the restore's run, the runs journaled. ``query()`` returns the new
    query's ``DataStreamWriter`` (checkpointLocation ``checkpoint``, sources starting at
    the savepoint's offsets), not started; start it afterwards as usual. RestoreError
    (one line) when no savepoint is usable or a batch cannot be replayed; the new
    checkpoint is then removed, and nothing is journaled."""
    from ...restart import PlanRequest, plan_restart
    from .offsets import concrete_ends

    found = _chosen(journal, query_name, savepoint)
    m = found.manifest
    ref = found.id if found.id is not None else found.location
    request = PlanRequest(query_name, savepoint=ref, restore=True, checkpoint=checkpoint,
                          bootstrap_servers=bootstrap_servers).checked()
    plan = _ok(plan_restart(None, request, journal=journal, record=False,
                            command="state-recover"))
    todo = replays(m.batch_id, _after(journal, query_name, found, bootstrap_servers),
                   _old_metadata(found))
    from ._write import _remove, restore_savepoint

    restored = restore_savepoint(spark, found, checkpoint, query,
                                 ends=concrete_ends(plan.sources), journal=journal,
                                 expect_sha256=plan.savepoint_sha256, verify=False)
    try:
        runs = tuple(_replay(spark, checkpoint, query, r, reread_sink, restored.query_id)
                     for r in todo)
    except BaseException:
        _remove(spark, checkpoint)
        raise
    done = Recovered(restored, todo, plan, runs, reread_sink)
    plan.notes.append(done.decision)
    plan.recovery = _recorded(done)
    warnings = _journal(journal, done, request, record)
    log.info("%s", done.explain())
    return replace(done, warnings=tuple(warnings))


def _chosen(journal: Journal, query_name: str, ref: int | str | None) -> Savepoint:
    """The savepoint ``ref`` names, checked as a recovery needs it, else the newest
    usable one of the query (:func:`~.recover.choose`)."""
    from .. import load_savepoint

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
    last: the journal's, and those the sink holds beyond it (taken by the plan)."""
    from ...restart import PlanRequest, plan_restart

    m = found.manifest
    after = _ok(plan_restart(None, PlanRequest(query_name,
                                               bootstrap_servers=bootstrap_servers).checked(),
                             journal=journal, record=False))
    if after.anchor.query_id != m.query_id:
        raise RestoreError(
            f"the journal's last batch of query {query_name!r} is of query id "
            f"{after.anchor.query_id}, not of the savepoint's checkpoint ({m.query_id}): "
            f"another checkpoint ran after {found.label()}; its batches are not the "
            "savepoint's to read again")
    last = journal.batch(query_name, after.anchor.run_id, after.anchor.batch_id)
    count = max(after.anchor.batch_id - m.batch_id, 0)
    held = (journal.checkpoint_batches(last, newest_first=True, limit=count)
            if last is not None and count else [])
    return [*held, *after.sink_batches]


def _old_metadata(found: Savepoint) -> dict[int, tuple[int | None, int | None]]:
    """Each old batch's watermark and timestamp from the old checkpoint's ``offsets/N``,
    while the checkpoint there is still the savepoint's query's (empty otherwise)."""
    from ...checkpoint import read_checkpoint
    from ._write import other_query

    m = found.manifest
    if other_query(m) is not None:
        return {}
    try:
        old = read_checkpoint(m.checkpoint)
    except OffsetJournalError:
        return {}
    return {b.batch_id: (b.batch_watermark_ms, b.batch_timestamp_ms)
            for b in old.batches if b.batch_id > m.batch_id and b.readable}


def _replay(spark: Any, checkpoint: str, query: Callable[[], Any], replay: Replay,
            reread_sink: bool, query_id: str) -> Bootstrap:
    """``offsets/N`` written for one old batch and the new query run once on it: Spark
    re-executes it as the batch it had not committed (its sink ``noop`` unless
    ``reread_sink``). The run, with its progress, for the journal."""
    from ...checkpoint.store import open_store
    from ._bootstrap import Bootstrap, built_writer, checkpoint_problem

    store, root = open_store(checkpoint, None)
    before = store.read(store.join(root, "offsets", str(replay.new_batch_id - 1)))
    store.write(store.join(root, "offsets", str(replay.new_batch_id)),
                offsets_file(before.decode("utf-8"), replay).encode("utf-8"))
    writer = built_writer(spark, query, checkpoint)
    problem = checkpoint_problem(spark, writer, checkpoint)
    if problem is not None:
        raise RestoreError(problem)
    if not reread_sink:
        writer = writer.format("noop")
    began = datetime.now(timezone.utc)
    started = writer.trigger(once=True).start()
    if str(started.id) != query_id:
        started.stop()
        raise RestoreError(f"the new query ran on another checkpoint than {checkpoint} "
                           "while replaying: its function must set checkpointLocation to it")
    started.awaitTermination(REPLAY_TIMEOUT_S)
    if started.isActive:
        started.stop()
        raise RestoreError(f"replaying old batch {replay.old_batch_id} did not end in "
                           f"{REPLAY_TIMEOUT_S} s")
    failed = started.exception()
    if failed is not None:
        raise RestoreError(f"replaying old batch {replay.old_batch_id} failed: "
                           f"{first_line(failed)}")
    if store.kind(store.join(root, "commits", str(replay.new_batch_id))) != "file":
        raise RestoreError(f"replaying old batch {replay.old_batch_id} left no commit")
    return Bootstrap(query_id, str(started.runId), started.name, began,
                     datetime.now(timezone.utc),
                     tuple(str(p.json) for p in started.recentProgress))


def _recorded(done: Recovered) -> dict[str, Any]:
    """What the plan records of the recovery: the audit reads the replay runs (their
    query id and new batch ids) as planned."""
    sp = done.restored.savepoint
    return {"savepoint_id": sp.id, "savepoint_batch": sp.manifest.batch_id,
            "old_batches": [r.old_batch_id for r in done.replayed],
            "query_id": done.restored.query_id,
            "new_batches": [r.new_batch_id for r in done.replayed],
            "reread_sink": done.reread_sink, "note": done.decision}


def _journal(journal: Journal, done: Recovered, request: Any, record: bool) -> list[str]:
    """The plan recorded and linked, the restore's run and every replay run journaled,
    in the order the audit takes (as ``state restore`` does); the warnings."""
    from ._bootstrap import journal_bootstrap

    warnings = _journal_plan(journal, done, request, record)
    for run in done.runs:
        problem = journal_bootstrap(journal, run, done.plan.query_name)
        if problem is not None:
            warnings.append(f"the replay run {run.run_id} was not journaled: {problem}")
    return warnings


def _journal_plan(journal: Journal, done: Recovered, request: Any,
                  record: bool) -> list[str]:
    from ...restart.edge import journal_sink_batches
    from ...restart.record import record_plan
    from ._bootstrap import journal_bootstrap

    plan, restored = done.plan, done.restored
    warnings: list[str] = []
    if record:
        journal_sink_batches(journal, plan)
        record_plan(journal, plan, request, "state-recover")
    if plan.plan_id is not None:
        try:
            journal.link_plan(plan.plan_id, restored.bootstrap_run_id)
        except Exception as exc:  # the recovery is done: the link is bookkeeping
            warnings.append(f"plan {plan.plan_id} was not linked to the restore's run "
                            f"{restored.bootstrap_run_id}: {first_line(exc)}")
    elif plan.record_problem:
        warnings.append(plan.record_problem)
    if restored.bootstrap is not None:
        problem = journal_bootstrap(journal, restored.bootstrap, plan.query_name)
        if problem is not None:
            warnings.append(f"the restore's run {restored.bootstrap_run_id} was not "
                            f"journaled: {problem}")
    return warnings
