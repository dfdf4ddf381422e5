"""Does a savepoint's state fit the new query's state layout, the pure part:
operators matched by id and kind, column families field by field (names, types, order,
nullability), the mappings a rule bridges said, everything else refused in one line. No
Spark, broker or database: the quick tier. The schemas are the shapes Spark 4.2 writes
(State Data Source reads and state schema files of real checkpoints)."""

from __future__ import annotations

from typing import Any

import pytest

from offset_journal.errors import RestoreError
from offset_journal.savepoint import core
from offset_journal.savepoint.model import Manifest, Operator, Part
from offset_journal.state import Rules
from offset_journal.state.layout import (
    COUNT,
    INDEX,
    MATCHED,
    NewOperator,
    new_operators,
    type_name,
)
from offset_journal.state.matching import plan_layout


def _f(name: str, t: Any, nullable: bool = True) -> dict[str, Any]:
    return {"name": name, "type": t, "nullable": nullable, "metadata": {}}


def _s(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "fields": list(fields)}


KEY = _s(_f("grp", "string"))
BUFFER = _s(_f("count", "long", False), _f("max", "long"), _f("sum", "long"))


def _part(op: int, name: str, kind: Any, op_kind: Any, **top: Any) -> Part:
    schema = _s(*[_f(k, v) for k, v in top.items()], _f("partition_id", "integer"))
    columns, _opaque, _dropped = core.export_columns(kind, op_kind, schema)
    return Part(op, name, kind, f"operator={op}/part={name}", {}, schema, tuple(columns), 7,
                7, ())


def _manifest(*ops: tuple[Operator, list[Part]]) -> Manifest:
    return Manifest("q", "run", "qid", 5, "/old", (), tuple(o for o, _p in ops),
                    tuple(p for _o, parts in ops for p in parts), "now",
                    provider="org.apache.spark.sql.execution.streaming.state."
                             "HDFSBackedStateStoreProvider")


def _agg_manifest(value: Any = BUFFER, key: Any = KEY) -> Manifest:
    op = Operator(0, "stateStoreSave", "aggregation", 4, ("default",))
    return _manifest((op, [_part(0, "default", "store", "aggregation", key=key, value=value)]))


def _new(op_id: int, name: str, stores: dict[str, dict[str, tuple[Any, Any]]],
         partitions: int = 8, properties: Any = None,
         join_type: str | None = None) -> NewOperator:
    described = {"id": op_id, "name": name, "version": 2 if properties else 1,
                 "stores": [{"name": store, "partitions": partitions,
                             "column_families": [{"name": cf, "key_schema": k,
                                                  "value_schema": v,
                                                  "key_encoder": {"keyStateEncoderType":
                                                                  "NoPrefixKeyStateEncoderSpec"}}
                                                 for cf, (k, v) in cfs.items()]}
                            for store, cfs in stores.items()]}
    if properties is not None:
        described["properties"] = properties
    (op,) = new_operators([described], {op_id: join_type} if join_type else None)
    return op


def _agg(value: Any = BUFFER, key: Any = KEY) -> NewOperator:
    return _new(0, "stateStoreSave", {"default": {"default": (key, value)}})


def test_an_aggregation_with_the_same_layout_is_restored_field_by_field():
    layout = plan_layout(_agg_manifest(), [_agg()], Rules()).check()
    (op,) = layout.operators
    assert (op.decision, op.path, op.keys) == ("restored", "typed", 7)
    (target,) = op.targets
    assert [(s.name, s.column) for s in target.key] == [("grp", "grp")]
    assert [(s.name, s.column, s.type) for s in target.value] == [
        ("count", "count", "long"), ("max", "max", "long"), ("sum", "sum", "long")]
    assert "into 8 partitions" in op.how and layout.notes == ()


