"""Where a plan is decided: :func:`decide` (pure: one :class:`~._inputs.PlanInputs`
in, the plan out; :func:`compute_plan` builds the inputs from a batch and the typed
groups).

It is a short sequence of steps, each returning :class:`~.model.Findings`:

1. refuse what cannot be planned (unknown mode, a used checkpoint location);
2. decide where to start, one module per kind of start: after the last batch
   (start_after.py), at a batch or a record time (start_at.py), state-aware
   (state_aware.py), from a savepoint (seeding.py), translated (translated.py);
3. flag the batches the journal flagged when it wrote them;
4. plan each source (Kafka: kafka_offsets.py, others: other_sources.py);
5. check the output path, the sink (foreachBatch: Delta txnAppId), the new checkpoint,
   the clocks and concurrent runs, and what the gather step read besides (checks.py:
   the journal's orders on the last batch, spool losses, the Delta tables now).

Before 2, the old query's sink (``sink.py``): when its own commit log holds batches
beyond the journal's last, they are taken from the old checkpoint and the plan starts
after the last of them, as if the journal had them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ...errors import RestartError
from ...formatting import format_time
from ...overlap import concurrent_runs
from ...rows import KIND_KAFKA, Batch, BatchRef, FlaggedProblem, order_key, source_kind
from .._findings import Findings, Flagged
from .._inputs import (
    JournalFacts,
    KafkaFacts,
    LocationFacts,
    OldQueryFacts,
    PlanInputs,
    SavepointFacts,
)
from ..model import (
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
from ..request import PlanRequest, check_request
from .checks import (
    async_findings,
    check_last_batch,
    concurrency_findings,
    delta_table_findings,
    future_trigger_findings,
    gathered_warnings,
    location_findings,
    unchecked_cluster,
)
from .from_time import time_source_plan
from .kafka_offsets import kafka_source_plan, kafka_topics
from .other_sources import journaled_offset, other_source_plan, sink_findings
from .real_time import real_time_findings
from .seeding import carried_state, savepoint_start
from .sink import sink_outcome
from .start_after import after_start, still_running
from .start_at import at_start, from_time_start
from .state_aware import state_aware_start
from .translate import cluster_findings, refuse_other_cluster
from .translated import translated_start


def compute_plan(query_name: str, anchor: Batch | JournalFacts, *,
                 locations: LocationFacts | None = None, kafka: KafkaFacts | None = None,
                 old_query: OldQueryFacts | None = None,
                 savepoint_facts: SavepointFacts | None = None,
                 command: str = "api", **asked: Any) -> RestartPlan:
    """Make a restart plan from journal data alone (pure: no I/O).

    ``anchor``: the batch to plan from, or the journal's facts around it
    (:class:`~._inputs.JournalFacts`); the other facts come as their typed groups
    (:class:`~._inputs.PlanInputs` says what each holds). The other keyword arguments
    are the request's fields (:class:`~.request.PlanRequest`: ``mode``, ``as_of``,
    ``allow_data_loss``...); a name that is not one is a TypeError.
    """
    journal = anchor if isinstance(anchor, JournalFacts) else JournalFacts(anchor)
    return decide(PlanInputs(PlanRequest(query_name, **asked), journal,
                             locations or LocationFacts(), kafka or KafkaFacts(),
                             old_query or OldQueryFacts(), savepoint_facts or SavepointFacts(),
                             command=command))


def decide(inp: PlanInputs) -> RestartPlan:
    """The plan for ``inp``: the steps of the module docstring, in order."""
    gathered = gathered_warnings(inp)  # before all: the journal must know its last batch
    refuse_bad_request(inp)
    sink = sink_outcome(inp)
    if sink.taken:  # the sink holds batches beyond the journal: start after its last
        inp = replace(inp, journal=replace(inp.journal, anchor=sink.taken[-1]),
                      sink_taken=sink.taken)
    flagged = flagged_batches(inp.journal.problems, [inp.anchor, *inp.journal.chain])
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
    found.merge(future_trigger_findings(inp.anchor, inp.journal.database_now))
    found.merge(concurrency_findings(inp))
    found.merge(async_findings(inp, start))
    found.merge(cluster_findings(inp.kafka.cluster, inp.request.translate_from,
                                 inp.request.accept_cluster))
    real_time, rt_record = real_time_findings(inp, start, sources)
    found.merge(real_time)
    state: list[CarriedState] = []
    saved = inp.savepoint_facts.loaded
    if saved is not None:
        state, carried = carried_state(inp, saved)
        found.merge(carried)
    found.warnings += gathered
    found.merge(delta_table_findings(sources, inp.locations.delta_tables,
                                     inp.request.recreated_tables))
    return RestartPlan(
        query_name=inp.request.query_name, mode=inp.mode, position=start.position,
        anchor=BatchRef.of(inp.anchor), start_batch=start.start_ref, sources=sources,
        notes=found.notes, plan_warnings=found.warnings, plan_errors=found.errors,
        as_of=inp.request.as_of, event_time_cutoff=start.cutoff,
        window=inp.request.window if inp.mode == MODE_STATE_AWARE else None,
        checkpoint=inp.locations.checkpoint.path if inp.locations.checkpoint else None,
        output_path=inp.locations.output.path if inp.locations.output else None,
        kafka_checked=inp.kafka.state is not None,
        from_time=inp.request.from_time if start.position == POSITION_FROM_TIME else None,
        reread=list(inp.kafka.reread) if start.position == POSITION_FROM_TIME else [],
        kafka_cluster_id=inp.kafka.cluster.now if inp.kafka.cluster else None,
        journaled_cluster_id=inp.kafka.cluster.journaled if inp.kafka.cluster else None,
        savepoint_id=saved.id if saved else None,
        savepoint_location=saved.location if saved else None,
        savepoint_sha256=saved.digest if saved else None,
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
    check_request(inp.mode, inp.journal.position)
    if inp.locations.checkpoint is not None:
        refuse_used_checkpoint(inp.locations.checkpoint, inp.anchor.query_id)
    refuse_unknown_recreated(inp)
    refuse_other_cluster(inp.kafka.cluster, inp.request.translate_from,
                         by_time=inp.request.from_time is not None,
                         accepted=inp.request.accept_cluster)


def refuse_unknown_recreated(inp: PlanInputs) -> None:
    """Raise RestartError for topics named as recreated that the plan does not read
    (a typo must not pass unnoticed), or when there is no cluster to see them on."""
    if not inp.request.recreated_topics:
        return
    asked = inp.request
    known = (set(kafka_topics([inp.anchor, *inp.journal.chain], asked.source))
             | set(asked.subscribe or ()))
    unknown = sorted(set(inp.request.recreated_topics) - known)
    if unknown:
        have = ", ".join(sorted(known)) or "none"
        raise RestartError(
            f"--restart-recreated-topic {unknown[0]}: query {inp.request.query_name!r} neither "
            f"journaled nor subscribes to topic {unknown[0]!r} (its topics: {have})")
    if inp.kafka.state is None:
        raise RestartError("--restart-recreated-topic needs the cluster (bootstrap servers): "
                           "the recreated topic's partitions are read from it")


# --------------------------------------------------------------------------- 2. start


def where_to_start(inp: PlanInputs, flagged: Flagged) -> Start:
    """Which kind of start, each decided by its own module: from a savepoint
    (seeding), state-aware (rewound: state_aware), from a record time or AT a batch
    (start_at), or AFTER the anchor (start_after; translated: translated)."""
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


__all__ = ["check_last_batch", "check_request", "compute_plan", "concurrent_runs", "decide",
           "order_key", "refuse_used_checkpoint"]
