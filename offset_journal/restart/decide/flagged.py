"""What the journal flagged when it wrote the plan's batches (pure): gathered before
the start is decided (a start after a flagged batch says so), judged once it is."""

from __future__ import annotations

from collections.abc import Sequence

from ...rows import Batch, BatchRef, FlaggedProblem
from .._findings import Findings, Flagged
from .._inputs import PlanInputs
from ..model import POSITION_AFTER, POSITION_SAVEPOINT, Start


def flagged_batches(problems: Sequence[FlaggedProblem], batches: Sequence[Batch]) -> Flagged:
    """What the journal flagged, from its list and from the plan's own batches' sources."""
    out: Flagged = {}
    for p in problems:
        ref = BatchRef(p.run_id, p.batch_id, p.query_id, p.trigger_at)
        out[(p.pk, p.source_index)] = (ref.label(), p.problem)
    for batch in batches:
        for src in batch.sources:
            if src.problem:
                out[(batch.pk, src.source_index)] = (BatchRef.of(batch).label(), src.problem)
    return out


def flagged_findings(inp: PlanInputs, start: Start, flagged: Flagged) -> Findings:
    """An error where the plan takes the END offsets of a flagged batch (it starts
    after it); re-read batches (at, rewind) and earlier ones get a warning: reading
    a batch again is how a person repairs what was flagged on it."""
    found = Findings()
    # Plans that take the anchor's END offsets: after it, or after a savepoint's batch.
    affected = ({inp.anchor.pk} if start.position in (POSITION_AFTER, POSITION_SAVEPOINT)
                else set())
    for (pk, index), (label, problem) in sorted(flagged.items(), key=lambda x: x[0]):
        if inp.request.source is not None and index != inp.request.source:
            continue
        if pk in affected:
            found.errors.append(f"the journal flagged {label}, which this plan starts from: "
                                f"source {index}: {problem}")
        else:
            found.warnings.append(f"the journal flagged {label}: source {index}: {problem}")
    return found
