"""The plan's checks (pure), step 5 of :func:`~.plan.decide`: the cluster not asked,
the output path and the new checkpoint, a trigger time ahead of the database's clock,
runs that overlapped, async progress tracking; and what the gather step read besides the plan's
own facts: the journal's orders on the last batch, batches a full spool dropped,
flagged problems beyond those listed, and the Delta tables at the sources' paths now."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from ...descriptions import is_foreach_batch_sink
from ...errors import RestartError
from ...formatting import format_time
from ...overlap import concurrent_runs
from ...rows import (
    FLAGGED_PROBLEMS,
    KIND_DELTA,
    KIND_KAFKA,
    Batch,
    BatchRef,
    SpoolLoss,
    source_kind,
)
from ...wording import count, tp
from .._delta_log import same_path
from .._findings import Findings
from .._inputs import PlanInputs
from ..model import POSITION_AFTER, SourcePlan, Start
from .other_sources import check_delta_table, delta_path

FUTURE_TOLERANCE = timedelta(minutes=1)
"""A driver's clock this far ahead of the database's is worth a warning."""
FUTURE_LIMIT = timedelta(days=1)
"""No driver's clock is this far ahead: a batch triggered later is forged or corrupt."""


def plan_checks(inp: PlanInputs, start: Start, sources: Sequence[SourcePlan],
                ) -> tuple[Findings, Findings]:
    """The checks of a plan whose start and sources are decided, joined in the order a
    plan says them, and apart the Delta tables' (a plan says them last); a Delta
    source's plan is held against its table in place. The runs' overlap is computed
    last, as it is the one check that leaves this module (:mod:`offset_journal.overlap`)."""
    unchecked = unchecked_cluster(inp, sources)
    located = location_findings(inp)
    sink = Findings(warnings=sink_findings(inp.anchor.sink_description))
    future = future_trigger_findings(inp.anchor, inp.journal.database_now)
    tracked = async_findings(inp, start)
    tables = delta_table_findings(sources, inp.locations.delta_tables,
                                  inp.request.recreated_tables)
    overlapped = concurrency_findings(inp)
    return Findings.joined(unchecked, located, sink, future, overlapped, tracked), tables


def unchecked_cluster(inp: PlanInputs, sources: Sequence[SourcePlan]) -> Findings:
    found = Findings()
    if inp.kafka.state is None and any(s.kind == KIND_KAFKA for s in sources):
        found.warnings.append(
            "not checked against a Kafka cluster (no bootstrap servers): partitions added "
            "since, deleted topics and offsets lost to retention are unknown"
        )
    return found


def location_findings(inp: PlanInputs) -> Findings:
    """The output path's file sink log, and the new checkpoint location."""
    found = Findings()
    sink, checkpoint = inp.locations.output, inp.locations.checkpoint
    if sink is not None and sink.last_batch_id is not None:
        found.warnings.append(
            f"output path {sink.path} already has a file sink log (_spark_metadata, up to "
            f"batch {sink.last_batch_id}): a query on a new checkpoint numbers batches from "
            f"0 again and the sink skips batches 0..{sink.last_batch_id} as already "
            "written, silently dropping their output; write to a new output path"
        )
    elif sink is not None:
        found.notes.append(
            f"Output path {sink.path} has no file sink log: nothing will be skipped.")
    if checkpoint is not None:
        found.notes.append(f"New checkpoint location {checkpoint.path} holds no offsets: "
                           "Spark will honour startingOffsets there.")
    return found


def sink_findings(description: str | None) -> list[str]:
    """Warnings about the old query's sink (its journaled description): a foreachBatch
    sink may write Delta with idempotent writes keyed on the batch id. What the function
    writes is not in the journal, so the plan says it for every foreachBatch sink."""
    if not is_foreach_batch_sink(description):
        return []
    return [
        "the query's sink is foreachBatch: if it writes Delta with idempotent writes "
        "(options txnAppId and txnVersion = batch id), the new checkpoint needs a NEW "
        "txnAppId: the new query numbers its batches from 0 again, and Delta silently "
        "skips every write whose txnVersion is not above the last one the table recorded "
        "for that txnAppId (the rows never reach the table)"
    ]


