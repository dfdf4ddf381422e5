"""A savepoint restored from a restart plan, as one flow: the plan's savepoint written
into the new checkpoint (:func:`offset_journal.state.restore_savepoint`), the plan
recorded and linked to the bootstrap run (the run that started from its offsets), the
bootstrap run journaled. ``state restore``, a job's ``--from-journal --restore`` and an
upgrade in one call all restore through :func:`restore_from_plan`; they only make the
plan, open the journal and the session, and say what was done.

It plans too (it records a plan), so it lives where plans do, above :mod:`offset_journal.state`.
Handed an open :class:`~offset_journal.journal.Journal` and a Spark session, never URLs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import OffsetJournalError, RestoreError
from ..formatting import first_line

if TYPE_CHECKING:
    from ..journal import Journal
    from ..savepoint import Savepoint
    from ..state import Restored, Rules
    from .model import RestartPlan
    from .request import PlanRequest


@dataclass(frozen=True)
class PlannedRestore:
    """A restore from a plan done: the restore, the plan (``plan_id`` set once recorded)
    and the warnings of the bookkeeping (a link or a journaling refused: the restore
    stands, the audit then matches the run to the plan by its offsets)."""

    restored: Restored
    plan: RestartPlan
    warnings: tuple[str, ...] = ()


def restore_from_plan(journal: Journal, spark: Any, plan: RestartPlan, checkpoint: str,
                      query: Callable[[], Any], *, request: PlanRequest | None = None,
                      savepoint: Savepoint | None = None, rules: Rules | None = None,
                      command: str = "api") -> PlannedRestore:
    """Restore ``plan``'s savepoint into the NEW checkpoint ``checkpoint`` of the query
    ``query()`` builds (its sources at the plan's offsets), and journal it in the order
    the audit takes.

    A plan recorded already (``plan.plan_id``: a job's ``--from-journal`` plan, an
    upgrade's) is linked to the bootstrap run as that run starts, before a listener can
    journal its batch (a link recorded later is not one the audit takes). A plan not
    recorded yet is recorded with ``request`` (None: not recorded) once the restore is
    done, so a refused restore leaves no plan, and linked then. The bootstrap run is then
    journaled from its progress, where no listener did (the journal keeps one copy).
    ``savepoint``: the plan's, loaded already (default: read again from the plan's
    location); its manifest is pinned to the one the plan checked either way.
    RestoreError or SavepointError (one line) when the restore is refused."""
    from ..state import journal_bootstrap, restore_savepoint
    from ..state.offsets import concrete_ends

    warnings: list[str] = []
    linked: list[str] = []

    def link(run_id: str) -> None:
        if plan.plan_id is not None:
            linked.append(run_id)
            warnings.extend(_link(journal, plan.plan_id, run_id))

    ref = savepoint if savepoint is not None else plan.savepoint_location
    if ref is None:
        raise RestoreError(f"the plan for {plan.query_name!r} restores no savepoint: plan "
                           "from one (--savepoint ID|DIR) to restore it")
    restored = restore_savepoint(spark, ref, checkpoint, query,
                                 ends=concrete_ends(plan.sources), rules=rules, journal=journal,
                                 expect_sha256=plan.savepoint_sha256, on_start=link)
    if not linked:
        plan, said = _record_and_link(journal, plan, request, restored, command)
        warnings.extend(said)
    if restored.bootstrap is not None:
        problem = journal_bootstrap(journal, restored.bootstrap, plan.query_name)
        if problem is not None:
            warnings.append(f"the bootstrap run {restored.bootstrap_run_id} was not "
                            f"journaled: {problem}")
    return PlannedRestore(restored, plan, tuple(warnings))


def _record_and_link(journal: Journal, plan: RestartPlan, request: PlanRequest | None,
                     restored: Restored, command: str) -> tuple[RestartPlan, list[str]]:
    """The plan recorded after the restore (with ``request``), then linked: the plan as
    recorded, and the warnings."""
    from .record import record

    if plan.plan_id is None and request is not None:
        plan = record(journal, plan, request, command).onto(plan)
    if plan.plan_id is not None:
        return plan, _link(journal, plan.plan_id, restored.bootstrap_run_id)
    return plan, [plan.record_problem] if plan.record_problem else []


def _link(journal: Journal, plan_id: int, run_id: str) -> list[str]:
    """The plan linked to the run; a journal that refuses costs a warning, not the
    restore."""
    from ..redaction import redact

    try:
        journal.link_plan(plan_id, run_id)
    except OffsetJournalError as exc:  # the journal's own kinds among them
        reason = redact(first_line(exc))
        return [f"plan {plan_id} was not linked to the bootstrap run {run_id}: {reason}"]
    return []
