"""State-aware restarts (pure): rewind to the first batch that may hold a record of a
window the old checkpoint's state had not emitted yet.

In append mode a window is written when the watermark passes its end; the state
discarded with the old checkpoint held every window still open. The plan re-reads
their records and tells the new job which windows the sink already has
(``event_time_cutoff``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ...errors import RestartError
from ...formatting import format_time
from ...rows import Batch, BatchRef, order_key
from .._findings import Findings
from .._inputs import PlanInputs
from ..model import POSITION_AFTER, POSITION_REWIND, Start


def emitted_cutoff(chain: Sequence[Batch]) -> tuple[datetime | None, Batch | None]:
    """The watermark the last durable batch ran with, and that batch.

    In append mode a window is emitted by the batch whose watermark passed its end,
    and progress reports the watermark a batch USED (the next batch's may be higher),
    so windows ending at or before the last batch's watermark are in the sink and any
    other window lived only in the state being discarded. A last batch without a
    watermark falls back to the latest batch that has one.
    """
    for batch in reversed(chain):
        if batch.watermark is not None:
            return batch.watermark, batch
    return None, None


def rewind_index(chain: Sequence[Batch], threshold: datetime) -> int | None:
    """Index of the earliest batch whose event time max is >= ``threshold``, or that
    may hold records (row count not 0) without journaled event times (imported from a
    checkpoint): nothing says its records are older.

    Every earlier batch's records are older than ``threshold``, so their windows ended
    at or before the cutoff and were emitted: re-reading from this batch on covers
    every record of the windows still open. None when no batch has such records.
    """
    for i, batch in enumerate(chain):
        if batch.event_time_max is None:
            if batch.num_input_rows != 0:
                return i
        elif batch.event_time_max >= threshold:
            return i
    return None


def _chain_to_anchor(inp: PlanInputs) -> list[Batch]:
    """The checkpoint's batches up to the anchor, ending with it."""
    anchor = inp.anchor
    chain = [b for b in inp.journal.chain if order_key(b) <= order_key(anchor)] or [anchor]
    if order_key(chain[-1]) != order_key(anchor):
        chain = [*chain, anchor]
    return chain


def _rewind_to(chain: list[Batch], threshold: datetime, found: Findings) -> int | None:
    """Index of the batch to rewind to (None: no window was open), with warnings for
    batches without journaled event times."""
    if not any(b.event_time_max is not None for b in chain):
        if all(b.num_input_rows == 0 for b in chain):
            return None
        found.warnings.append(
            "no event times are journaled for this checkpoint's batches (imported "
            "from a checkpoint?): rewinding to its first journaled batch"
        )
        return 0
    k = rewind_index(chain, threshold)
    if k is not None and chain[k].event_time_max is None:
        found.warnings.append(
            f"{BatchRef.of(chain[k]).label()} has no journaled event times (imported "
            "from a checkpoint?): rewinding to it, as it may hold records of a "
            "window still open"
        )
    return k


def state_aware_start(inp: PlanInputs, when: str) -> Start:
    """Where a state-aware plan starts: after the anchor when no window was open at the
    cutoff, else at the START offsets of the first batch that may hold one's records.
    ``when``: how the anchor was chosen, for the notes."""
    chain = _chain_to_anchor(inp)
    cutoff, cutoff_batch = emitted_cutoff(chain)
    if cutoff is None or cutoff_batch is None:
        raise RestartError(
            f"a state-aware plan needs the watermark, and no journaled batch of query "
            f"{inp.request.query_name!r} (query id {inp.anchor.query_id}) reported one: was "
            "withWatermark used?"
        )
    found = Findings()
    if cutoff_batch is not inp.anchor:
        found.warnings.append(
            f"the last batch reported no watermark: using {format_time(cutoff)} from "
            f"{BatchRef.of(cutoff_batch).label()}"
        )
    window = inp.request.window
    threshold = cutoff - window if window is not None else cutoff
    found.notes.append(
        f"State-aware restart after {BatchRef.of(inp.anchor).label()} (the last journaled "
        f"batch{when}). That batch ran with watermark {format_time(cutoff)}: in append mode "
        "every window ending at or before it has been emitted to the sink; windows "
        "ending after it lived only in the old checkpoint's state, which is being "
        "discarded, so their records must be read again."
    )
    if window is None:
        found.warnings.append(
            "no window length given: re-reading only records at or after the cutoff; "
            "a window still open at the cutoff that began before it comes out "
            "incomplete (pass the window length)"
        )
    k = _rewind_to(chain, threshold, found)
    start = Start(POSITION_AFTER, None, inp.journal.before, found, cutoff=cutoff)
    if k is None:
        found.notes.append(
            f"No journaled batch of this checkpoint holds event times at or after "
            f"{format_time(threshold)}: the discarded state held no window still open, so "
            "the new query starts after the last batch, at its END offsets."
        )
    else:
        start.position = POSITION_REWIND
        start.from_batches = list(chain[k:])
        start.before = chain[k - 1] if k > 0 else inp.journal.before
        start.start_ref = BatchRef.of(chain[k])
        found.notes.append(
            f"Rewinding to the START offsets of {start.start_ref.label()}: the earliest "
            f"batch of this checkpoint with event times at or after "
            f"{format_time(threshold)} (the cutoff{' minus the window length' if window else ''}"
            f"), so every record of a window still open is read again "
            f"({len(start.from_batches)} batches)."
        )
    found.notes += _cutoff_notes(cutoff)
    return start


def _cutoff_notes(cutoff: datetime) -> list[str]:
    return [
        f"event_time_cutoff = {format_time(cutoff)}: in the new job drop windows whose end "
        "is at or before it (e.g. .where(col('window.end') > cutoff)) so no window is "
        "written twice.",
        "Records that came later than the watermark were dropped by the old query; "
        "the new query's watermark starts over, so it may count some of them in "
        "windows ending after the cutoff: those windows can come out slightly more "
        "complete than the old query would have written them.",
    ]