def future_trigger_findings(anchor: Batch, database_now: datetime | None) -> Findings:
    """A batch triggered after the database's clock: trigger times come from the
    drivers' clocks, so a little ahead is clock skew (a warning: the order of batches
    may be wrong), far ahead is a batch that cannot be real (an error)."""
    when = anchor.trigger_at
    if database_now is None or when is None or when <= database_now + FUTURE_TOLERANCE:
        return Findings()
    ahead = when - database_now
    label = BatchRef.of(anchor).label()
    if ahead > FUTURE_LIMIT:
        return Findings(errors=[
            f"{label} was triggered at {format_time(when)}, {ahead.days} days in the future "
            f"of the database's clock ({format_time(database_now)}): no driver's clock is "
            "that wrong, so the batch is forged or corrupt and its offsets are not handed "
            "out; start from a point in time before it (--as-of now) or a batch (--batch)"
        ])
    return Findings(warnings=[
        f"{label} was triggered at {format_time(when)}, {ahead} ahead of the database's "
        f"clock ({format_time(database_now)}): a driver's clock is fast, so 'last' by "
        "trigger time may not be the last batch; check `history` before using this plan"
    ])


def concurrency_findings(inp: PlanInputs) -> Findings:
    """A warning per pair of runs (started by the anchor's time) that overlapped."""
    cutoff_time = inp.anchor.trigger_at
    relevant = [s for s in inp.journal.runs if cutoff_time is None or s.start is None
                or s.start <= cutoff_time]
    return Findings(warnings=[
        f"runs {a.run_id} and {b.run_id} of query {inp.request.query_name!r} journaled batches at "
        f"the same time ({format_time(a.start)}..{format_time(a.end)} and "
        f"{format_time(b.start)}..{format_time(b.end)}): two jobs under one name "
        "interleave their offsets, and the last batch may belong to either"
        for a, b in concurrent_runs(relevant)
    ])


def async_findings(inp: PlanInputs, start: Start) -> Findings:
    """A warning when the plan starts after a batch whose end offsets may not be in the
    old checkpoint yet (async progress tracking)."""
    tail = inp.journal.async_tail
    if tail is None or start.position != POSITION_AFTER or not tail.batches:
        return Findings()
    ids = [b.batch_id for b in tail.batches if b.run_id == inp.anchor.run_id]
    if inp.anchor.run_id != tail.run_id or inp.anchor.batch_id not in ids:
        return Findings()
    first, last = ids[0], ids[-1]
    which = f"batch {first}" if first == last else f"batches {first}..{last}"
    return Findings(warnings=[
        f"run {tail.run_id} ran with async progress tracking (asyncProgressTrackingEnabled: "
        f"Spark writes its offset and commit logs at most every {tail.interval_ms} ms): "
        f"{which}, journaled in the last {tail.interval_ms} ms of the run, may not be in "
        "its checkpoint, so their end offsets may not be final. This plan starts after "
        f"batch {inp.anchor.batch_id}, which Spark reported done (its output is in the "
        "sink) and which a NEW checkpoint takes as it is; but the OLD checkpoint may be "
        "behind it and, restarted, would run those batches again, maybe with other offset "
        "ranges: do not run both. To start from the last batch certainly durable instead, "
        f"use --batch {tail.run_id}:{first} (its start offsets: {which} processed again), "
        "or accept possible reprocessing downstream; `checkpoint compare DIR QUERY` shows "
        "where the old checkpoint stands"
    ])


def gathered_warnings(inp: PlanInputs) -> list[str]:
    """The warnings of the read-only facts, in the order plans have always said them:
    the last batch's, the flagged problems cut off, then the spool's losses."""
    warnings = check_last_batch(inp.request.query_name, inp.anchor, inp.journal.last_candidates) \
        if inp.journal.last_candidates else []
    if inp.journal.problems_cut:
        warnings.append(
            f"the journal flagged problems on more batches than the {FLAGGED_PROBLEMS} "
            "most recent reported here: see offset_journal.batch_sources.problem")
    return warnings + [spool_loss_warning(loss) for loss in inp.journal.spool_losses]


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
