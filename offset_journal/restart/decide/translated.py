"""A translated plan (pure): AFTER the anchor, its end offsets moved to a replica by
MM2's offset syncs (the offsets: :mod:`.translate`); its note says the re-read bound
the translation found, so it is said once the sources are planned."""

from __future__ import annotations

from collections.abc import Sequence

from .._findings import Flagged
from .._inputs import PlanInputs
from ..model import MODE_STATE_AWARE, POSITION_AFTER, SourcePlan, Start
from .start_after import after_note


def translated_start(inp: PlanInputs, start: Start, flagged: Flagged,
                     sources: Sequence[SourcePlan]) -> list[str]:
    """A translated plan AFTER the anchor: the start's note, with the re-read bound the
    translation found (every other plan's start said its note already)."""
    if inp.kafka.mirror is None or start.position != POSITION_AFTER or inp.mode == MODE_STATE_AWARE:
        return []
    done = [s.translation for s in sources if s.translation is not None]
    return [after_note(inp, flagged, (sum(t.reread_bound for t in done),
                                      sum(len(t.unsynced) for t in done)))]
