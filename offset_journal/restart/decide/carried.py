"""What becomes of each old operator's state in a plan from a savepoint (pure). Per
operator, the restore writes its state straight into the new checkpoint before the
first batch (``--restore``: :func:`offset_journal.state.restore_savepoint`,
the JVM path, for built-in operators too), the new query seeds a ``transformWithState``
with it (``--seed``: :func:`offset_journal.savepoint.initial_state`, the Python path, for
a query that transforms state in Python), or it is lost: Spark gives a built-in operator
(aggregation, dropDuplicates, stream-stream join, session window) no initial state.
Losing state is never silent: the plan refuses unless ``--discard-state``, recorded as
its decision, and offers the state-aware rewind for a windowed aggregation, which
rebuilds such state from the records instead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import RestartError
from ...savepoint.model import BUILT_IN, Operator, Savepoint
from .._findings import Findings
from .._inputs import PlanInputs
from ..model import CarriedState
from ..request import SEED_ALL


def seeded_ids(seed: Sequence[int] | str, savepoint: Savepoint) -> set[int]:
    """The operator ids asked to be seeded; RestartError for one the savepoint lacks."""
    have = {op.id for op in savepoint.manifest.operators}
    if isinstance(seed, str):
        return have if seed == SEED_ALL else set()
    unknown = sorted(set(seed) - have)
    if unknown:
        listed = ", ".join(str(i) for i in sorted(have)) or "none"
        raise RestartError(f"--seed {unknown[0]}: {savepoint.label()} has no operator "
                           f"{unknown[0]} (operators: {listed})")
    return set(seed)


def carried_state(inp: PlanInputs, savepoint: Savepoint) -> tuple[list[CarriedState], Findings]:
    """Each old operator's state and what becomes of it, with the findings: a note per
    operator carried, an error per operator whose state would be lost (a warning with
    ``--discard-state``)."""
    request = inp.request
    seeded = seeded_ids(request.seed, savepoint)
    found = Findings()
    out = []
    location = savepoint.location
    ref = str(savepoint.id) if savepoint.id is not None else repr(location)
    m = savepoint.manifest
    for op in m.operators:
        keys = m.keys(op.id)
        parts = tuple(p.name for p in m.parts_of(op.id))
        opaque = [f for p in m.parts_of(op.id) for f in p.opaque]
        label = f"{op.label()}, {keys:,} keys at batch {m.batch_id}"
        if keys == 0 and not op.problem:
            out.append(CarriedState(op.id, op.kind, op.name, 0, "empty",
                                    "no state to carry", parts))
            continue
        if request.restore and not op.problem:
            how = _restored(op, keys, inp.command, ref)
            found.notes.append(f"State of {label}: {how}.")
            out.append(CarriedState(op.id, op.kind, op.name, keys, "restored", how, parts))
            continue
        if op.id in seeded and not op.problem and not opaque:
            how = (f"carried: initial_state(spark, {ref}, operator={op.id}, "
                   f"expect_sha256='{savepoint.digest}') (the plan's savepoint_sha256) is "
                   "the new query's transformWithState(initialState=...); its "
                   f"handleInitialState gets each key's {_what(m.parts_of(op.id))}")
            found.notes.append(f"State of {label}: {how}.")
            out.append(CarriedState(op.id, op.kind, op.name, keys, "seeded", how, parts))
            continue
        why = _why_lost(op, op.id in seeded, opaque, request.query_name)
        if request.discard_state:
            found.warnings.append(f"the state of {label} is discarded (--discard-state, "
                                  f"recorded with the plan as its decision): {why}")
            out.append(CarriedState(op.id, op.kind, op.name, keys, "discarded", why, parts))
        else:
            found.errors.append(f"the state of {label} would be lost: {why}; or accept "
                                "losing it with --discard-state")
            out.append(CarriedState(op.id, op.kind, op.name, keys, "refused", why, parts))
    if not m.operators:
        found.notes.append(f"{savepoint.label()} holds no state: the old query had no "
                           "stateful operator; the plan only starts after its batch.")
    return out, found


_RESTORER = {
    "state-restore": "this restore (offset-journal state restore) writes",
    "upgrade": "this upgrade (offset_journal.upgrade) writes",
    "api": "restore_savepoint (a job's --restore: jobs/_common.start_query) writes"}
"""Who writes a restored operator's state, as the interface that made the plan says it;
a plan the plan commands print names the command that restores (below)."""


def _restored(op: Operator, keys: int, command: str, ref: str) -> str:
    """How a restore carries one operator's state, and why that path, naming the way
    of the interface the plan was made for."""
    who = _RESTORER.get(command) or (
        f"`offset-journal state restore {ref} --to CHECKPOINT --query FILE:FUNCTION` (or "
        "the job started from this plan with --restore) writes")
    return (f"restored: {who} its {keys:,} keys into the new checkpoint before its first "
            "batch (the JVM path: Spark's own state writer, at the new query's shuffle "
            f"partitions), after checking them against the new query's {op.kind} field by "
            "field; the Python path (--seed, initial_state) is for a transformWithState "
            "that transforms its state in Python")


def _what(parts: Sequence[Any]) -> str:
    names = []
    for p in parts:
        values = [c.name for c in p.columns if not c.key]
        kind = {"store": "state", "join-side": "join side", "value": "value state",
                "list": "list state (one row per element)",
                "map": "map state (one row per entry)",
                "timers": "timers (one row per timer)"}[p.kind]
        names.append(f"{p.name} ({kind}: {', '.join(values) or 'the key only'})")
    return "; ".join(names)


def _why_lost(op: Operator, seeded: bool, opaque: Sequence[str], query: str) -> str:
    """Why an operator's state does not reach the new query, and what else can be done."""
    if op.problem:
        return f"it was not exported ({op.problem})"
    if seeded and opaque:
        return (f"its field(s) {', '.join(opaque)} are aggregate buffers Spark keeps as "
                "bytes (collect_list, percentile...): they cannot be carried")
    if op.kind in BUILT_IN:
        why = (f"a built-in {op.kind} takes no initial state in Spark, so the new query's "
               f"starts empty unless a transformWithState is seeded with it "
               f"(--seed {op.id})")
    else:
        why = (f"no transformWithState of the new query is seeded with it (--seed {op.id} "
               "when one is)")
    if op.kind == "aggregation" and op.windowed:
        why += (f"; it is a windowed aggregation: the state-aware rewind rebuilds its state "
                f"from the records instead (plan {query!r} --state-aware --window LENGTH, "
                "without --savepoint)")
    return why
