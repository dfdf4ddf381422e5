"""What the commands say about savepoints (pure: lines of text from plain data):
`savepoint show` and `list`, what `prune` kept for savepoints, and the manifest digest
a v2 of a user's own hands ``initial_state(..., expect_sha256=)`` (`savepoint show`,
`starting-offsets`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..formatting import cell, format_time, table
from ..rows import PruneResult, RecordedSavepoint


def manifest_table(m: Any) -> str:
    """A savepoint's parts, one row each (or the line saying it holds none)."""
    rows = [[p.operator_id, (m.operator(p.operator_id) or p).kind, p.name, p.kind, p.keys,
             p.rows, len(p.files), ", ".join(c.name for c in p.columns)] for p in m.parts]
    if not rows:
        return "no stateful operator: the savepoint holds only where the query stood"
    return table(["OPERATOR", "KIND", "PART", "STATE", "KEYS", "ROWS", "FILES", "COLUMNS"],
                 rows)


def _initial_state(ref: str, operators: Sequence[int], digest: str) -> str:
    """The call that reads this savepoint's state, pinned to its manifest."""
    which = (f"operator={operators[0]}, " if len(operators) == 1
             else "operator=N, " if operators else "")
    return f"initial_state(spark, {ref}, {which}expect_sha256='{digest}')"


def shown(found: Any, fmt: str) -> str:
    """`savepoint show`: the savepoint checked, its manifest's SHA-256 (what
    ``initial_state(..., expect_sha256=)`` holds the manifest it reads against) and its
    parts; or all of it as JSON."""
    m = found.manifest
    if fmt == "json":
        return json.dumps({"id": found.id, "location": found.location,
                           "manifest_sha256": found.digest, **m.to_dict()},
                          indent=2, default=str)
    ref = str(found.id) if found.id is not None else repr(found.location)
    return "\n".join([
        f"{found.label()}: query {m.query_name!r}, batch {m.batch_id} of run {m.run_id}, "
        f"made {m.created_at}; checksums verified",
        f"manifest SHA-256 {found.digest}",
        "a v2 of your own reads this state, and no other, with "
        + _initial_state(ref, [op.id for op in m.operators], found.digest),
        manifest_table(m)])


def listed(rows: Iterable[RecordedSavepoint]) -> tuple[str, list[str]]:
    """`savepoint list`: the table (a savepoint retention deleted says when and why),
    and a note per row whose recorded manifest is ignored (not a manifest, not of the
    row's batch, not the one its SHA-256 names: any role with INSERT on the table may
    write a row)."""
    from ..savepoint.core import recorded_problem

    out, notes = [], []
    for r in rows:
        why = recorded_problem(r, sha256=True)
        if why is not None:
            notes.append(f"savepoint {r.id}: its recorded manifest is ignored ({why})")
        operators = "?" if why is not None else len(r.manifest.get("operators") or ())
        deleted = (f"{format_time(r.deleted_at, 'milliseconds')}: {r.deleted_reason}"
                   if r.deleted_at is not None else "")
        out.append([r.id, format_time(r.created_at, "milliseconds") or "", r.batch_id,
                    r.run_id, operators, r.location, deleted])
    return table(["ID", "CREATED", "BATCH", "RUN", "OPERATORS", "LOCATION", "DELETED"],
                 out), notes


def prune_lines(result: PruneResult, ignored: Iterable[tuple[int, str]],
                ) -> tuple[list[str], list[str]]:
    """What `prune` kept for savepoints (lines), and the savepoints that keep nothing
    (notes): a savepoint keeps its batch and what its run journaled after it."""
    lines = []
    for k in result.kept_for_savepoints:
        after = k.batches - 1
        more = f" and the {after:,} after it in that run" if after else ""
        lines.append(f"kept batch {k.batch_id} of run {cell(k.run_id)} of query "
                     f"{k.query_name!r}{more} for savepoint {k.savepoint_id}: a plan from it "
                     "starts at that batch's end offsets")
    notes = [f"savepoint {sid} keeps no batch: its recorded manifest is ignored ({why})"
             for sid, why in ignored]
    return lines, notes


def _seeded(plan: Any) -> list[int]:
    return [c.operator_id for c in plan.state if c.decision == "seeded"]


def savepoint_note(plan: Any) -> str | None:
    """`starting-offsets`: the savepoint a plan starts after, and how a v2 reads its
    state pinned to the manifest the plan checked (None: no savepoint)."""
    if plan.savepoint_location is None or plan.savepoint_sha256 is None:
        return None
    which = (f"savepoint {plan.savepoint_id}" if plan.savepoint_id is not None
             else "the savepoint")
    ref = (str(plan.savepoint_id) if plan.savepoint_id is not None
           else repr(plan.savepoint_location))
    return (f"the plan starts after {which} at {plan.savepoint_location} (manifest SHA-256 "
            f"{plan.savepoint_sha256}): a v2 reads its state with "
            + _initial_state(ref, _seeded(plan), plan.savepoint_sha256))


def starting_offsets_json(plan: Any, source: Any) -> str:
    """`starting-offsets --format json`: the startingOffsets text with what a v2 needs
    beside it (the plan recorded, the savepoint and its manifest's SHA-256)."""
    savepoint = None
    if plan.savepoint_location is not None:
        savepoint = {"id": plan.savepoint_id, "location": plan.savepoint_location,
                     "sha256": plan.savepoint_sha256, "seeded": _seeded(plan)}
    cutoff = format_time(plan.event_time_cutoff, "milliseconds") or None
    return json.dumps({"query_name": plan.query_name, "source": source.index,
                       "startingOffsets": source.starting_offsets(), "plan_id": plan.plan_id,
                       "savepoint": savepoint, "event_time_cutoff": cutoff}, indent=2)
