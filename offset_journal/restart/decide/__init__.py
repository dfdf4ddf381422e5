"""Decide: the plan from the gathered facts alone (pure: one frozen
:class:`~offset_journal.restart.PlanInputs` in, a :class:`~offset_journal.restart.RestartPlan`
out; no I/O). :func:`~.plan.decide` is the sequence of steps (its module docstring lists
them); each step is a module:

* kinds of start: ``start_after.py`` (after the last batch), ``start_at.py`` (at a
  batch, or a record time with ``from_time.py``), ``state_aware.py`` (rewound),
  ``seeding.py`` (a savepoint), ``translated.py`` with ``translate.py`` (on a replica),
  ``real_time.py`` (a real-time run's last batch);
* sources: ``kafka_offsets.py`` (Kafka), ``other_sources.py`` (Delta, file, rate);
* ``sink.py``: the old query's sink (batches it holds beyond the journal);
* ``checks.py``: the gathered facts that only warn.

May import: the restart package's base (request, model, inputs, findings) and the
shared modules, :mod:`offset_journal.kafka.mirror` (pure); never ``gather/``, the
planner's entry or the recording.
"""

from __future__ import annotations

from .plan import compute_plan, decide

__all__ = ["compute_plan", "decide"]
