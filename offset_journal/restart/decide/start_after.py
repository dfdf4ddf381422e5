"""A plan AFTER the last batch (pure): start at the anchor's END offsets, so the new
query reads exactly what came after it (the default start, and ``--as-of``)."""

from __future__ import annotations

from datetime import timedelta

from ...formatting import format_time
from ...rows import BatchRef
from ...wording import count
from .._findings import Findings, Flagged
from .._inputs import PlanInputs
from ..model import POSITION_AFTER, Start


def after_start(inp: PlanInputs, flagged: Flagged) -> Start:
    """After the anchor, with the note saying why (a translated start says it once its
    re-read bound is known: :mod:`.translated`)."""
    start = Start(POSITION_AFTER, None, inp.journal.before, Findings())
    if inp.kafka.mirror is None:
        start.findings.notes.append(after_note(inp, flagged))
    return start


def after_note(inp: PlanInputs, flagged: Flagged,
               translated: tuple[int, int] | None = None) -> str:
    """Why a plan AFTER the anchor reads what came after it; ``translated``: a translated
    plan's bound of records read again on the replica, and its partitions without a
    sync (read from the replica's earliest, unbounded)."""
    anchor_ref = BatchRef.of(inp.anchor)
    latest = ("the last journaled batch" if inp.request.as_of is None
              else f"the last batch triggered at or before {format_time(inp.request.as_of)}")
    if inp.sink_taken:
        latest = "the last batch the old query's sink holds, beyond the journal's: see below"
    head = f"Starts AFTER {anchor_ref.label()} ({latest}): at its END offsets"
    if translated is not None:
        bound, unsynced = translated
        more = (f", and all the replica holds of {count(unsynced, 'partition')} without a "
                "sync (see the warnings)" if unsynced else "")
        head += (", translated to the replica's (per partition below). MM2's offset syncs "
                 "place each at its record or just before it: nothing the replica holds is "
                 f"skipped, but records may be read again, up to {count(bound, 'record')}"
                 f"{more}")
    else:
        head += (". Kafka start offsets are inclusive and a batch's end offsets exclusive, "
                 "so the new query reads exactly what came after that batch")
    if flagged:
        return head + (
            ". But the journal flagged offsets that did not continue from one batch to "
            "the next (see the errors and warnings): records were skipped or read "
            "twice before this point, and starting here does not undo that.")
    return head + (": nothing skipped, nothing read twice." if translated is None else ".")


def still_running(inp: PlanInputs) -> list[str]:
    """A note when the anchor was still running at ``as_of`` (it counts as before)."""
    anchor, as_of = inp.anchor, inp.request.as_of
    if as_of is None or anchor.trigger_at is None or not anchor.batch_duration_ms:
        return []
    finished = anchor.trigger_at + timedelta(milliseconds=anchor.batch_duration_ms)
    if finished <= as_of:
        return []
    return [f"That batch was still running at {format_time(as_of)} (it finished at "
            f"{format_time(finished)}); it counts as before that time."]
