"""Where a plan is decided: :func:`decide` (pure: one :class:`~._inputs.PlanInputs`
in, the plan out; :func:`compute_plan` builds the inputs from keywords).

It is a short sequence of steps, each returning :class:`~.model.Findings`:

1. refuse what cannot be planned (unknown mode, a used checkpoint location);
2. decide where to start, one module per kind of start: after the last batch
   (_start_after.py), at a batch or a record time (_start_at.py), state-aware
   (_state_aware.py), from a savepoint (seeding.py), translated (_start_translated.py);
3. flag the batches the journal flagged when it wrote them;
4. plan each source (Kafka: kafka_offsets.py, others: _other_sources.py);
5. check the output path, the sink (foreachBatch: Delta txnAppId), the new checkpoint,
   the clocks and concurrent runs, and what the gather step read besides (_checks.py:
   the journal's orders on the last batch, spool losses, the Delta tables now).

Before 2, the old query's sink (``_sink.py``): when its own commit log holds batches
beyond the journal's last, they are taken from the old checkpoint and the plan starts
after the last of them, as if the journal had them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..errors import RestartError
from ..formatting import format_time
from ..overlap import concurrent_runs
from ..rows import KIND_KAFKA, Batch, BatchRef, FlaggedProblem, order_key, source_kind
from ._checks import check_last_batch, delta_table_findings, gathered_warnings
from ._findings import Findings, Flagged
from ._from_time import time_source_plan
from ._inputs import PlanInputs
from ._other_sources import journaled_offset, other_source_plan, sink_findings
from ._real_time import real_time_findings
from ._sink import sink_outcome
from ._start_after import after_start, still_running
from ._start_at import at_start, from_time_start
from ._start_translated import translated_start
from ._state_aware import state_aware_start
from .kafka_offsets import kafka_source_plan, kafka_topics
from .model import (
    MODE_STATE_AWARE,
    POSITION_AFTER,
    POSITION_AT,
    POSITION_FROM_TIME,
    POSITION_SAVEPOINT,
    CarriedState,
    CheckpointState,
    RestartPlan,
    SourcePlan,
    Start,
)
from .request import REQUEST_FIELDS, PlanRequest, check_request
from .seeding import carried_state, savepoint_start
from .translate import cluster_findings, refuse_other_cluster

FUTURE_TOLERANCE = timedelta(minutes=1)
"""A driver's clock this far ahead of the database's is worth a warning."""
FUTURE_LIMIT = timedelta(days=1)
"""No driver's clock is this far ahead: a batch triggered later is forged or corrupt."""

def compute_plan(query_name: str, anchor: Batch, **given: Any) -> RestartPlan:
    """Make a restart plan from journal data alone (pure: no I/O).

    The keyword arguments are the request's fields (:class:`~.request.PlanRequest`:
    ``mode``, ``as_of``, ``allow_data_loss``...) and the facts of
    :class:`~._inputs.PlanInputs` (``position``, ``chain``, ``kafka_state``...), which
    say what each one is; :func:`decide` takes them as one value. A name that is
    neither is a TypeError.
    """
    asked = {k: v for k, v in given.items() if k in REQUEST_FIELDS}
    facts = {k: v for k, v in given.items() if k not in REQUEST_FIELDS}
    return decide(PlanInputs(PlanRequest(query_name, **asked), anchor, **facts))


