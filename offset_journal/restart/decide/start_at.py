"""A plan that reads again from a point (pure): AT a journaled batch (``--batch``: its
START offsets) or from a record time (``--from-time``: per partition, the first offset
at or after it; the offsets themselves are :mod:`.from_time`'s)."""

from __future__ import annotations

from ...formatting import format_time
from ...rows import BatchRef
from .._findings import Findings
from .._inputs import PlanInputs
from ..model import POSITION_AT, POSITION_FROM_TIME, Start
from .from_time import reread_note


def at_start(inp: PlanInputs) -> Start:
    """AT the anchor: that batch and all after it are processed again."""
    anchor_ref = BatchRef.of(inp.anchor)
    return Start(POSITION_AT, [inp.anchor], inp.journal.before, Findings(notes=[
        f"Starts AT {anchor_ref.label()}: its START offsets, so that batch and all "
        "after it are processed again (the sink receives those rows a second time "
        "unless it is idempotent)."
    ]), start_ref=anchor_ref)


def from_time_start(inp: PlanInputs) -> Start:
    """From the request's record time: what is read again is said per journaled run."""
    anchor_ref = BatchRef.of(inp.anchor)
    return Start(POSITION_FROM_TIME, None, None, Findings(notes=[
        f"Starts at record time {format_time(inp.request.from_time)}: per partition, the first "
        "offset whose record timestamp is at or after it (Kafka's offsetsForTimes, as "
        "kafka-consumer-groups --reset-offsets --to-datetime); partitions without such "
        "a record start at their log end. The journal's last batch "
        f"({anchor_ref.label()}) gives the end offsets that counts what is read again.",
        reread_note(inp.kafka.reread)]))
