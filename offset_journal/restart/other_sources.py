"""Sources other than Kafka (pure): Delta (startingVersion), files, rate, others.

Only Delta has an option that resumes where the journal says; for the others the plan
says what a new checkpoint will do, and how to avoid reading things twice.
"""

from __future__ import annotations

import json
from typing import Any

from ..journal import SourceOffsets
from .model import KIND_DELTA, KIND_FILE, KIND_RATE, PlanInputs, SourceKind, SourcePlan, Start


def journaled_offset(inp: PlanInputs, start: Start, index: int) -> tuple[Any, str]:
    """The journaled offset a non-Kafka source starts from, and what it is: the
    anchor's end offset, or the first re-read batch's start offset (else the end
    offset of the batch before it)."""
    if start.from_batches is None:
        return inp.anchor.source(index).end_offset, "end offset"
    try:
        offset = start.from_batches[0].source(index).start_offset
    except KeyError:
        offset = None
    what = "start offset"
    if offset is None and start.before is not None:
        try:
            offset = start.before.source(index).end_offset
            what = "end offset (of the batch before)"
        except KeyError:
            offset = None
    return offset, what


def other_source_plan(source: SourceOffsets, kind: SourceKind, offset: Any,
                      what: str) -> SourcePlan:
    """How a non-Kafka source starts from ``offset`` (``what``: which offset it is)."""
    plan = SourcePlan(source.source_index, source.description, kind, {}, None, offset)
    shown = json.dumps(offset, separators=(",", ":"), sort_keys=True, default=str)
    if kind == KIND_DELTA:
        _delta(plan, offset, shown, what)
    elif kind == KIND_FILE:
        plan.warnings.append(
            "the file source has no starting-position option: a new checkpoint lists the "
            "directory again and reads every file in it (the journaled logOffset "
            f"{shown} indexes the OLD checkpoint's file log); move processed files away "
            "(cleanSource) or limit with maxFileAge to avoid re-reading"
        )
    elif kind == KIND_RATE:
        plan.notes.append(
            f"the rate source generates rows from the query's start: nothing to resume "
            f"(journaled {what}: {shown})"
        )
    else:
        plan.warnings.append(
            f"no option is known for this source; journaled {what}: {shown} (see the "
            "source's documentation for a starting-position option)"
        )
    return plan


def _delta(plan: SourcePlan, offset: Any, shown: str, what: str) -> None:
    """startingVersion from a Delta offset (reservoirVersion, index, isStartingVersion)."""
    if not isinstance(offset, dict) or not isinstance(offset.get("reservoirVersion"), int):
        plan.errors.append(f"the journaled Delta offset has no reservoirVersion: {shown}")
        return
    version = offset["reservoirVersion"]
    index_in = offset.get("index", -1)
    if offset.get("isStartingVersion"):
        plan.warnings.append(
            f"the old query was still reading the table's initial snapshot (version "
            f"{version}); no option resumes inside a snapshot: without startingVersion "
            "the whole table is read again (duplicates); startingVersion="
            f"{version + 1} would skip the rest of the snapshot"
        )
        plan.notes.append(f"journaled {what}: {shown}; no startingVersion set")
        return
    plan.options["startingVersion"] = str(version)
    plan.notes.append(
        f"journaled {what}: {shown}: startingVersion = reservoirVersion = {version}"
    )
    if isinstance(index_in, int) and index_in >= 0:
        plan.warnings.append(
            f"version {version} was only partly processed (files up to index "
            f"{index_in}): it is read again in full, so some of its rows come twice"
        )
    else:
        plan.notes.append(f"every version before {version} was processed in full")
