"""Step 1 of :func:`~.plan.decide` (pure): refuse what cannot be planned, before
anything is decided (the request's mode against its position is checked just before,
by :func:`~..request.check_request`): a NEW checkpoint location that holds offsets,
topics named as recreated that the plan does not read, a cluster other than the
journaled one."""

from __future__ import annotations

from ...errors import RestartError
from ...rows import kafka_topics
from .._inputs import PlanInputs
from ..model import CheckpointState
from .cluster import refuse_other_cluster


def refuse(inp: PlanInputs) -> None:
    """Raise RestartError for a request that cannot be planned (the module docstring
    says which), the first that applies in that order: what the person can fix in the
    request comes before what the cluster says."""
    if inp.locations.checkpoint is not None:
        refuse_used_checkpoint(inp.locations.checkpoint, inp.anchor.query_id)
    refuse_unknown_recreated(inp)
    refuse_other_cluster(inp.kafka.cluster, inp.request.translate_from,
                         by_time=inp.request.from_time is not None,
                         accepted=inp.request.accept_cluster)


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


def refuse_unknown_recreated(inp: PlanInputs) -> None:
    """Raise RestartError for topics named as recreated that the plan does not read
    (a typo must not pass unnoticed), or when there is no cluster to see them on."""
    asked = inp.request
    if not asked.recreated_topics:
        return
    known = (set(kafka_topics([inp.anchor, *inp.journal.chain], asked.source))
             | set(asked.subscribe or ()))
    unknown = sorted(set(asked.recreated_topics) - known)
    if unknown:
        have = ", ".join(sorted(known)) or "none"
        raise RestartError(
            f"--restart-recreated-topic {unknown[0]}: query {asked.query_name!r} neither "
            f"journaled nor subscribes to topic {unknown[0]!r} (its topics: {have})")
    if inp.kafka.state is None:
        raise RestartError("--restart-recreated-topic needs the cluster (bootstrap servers): "
                           "the recreated topic's partitions are read from it")