def decide(inp: PlanInputs) -> RestartPlan:
    """The plan for ``inp``: the steps of the module docstring, in order."""
    gathered = gathered_warnings(inp)  # before all: the journal must know its last batch
    refuse_bad_request(inp)
    sink = sink_outcome(inp)
    if sink.taken:  # the sink holds batches beyond the journal: start after its last
        inp = replace(inp, anchor=sink.taken[-1], sink_taken=sink.taken)
    flagged = flagged_batches(inp.problems, [inp.anchor, *inp.chain])
    start = where_to_start(inp, flagged)
    sources, source_findings = source_plans(inp, start)
    found = Findings(notes=translated_start(inp, start, flagged, sources))
    found.merge(start.findings)
    found.merge(sink.findings)
    found.merge(flagged_findings(inp, start, flagged))
    found.merge(source_findings)
    found.merge(unchecked_cluster(inp, sources))
    found.merge(location_findings(inp))
    found.warnings += sink_findings(inp.anchor.sink_description)
    found.merge(future_trigger_findings(inp.anchor, inp.database_now))
    found.merge(concurrency_findings(inp))
    found.merge(async_findings(inp, start))
    found.merge(cluster_findings(inp.cluster, inp.request.translate_from,
                                 inp.request.accept_cluster))
    real_time, rt_record = real_time_findings(inp, start, sources)
    found.merge(real_time)
    state: list[CarriedState] = []
    if inp.loaded_savepoint is not None:
        state, carried = carried_state(inp, inp.loaded_savepoint)
        found.merge(carried)
    found.warnings += gathered
    found.merge(delta_table_findings(sources, inp.delta_tables, inp.request.recreated_tables))
    return RestartPlan(
        query_name=inp.request.query_name, mode=inp.mode, position=start.position,
        anchor=BatchRef.of(inp.anchor), start_batch=start.start_ref, sources=sources,
        notes=found.notes, plan_warnings=found.warnings, plan_errors=found.errors,
        as_of=inp.request.as_of, event_time_cutoff=start.cutoff,
        window=inp.request.window if inp.mode == MODE_STATE_AWARE else None,
        checkpoint=inp.checkpoint_state.path if inp.checkpoint_state else None,
        output_path=inp.sink.path if inp.sink else None,
        kafka_checked=inp.kafka_state is not None,
        from_time=inp.request.from_time if start.position == POSITION_FROM_TIME else None,
        reread=list(inp.reread) if start.position == POSITION_FROM_TIME else [],
        kafka_cluster_id=inp.cluster.now if inp.cluster else None,
        journaled_cluster_id=inp.cluster.journaled if inp.cluster else None,
        savepoint_id=inp.loaded_savepoint.id if inp.loaded_savepoint else None,
        savepoint_location=inp.loaded_savepoint.location if inp.loaded_savepoint else None,
        savepoint_sha256=inp.loaded_savepoint.digest if inp.loaded_savepoint else None,
        state=state, real_time=rt_record, sink=sink.record, sink_batches=list(sink.taken),
    )


# --------------------------------------------------------------------------- 1. refuse


def refuse_used_checkpoint(state: CheckpointState, query_id: str | None = None) -> None:
    """Raise RestartError when the NEW checkpoint location already holds offsets.

    Spark resumes from such a location and silently ignores ``startingOffsets``, so a
    plan for it would look applied and not be.
    """
    if not state.has_offsets:
        return
    which = (f"batches up to {state.last_batch_id}" if state.last_batch_id is not None
             else "offsets")
    same = (" (it is the checkpoint of the journaled query itself)"
            if state.query_id and query_id and state.query_id == query_id else "")
    raise RestartError(
        f"checkpoint location {state.path} already holds {which}{same}: Spark would "
        "resume from it and ignore startingOffsets; use a new, empty location"
    )


def refuse_bad_request(inp: PlanInputs) -> None:
    check_request(inp.mode, inp.position)
    if inp.checkpoint_state is not None:
        refuse_used_checkpoint(inp.checkpoint_state, inp.anchor.query_id)
    refuse_unknown_recreated(inp)
    refuse_other_cluster(inp.cluster, inp.request.translate_from,
                         by_time=inp.request.from_time is not None,
                         accepted=inp.request.accept_cluster)