def test_value_fields_swapped_are_refused_not_copied():
    """The spike's silent failure: two longs in the other order."""
    swapped = _s(_f("count", "long", False), _f("sum", "long"), _f("max", "long"))
    layout = plan_layout(_agg_manifest(), [_agg(swapped)], Rules())
    assert layout.notes == ("operator 0 (aggregation, stateStoreSave): the value: fields "
                            "taken by name, in the new query's order (count, sum, max)",)
    (target,) = layout.check().targets
    assert [s.column for s in target.value] == ["count", "sum", "max"]

    repeated = _s(_f("count", "long", False), _f("count", "long", False))
    swapped_names = _s(_f("count", "long", False), _f("total", "long"))
    m = _agg_manifest(repeated)
    with pytest.raises(RestoreError, match=r"operator 0 \(aggregation, stateStoreSave\): the "
                                           r"value: field 2 is 'count' in the savepoint and "
                                           r"'total' in the new query \(declare a rename"):
        plan_layout(m, [_agg(swapped_names)], Rules()).check()


def test_a_declared_rename_a_widened_type_and_what_is_refused():
    renamed = _s(_f("count", "long", False), _f("max", "long"), _f("total", "long"))
    layout = plan_layout(_agg_manifest(), [_agg(renamed)],
                         Rules(fields={0: {"total": "sum"}})).check()
    assert any("renamed total <- sum (declared)" in n for n in layout.notes)
    narrow = _s(_f("count", "integer", False), _f("max", "long"), _f("sum", "long"))
    wide = _s(_f("count", "long", False), _f("max", "long"), _f("sum", "long"))
    layout = plan_layout(_agg_manifest(narrow), [_agg(wide)], Rules()).check()
    assert any("field 'count' widened from integer to long" in n for n in layout.notes)

    cases = [
        (_agg_manifest(), _agg(narrow), "field 'count' is long in the savepoint and integer"),
        (_agg_manifest(), _agg(_s(_f("count", "long", False), _f("max", "string"),
                                  _f("sum", "long"))),
         "field 'max' is long in the savepoint and string in the new query"),
        (_agg_manifest(), _agg(_s(_f("count", "long", False), _f("max", "long", False),
                                  _f("sum", "long"))),
         "field 'max' may be null in the savepoint and may not in the new query"),
        (_agg_manifest(), _agg(_s(_f("count", "long", False), _f("max", "long"))),
         r"the value has 3 field\(s\) in the savepoint \(count, max, sum\) and 2 in the new "
         r"query \(count, max\)"),
        (_agg_manifest(), _agg(key=_s(_f("grp", "string"), _f("topic", "string"))),
         r"the key has 1 field\(s\) in the savepoint \(grp\) and 2"),
        (_agg_manifest(), _new(0, "dedupe", {"default": {"default": (KEY, BUFFER)}}),
         r"operator 0 \(aggregation, stateStoreSave\) of the savepoint is operator 0 \(dedup, "
         r"dedupe\) in the new query: a aggregation's state cannot become a dedup's"),
        (_agg_manifest(), _new(1, "stateStoreSave", {"default": {"default": (KEY, BUFFER)}}),
         r"operator 0 \(aggregation, stateStoreSave\) of the savepoint \(7 keys at batch 5\): "
         r"the new query has no operator 0 \(its operators: operator 1 \(aggregation"),
    ]
    for manifest, new, message in cases:
        with pytest.raises(RestoreError, match=message):
            plan_layout(manifest, [new], Rules()).check()


def test_state_discarded_or_new_operators_start_empty():
    new = [_new(1, "dedupe", {"default": {"default": (KEY, _s(_f("__dummy__", "void")))}})]
    layout = plan_layout(_agg_manifest(), new, Rules(discard=frozenset({0}))).check()
    assert [(o.operator_id, o.decision) for o in layout.operators] == [
        (0, "discarded"), (1, "empty")]
    assert "is new: the savepoint has no state for it" in layout.operators[1].how
    layout = plan_layout(_agg_manifest(), [_agg(_s(_f("x", "string")))], Rules(discard=True))
    assert layout.check().operators[0].decision == "discarded"


