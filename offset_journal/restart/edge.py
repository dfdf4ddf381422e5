"""The planner's entry: gather, then decide. :func:`~.gather.gather` reads every fact
(the I/O step, in ``gather/``: one typed group per place read) into one frozen
:class:`~._inputs.PlanInputs`; :func:`~.decide.plan.decide` decides from it alone (pure); the
plan handed out is recorded after (:mod:`.record`, the one step that writes).

:func:`plan_from_journal` is handed an open :class:`~offset_journal.journal.Journal`;
:func:`plan_restart` is the thin wrapper that opens one from a database URL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import RestartError
from ..journal import Journal
from ._inputs import LocationFacts
from .decide.plan import decide
from .gather import gather, locations
from .gather.cluster import clusters_of
from .gather.locations import checkpoint_state
from .model import RestartPlan
from .request import PlanRequest

log = logging.getLogger(__name__)

Locations = LocationFacts
"""What the new checkpoint location and the output path hold (kept for its old name)."""


# --------------------------------------------------------------------------- entry points


def plan_restart(database_url: str | None, query: str | PlanRequest, *,
                 journal: Journal | None = None, record: bool = True, command: str = "api",
                 **options: Any) -> RestartPlan:
    """Plan how a query starts on a new checkpoint; see the package docstring. ``query``
    is the query name with :class:`PlanRequest`'s other fields as keyword options, or a
    whole request (as :func:`offset_journal.cli.plan_args.request_from_args` builds one).
    Opens the journal at ``database_url`` unless ``journal`` is given.

    The plan handed out is recorded in the journal (``restart_plans``; its id in
    ``plan.plan_id``) unless ``record=False``; a journal that refuses it leaves the
    plan usable and says why in ``plan.record_problem``
    (:mod:`offset_journal.restart.record`). ``command``: who hands it out (``api``,
    ``plan``, ``starting-offsets``). Link the run started from it with
    ``Journal.link_plan(plan.plan_id, query.runId)``.
    Raises RestartError, CheckpointError, JournalError or KafkaAdminError (all OffsetJournalError).
    """
    from .record import record as recorded

    if isinstance(query, PlanRequest):
        if options:
            raise RestartError(f"give a PlanRequest or options, not both: {sorted(options)}")
        request = query.checked()
    else:
        request = PlanRequest(query, **options).checked()
    places = locations(request)  # before the journal is opened: refusing changes nothing
    with _opened(database_url, journal) as j:
        plan = plan_from_journal(j, request, places, command)
        # The write step, after the plan is made: gathering its facts wrote nothing.
        return recorded(j, plan, request, command).onto(plan) if record else plan


def plan_from_journal(journal: Journal, request: PlanRequest,
                      places: Locations | None = None, command: str = "api") -> RestartPlan:
    """The plan for a checked ``request``, from an open journal; ``places``: the
    request's :func:`locations` when already read; ``command``: who hands it out. Two
    steps: :func:`gather` reads every fact, :func:`~.decide.plan.decide` decides from them
    alone."""
    plan = decide(gather(journal, request, places, command))
    for w in plan.warnings:
        log.info("restart plan for %s: %s", request.query_name, w)
    return plan


@contextmanager
def _opened(database_url: str | None, journal: Journal | None) -> Iterator[Journal]:
    """``journal`` as is, else a journal opened at ``database_url`` and closed after."""
    if journal is not None:
        yield journal
        return
    with Journal(database_url) as own:
        yield own


__all__ = ["Locations", "checkpoint_state", "clusters_of", "gather", "locations",
           "plan_from_journal", "plan_restart"]
