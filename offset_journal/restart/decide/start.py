"""Step 3 of :func:`~.plan.decide` (pure): which kind of start, each decided by its own
module: from a savepoint (seeding), state-aware (rewound: state_aware), from a record
time or AT a batch (start_at), or AFTER the anchor (start_after; translated:
translated, once the sources are planned)."""

from __future__ import annotations

from ...formatting import format_time
from .._findings import Flagged
from .._inputs import PlanInputs
from ..model import MODE_STATE_AWARE, POSITION_AT, POSITION_FROM_TIME, Start
from .seeding import savepoint_start
from .start_after import after_start, still_running
from .start_at import at_start, from_time_start
from .state_aware import state_aware_start


def where_to_start(inp: PlanInputs, flagged: Flagged) -> Start:
    """The plan's start; a start at or after a batch notes it was still running at
    ``as_of``."""
    if inp.savepoint_facts.loaded is not None:
        return savepoint_start(inp, inp.savepoint_facts.loaded)
    if inp.mode == MODE_STATE_AWARE:
        as_of = inp.request.as_of
        when = f" triggered at or before {format_time(as_of)}" if as_of is not None else ""
        start = state_aware_start(inp, when)
    elif inp.journal.position == POSITION_FROM_TIME:
        return from_time_start(inp)
    elif inp.journal.position == POSITION_AT:
        start = at_start(inp)
    else:
        start = after_start(inp, flagged)
    start.findings.notes += still_running(inp)
    return start