def test_dedup_session_window_and_group_state_map_their_one_store():
    dummy = _s(_f("__dummy__", "void"))
    dedup = _manifest((Operator(0, "dedupe", "dedup", 4, ("default",)),
                       [_part(0, "default", "store", "dedup", key=KEY, value=dummy)]))
    (target,) = plan_layout(dedup, [_new(0, "dedupe", {"default": {"default": (KEY, dummy)}})],
                            Rules()).check().targets
    assert [(s.name, s.column, s.type) for s in target.value] == [("__dummy__", None, "void")]

    window = _s(_f("start", "timestamp"), _f("end", "timestamp"))
    key = _s(_f("grp", "string"), _f("sessionStartTime", "timestamp", False))
    value = _s(_f("session_window", window, False), _f("grp", "string"),
               _f("count", "long", False))
    session = _manifest((Operator(0, "sessionWindowStateStoreSaveExec", "session-window", 2,
                                  ("default",)),
                         [_part(0, "default", "store", "session-window", key=key,
                                value=value)]))
    new = _new(0, "sessionWindowStateStoreSaveExec", {"default": {"default": (key, value)}})
    (target,) = plan_layout(session, [new], Rules()).check().targets
    assert [s.column for s in target.value] == ["session_window", "value_grp", "count"]

    state = _s(_f("groupState", _s(_f("n", "long"))), _f("timeoutTimestamp", "long", False))
    pandas = _manifest((Operator(0, "applyInPandasWithState", "apply-in-pandas-with-state", 2,
                                 ("default",)),
                        [_part(0, "default", "store", "apply-in-pandas-with-state", key=KEY,
                               value=state)]))
    new = _new(0, "applyInPandasWithState", {"default": {"default": (KEY, state)}})
    (target,) = plan_layout(pandas, [new], Rules()).check().targets
    group, timeout = target.value
    assert [(s.name, s.column) for s in group.fields] == [("n", "n")]
    assert timeout.column == "timeoutTimestamp"


JOIN_KEY = _s(_f("field0", "string"))
LEFT = _s(_f("grp", "string"), _f("amount", "long"), _f("ts", "timestamp"))
RIGHT = _s(_f("g2", "string"), _f("a2", "long"), _f("ts2", "timestamp"))


def _join_manifest() -> Manifest:
    parts = [_part(0, side, "join-side", "stream-stream-join", key=JOIN_KEY, value=row)
             for side, row in (("left", LEFT), ("right", RIGHT))]
    return _manifest((Operator(0, "symmetricHashJoin", "stream-stream-join", 2,
                               ("left-keyToNumValues",)), parts))


def _join(join_type: str | None, matched: bool = True) -> NewOperator:
    """A new stream-stream join's four stores (state format 2: each row's ``matched``
    flag; 1: none)."""
    stores = {}
    for side, row in (("left", LEFT), ("right", RIGHT)):
        stores[f"{side}-keyToNumValues"] = {"default": (JOIN_KEY,
                                                        _s(_f("value", "long", False)))}
        stores[f"{side}-keyWithIndexToValue"] = {"default": (
            _s(_f("field0", "string"), _f("index", "long", False)),
            _s(*row["fields"], *([_f("matched", "boolean", False)] if matched else [])))}
    return _new(0, "symmetricHashJoin", stores, join_type=join_type)


def test_a_join_rebuilds_both_sides_stores_from_their_rows():
    layout = plan_layout(_join_manifest(), [_join("INNER")], Rules()).check()
    assert [(t.store, t.shape) for t in layout.targets] == [
        ("left-keyToNumValues", "join-count"), ("left-keyWithIndexToValue", "join-index"),
        ("right-keyToNumValues", "join-count"), ("right-keyWithIndexToValue", "join-index")]
    counts, rows = layout.targets[:2]
    assert [s.column for s in counts.value] == [COUNT]
    assert [s.column for s in rows.key] == ["field0", INDEX]
    assert [s.column for s in rows.value] == ["grp", "amount", "ts", MATCHED]
    assert rows.matched is True
    assert ("operator 0 (stream-stream-join, symmetricHashJoin): an INNER join never reads "
            "its rows' 'matched' flags") in " ".join(layout.notes)


