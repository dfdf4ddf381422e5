"""Decide: the plan from the gathered facts alone (pure: one frozen
:class:`~offset_journal.restart.PlanInputs` in, a :class:`~offset_journal.restart.RestartPlan`
out; no I/O). :func:`~.plan.decide` only calls the steps, each a module, in order
(``refuse``, ``sink`` with ``sink_held``, ``start``, ``sources``, ``translated``,
``flagged``, ``checks``, ``cluster``, ``real_time``, ``carried``); the kinds of start
and of source are modules of their own (``start_after``, ``start_at``, ``from_time``,
``state_aware``, ``seeding``; ``kafka_offsets``, ``translate``, ``other_sources``).
The map: docs/architecture.md.

May import: the restart package's base (request, model, inputs, findings) and the
shared modules, :mod:`offset_journal.kafka.mirror` (pure); never ``gather/``, the
planner's entry or the recording.
"""

from __future__ import annotations

from .plan import compute_plan, decide

__all__ = ["compute_plan", "decide"]
