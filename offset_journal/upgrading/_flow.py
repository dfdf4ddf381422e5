""":func:`upgrade`: the steps of :mod:`._steps` in order, and what happens when one
refuses or v2 fails.

Why v1 rolls back onto ITS OWN checkpoint: after a stop between batches that checkpoint
is intact, at the batch the savepoint was taken of, and v2 wrote to a sink of its own
(a query on a new checkpoint needs a new file-sink directory anyway: the jobs take one
per checkpoint). So v1, started again there, resumes after its last committed batch
and reads again what v2 read, into v1's sink, where v1 had not written it: exactly once
into a sink with a log, and no batch of v1's written twice into one without. Nothing
needs restoring for that, which is also the fastest way back. The running query object
cannot be started again (Spark's queries are started once), so v1 is built again by
``build_v1``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, OffsetJournalError
from ..formatting import first_line
from ..redaction import redact
from ._steps import (
    Build,
    Context,
    checkpoint_of,
    link,
    plan_upgrade,
    preflight,
    record_result,
    restore,
    resume_offsets,
    settle,
    start,
    stop_between_batches,
    stop_quietly,
    take_savepoint,
    verify,
)
from .model import Outcome, Upgrade, Verification, result_row

if TYPE_CHECKING:
    from ..journal import Journal
    from ..restart import RestartPlan
    from ..savepoint import Savepoint
    from ..state import Rules

log = logging.getLogger(__name__)


def upgrade(spark: Any, running_query: Any, build_v2: Build, new_checkpoint: str, *,
            journal: Journal, build_v1: Build, savepoint_to: str,
            checkpoint: str | None = None, query_name: str | None = None,
            listener: Any = None, rules: Rules | None = None, batches: int = 2,
            check: Callable[[Any], bool | None] | None = None, timeout_s: float = 300.0,
            bootstrap_servers: str | None = None) -> Upgrade:
    """Upgrade a stateful query in one call: stop v1 (``running_query``; None: v1 is
    stopped already, give ``query_name`` and ``checkpoint``) between batches,
    take a savepoint at its last committed batch (to ``savepoint_to``), restore it into
    v2's ``new_checkpoint`` (the plan recorded as ``state restore`` records it, the
    layout checked), start v2 (``build_v2``), and verify it: its first batch starts at
    the planned offsets, ``batches`` batches complete within ``timeout_s`` (or it ends by
    itself, an ``availableNow`` trigger), ``check(query)`` does not return False or
    raise, and it raises nothing. If verification fails, roll back: v2 stopped, v1
    started again by ``build_v1`` on its own checkpoint, where it resumes after its last
    committed batch. A refusal before v2 starts (the savepoint, the plan, the restore's
    layout check, each one line; or any other error once v1 was stopped, named by its
    type) starts v1 again as it was, when it was running.
    Arguments that cannot work (``new_checkpoint`` not new, as a rolled-back v2's is;
    two of the three places one; ``savepoint_to`` not empty or not writable;
    ``batches`` < 1, ``timeout_s`` <= 0) raise ConfigError or SavepointError (one line)
    first, v1 untouched and nothing journaled.

    Every outcome is journaled as a decision (a ``restart_plans`` row, ``command``
    ``upgrade-result``); a roll back's row holds the offsets v1 resumes from and is
    linked to v1's new run, so the audit reads what v1 reads again as planned.

    ``build_v1``/``build_v2``: ``build(spark, checkpoint, starting_offsets)`` returning
    a ``DataStreamWriter`` not started (see :data:`._steps.Build`). ``checkpoint``: v1's
    (default: where Spark says it runs); ``query_name``: the journal's name for it
    (default: the query's name). ``listener``: the journal's listener in this session,
    waited on for v1's and v2's ends (bounded). Returns an :class:`Upgrade`:
    ``explain()`` says what happened; ``query`` is the query running now."""
    ctx = _context(spark, journal, running_query, query_name, checkpoint, new_checkpoint,
                   timeout_s, listener)
    preflight(ctx, savepoint_to, batches)
    was_running = running_query is not None and bool(running_query.isActive)
    notes = stop_between_batches(running_query, timeout_s) if was_running else []
    saved: Savepoint | None = None
    plan: RestartPlan | None = None
    try:
        notes += settle(ctx, str(running_query.runId) if running_query is not None else None)
        saved = take_savepoint(ctx, savepoint_to)
        plan, _request = plan_upgrade(ctx, saved, rules, bootstrap_servers)
        restore(ctx, saved, plan, build_v2, rules)
    except Exception as exc:  # noqa: BLE001 - v1 is stopped: whatever failed, it comes back
        return _refused(ctx, build_v1, was_running, saved, plan, _reason(exc), notes)
    return _run_v2(ctx, build_v1, build_v2, saved, plan, batches, check, notes)


def _reason(exc: Exception) -> str:
    """A refusal's reason in one line: the library's own errors as they are said, any
    other error named by its type (its traceback logged, for whoever debugs it)."""
    if isinstance(exc, OffsetJournalError):  # the journal's errors among them
        return redact(first_line(exc))
    log.warning("the upgrade failed before v2 started", exc_info=exc)
    return f"{type(exc).__name__}: {redact(first_line(exc))}"


def _context(spark: Any, journal: Journal, running_query: Any, query_name: str | None,
             checkpoint: str | None, new_checkpoint: str, timeout_s: float,
             listener: Any) -> Context:
    """The context, v1's name and checkpoint from the query where not given."""
    if running_query is None and (not query_name or not checkpoint):
        raise ConfigError("without a running query, give query_name= and checkpoint= (v1's)")
    name = query_name or running_query.name
    if not name:
        raise ConfigError("the running query has no name: give query_name= (the name "
                          "the journal knows it by)")
    return Context(spark, journal, name, checkpoint or checkpoint_of(running_query),
                   new_checkpoint, timeout_s, listener)


def _run_v2(ctx: Context, build_v1: Build, build_v2: Build,
            saved: Savepoint, plan: RestartPlan, batches: int,
            check: Callable[[Any], bool | None] | None, notes: list[str]) -> Upgrade:
    """v2 started on its restored checkpoint and verified; upgraded, or rolled back."""
    starting = [plan.starting_offsets(s.index) for s in plan.sources]
    try:
        v2 = start(ctx, build_v2, ctx.new_checkpoint, starting)
    except Exception as exc:  # noqa: BLE001 - v2 that does not start failed verification
        failed = Verification(failures=(f"v2 did not start: {redact(first_line(exc))}",))
        return _rolled_back(ctx, build_v1, saved, plan, None, failed, notes)
    try:
        verification = verify(v2, plan, batches, ctx.timeout_s, check)
    except Exception as exc:  # noqa: BLE001 - v2 that cannot be watched is not verified
        verification = Verification(failures=(
            f"v2 could not be watched: {type(exc).__name__}: {redact(first_line(exc))}",))
    if not verification.passed:
        return _rolled_back(ctx, build_v1, saved, plan, v2, verification, notes)
    row = result_row(ctx.query_name, "upgraded", plan_id=plan.plan_id,
                     savepoint=_ref(saved), checkpoint=ctx.checkpoint,
                     new_checkpoint=ctx.new_checkpoint, reasons=(),
                     verification=verification)
    result_id, problem = record_result(ctx, row)
    done = Upgrade("upgraded", ctx.query_name, (), v2, saved, plan.plan_id, result_id,
                   verification, tuple(notes), _warnings(plan, problem))
    log.info("%s", done.explain())
    return done


def _rolled_back(ctx: Context, build_v1: Build, saved: Savepoint,
                 plan: RestartPlan, v2: Any, verification: Verification,
                 notes: list[str]) -> Upgrade:
    """v2 stopped; the roll back journaled (the offsets v1 resumes from), then v1 started
    on its own checkpoint and its run linked to that decision as it starts."""
    if v2 is not None:
        stop_quietly(v2, ctx)
    notes = [*notes, f"v2's checkpoint {ctx.new_checkpoint} and what v2 wrote are the "
                     "rolled-back run's (v1 reads those records again into its own sink): "
                     "discard v2's output, and remove that checkpoint before upgrading "
                     "to it again"]
    resume, resumed_after = resume_offsets(ctx.checkpoint)
    row = result_row(ctx.query_name, "rolled-back", plan_id=plan.plan_id,
                     savepoint=_ref(saved), checkpoint=ctx.checkpoint,
                     new_checkpoint=ctx.new_checkpoint, reasons=verification.reasons,
                     verification=verification, resume=resume,
                     resumed_after=resumed_after)
    return _v1_again(ctx, build_v1, "rolled-back", row, verification.reasons, saved, plan,
                     verification, notes)


def _refused(ctx: Context, build_v1: Build, was_running: bool,
             saved: Savepoint | None, plan: RestartPlan | None, reason: str,
             notes: list[str]) -> Upgrade:
    """A step before v2 refused: journaled, and v1 started again when it was running
    (nothing read past its checkpoint: it resumes exactly where it stopped)."""
    row = result_row(ctx.query_name, "refused", plan_id=plan.plan_id if plan else None,
                     savepoint=_ref(saved) if saved else None, checkpoint=ctx.checkpoint,
                     new_checkpoint=ctx.new_checkpoint, reasons=(reason,))
    if not was_running:
        result_id, problem = record_result(ctx, row)
        done = Upgrade("refused", ctx.query_name, (reason,), None, saved,
                       plan.plan_id if plan else None, result_id, None,
                       (*notes, "v1 was not running: start it again on its checkpoint"),
                       _warnings(plan, problem))
        log.warning("%s", done.explain())
        return done
    return _v1_again(ctx, build_v1, "refused", row, (reason,), saved, plan, None, notes)


def _v1_again(ctx: Context, build_v1: Build, outcome: Outcome,
              row: dict[str, Any], reasons: tuple[str, ...], saved: Savepoint | None,
              plan: RestartPlan | None, verification: Verification | None,
              notes: list[str]) -> Upgrade:
    """The outcome recorded BEFORE v1 starts (the audit takes only a decision recorded
    before the run's first batch), v1 started on its own checkpoint, its run linked."""
    result_id, problem = record_result(ctx, row)
    warnings = [w for w in (problem,) if w]
    v1 = None
    try:
        v1 = start(ctx, build_v1, ctx.checkpoint, _starting(plan))
    except Exception as exc:  # noqa: BLE001 - said in the result: nothing runs now
        reasons = (*reasons, f"v1 did not start again: {redact(first_line(exc))}")
        notes = [*notes, f"start v1 on {ctx.checkpoint} by hand: it resumes after its "
                         "last committed batch"]
    else:
        linked = link(ctx, result_id, v1)
        warnings += [linked] if linked else []
    done = Upgrade(outcome, ctx.query_name, reasons, v1, saved,
                   plan.plan_id if plan else None, result_id, verification, tuple(notes),
                   tuple(_warnings(plan, None)) + tuple(warnings), restart_failed=v1 is None)
    log.warning("%s", done.explain())
    return done


def _starting(plan: RestartPlan | None) -> list[str]:
    """Starting offsets for v1's writer: Spark ignores them on its existing checkpoint."""
    return [plan.starting_offsets(s.index) for s in plan.sources] if plan else ["latest"]


def _ref(saved: Savepoint) -> tuple[int | None, int]:
    return saved.id, saved.manifest.batch_id


def _warnings(plan: RestartPlan | None, problem: str | None) -> tuple[str, ...]:
    out = [*((plan.record_problem,) if plan is not None and plan.record_problem else ()),
           *((problem,) if problem else ())]
    return tuple(out)