def _tws(value: Any, ttl: bool = False, variables: tuple[str, ...] = ("totals",)) -> NewOperator:
    props = {"timeMode": "None", "outputMode": "Update", "stateVariables": [
        {"stateName": v, "stateVariableType": "ValueState", "ttlEnabled": ttl}
        for v in variables]}
    return _new(0, "transformWithStateInPySparkExec",
                {"default": {v: (KEY, value) for v in variables}}, 3, props)


def test_an_aggregation_maps_into_a_value_state_with_its_fields_declared():
    totals = _s(_f("n", "long"), _f("mx", "long"), _f("total", "long"))
    fields = {0: {"n": "count", "mx": "max", "total": "sum"}}
    layout = plan_layout(_agg_manifest(), [_tws(totals)], Rules(fields=fields)).check()
    (op,) = layout.operators
    assert op.decision == "mapped"
    assert "into value state 'totals' (n <- count, mx <- max, total <- sum)" in op.how
    (target,) = op.targets
    assert (target.store, target.family) == ("default", "totals")
    assert [s.column for s in target.value] == ["count", "max", "sum"]

    for rules, new, message in [
        (Rules(), _tws(totals), r"field 1 is 'count' in the savepoint and 'n' in the new "
                                r"query \(declare a rename if it is the same value: "
                                r"Rules\(fields=\{0: \{'n': 'count'\}\}\)\)$"),
        (Rules(fields=fields), _tws(totals, ttl=True), "value state 'totals' has a TTL"),
        (Rules(fields=fields), _tws(totals, variables=("a", "b")),
         r"name the value state it goes into \(it has value states: a, b\): "
         r"Rules\(variable=\{0: 'NAME'\}\)"),
        (Rules(fields=fields, variable={0: "c"}), _tws(totals, variables=("a", "b")),
         "has no value state 'c'"),
    ]:
        with pytest.raises(RestoreError, match=message):
            plan_layout(_agg_manifest(), [new], rules).check()


def test_the_old_checkpoints_bytes_are_copied_only_when_every_family_is_the_same():
    """Copied for transformWithState (and joins): what the typed rows lack; a built-in
    single-store operator is written from the rows even when the bytes could be copied
    (faster: Parquet against loading the old store)."""
    (op,) = plan_layout(_agg_manifest(), [_agg()], Rules(), old=[_agg()]).check().operators
    assert op.path == "typed"

    tws = _new(0, "transformWithStateExec", {"default": {
        "cnt": (KEY, _s(_f("n", "long"))), "$ttl_cnt": (KEY, _s(_f("e", "long")))}})
    renamed = _new(0, "transformWithStateExec", {"default": {
        "count": (KEY, _s(_f("n", "long"))), "$ttl_count": (KEY, _s(_f("e", "long")))}})
    tws_op = Operator(0, "transformWithStateExec", "transform-with-state", 2, ("default",))
    m = _manifest((tws_op, [_part(0, "cnt", "value", "transform-with-state", key=KEY,
                                  value=_s(_f("n", "long")))]))
    (op,) = plan_layout(m, [renamed], Rules(variables={0: {"count": "cnt"}}),
                        old=[tws]).check().operators
    assert op.path == "raw" and op.raw[0].store == "default" and not op.targets
    assert set(op.raw[0].families) == {("$ttl_count", "$ttl_cnt"), ("count", "cnt")}
    other = _new(0, "transformWithStateExec", {"default": {
        "count": (KEY, _s(_f("n", "integer"))), "$ttl_count": (KEY, _s(_f("e", "long")))}})
    with pytest.raises(RestoreError, match="restored from the old checkpoint's RocksDB"):
        plan_layout(m, [other], Rules(variables={0: {"count": "cnt"}}), old=[tws]).check()
    with pytest.raises(RestoreError, match="transformWithState state is restored from the old "
                                           "checkpoint's RocksDB store"):
        plan_layout(m, [renamed], Rules(), old=[tws]).check()


