"""Sources other than Kafka (pure): Delta (startingVersion), files, rate, others.

Only Delta has an option that resumes where the journal says; for the others the plan
says what a new checkpoint will do, and how to avoid reading things twice.
"""

from __future__ import annotations

import json
from typing import Any

from ...descriptions import delta_source_path
from ...rows import KIND_DELTA, KIND_FILE, KIND_RATE, SourceKind, SourceOffsets
from .._inputs import PlanInputs
from ..model import SourcePlan, Start


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
    """``startingVersion`` from a Delta offset (reservoirVersion, index, isStartingVersion).

    Delta's source (DeltaSource.scala, DeltaSourceOffset.scala) reads a batch from its
    start offset EXCLUSIVE to its end offset INCLUSIVE, ordered by (reservoirVersion,
    index). ``index`` numbers the data files a commit adds (0, 1, ...); -1 (BASE_INDEX,
    also -20/-19 around a schema change) is before the version's first file. A version
    read to its end is never journaled as such: Delta moves the offset on to
    (version + 1, -1). ``isStartingVersion`` (isInitialSnapshot) means the index points
    into the table's initial snapshot at that version, which a query started without
    ``startingVersion`` reads first. ``startingVersion=V`` (inclusive) starts at the
    changes committed in version V, from its first file, without a snapshot.
    """
    if not isinstance(offset, dict) or not isinstance(offset.get("reservoirVersion"), int):
        plan.errors.append(f"the journaled Delta offset has no reservoirVersion: {shown}")
        return
    version = offset["reservoirVersion"]
    index = offset.get("index", -1)
    index = index if isinstance(index, int) else -1
    table = offset.get("reservoirId")
    if table:
        plan.notes.append(
            f"Delta table id {table}: the new query must read the same table (a table "
            "deleted and created again at the same path has a new id and starts its "
            "versions again; this plan does not apply to it)")
    if offset.get("isStartingVersion"):
        _delta_in_snapshot(plan, version, index, shown, what)
        return
    plan.options["startingVersion"] = str(version)
    if index < 0:
        plan.notes.append(
            f"journaled {what}: {shown}: every version before {version} was read in full "
            f"and nothing of version {version}: startingVersion = {version} (inclusive) "
            "reads each row once")
        return
    plan.notes.append(f"journaled {what}: {shown}: startingVersion = {version}")
    plan.warnings.append(
        f"version {version} was only partly processed (its data files 0..{index} in Delta's "
        f"order, {index + 1} file(s)): startingVersion cannot start inside a version, so "
        f"startingVersion = {version} reads those {index + 1} file(s) again and their rows "
        f"come twice; startingVersion = {version + 1} instead would skip the rest of "
        f"version {version} (rows lost)")


def _delta_in_snapshot(plan: SourcePlan, version: int, index: int, shown: str,
                       what: str) -> None:
    """The old query was reading the initial snapshot (it started without
    startingVersion): no option starts inside a snapshot."""
    if index < 0:
        plan.notes.append(
            f"journaled {what}: {shown}: the old query had not read any of the table's "
            f"initial snapshot (version {version}) yet: start the new query without "
            "startingVersion, it reads the table's snapshot as it is then, and every "
            "change after it, each row once")
        return
    plan.notes.append(f"journaled {what}: {shown}: no startingVersion set")
    plan.warnings.append(
        f"the old query was still reading the table's initial snapshot at version "
        f"{version} (files 0..{index} of it, {index + 1} file(s), were read) and no option "
        "starts inside a snapshot: without startingVersion the new query reads the whole "
        "table again (the rows already read come twice); startingVersion = "
        f"{version + 1} would skip the rest of the snapshot (rows lost)")


def delta_path(description: str | None) -> str | None:
    """The table path of a Delta source, from Spark's ``DeltaSource[file:/path]``."""
    return delta_source_path(description)


def check_delta_table(plan: SourcePlan, path: str, now: str | None | Exception,
                      recreated: bool) -> None:
    """Hold a Delta source's plan against the table at ``path`` now (``now``: its table
    id, None when no table is there, or the error reading it), in place.

    The journaled offset names the table it belongs to (``reservoirId``). A table
    deleted and created again at the same path has a new id and numbers its versions
    from 0 again, so ``startingVersion`` from the old table would skip the new one's
    first versions: refused, unless the person says the table was recreated
    (``recreated``), when the new query reads it from its start (no startingVersion).
    """
    journaled = plan.journaled.get("reservoirId") if isinstance(plan.journaled, dict) else None
    if isinstance(now, Exception):
        plan.warnings.append(f"the Delta table at {path} could not be read to check its "
                             f"table id ({now}): make sure it is still table {journaled}")
        return
    if journaled is None or now == journaled:
        if recreated:
            plan.errors.append(
                f"the Delta table at {path} was named as recreated "
                f"(--restart-recreated-table) but it is still table {journaled}: plan "
                "without --restart-recreated-table")
        return
    if recreated and now is not None:
        plan.options.pop("startingVersion", None)
        plan.warnings.append(
            f"the Delta table at {path} is table {now} now, not the journaled {journaled}: "
            "as asked (--restart-recreated-table), the new query reads it from its start "
            "(no startingVersion): every row it holds, once")
        return
    there = (f"holds table {now} now, not the journaled {journaled} (deleted and created "
             "again: its versions start from 0 again, and startingVersion from the old "
             "table would skip the new one's first versions)" if now is not None
             else f"holds no Delta table now (journaled table {journaled})")
    plan.errors.append(
        f"the Delta table at {path} {there}. Not handed out. If the table was recreated, "
        f"read the new one from its start: --restart-recreated-table {path}")