def refuse_unknown_recreated(inp: PlanInputs) -> None:
    """Raise RestartError for topics named as recreated that the plan does not read
    (a typo must not pass unnoticed), or when there is no cluster to see them on."""
    if not inp.request.recreated_topics:
        return
    asked = inp.request
    known = (set(kafka_topics([inp.anchor, *inp.chain], asked.source))
             | set(asked.subscribe or ()))
    unknown = sorted(set(inp.request.recreated_topics) - known)
    if unknown:
        have = ", ".join(sorted(known)) or "none"
        raise RestartError(
            f"--restart-recreated-topic {unknown[0]}: query {inp.request.query_name!r} neither "
            f"journaled nor subscribes to topic {unknown[0]!r} (its topics: {have})")
    if inp.kafka_state is None:
        raise RestartError("--restart-recreated-topic needs the cluster (bootstrap servers): "
                           "the recreated topic's partitions are read from it")


# --------------------------------------------------------------------------- 2. start


def where_to_start(inp: PlanInputs, flagged: Flagged) -> Start:
    """Which kind of start, each decided by its own module: from a savepoint
    (seeding), state-aware (rewound: _state_aware), from a record time or AT a batch
    (_start_at), or AFTER the anchor (_start_after; translated: _start_translated)."""
    if inp.loaded_savepoint is not None:
        return savepoint_start(inp, inp.loaded_savepoint)
    if inp.mode == MODE_STATE_AWARE:
        as_of = inp.request.as_of
        when = f" triggered at or before {format_time(as_of)}" if as_of is not None else ""
        start = state_aware_start(inp, when)
    elif inp.position == POSITION_FROM_TIME:
        return from_time_start(inp)
    elif inp.position == POSITION_AT:
        start = at_start(inp)
    else:
        start = after_start(inp, flagged)
    start.findings.notes += still_running(inp)
    return start


# --------------------------------------------------------------------------- 3. flagged


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


# --------------------------------------------------------------------------- 4. sources


def source_plans(inp: PlanInputs, start: Start) -> tuple[list[SourcePlan], Findings]:
    """One plan per source of the anchor (or the one asked for); an error when the
    anchor journaled none."""
    found = Findings()
    anchor = inp.anchor
    indexes = [s.source_index for s in anchor.sources]
    if inp.request.source is not None:
        if inp.request.source not in indexes:
            have = ", ".join(str(i) for i in indexes) or "none"
            raise RestartError(
                f"query {inp.request.query_name!r} has no source {inp.request.source} in "
                f"{BatchRef.of(anchor).label()} (sources: {have})"
            )
        indexes = [inp.request.source]
    if not indexes:
        found.errors.append(f"{BatchRef.of(anchor).label()} journaled no sources")
    plans = []
    for index in indexes:
        src = anchor.source(index)
        kind = source_kind(src)
        if kind == KIND_KAFKA and start.position == POSITION_FROM_TIME:
            plans.append(time_source_plan(inp, src))
        elif kind == KIND_KAFKA:
            plans.append(kafka_source_plan(inp, start, src))
        else:
            plans.append(other_source_plan(src, kind, *journaled_offset(inp, start, index)))
            if start.position == POSITION_FROM_TIME:
                plans[-1].warnings.append(
                    "a record time applies to Kafka sources only: this source starts "
                    "after the last journaled batch")
    return plans, found


# --------------------------------------------------------------------------- 5. checks


def unchecked_cluster(inp: PlanInputs, sources: Sequence[SourcePlan]) -> Findings:
    found = Findings()
    if inp.kafka_state is None and any(s.kind == KIND_KAFKA for s in sources):
        found.warnings.append(
            "not checked against a Kafka cluster (no bootstrap servers): partitions added "
            "since, deleted topics and offsets lost to retention are unknown"
        )
    return found


def location_findings(inp: PlanInputs) -> Findings:
    """The output path's file sink log, and the new checkpoint location."""
    found = Findings()
    sink, checkpoint = inp.sink, inp.checkpoint_state
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
    relevant = [s for s in inp.runs if cutoff_time is None or s.start is None
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
    tail = inp.async_tail
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


__all__ = ["check_last_batch", "check_request", "compute_plan", "concurrent_runs", "decide",
           "order_key", "refuse_used_checkpoint"]