def test_types_read_as_people_write_them():
    assert type_name(_s(_f("a", "long"), _f("b", _s(_f("c", "string"))))) == \
        "struct<a: long, b: struct<c: string>>"
    assert type_name({"type": "array", "elementType": "long", "containsNull": True}) == \
        "array<long>"
    assert type_name("null") == "void"


def test_a_spark_version_not_proven_is_refused_in_one_line():
    """Any 4.2.x or 4.3.x (a vendor's build of one too) runs the restore, any 4.2.x the
    repartition; another minor is refused in one line naming it."""
    from offset_journal.state._jvm import PROVEN_SPARK, version_problem

    assert PROVEN_SPARK == "Spark 4.2 or 4.3 (any 4.2.x, 4.3.x)"
    for running in ("4.2.0", "4.2.1", "4.2.0-amzn-0", "4.3.0", "4.3.1-amzn-0"):
        assert version_problem(running) is None
    for running in ("4.2.0", "4.2.1", "4.2.0-amzn-0"):
        assert version_problem(running, "state-repartition") is None
    for feature, others in (("state-restore", ("4.1.0", "3.5.3", "3.5.6-amzn-2", "5.0.0")),
                            ("state-repartition", ("4.3.0", "4.1.0", "3.5.3"))):
        for other in others:
            problem = version_problem(other, feature)
            assert problem is not None and "\n" not in problem
            assert "needs Spark 4.2" in problem and f"this is Spark {other}" in problem


def test_a_plans_start_offsets_made_concrete_for_the_offsets_file():
    from dataclasses import dataclass, field

    from offset_journal.state.offsets import concrete_ends

    @dataclass
    class Source:
        index: int
        offsets: Any
        log_starts: dict = field(default_factory=dict)

        def starting_offsets(self) -> str:
            return '{"logOffset":3}'

    plan = [Source(1, None), Source(0, {"t": {"0": 18, "1": -2}}, {("t", 1): 7})]
    assert concrete_ends(plan) == ('{"t":{"0":18,"1":7}}', '{"logOffset":3}')
    with pytest.raises(RestoreError, match="starts t-1 at its earliest without its log start"):
        concrete_ends([Source(0, {"t": {"1": -2}})])


# --------------------------------------------------------------------------- joins' flags


def test_an_outer_join_from_the_rows_is_refused_unless_its_flags_are_declared():
    """The savepoint's join rows carry no ``matched`` flag: an outer join (or a semi
    join) reads it, so its rows are not restored as matched behind the user's back."""
    from offset_journal.cli._restore_flags import CommandFlags

    m = _join_manifest()
    with pytest.raises(RestoreError) as caught:
        plan_layout(m, [_join("LEFT OUTER")], Rules()).check()
    message = str(caught.value)
    assert message.startswith("operator 0 (stream-stream-join, symmetricHashJoin) is a LEFT "
                              "OUTER join, which reads each row's 'matched' flag")
    assert ("restored as matched, a left row that never matched emits no null-padded row "
            "when the watermark expires it") in message
    assert ("declare which (Rules(matched={0: True}) or Rules(matched={0: False})), or accept "
            "losing the join's state (Rules(discard={0}))") in message
    flags = Rules(spelling=CommandFlags())
    with pytest.raises(RestoreError, match=r"declare which \(--assume-matched 0:true or "
                                           r"--assume-matched 0:false\), or accept losing "
                                           r"the join's state \(--discard-state\)$"):
        plan_layout(m, [_join("RIGHT OUTER")], flags).check()
    for kind, text in [("FULL OUTER", "a row of either side that never matched"),
                       ("LEFT SEMI", "a left row not yet matched is never emitted"),
                       (None, "a join whose type the new query's plan did not say")]:
        with pytest.raises(RestoreError, match=text):
            plan_layout(m, [_join(kind)], Rules()).check()

    layout = plan_layout(m, [_join("LEFT OUTER")], Rules(matched={0: False})).check()
    rows = [t for t in layout.targets if t.shape == "join-index"]
    assert len(rows) == 2 and all(t.matched is False for t in rows)
    (note,) = [n for n in layout.notes if "'matched'" in n]
    assert ("a LEFT OUTER join restored from the savepoint's rows, which carry no 'matched' "
            "flag: every row restored as unmatched (declared: Rules(matched={0: False})): a "
            "left row that did match emits a null-padded row too") in note
    kept = plan_layout(m, [_join("LEFT OUTER")], Rules(matched={0: True})).check()
    assert all(t.matched for t in kept.targets if t.shape == "join-index")
    (op,) = plan_layout(m, [_join("LEFT OUTER")], Rules(discard=True)).check().operators
    assert op.decision == "discarded"
    # Spark's state format 1 keeps no flag: there is none to lose.
    assert plan_layout(m, [_join("LEFT OUTER", matched=False)], Rules()).check().targets


