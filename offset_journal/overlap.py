"""Runs that journaled at the same time (pure): the one rule for it, used by
:meth:`Journal.concurrent_runs <offset_journal.journal.Journal.concurrent_runs>` and by
restart plans.

Two live drivers under one name (two checkpoints) interleave their offsets, and "the
last batch" may then belong to either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .rows import RunBounds


@dataclass(frozen=True)
class RunSpan:
    """When a run journaled batches: [start, end], for spotting concurrent runs.

    ``start`` is the run's start event, else its first batch's trigger time; ``end`` its
    termination, else its last batch's trigger (a crashed run has no termination, and
    must not look as if it ran forever).
    """

    run_id: str
    query_id: str
    start: datetime | None
    end: datetime | None
    terminated: bool = False


def span_of(run: RunBounds) -> RunSpan:
    """A run's span from what the journal knows of it; never ending before it starts."""
    start = run.started_at or run.first_trigger_at
    end = run.terminated_at or run.last_trigger_at
    if end is None or (start is not None and end < start):
        end = start
    return RunSpan(run.run_id, run.query_id, start, end, run.terminated_at is not None)


def concurrent_runs(spans: Sequence[RunSpan]) -> list[tuple[RunSpan, RunSpan]]:
    """Pairs of runs whose [start, end] spans overlap (touching ends do not count), in
    order of the earlier run's start."""
    known = sorted((s for s in spans if s.start is not None and s.end is not None),
                   key=lambda s: (s.start, s.run_id))
    pairs = []
    for i, a in enumerate(known):
        for b in known[i + 1:]:
            assert a.start is not None and a.end is not None
            assert b.start is not None and b.end is not None
            if b.start >= a.end:
                break  # sorted by start: no later run starts before ``a`` ends either
            if a.start < b.end:
                pairs.append((a, b))
    return pairs
