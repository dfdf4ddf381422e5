"""Checks of what the gather step read besides the plan's own facts (pure): the
journal's orders on the last batch, batches a full spool dropped, flagged problems
beyond those listed, and the Delta tables at the sources' paths now."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import RestartError
from ..formatting import format_time
from ..rows import FLAGGED_PROBLEMS, KIND_DELTA, KIND_KAFKA, Batch, BatchRef, SpoolLoss, source_kind
from ..wording import count, tp
from ._delta_log import same_path
from ._findings import Findings
from ._inputs import PlanInputs
from ._other_sources import check_delta_table, delta_path
from .model import SourcePlan


def gathered_warnings(inp: PlanInputs) -> list[str]:
    """The warnings of the read-only facts, in the order plans have always said them:
    the last batch's, the flagged problems cut off, then the spool's losses."""
    warnings = check_last_batch(inp.request.query_name, inp.anchor, inp.last_candidates) \
        if inp.last_candidates else []
    if inp.problems_cut:
        warnings.append(
            f"the journal flagged problems on more batches than the {FLAGGED_PROBLEMS} "
            "most recent reported here: see offset_journal.batch_sources.problem")
    return warnings + [spool_loss_warning(loss) for loss in inp.spool_losses]


def spool_loss_warning(loss: SpoolLoss) -> str:
    """A plan warning for batches a full listener spool dropped (spool_max_bytes)."""
    batches = (f"batch ids {loss.batch_id_min}..{loss.batch_id_max}"
               if loss.batch_id_min is not None else "unknown batch ids")
    runs = ", ".join(loss.run_ids[:3]) + (" ..." if len(loss.run_ids) > 3 else "")
    when = (f", triggered {format_time(loss.first_trigger_at)}.."
            f"{format_time(loss.last_trigger_at)}"
            if loss.first_trigger_at is not None else "")
    parts = ", ".join(f"{tp(t, p)} {lo}..{hi}" for _i, t, p, lo, hi in loss.partitions[:8])
    more = f" and {len(loss.partitions) - 8} more" if len(loss.partitions) > 8 else ""
    return (f"{count(loss.events, 'batch event')} of this query were dropped from a full "
            f"listener spool (spool_max_bytes) on {loss.host or 'an unknown host'} and are "
            f"not in the journal: {batches} of run(s) {runs}{when}"
            + (f"; offsets {parts}{more}" if parts else "")
            + ". Each query's newest batch was kept; plans that start inside this range "
            "(--as-of, --batch, state-aware rewinds) cannot be checked against it")


def delta_table_findings(sources: Sequence[SourcePlan],
                         tables: Mapping[str, str | None | Exception] | None,
                         recreated: Sequence[str]) -> Findings:
    """Hold each Delta source's plan against the table at its path now (``tables``:
    its table id as gathered; None: not gathered, nothing to check), in place; errors
    for recreated paths no source reads."""
    if tables is None:
        return Findings()
    asked = {same_path(p): p for p in recreated}
    seen: set[str] = set()
    for source in sources:
        path = delta_path(source.description) if source.kind == KIND_DELTA else None
        if path is None:
            continue
        seen.add(same_path(path))
        now = tables.get(path, OSError("not read when the plan's facts were gathered"))
        check_delta_table(source, path, now, same_path(path) in asked)
    return Findings(errors=[f"--restart-recreated-table {p}: no journaled Delta source reads it"
                            for key, p in asked.items() if key not in seen])



def _kafka_ends(batch: Batch) -> dict[tuple[int, str, int], int]:
    return {(s.source_index, p.topic, p.partition): p.end for s in batch.sources
            if source_kind(s) == KIND_KAFKA for p in s.partitions if p.end is not None}


def check_last_batch(query_name: str, anchor: Batch, others: Sequence[Batch]) -> list[str]:
    """Check the batch the journal's own order calls last against the batches other
    orders call last (pure); returns warnings, raises RestartError when they disagree.

    The journal's order (the database's sequence, then batch ids within the run)
    cannot be skewed by a driver's clock, but a batch replayed late from a spool can
    come after batches of a later run. The offsets settle it: the last batch must have
    read every Kafka partition it shares with another candidate at least as far. If
    another candidate read further, which batch is last is not clear from the journal,
    and a person must choose (``--batch RUN:BATCH``).
    """
    warnings: list[str] = []
    mine = _kafka_ends(anchor)
    for other in others:
        if other.pk == anchor.pk:
            continue
        theirs = _kafka_ends(other)
        ahead = sorted(k for k in mine.keys() & theirs.keys() if theirs[k] > mine[k])
        ref, other_ref = BatchRef.of(anchor).label(), BatchRef.of(other).label()
        if ahead:
            sample = ", ".join(f"{tp(t, p)} {theirs[(i, t, p)]} > {mine[(i, t, p)]}"
                               for i, t, p in ahead[:3])
            more = f" and {len(ahead) - 3} more" if len(ahead) > 3 else ""
            raise RestartError(
                f"the journal's orders disagree on the last batch of query {query_name!r}: "
                f"{ref} was journaled last, but {other_ref} read further ({sample}{more}); "
                "a batch replayed late from a spool, a driver's clock off, or two jobs "
                "under one name? Choose where to start explicitly: --batch RUN:BATCH "
                "(starts AT that batch) or --as-of TIME"
            )
        later = (other.trigger_at is not None and anchor.trigger_at is not None
                 and other.trigger_at > anchor.trigger_at)
        if later:
            shared = "; the offsets agree" if mine.keys() & theirs.keys() else (
                "; no Kafka partition in common to check it by")
            warnings.append(
                f"{other_ref} has a later trigger time than {ref}, which the journal "
                f"recorded after it: the clock of run {other.run_id}'s driver was ahead, "
                f"or of run {anchor.run_id}'s behind. The journal's own order decides"
                f"{shared}"
            )
    return warnings