# --------------------------------------------------------------------------- nested types


INFO = _s(_f("a", "integer"), _f("b", "integer"))
INFO_SWAPPED = _s(_f("b", "integer"), _f("a", "integer"))
MAX = _s(_f("ts", "timestamp"), _f("v", "long"))
MAX_SWAPPED = _s(_f("v", "long"), _f("ts", "timestamp"))


def _max_manifest(key: Any, value: Any) -> Manifest:
    return _agg_manifest(value=_s(_f("max", value)), key=_s(_f("info", key)))


def _max_new(key: Any, value: Any) -> NewOperator:
    return _agg(value=_s(_f("max", value)), key=_s(_f("info", key)))


def test_a_structs_fields_are_taken_by_name_at_every_depth():
    """Spark's cast between structs is positional: ``struct<a, b>`` into ``struct<b, a>``
    would write a's value into b. The restore builds the struct by name, says so, and
    leaves a struct that is the same by name to Spark's cast."""
    layout = plan_layout(_max_manifest(INFO, MAX), [_max_new(INFO_SWAPPED, MAX_SWAPPED)],
                         Rules()).check()
    assert layout.notes == (
        "operator 0 (aggregation, stateStoreSave): the key: field 'info': its fields taken by "
        "name, in the new query's order (b, a), not by position as Spark's cast would",
        "operator 0 (aggregation, stateStoreSave): the value: field 'max': its fields taken "
        "by name, in the new query's order (v, ts), not by position as Spark's cast would")
    (target,) = layout.targets
    (info,) = target.key
    assert info.column == "info" and info.convert is not None
    assert [(new, old, c.kind) for new, old, c in info.convert.fields] == [
        ("b", "b", "cast"), ("a", "a", "cast")]
    (mx,) = target.value
    assert mx.convert is not None and [f[:2] for f in mx.convert.fields] == [("v", "v"),
                                                                             ("ts", "ts")]
    same = plan_layout(_max_manifest(INFO, MAX), [_max_new(INFO, MAX)], Rules()).check()
    assert same.notes == () and all(s.convert is None for s in same.targets[0].key)

    # Deeper: a struct in an array in a map's values, reordered; a widened leaf in it.
    inner_old = _s(_f("x", "integer"), _f("y", "string"))
    inner_new = _s(_f("y", "string"), _f("x", "long"))

    def deep(inner: Any) -> Any:
        return {"type": "map", "keyType": "string", "valueContainsNull": True,
                "valueType": {"type": "array", "elementType": inner, "containsNull": True}}

    layout = plan_layout(_max_manifest(INFO, deep(inner_old)),
                         [_max_new(INFO, deep(inner_new))], Rules()).check()
    (mx,) = layout.targets[0].value
    how = mx.convert
    assert how is not None and how.kind == "map" and how.key is not None
    assert (how.key.kind, how.element.kind) == ("cast", "array")
    struct = how.element.element
    assert [(n, c.kind) for n, _o, c in struct.fields] == [("y", "cast"), ("x", "cast")]
    assert any("field 'max{value}[]': its fields taken by name" in n for n in layout.notes)
    assert any("field 'max{value}[].x' widened from integer to long" in n
               for n in layout.notes)


