"""Step 4 of :func:`~.plan.decide` (pure): one plan per source of the anchor (or the
one asked for), each by its kind: Kafka from the journal (kafka_offsets) or from a
record time (from_time), any other source from its journaled offset (other_sources)."""

from __future__ import annotations

from ...errors import RestartError
from ...rows import KIND_KAFKA, BatchRef, source_kind
from .._findings import Findings
from .._inputs import PlanInputs
from ..model import POSITION_FROM_TIME, SourcePlan, Start
from .from_time import time_source_plan
from .kafka_offsets import kafka_source_plan
from .other_sources import journaled_offset, other_source_plan

TIME_FOR_KAFKA_ONLY = ("a record time applies to Kafka sources only: this source starts "
                       "after the last journaled batch")


def source_plans(inp: PlanInputs, start: Start) -> tuple[list[SourcePlan], Findings]:
    """The sources' plans; an error when the anchor journaled none, RestartError for a
    source asked for that it does not have."""
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
    found = Findings(errors=[] if indexes else
                     [f"{BatchRef.of(anchor).label()} journaled no sources"])
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
                plans[-1].warnings.append(TIME_FOR_KAFKA_ONLY)
    return plans, found
