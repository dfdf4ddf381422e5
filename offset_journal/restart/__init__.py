"""Restart plans: where a query on a NEW checkpoint starts, and why.

**Gather, then decide.** :func:`plan_restart` (``edge.py``, the planner's entry) lets
``gather/`` read every fact (the journal, the locations, the old sink, the savepoint,
the Kafka cluster: one frozen typed group each) into one frozen :class:`PlanInputs`;
``decide/`` makes the plan from it alone, with no I/O (:func:`compute_plan` builds the
inputs from a batch and the groups); ``record.py`` writes it down after. Its modules,
and where it stands: docs/architecture.md; the positions a plan starts from:
docs/restarts.md. The I/O names are imported on first use, so the pure modules load
without the database driver.

May import: :mod:`offset_journal.state`, :mod:`offset_journal.savepoint`,
:mod:`offset_journal.checkpoint`, :mod:`offset_journal.journal`,
:mod:`offset_journal.kafka` and the shared modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import RestartError
from ..rows import BatchRef
from ._findings import Findings
from ._inputs import (
    ClusterFacts,
    JournalFacts,
    KafkaFacts,
    LocationFacts,
    MirrorFacts,
    OldQueryFacts,
    PlanInputs,
    SavepointFacts,
)
from .decide.plan import compute_plan
from .model import MODE_STATE_AWARE, MODE_STATELESS, Mode, Position, RestartPlan, SourcePlan
from .request import PlanRequest

if TYPE_CHECKING:
    from .edge import plan_from_journal, plan_restart
    from .recovery import Recovered, recover
    from .restoring import PlannedRestore, restore_from_plan

_EDGE = {"plan_from_journal": "edge", "plan_restart": "edge", "recover": "recovery",
         "Recovered": "recovery", "restore_from_plan": "restoring",
         "PlannedRestore": "restoring"}


def __getattr__(name: str) -> Any:
    if name in _EDGE:
        import importlib

        return getattr(importlib.import_module(f".{_EDGE[name]}", __name__), name)
    raise AttributeError(f"module 'offset_journal.restart' has no attribute {name!r}")


__all__ = [
    "MODE_STATELESS",
    "MODE_STATE_AWARE",
    "BatchRef",
    "ClusterFacts",
    "Findings",
    "JournalFacts",
    "KafkaFacts",
    "LocationFacts",
    "MirrorFacts",
    "OldQueryFacts",
    "PlanInputs",
    "PlannedRestore",
    "SavepointFacts",
    "Mode",
    "PlanRequest",
    "Position",
    "RestartError",
    "Recovered",
    "RestartPlan",
    "SourcePlan",
    "compute_plan",
    "plan_from_journal",
    "plan_restart",
    "recover",
    "restore_from_plan",
]
