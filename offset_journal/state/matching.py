"""Which state goes where (pure): the savepoint's operators set against the new query's,
by id and kind, each column family checked field by field (:mod:`.layout`).

Per pair of operators:

* the same built-in kind with one store (an aggregation, windowed or not,
  ``dropDuplicates`` and ``dropDuplicatesWithinWatermark``, a session window,
  ``flatMapGroupsWithState`` and ``applyInPandasWithState``): its one column family,
  key and value;
* a stream-stream join: each side's two stores, rebuilt from the side's rows (the rows
  per key, the rows numbered per key); the rows carry no ``matched`` flag (the State
  Data Source leaves it out), which an INNER join never reads and an outer or semi join
  does: such a join is refused unless the flag its rows get is declared, or its state
  discarded;
* an aggregation into a ``transformWithState``: its state into one value state of the
  same key (:class:`~.layout.Rules`);
* ``transformWithState`` into ``transformWithState``: every column family as the old
  checkpoint's RocksDB store has it (its TTL indexes and timers are Spark's internals,
  not in the savepoint's rows), renamed state variables declared.

For a join and a transformWithState, where the old checkpoint is still there, on
RocksDB, with the savepoint's batch, and the operator's column families are the same in
both (names, schemas, key encoders), its bytes are copied as they are: the only path
that keeps a join's ``matched`` flags and transformWithState's internal column families.
Everything else is written from the savepoint's typed rows, encoded (copying the old
RocksDB bytes was not faster).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..savepoint.model import Manifest, Operator, Part
from .layout import (
    COUNT,
    INDEX,
    MATCHED,
    Family,
    FieldCompare,
    Layout,
    NewOperator,
    OperatorPlan,
    RawTarget,
    Rules,
    Source,
    Target,
    struct_fields,
    top,
)

SINGLE_STORE = frozenset({"aggregation", "dedup", "dedup-within-watermark", "session-window",
                          "flat-map-groups-with-state", "apply-in-pandas-with-state"})
"""Built-in operators whose state is one store with one column family."""
BYTES_KEEP = frozenset({"stream-stream-join", "transform-with-state"})
"""Operators whose old RocksDB bytes carry what the savepoint's typed rows lack (a join's
``matched`` flags; transformWithState's TTL and timer indexes): copied when they can be.
The others are written from the savepoint's rows even when the bytes could be copied:
copying was not faster (loading the old RocksDB store costs what decoding the
savepoint's Parquet saves; bench/restore.py), and the rows work without the old
checkpoint."""


@dataclass
class _Acc:
    notes: list[str]
    errors: list[str]


def plan_layout(manifest: Manifest, new: Sequence[NewOperator], rules: Rules,
                old: Sequence[NewOperator] | None = None) -> Layout:
    """What becomes of every operator's state (see the module). ``old``: the old
    checkpoint's operators at the savepoint's batch, when its RocksDB bytes can be
    copied (None: they cannot, typed rows only)."""
    acc = _Acc([], [])
    olds = {o.id: o for o in manifest.operators}
    news = {o.id: o for o in new}
    raws = {o.id: o for o in old or ()}
    plans: list[OperatorPlan] = []
    for op_id in sorted(set(olds) | set(news)):
        o, n = olds.get(op_id), news.get(op_id)
        plan = _pair(manifest, o, n, rules, raws.get(op_id), acc, news)
        if plan is not None:
            plans.append(plan)
    return Layout(tuple(plans), tuple(acc.notes), tuple(acc.errors))


def _pair(manifest: Manifest, o: Operator | None, n: NewOperator | None, rules: Rules,
          raw: NewOperator | None, acc: _Acc,
          news: Mapping[int, NewOperator]) -> OperatorPlan | None:
    if o is None:
        assert n is not None
        return OperatorPlan(n.id, n.kind, "empty", f"{n.label()} is new: the savepoint has no "
                                                   "state for it, it starts empty")
    keys = manifest.keys(o.id)
    lost = f"{o.label()} of the savepoint ({keys:,} keys at batch {manifest.batch_id})"
    if n is None or o.problem:
        if keys == 0 and not o.problem:
            return None
        why = (f"it was not exported ({o.problem})" if o.problem else
               "the new query has no operator " + str(o.id) + " (its operators: "
               + (", ".join(x.label() for x in news.values()) or "none") + ")")
        if rules.discards(o.id):
            return OperatorPlan(o.id, o.kind, "discarded", f"{why}: discarded "
                                f"({rules.spelling.discard(o.id)})", keys=keys)
        acc.errors.append(f"{lost}: {why}; its state would be lost (or accept losing it: "
                          f"{rules.spelling.discard(o.id)})")
        return None
    if keys == 0:
        return OperatorPlan(n.id, n.kind, "empty", f"{o.label()} held no state at batch "
                                                   f"{manifest.batch_id}")
    if rules.discards(o.id):
        return OperatorPlan(n.id, n.kind, "discarded", f"{lost}: discarded "
                            f"({rules.spelling.discard(o.id)}), the new operator starts empty",
                            keys=keys)
    errors_before = len(acc.errors)
    plan = _carry(manifest, o, n, rules, raw, acc)
    if len(acc.errors) > errors_before:
        return None
    return plan


def _carry(manifest: Manifest, o: Operator, n: NewOperator, rules: Rules,
           raw: NewOperator | None, acc: _Acc) -> OperatorPlan | None:
    keys = manifest.keys(o.id)
    same = o.kind == n.kind
    if same and o.kind in BYTES_KEEP and raw is not None and raw.name == n.name:
        copied = _raw_targets(n, raw, rules)
        if copied:
            return OperatorPlan(n.id, n.kind, "restored", (
                f"{keys:,} keys: every column family copied as the old checkpoint's RocksDB "
                f"store has it at batch {manifest.batch_id}, into {n.partitions} partitions"),
                raw=copied, keys=keys)
    if same and o.kind in SINGLE_STORE:
        return _single(manifest, o, n, rules, acc)
    if same and o.kind == "stream-stream-join":
        return _join(manifest, o, n, rules, acc)
    if o.kind == "aggregation" and n.kind == "transform-with-state":
        return _into_value_state(manifest, o, n, rules, acc)
    if same and o.kind == "transform-with-state":
        acc.errors.append(
            f"{o.label()}: transformWithState state is restored from the old checkpoint's "
            "RocksDB store at the savepoint's batch (its TTL indexes and timers are Spark's "
            "own column families, not in the savepoint's rows), and it is not there with "
            "the same column families: keep the old checkpoint until the restore, or "
            "seed the new query in Python (initial_state)")
        return None
    acc.errors.append(f"{o.label()} of the savepoint is {n.label()} in the new query: a "
                      f"{o.kind}'s state cannot become a {n.kind}'s (or accept losing it: "
                      f"{rules.spelling.discard(o.id)})")
    return None


def _family(n: NewOperator, store: str, name: str, acc: _Acc) -> Family | None:
    for f in n.families:
        if f.store == store and f.name == name:
            return f
    have = ", ".join(f"{f.store}/{f.name}" for f in n.families) or "none"
    acc.errors.append(f"{n.label()} has no column family {store}/{name} in the new "
                      f"checkpoint (it has {have})")
    return None


def _part(manifest: Manifest, o: Operator, name: str, acc: _Acc) -> Part | None:
    for p in manifest.parts_of(o.id):
        if p.name == name:
            return p
    acc.errors.append(f"{o.label()} has no part {name!r} in the savepoint")
    return None


def _compare(where: str, part: Part, renames: Mapping[str, str], acc: _Acc, n: NewOperator,
             rules: Rules) -> FieldCompare:
    return FieldCompare(where, part, renames, acc.notes, acc.errors, n.id, rules)


def _single(manifest: Manifest, o: Operator, n: NewOperator, rules: Rules,
            acc: _Acc) -> OperatorPlan | None:
    part = _part(manifest, o, "default", acc)
    fam = _family(n, "default", "default", acc)
    if part is None or fam is None:
        return None
    renames = rules.fields.get(n.id, {})
    key = _compare(f"{n.label()}: the key", part, renames, acc, n, rules).struct(
        top(part.schema, "key"), fam.key, ("key",))
    value = _compare(f"{n.label()}: the value", part, renames, acc, n, rules).struct(
        top(part.schema, "value"), fam.value, ("value",))
    keys = manifest.keys(o.id)
    return OperatorPlan(n.id, n.kind, "restored", (
        f"{keys:,} keys: the savepoint's rows encoded as the state store keeps them, into "
        f"{n.partitions} partitions"), (Target(n.id, "default", "default", part, key, value),),
        keys=keys)


def _join(manifest: Manifest, o: Operator, n: NewOperator, rules: Rules,
          acc: _Acc) -> OperatorPlan | None:
    flag = _join_flag(n, rules, acc)
    if flag is None:
        return None
    targets: list[Target] = []
    renames = rules.fields.get(n.id, {})
    for side in ("left", "right"):
        part = _part(manifest, o, side, acc)
        counts = _family(n, f"{side}-keyToNumValues", "default", acc)
        rows = _family(n, f"{side}-keyWithIndexToValue", "default", acc)
        if part is None or counts is None or rows is None:
            return None
        where = f"{n.label()}: the {side} side's"
        old_key, old_value = top(part.schema, "key"), top(part.schema, "value")
        key = _compare(f"{where} key", part, renames, acc, n, rules).struct(
            old_key, counts.key, ("key",))
        (count_field,) = struct_fields(counts.value)[:1] or [{"name": "value", "type": "long"}]
        targets.append(Target(n.id, counts.store, "default", part, key,
                              (Source(str(count_field["name"]), count_field["type"], COUNT),),
                              "join-count"))
        index_key = struct_fields(rows.key)
        index_value = struct_fields(rows.value)
        matched = _has_matched(rows)
        key2 = _compare(f"{where} key", part, renames, _Acc([], acc.errors), n, rules).struct(
            old_key, _struct(index_key[:-1]), ("key",))
        value2 = _compare(f"{where} row", part, renames, acc, n, rules).struct(
            old_value, _struct(index_value[:-1] if matched else index_value), ("value",))
        key2 += (Source(str(index_key[-1]["name"]), index_key[-1]["type"], INDEX),)
        if matched:
            value2 += (Source("matched", "boolean", MATCHED),)
        targets.append(Target(n.id, rows.store, "default", part, key2, value2, "join-index",
                              matched=flag))
    keys = manifest.keys(o.id)
    return OperatorPlan(n.id, n.kind, "restored", (
        f"{keys:,} keys: both sides rebuilt from the savepoint's rows (rows per key, each "
        f"row's index), into {n.partitions} partitions"), tuple(targets), keys=keys)


def _has_matched(rows: Family) -> bool:
    """A keyWithIndexToValue store keeps each row's ``matched`` flag (state format 2)."""
    fields = struct_fields(rows.value)
    return bool(fields) and fields[-1]["name"] == "matched"


_FLAG_READER = {"LEFT OUTER": "a left row", "RIGHT OUTER": "a right row",
                "FULL OUTER": "a row of either side", "LEFT SEMI": "a left row"}
"""The joins that read their rows' ``matched`` flags, and whose rows: an outer join
emits a row that never matched, null-padded, when the watermark expires it; a left semi
join emits a left row at its first match only."""


def _join_flag(n: NewOperator, rules: Rules, acc: _Acc) -> bool | None:
    """The ``matched`` flag the join's rows are written with (the savepoint has none);
    None: refused (the join reads the flags, and none is declared)."""
    label, kind = n.label(), n.join_type
    if not any(_has_matched(f) for f in n.families if f.store.endswith("keyWithIndexToValue")):
        return True  # state format 1: Spark keeps no flag to lose
    if kind == "INNER":
        acc.notes.append(f"{label}: an INNER join never reads its rows' 'matched' flags, "
                         "which the savepoint's rows lack (the State Data Source leaves "
                         "them out): its rows are restored as matched")
        return True
    whose = _FLAG_READER.get(str(kind), "a row")
    lose, again = (
        (f"{whose} not yet matched is never emitted at its match",
         f"{whose} already emitted is emitted again at its next match")
        if kind == "LEFT SEMI" else
        (f"{whose} that never matched emits no null-padded row when the watermark expires it",
         f"{whose} that did match emits a null-padded row too when it expires"))
    what = (f"a {kind} join" if kind else
            "a join whose type the new query's plan did not say (an outer or semi join "
            "reads the flags)")
    declared = rules.matched.get(n.id)
    if declared is not None:
        acc.notes.append(
            f"{label}: {what} restored from the savepoint's rows, which carry no 'matched' "
            f"flag: every row restored as {'matched' if declared else 'unmatched'} "
            f"(declared: {rules.spelling.matched(n.id, declared)}): "
            f"{lose if declared else again}")
        return declared
    spell = rules.spelling
    acc.errors.append(
        f"{label} is {what}, which reads each row's 'matched' flag, and the savepoint's rows "
        "carry none (the State Data Source leaves it out; the old checkpoint's RocksDB store "
        f"has it): restored as matched, {lose}; as unmatched, {again}. Restore from the old "
        f"RocksDB checkpoint, or declare which ({spell.matched(n.id, True)} or "
        f"{spell.matched(n.id, False)}), or accept losing the join's state "
        f"({spell.discard(n.id)})")
    return None


def _struct(fields: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"type": "struct", "fields": list(fields)}


def _variables(n: NewOperator) -> list[Mapping[str, Any]]:
    props = n.properties if isinstance(n.properties, Mapping) else {}
    return list(props.get("stateVariables") or [])


def _into_value_state(manifest: Manifest, o: Operator, n: NewOperator, rules: Rules,
                      acc: _Acc) -> OperatorPlan | None:
    values = [v for v in _variables(n) if v.get("stateVariableType") == "ValueState"]
    wanted = rules.variable.get(n.id)
    if wanted is None and len(values) != 1:
        names = ", ".join(str(v.get("stateName")) for v in values) or "none"
        acc.errors.append(f"{o.label()} goes into {n.label()}: name the value state it goes "
                          f"into (it has value states: {names}): "
                          f"{rules.spelling.into_state(n.id, 'NAME')}")
        return None
    chosen = next((v for v in values if wanted is None or v.get("stateName") == wanted), None)
    if chosen is None:
        acc.errors.append(f"{n.label()} has no value state {wanted!r}")
        return None
    name = str(chosen.get("stateName"))
    if chosen.get("ttlEnabled"):
        acc.errors.append(f"{n.label()}'s value state {name!r} has a TTL: an aggregation's "
                          "state has no expiry to give it (declare the value state without a "
                          "TTL, or seed it in Python with initial_state)")
        return None
    part = _part(manifest, o, "default", acc)
    fam = _family(n, "default", name, acc)
    if part is None or fam is None:
        return None
    renames = rules.fields.get(n.id, {})
    key = _compare(f"{n.label()}: the key", part, {}, acc, n, rules).struct(
        top(part.schema, "key"), fam.key, ("key",))
    value = _compare(f"{n.label()}: value state {name!r}", part, renames, acc, n,
                     rules).struct(top(part.schema, "value"), fam.value, ("value",))
    pairs = ", ".join(f"{s.name} <- {renames.get(s.name, s.name)}" for s in value)
    keys = manifest.keys(o.id)
    return OperatorPlan(n.id, n.kind, "mapped", (
        f"{keys:,} keys: the aggregation's state of each key into value state {name!r} "
        f"({pairs}), into {n.partitions} partitions"),
        (Target(n.id, "default", name, part, key, value),), keys=keys)


def _raw_targets(n: NewOperator, old: NewOperator, rules: Rules) -> tuple[RawTarget, ...]:
    """The stores whose column families are the same in both checkpoints (names, after
    declared renames of state variables, schemas with their names, key encoders): every
    store of the operator, or none."""
    renamed = rules.variables.get(n.id, {})
    olds = {(f.store, f.name): f for f in old.families}
    stores: dict[str, list[tuple[str, str]]] = {}
    for f in n.families:
        was = _renamed(f.name, renamed)
        o = olds.get((f.store, was))
        if o is None or o.key != f.key or o.value != f.value or o.key_encoder != f.key_encoder:
            return ()
        stores.setdefault(f.store, []).append((f.name, was))
    if len(olds) != len(n.families):
        return ()
    return tuple(RawTarget(n.id, store, old.id, store,
                           tuple((new, was) for new, was in pairs if new != was))
                 for store, pairs in sorted(stores.items()))


def _renamed(family: str, renamed: Mapping[str, str]) -> str:
    """A column family's name in the old checkpoint, a state variable renamed (``cnt``
    for ``count``; its internal families too: ``$ttl_cnt`` for ``$ttl_count``)."""
    for new, old in renamed.items():
        if family == new:
            return old
        for prefix in ("$ttl_", "$min_", "$count_", "$rowCounter_"):
            if family == prefix + new:
                return prefix + old
    return family