def test_nested_names_nullability_and_types_are_checked_at_every_depth():
    def arr(element: Any, nulls: bool) -> Any:
        return {"type": "array", "elementType": element, "containsNull": nulls}

    def mp(value: Any, nulls: bool) -> Any:
        return {"type": "map", "keyType": "string", "valueType": value,
                "valueContainsNull": nulls}

    cases = [
        (INFO, _s(_f("a", "integer"), _f("c", "integer")),
         r"field 'info' is struct<a: integer, b: integer> in the savepoint and struct<a: "
         r"integer, c: integer> in the new query: its field 2 is 'b' in the savepoint and "
         r"'c' in the new query \(a field inside a struct is matched by its name\)"),
        (INFO, _s(_f("a", "integer"), _f("b", "integer", False)),
         r"the key: field 'info.b' may be null in the savepoint and may not in the new query"),
        (INFO, _s(_f("a", "integer")), r"field 'info' is .*: 2 field\(s\) against 1"),
        (INFO, _s(_f("a", "integer"), _f("b", "string")),
         r"field 'info.b' is integer in the savepoint and string in the new query"),
        (_s(_f("a", arr("long", True))), _s(_f("a", arr("long", False))),
         r"the key: the elements of field 'info.a' may be null in the savepoint and may not"),
        (_s(_f("a", mp("long", True))), _s(_f("a", mp("long", False))),
         r"the key: the values of field 'info.a' may be null in the savepoint and may not"),
        (_s(_f("a", arr(INFO, True))), _s(_f("a", arr(_s(_f("a", "integer"),
                                                          _f("b", "long", False)), True))),
         r"field 'info.a\[\].b' may be null in the savepoint and may not"),
        (_s(_f("a", "long")), _s(_f("a", arr("long", True))),
         r"field 'info.a' is long in the savepoint and array<long> in the new query"),
    ]
    for old, new, message in cases:
        with pytest.raises(RestoreError, match=message):
            plan_layout(_max_manifest(old, MAX), [_max_new(new, MAX)], Rules()).check()


# --------------------------------------------------------------------------- dates


def test_a_date_becomes_a_timestamp_only_in_a_time_zone_declared_or_the_sessions():
    """A day is a timestamp only at midnight of some zone: the new query's. The restore
    never takes the zone of whatever session it happens to run in."""
    from offset_journal.cli._restore_flags import CommandFlags

    m = _agg_manifest(key=_s(_f("day", "date")))
    new = _agg(key=_s(_f("day", "timestamp")))
    with pytest.raises(RestoreError, match=r"the key: field 'day' is date in the savepoint and "
                                           r"timestamp in the new query: a date becomes .*"
                                           r"declare it \(--time-zone ZONE, the new query's "
                                           r"spark.sql.session.timeZone\)$"):
        plan_layout(m, [new], Rules(time_zone=None, spelling=CommandFlags())).check()
    with pytest.raises(RestoreError, match=r"declare it \(Rules\(time_zone='ZONE'\)"):
        plan_layout(m, [new], Rules()).check()  # the session's zone, not resolved

    for rules in (Rules(time_zone="America/New_York"),
                  Rules().in_session("America/New_York")):
        layout = plan_layout(m, [new], rules).check()
        assert layout.notes == ("operator 0 (aggregation, stateStoreSave): the key: field "
                                "'day' widened from date to timestamp: each date at midnight "
                                "in America/New_York",)
        (day,) = layout.targets[0].key
        assert day.convert is not None and (day.convert.kind, day.convert.zone) == (
            "date", "America/New_York")
    assert Rules(time_zone="UTC").in_session("Asia/Tokyo").time_zone == "UTC"
    # Inside a struct too.
    m = _agg_manifest(key=_s(_f("when", _s(_f("day", "date")))))
    new = _agg(key=_s(_f("when", _s(_f("day", "timestamp")))))
    (when,) = plan_layout(m, [new], Rules(time_zone="+05:00")).check().targets[0].key
    assert when.convert is not None and when.convert.fields[0][2].zone == "+05:00"


