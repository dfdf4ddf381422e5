"""Does a savepoint's state fit the new query's state layout (issue 40), the pure part:
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
from offset_journal.savepoint.restore import Rules
from offset_journal.savepoint.restore.layout import (
    COUNT,
    INDEX,
    MATCHED,
    NewOperator,
    new_operators,
    type_name,
)
from offset_journal.savepoint.restore.matching import plan_layout


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
         partitions: int = 8, properties: Any = None) -> NewOperator:
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
    (op,) = new_operators([described])
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


def test_a_join_rebuilds_both_sides_stores_from_their_rows():
    key = _s(_f("field0", "string"))
    left = _s(_f("grp", "string"), _f("amount", "long"), _f("ts", "timestamp"))
    right = _s(_f("g2", "string"), _f("a2", "long"), _f("ts2", "timestamp"))
    parts = [_part(0, side, "join-side", "stream-stream-join", key=key, value=row)
             for side, row in (("left", left), ("right", right))]
    m = _manifest((Operator(0, "symmetricHashJoin", "stream-stream-join", 2,
                            ("left-keyToNumValues",)), parts))
    stores = {}
    for side, row in (("left", left), ("right", right)):
        stores[f"{side}-keyToNumValues"] = {"default": (key, _s(_f("value", "long", False)))}
        stores[f"{side}-keyWithIndexToValue"] = {"default": (
            _s(_f("field0", "string"), _f("index", "long", False)),
            _s(*row["fields"], _f("matched", "boolean", False)))}
    layout = plan_layout(m, [_new(0, "symmetricHashJoin", stores)], Rules()).check()
    assert [(t.store, t.shape) for t in layout.targets] == [
        ("left-keyToNumValues", "join-count"), ("left-keyWithIndexToValue", "join-index"),
        ("right-keyToNumValues", "join-count"), ("right-keyWithIndexToValue", "join-index")]
    counts, rows = layout.targets[:2]
    assert [s.column for s in counts.value] == [COUNT]
    assert [s.column for s in rows.key] == ["field0", INDEX]
    assert [s.column for s in rows.value] == ["grp", "amount", "ts", MATCHED]
    assert any("carry no 'matched' flag" in n for n in layout.notes)


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
                                r"query \(declare a rename, e.g. fields=\{'n': 'count'\}"),
        (Rules(fields=fields), _tws(totals, ttl=True), "value state 'totals' has a TTL"),
        (Rules(fields=fields), _tws(totals, variables=("a", "b")),
         r"name the value state it goes into \(it has value states: a, b\)"),
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
    """Any 4.2.x (a vendor's build of one too) runs the restore; another minor is
    refused in one line naming it, the repartition the same."""
    from offset_journal.savepoint.restore._jvm import PROVEN_SPARK, version_problem

    assert PROVEN_SPARK == "Spark 4.2 (any 4.2.x)"
    for running in ("4.2.0", "4.2.1", "4.2.0-amzn-0"):
        assert version_problem(running) is None
        assert version_problem(running, "state-repartition") is None
    for other in ("4.3.0", "4.1.0", "3.5.3", "3.5.6-amzn-2"):
        for feature in ("state-restore", "state-repartition"):
            problem = version_problem(other, feature)
            assert problem is not None and "\n" not in problem
            assert "needs Spark 4.2 (any 4.2.x)" in problem
            assert f"this is Spark {other}" in problem


def test_a_plans_start_offsets_made_concrete_for_the_offsets_file():
    from dataclasses import dataclass, field

    from offset_journal.savepoint.restore.offsets import concrete_ends

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
