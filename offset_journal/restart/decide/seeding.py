"""A plan from a savepoint (pure): where it starts (what becomes of each old operator's
state: :mod:`.carried`).

The plan starts right after the savepoint's batch B, at B's END offsets: the carried
state holds every record up to them, so each later record is counted once into it.
"""

from __future__ import annotations

import json
from typing import Any

from ...rows import BatchRef
from ...savepoint.model import Savepoint
from .._findings import Findings
from .._inputs import PlanInputs
from ..model import POSITION_SAVEPOINT, Start
from .carried import carried_state, seeded_ids  # importable here as before


def savepoint_start(inp: PlanInputs, savepoint: Savepoint) -> Start:
    """Start AFTER the savepoint's batch (the anchor), with the notes saying why, and a
    warning when the journal or the old checkpoint goes on past it (those batches are
    read again, their output written again)."""
    anchor = BatchRef.of(inp.anchor)
    m = savepoint.manifest
    start = Start(POSITION_SAVEPOINT, None, inp.journal.before, Findings(), start_ref=None)
    start.findings.notes.append(
        f"Starts AFTER {anchor.label()}, the batch of {savepoint.label()}: at its END "
        "offsets, where the carried state stands (the state holds every record before "
        "them), so each later record is counted once into it: state and offsets agree.")
    start.findings.notes += list(m.notes)
    start.findings.errors += _offsets_differ(inp, savepoint)
    latest = inp.savepoint_facts.latest
    if latest is not None and latest.pk != inp.anchor.pk:
        start.findings.warnings.append(
            f"the journal goes on past the savepoint's batch, to "
            f"{BatchRef.of(latest).label()}: the records the old query processed after "
            f"batch {m.batch_id} are read again, counted once into the carried state (it "
            "does not hold them), but their output is written again: the sink receives "
            "those rows a second time unless it is idempotent")
    if m.committed_after is not None:
        first, last = m.committed_after
        which = f"batch {first}" if first == last else f"batches {first}..{last}"
        start.findings.warnings.append(
            f"the old checkpoint committed {which} after the savepoint's batch "
            f"{m.batch_id}, which the journal lacks (the listener had not journaled them): "
            "the old query already wrote their output, and the new query reads those "
            "records again from the savepoint's offsets and writes it again: the sink "
            "receives those rows a second time unless it is idempotent")
    start.findings.warnings += list(savepoint.warnings)
    return start


def _offsets_differ(inp: PlanInputs, savepoint: Savepoint) -> list[str]:
    """An error per source whose end offset the savepoint recorded is not the
    journal's (the state would not match the offsets the plan starts from)."""
    out = []
    for end in savepoint.manifest.end_offsets:
        try:
            journaled = inp.anchor.source(end.index).end_offset
        except KeyError:
            journaled = None
        if _canonical(journaled) != _canonical(end.offset):
            out.append(f"source {end.index}: the savepoint recorded other end offsets for "
                       f"batch {savepoint.manifest.batch_id} than the journal holds now: "
                       "the state would not match the offsets the plan starts from")
    return out


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


__all__ = ["carried_state", "savepoint_start", "seeded_ids"]