# --------------------------------------------------------------------------- spelling


def test_each_refusal_names_the_declaration_of_the_interface_it_came_from():
    """The pure core asks the caller's spelling: a command's user reads its flags, a
    Python caller reads Rules(...)."""
    from offset_journal.cli._restore_flags import CommandFlags

    renamed = _s(_f("count", "long", False), _f("max", "long"), _f("total", "long"))
    tws = _tws(_s(_f("n", "long"), _f("mx", "long"), _f("total", "long")),
               variables=("a", "b"))
    dedup = _new(0, "dedupe", {"default": {"default": (KEY, BUFFER)}})
    for new, python, command in [
        (_agg(renamed), "Rules(fields={0: {'total': 'sum'}})", "--map-field 0:total=sum"),
        (tws, "Rules(variable={0: 'NAME'})", "--into-state 0:NAME"),
        (dedup, "(or accept losing it: Rules(discard={0}))",
         "(or accept losing it: --discard-state)"),
    ]:
        for spelling, wanted, other in [(None, python, command),
                                        (CommandFlags(), command, python)]:
            rules = Rules() if spelling is None else Rules(spelling=spelling)
            with pytest.raises(RestoreError) as caught:
                plan_layout(_agg_manifest(), [new], rules).check()
            assert wanted in str(caught.value) and other not in str(caught.value)
    (op,) = plan_layout(_agg_manifest(), [dedup],
                        Rules(discard=True, spelling=CommandFlags())).check().operators
    assert "discarded (--discard-state)" in op.how


def test_the_rules_a_restore_declares_are_recorded_as_plain_json():
    rules = Rules(variable={0: "totals"}, fields={0: {"n": "count"}}, matched={2: False},
                  time_zone="America/New_York", discard=True)
    assert rules.recorded() == {"variable": {"0": "totals"}, "fields": {"0": {"n": "count"}},
                                "matched": {"2": False}, "time_zone": "America/New_York"}
    assert Rules().recorded() == {} and Rules(time_zone=None).recorded() == {}


def test_the_commands_declarations_are_checked_before_anything_is_read(tmp_path, capsys):
    """``state restore --assume-matched/--time-zone``: bad input is one line and exit 2,
    before the journal, Spark or the savepoint is touched (there is no journal here)."""
    from offset_journal.cli import main
    from offset_journal.cli._state_cmds import _zone
    from tests.support import one_error_line

    query = tmp_path / "v2.py"
    query.write_text("def v2(spark, checkpoint, starting):\n    return None\n")
    base = ["--database-url", "postgresql://nobody@127.0.0.1:9/none", "state", "restore",
            str(tmp_path / "sp"), "--to", str(tmp_path / "ck"), "--query", f"{query}:v2"]
    for extra, message in [
        (["--assume-matched", "0:maybe"], "'0:maybe': use OPERATOR:true or OPERATOR:false"),
        (["--assume-matched", "left:true"], "use OPERATOR:true or OPERATOR:false"),
        (["--time-zone", "Mars/Olympus_Mons"], "'Mars/Olympus_Mons': not a time zone"),
        (["--time-zone", ""], "not a time zone"),
    ]:
        code = main(base + extra)
        _out, err = capsys.readouterr()
        assert code == 2 and message in one_error_line(code, err)
    assert not (tmp_path / "ck").exists()
    assert [_zone(z) for z in ("America/New_York", "UTC", "+05:00", "-3", "GMT+01:00")] == [
        "America/New_York", "UTC", "+05:00", "-3", "GMT+01:00"]
