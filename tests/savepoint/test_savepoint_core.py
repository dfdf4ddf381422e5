"""Savepoints, the pure part: which batch, which parts and columns, the
manifest and its checksums, and what a plan from a savepoint says and refuses. No Spark,
broker or database: the quick tier."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from offset_journal.errors import RestartError, SavepointError
from offset_journal.offsets import PartitionOffset
from offset_journal.restart import JournalFacts, PlanRequest, SavepointFacts, compute_plan
from offset_journal.restart.model import POSITION_SAVEPOINT
from offset_journal.restart.record import plan_row
from offset_journal.rows import Batch, SourceOffsets
from offset_journal.savepoint import core, load_savepoint
from offset_journal.savepoint._files import (
    check_parts,
    read_manifest,
    require_empty,
    sums,
    write_manifest,
)
from offset_journal.savepoint.model import (
    Column,
    FileSum,
    Manifest,
    Operator,
    Part,
    Savepoint,
    SourceEnd,
)


def _struct(*fields: tuple[str, object]) -> dict:
    return {"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}


# --------------------------------------------------------------------------- the batch


def test_the_newest_batch_both_have_and_which_is_ahead():
    assert core.choose_batch([3, 4, 5], [3, 4, 5]) == (5, [])
    batch, notes = core.choose_batch([3, 4, 5, 6, 7], [2, 3, 4, 5])
    assert batch == 5 and "the checkpoint is ahead of the journal" in notes[0]
    assert "commits up to batch 7, journal up to 5" in notes[0]
    batch, notes = core.choose_batch([3, 4], [3, 4, 5])
    assert batch == 4 and "the journal is ahead of the checkpoint" in notes[0]
    with pytest.raises(SavepointError, match="no longer holds batch 2, the journal's newest "
                                             "of it: the oldest batch still there is 7"):
        core.choose_batch([7, 8], [1, 2])
    with pytest.raises(SavepointError, match=r"no batch in common \(commits 1..3, journal"):
        core.choose_batch([1, 3], [2])
    assert core.committed_after([3, 4, 5, 6, 7], 5) == (6, 7)
    assert core.committed_after([3, 4], 4) is None


# --------------------------------------------------------------------------- operators


TWS_PROPS = json.dumps({"timeMode": "ProcessingTime", "outputMode": "Update", "stateVariables": [
    {"stateName": "cnt", "stateVariableType": "ValueState", "ttlEnabled": False},
    {"stateName": "$procTimers_keyToTimestamp", "stateVariableType": "TimerState",
     "ttlEnabled": False},
    {"stateName": "m", "stateVariableType": "MapState", "ttlEnabled": True},
    {"stateName": "seen", "stateVariableType": "ListState", "ttlEnabled": True}]})


def _row(op: int, name: str, store: str = "default", props: str | None = None,
         lo: int = 0, hi: int = 5) -> dict:
    return {"operatorId": op, "operatorName": name, "stateStoreName": store,
            "numPartitions": 2, "minBatchId": lo, "maxBatchId": hi,
            "operatorProperties": props}


def test_metadata_rows_become_operators_and_parts_to_read():
    ops = core.operators_of([
        _row(1, "symmetricHashJoin", s) for s in ("left-keyToNumValues",
                                                  "left-keyWithIndexToValue",
                                                  "right-keyToNumValues",
                                                  "right-keyWithIndexToValue")
    ] + [_row(0, "transformWithStateInPySparkExec", props=TWS_PROPS),
         _row(2, "stateStoreSave"), _row(3, "somethingNew")])
    assert [(o.id, o.kind) for o in ops] == [
        (0, "transform-with-state"), (1, "stream-stream-join"), (2, "aggregation"),
        (3, "other")]
    tws = core.read_specs(ops[0])
    assert [(s.name, s.kind, s.ttl) for s in tws] == [
        ("cnt", "value", False), ("m", "map", True), ("seen", "list", True),
        ("timers", "timers", False)]
    assert tws[1].options == {"operatorId": "0", "stateVarName": "m"}
    assert tws[3].options == {"operatorId": "0", "readRegisteredTimers": "true"}
    assert [s.options for s in core.read_specs(ops[1])] == [
        {"operatorId": "1", "joinSide": "left"}, {"operatorId": "1", "joinSide": "right"}]
    assert [s.options for s in core.read_specs(ops[2])] == [{"operatorId": "2"}]


def test_state_cleaned_past_retention_names_the_oldest_batch_still_there():
    op = core.operators_of([_row(0, "stateStoreSave", lo=40, hi=45)])[0]
    assert core.state_gone(op, 40) is None
    gone = core.state_gone(op, 12)
    assert gone is not None and "oldest batch still there is 40" in gone
    assert "\n" not in gone


# --------------------------------------------------------------------------- columns


def test_aggregation_fields_by_position_and_opaque_buffers():
    schema = _struct(("key", _struct(("k", "string"))),
                     ("value", _struct(("count", "long"), ("count", "long"), ("sum", "double"),
                                       ("count", "long"), ("buf", "binary"))),
                     ("partition_id", "integer"))
    cols, opaque, dropped = core.export_columns("store", "aggregation", schema)
    assert [(c.name, c.source, c.key) for c in cols] == [
        ("k", ("key", 0), True), ("count", ("value", 0), False),
        ("count_1", ("value", 1), False), ("sum", ("value", 2), False),
        ("count_3", ("value", 3), False), ("buf", ("value", 4), False)]
    assert opaque == ["buf"] and dropped == []
    assert core.positional(schema["fields"][1]["type"])["fields"][1]["name"] == "_1"


def test_state_variables_flatten_with_their_ttl_and_timers():
    key = ("key", _struct(("k", "string")))
    ttl_value = _struct(("value", _struct(("v", "long"))), ("ttlExpirationMs", "long"))
    cols, _, _ = core.export_columns("list", "transform-with-state",
                                     _struct(key, ("list_element", ttl_value)))
    assert [(c.name, c.source) for c in cols] == [
        ("k", ("key", 0)), ("v", ("list_element", 0, 0)),
        ("ttl_expiration_ms", ("list_element", 1))]
    cols, _, _ = core.export_columns("map", "transform-with-state", _struct(
        key, ("user_map_key", _struct(("k", "string"))), ("user_map_value", ttl_value)))
    assert [c.name for c in cols] == ["k", "map_key_k", "v", "ttl_expiration_ms"]
    cols, _, _ = core.export_columns("timers", "transform-with-state", _struct(
        key, ("expiration_timestamp_ms", "long"), ("partition_id", "integer")))
    assert [c.name for c in cols] == ["k", "expiration_timestamp_ms"]


def test_group_state_dedup_and_session_windows():
    key = ("key", _struct(("k", "string")))
    cols, _, _ = core.export_columns("store", "apply-in-pandas-with-state", _struct(
        key, ("value", _struct(("groupState", _struct(("n", "long"))),
                               ("timeoutTimestamp", "long")))))
    assert [(c.name, c.source) for c in cols] == [
        ("k", ("key", 0)), ("n", ("value", 0, 0)), ("timeoutTimestamp", ("value", 1))]
    cols, _, dropped = core.export_columns("store", "dedup", _struct(
        key, ("value", _struct(("__dummy__", "void")))))
    assert [c.name for c in cols] == ["k"] and dropped == ["__dummy__"]
    window = _struct(("start", "timestamp"), ("end", "timestamp"))
    session = _struct(("key", _struct(("k", "string"), ("sessionStartTime", "timestamp"))),
                      ("value", _struct(("session_window", window), ("k", "string"),
                                        ("count", "long"))))
    cols, _, _ = core.export_columns("store", "session-window", session)
    assert [c.name for c in cols] == ["k", "sessionStartTime", "session_window", "value_k",
                                      "count"]
    assert cols[2].type == window  # a struct kept whole keeps its field names
    assert core.windowed_key(_struct(("key", _struct(("window", window), ("k", "string")))))
    assert not core.windowed_key(session)


# --------------------------------------------------------------------------- manifests


def _part(op: int = 0, name: str = "default", kind="store", keys: int = 3,
          columns: tuple[Column, ...] | None = None, files=(), opaque=()) -> Part:
    cols = columns or (Column("k", ("key", 0), "string", True),
                       Column("count", ("value", 0), "long"))
    return Part(op, name, kind, f"operator={op}/part=0", {"operatorId": str(op)},
                _struct(), cols, keys, keys, tuple(files), opaque=tuple(opaque))


def _manifest(operators=None, parts=None, batch_id: int = 4, end=None) -> Manifest:
    return Manifest(
        query_name="counts", run_id="run-1", query_id="qid", batch_id=batch_id,
        checkpoint="/chk/v1",
        end_offsets=(SourceEnd(0, "KafkaV2[Subscribe[t]]", "kafka", end or {"t": {"0": 50}}),),
        operators=tuple(operators if operators is not None else
                        [Operator(0, "stateStoreSave", "aggregation", 2, ("default",))]),
        parts=tuple(parts if parts is not None else [_part()]),
        created_at="2026-11-25T10:00:00.000+00:00", spark_version="4.2.0")


def test_a_manifest_reads_back_as_written_and_its_digest_is_stable():
    m = _manifest(parts=[_part(files=[FileSum("part-0.parquet", 10, "a" * 64)])])
    again = core.manifest_from_dict(json.loads(json.dumps(m.to_dict())))
    assert again == m and again.digest == m.digest
    assert replace(m, batch_id=5).digest != m.digest
    for bad in ({}, {**m.to_dict(), "version": 9}, {**m.to_dict(), "batch_id": "4"},
                {**m.to_dict(), "parts": [{**m.parts[0].to_dict(), "path": "../../etc"}]}):
        with pytest.raises(SavepointError, match="manifest is malformed"):
            core.manifest_from_dict(bad)


def test_a_recorded_manifest_is_read_as_one_never_trusted():
    assert core.recorded_operators(_manifest().to_dict()) == (1, None)
    for forged in ({"operators": 5}, {**_manifest().to_dict(), "operators": 5}, None, [1]):
        count, why = core.recorded_operators(forged)
        assert count is None and why is not None and "malformed" in why


def test_manifest_and_parquet_files_altered_are_refused(tmp_path: Path):
    root = tmp_path / "sp"
    part_dir = root / "operator=0" / "part=0"
    part_dir.mkdir(parents=True)
    (part_dir / "part-0.parquet").write_bytes(b"PAR1 data PAR1")
    (part_dir / "_SUCCESS").write_bytes(b"")
    (part_dir / ".part-0.parquet.crc").write_bytes(b"crc")
    found = sums(str(root), "operator=0/part=0")
    assert list(found) == ["part-0.parquet"]  # only what Spark reads as data
    m = _manifest(parts=[_part(files=found.values())])
    digest = write_manifest(str(root), m)
    assert read_manifest(str(root)) == (m, digest)
    check_parts(str(root), m.parts)

    (part_dir / "part-0.parquet").write_bytes(b"PAR1 dat4 PAR1")
    with pytest.raises(SavepointError, match="does not match its checksum"):
        check_parts(str(root), m.parts)
    (part_dir / "part-0.parquet").unlink()
    with pytest.raises(SavepointError, match="is missing"):
        check_parts(str(root), m.parts)
    (part_dir / "part-1.parquet").write_bytes(b"x")
    with pytest.raises(SavepointError, match="not in the manifest"):
        check_parts(str(root), [replace(m.parts[0], files=())])

    text = json.loads((root / "manifest.json").read_text())
    text["manifest"]["batch_id"] = 3
    (root / "manifest.json").write_text(json.dumps(text))
    with pytest.raises(SavepointError, match="does not match its checksum"):
        read_manifest(str(root))
    with pytest.raises(SavepointError, match="no manifest.json"):
        read_manifest(str(tmp_path))


def test_the_target_must_be_new_or_empty(tmp_path: Path):
    require_empty(str(tmp_path / "new"))
    require_empty(str(tmp_path))
    (tmp_path / "x").write_text("")
    with pytest.raises(SavepointError, match="is not empty"):
        require_empty(str(tmp_path))
    with pytest.raises(SavepointError, match="is a file"):
        require_empty(str(tmp_path / "x"))


def test_operators_and_state_variables_that_do_not_exist():
    tws = Operator(0, "transformWithStateInPySparkExec", "transform-with-state", 2,
                   ("default",))
    m = _manifest([tws], [_part(name="cnt", kind="value"), _part(name="seen", kind="list")])
    op, parts = core.choose_parts(m, None, None)
    assert op.id == 0 and [p.name for p in parts] == ["cnt", "seen"]
    assert [p.name for p in core.choose_parts(m, 0, "seen")[1]] == ["seen"]
    with pytest.raises(SavepointError, match="no operator 7 .operators: 0."):
        core.choose_parts(m, 7, None)
    with pytest.raises(SavepointError, match="no state variable 'nope' .it has: cnt, seen."):
        core.choose_parts(m, 0, ["cnt", "nope"])
    two = _manifest([tws, replace(tws, id=1)])
    with pytest.raises(SavepointError, match="operators 0, 1: name one"):
        core.choose_parts(two, None, None)


# --------------------------------------------------------------------------- the plan


def _anchor(batch_id: int = 4, end: int = 50, run: str = "run-1", pk: int = 9) -> Batch:
    src = SourceOffsets(0, "KafkaV2[Subscribe[t]]", "kafka", {"t": {"0": end - 10}},
                        {"t": {"0": end}}, 10, (PartitionOffset("t", 0, end - 10, end),))
    return Batch("counts", "qid", run, batch_id,
                 datetime(2026, 11, 25, 10, batch_id, tzinfo=timezone.utc), 10, 10, None,
                 None, None, (src,), pk=pk)


def _plan(savepoint: Savepoint, latest: Batch | None = None, **asked):
    return compute_plan("counts",
                        JournalFacts(_anchor(), position=POSITION_SAVEPOINT),
                        savepoint_facts=SavepointFacts(loaded=savepoint,
                                                       latest=latest or _anchor()),
                        savepoint="/sp",
                        **asked)


def test_a_plan_from_a_savepoint_starts_after_its_batch_and_names_what_is_carried():
    sp = Savepoint(_manifest(), "/sp", 7)
    plan = _plan(sp, seed=(0,))
    assert plan.ok, plan.errors
    assert plan.position == "savepoint" and plan.starting_offsets() == '{"t":{"0":50}}'
    assert [(c.operator_id, c.keys, c.decision) for c in plan.state] == [(0, 3, "seeded")]
    assert "initial_state(spark, 7, operator=0, expect_sha256=" in plan.state[0].how
    assert f"expect_sha256='{sp.digest}')" in plan.state[0].how
    text = plan.explain()
    assert "State (savepoint 7 at /sp):" in text and "3 keys, seeded" in text
    row = plan_row(plan, PlanRequest("counts", savepoint="/sp", seed=(0,)).checked(), "plan")
    assert row["position"] == "savepoint"
    assert row["request"]["savepoint"] == {"id": 7, "location": "/sp",
                                           "sha256": sp.manifest.digest}
    assert row["request"]["state"] == [[0, "aggregation", 3, "seeded"]]


def test_a_restore_plan_names_the_way_of_the_interface_it_was_made_for():
    """The plan's "how" of a restored operator names what its reader runs: the command
    that restores (a plan the plan commands print), this restore (`state restore`), or
    restore_savepoint (a job, the Python API). What the restore declares is recorded."""
    sp = Savepoint(_manifest(), "/sp", 7)
    hows = {command: _plan(sp, restore=True, command=command).state[0].how
            for command in ("plan", "starting-offsets", "state-restore", "api")}
    assert hows["plan"] == hows["starting-offsets"]
    assert hows["plan"].startswith("restored: `offset-journal state restore 7 --to CHECKPOINT "
                                   "--query FILE:FUNCTION` (or the job started from this plan "
                                   "with --restore) writes its 3 keys")
    assert hows["state-restore"].startswith("restored: this restore (offset-journal state "
                                            "restore) writes its 3 keys")
    assert hows["api"].startswith("restored: restore_savepoint (a job's --restore")
    assert "restore_savepoint" not in hows["plan"] + hows["state-restore"]

    declared = {"matched": {"0": False}, "time_zone": "America/New_York"}
    request = PlanRequest("counts", savepoint="/sp", restore=True, restore_rules=declared)
    plan = _plan(sp, restore=True, restore_rules=declared)
    row = plan_row(plan, request.checked(), "state-restore")
    assert row["command"] == "state-restore" and row["request"]["restore_rules"] == declared
    assert "restore_rules" not in plan_row(plan, replace(request, restore_rules=None).checked(),
                                           "state-restore")["request"]
    with pytest.raises(RestartError, match=r"they apply to a plan with restore \(--restore\)"):
        replace(request, restore=False).checked()


def test_state_a_built_in_operator_cannot_take_is_refused_unless_discarded():
    windowed = Operator(0, "stateStoreSave", "aggregation", 2, ("default",), windowed=True)
    dedup = Operator(1, "dedupe", "dedup", 2, ("default",))
    sp = Savepoint(_manifest([windowed, dedup], [_part(0), _part(1, keys=5)]), "/sp", 7)
    refused = _plan(sp)
    assert not refused.ok
    assert [c.decision for c in refused.state] == ["refused", "refused"]
    agg_error, dedup_error = refused.errors
    assert "a built-in aggregation takes no initial state in Spark" in agg_error
    assert "--state-aware --window" in agg_error and "--discard-state" in agg_error
    assert "5 keys" in dedup_error and "--state-aware" not in dedup_error
    kept = _plan(sp, seed=(1,), discard_state=True)
    assert kept.ok
    assert [c.decision for c in kept.state] == ["discarded", "seeded"]
    assert any("discarded (--discard-state, recorded with the plan" in w
               for w in kept.warnings)
    row = plan_row(kept, PlanRequest("counts", savepoint="/sp", seed=(1,),
                                     discard_state=True).checked(), "plan")
    assert row["request"]["discard_state"] is True and row["request"]["seed"] == [1]
    assert row["request"]["state"] == [[0, "aggregation", 3, "discarded"],
                                       [1, "dedup", 5, "seeded"]]


def test_opaque_buffers_unknown_operators_and_a_moved_journal():
    sp = Savepoint(_manifest(parts=[_part(opaque=["buf"])]), "/sp", 7)
    assert any("buf are aggregate buffers" in e for e in _plan(sp, seed="all").errors)
    with pytest.raises(RestartError, match="--seed 3: savepoint 7 at /sp has no operator 3"):
        _plan(sp, seed=(3,))
    later = _anchor(batch_id=9, end=90, pk=20)
    plan = _plan(Savepoint(_manifest(), "/sp", 7), later, seed="all")
    assert plan.ok and any("goes on past the savepoint's batch, to batch 9" in w
                           for w in plan.warnings)
    moved = Savepoint(_manifest(end={"t": {"0": 49}}), "/sp", 7)
    assert any("other end offsets" in e for e in _plan(moved, seed="all").errors)
    empty = _plan(Savepoint(_manifest([], []), "/sp", None))
    assert empty.ok and any("holds no state" in n for n in empty.notes)
    assert not any("old checkpoint committed" in w for w in plan.warnings)


def test_a_checkpoint_ahead_of_the_journal_warns_that_those_batches_are_written_again():
    """v1 committed batches 5..7 the journal lacks: v1 wrote their output, and v2, from
    batch 4's end offsets, writes it again (a warning naming them, not only a note)."""
    m = replace(_manifest(), committed_after=(5, 7))
    again = core.manifest_from_dict(json.loads(json.dumps(m.to_dict())))
    assert again.committed_after == (5, 7) and again.digest == m.digest
    assert "committed_after" not in _manifest().to_dict()  # older manifests' digests hold
    with pytest.raises(SavepointError, match="committed_after is malformed"):
        core.manifest_from_dict({**m.to_dict(), "committed_after": [5]})
    plan = _plan(Savepoint(m, "/sp", 7), seed="all")
    assert plan.ok
    (warning,) = [w for w in plan.warnings if "old checkpoint committed" in w]
    assert "batches 5..7 after the savepoint's batch 4" in warning
    assert "a second time" in warning
    one = _plan(Savepoint(replace(m, committed_after=(5, 5)), "/sp", 7), seed="all")
    assert any("committed batch 5 after" in w for w in one.warnings)


def test_a_savepoint_directory_named_with_digits_is_a_directory(tmp_path: Path, monkeypatch):
    from offset_journal.cli.plan_args import savepoint_ref

    monkeypatch.chdir(tmp_path)
    assert savepoint_ref("20261125") == 20261125  # no such directory: an id
    (tmp_path / "20261125").mkdir()
    assert savepoint_ref("20261125") == "./20261125"
    assert savepoint_ref("./7") == "./7" and savepoint_ref(" 7 ") == 7
    with pytest.raises(SavepointError, match="no savepoint at 20261125: no manifest.json"):
        load_savepoint("20261125")  # the library reads it as the directory too


def test_savepoint_requests_that_make_no_sense():
    base = PlanRequest("counts", savepoint="/sp")
    assert base.checked().position == "savepoint"
    for bad, match in [
        (replace(base, as_of=datetime(2026, 1, 1, tzinfo=timezone.utc)), "not both"),
        (replace(base, batch=("r", 1)), "not both"),
        (replace(base, mode="state-aware"), "--state-aware"),
        (PlanRequest("counts", seed=(0,)), "--seed applies to a plan from a savepoint"),
        (PlanRequest("counts", discard_state=True), "--discard-state applies"),
        (PlanRequest("counts", unrecorded_savepoint=True), "--unrecorded-savepoint applies"),
        (replace(base, seed="some"), "bad operator to seed"),
        (replace(base, seed=(-1,)), "bad operator to seed"),
    ]:
        with pytest.raises(RestartError, match=match):
            bad.checked()
    assert replace(base, seed=(2, 0, 2)).checked().seed == (0, 2)


def test_a_same_offsets_check_that_cannot_be_made_is_a_warning(tmp_path: Path, caplog):
    from offset_journal.checkpoint import read_checkpoint
    from offset_journal.savepoint.spark import _check_same_offsets
    from tests.checkpoint.test_checkpoint import DELTA_LINE, kafka_line, make_checkpoint

    kafka = read_checkpoint(str(make_checkpoint(
        tmp_path / "k", [[kafka_line("t", {0: 40})]] * 4 + [[kafka_line("t", {0: 50})]])))
    caplog.set_level("WARNING", logger="offset_journal.savepoint.spark")
    _check_same_offsets(kafka, _anchor())  # batch 4 read t/0 up to 50 in both
    assert not caplog.records
    with pytest.raises(SavepointError, match="batch 4 read other offsets"):
        _check_same_offsets(kafka, _anchor(end=51))
    delta = read_checkpoint(str(make_checkpoint(tmp_path / "d", [[DELTA_LINE]] * 5)))
    _check_same_offsets(delta, _anchor())
    _check_same_offsets(kafka, _anchor(batch_id=9))  # no offsets/9
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING"]
    assert "offsets/4 has no Kafka source: not checked" in caplog.records[0].getMessage()
    assert "offsets/9 cannot be read: not checked" in caplog.records[1].getMessage()


def test_savepoint_create_refuses_an_empty_directory(tmp_path: Path, monkeypatch, capsys):
    """``--to ''`` and ``--checkpoint ''`` were taken as the current
    directory (an empty one would have received the savepoint)."""
    from offset_journal.cli import main
    from offset_journal.savepoint.spark import prepare_savepoint

    monkeypatch.chdir(tmp_path)
    url = "postgresql://nobody@127.0.0.1:1/none"
    for argv, named in ((["--checkpoint", "", "--to", "sp"], "--checkpoint"),
                        (["--checkpoint", "chk", "--to", ""], "--to"),
                        (["--checkpoint", "chk", "--to", "  "], "--to")):
        code = main(["--database-url", url, "savepoint", "create", "q", *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, err
        assert named in err[0] and "empty" in err[0] and "Traceback" not in err[0], err
    for checkpoint, target in (("", "sp"), ("chk", ""), ("chk", " ")):
        with pytest.raises(SavepointError, match="is empty"):
            prepare_savepoint(None, "q", checkpoint, target)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------


def test_a_recorded_row_vouches_only_for_a_manifest_of_its_own_batch():
    """A savepoints row names a query, run, query id and batch; its
    manifest must name the same ones, or the row vouches for nothing."""
    m = _manifest()
    row = {"query_name": "counts", "run_id": "run-1", "query_id": "qid", "batch_id": 4,
           "checkpoint": "/chk/v1"}
    assert core.row_mismatch(row, m) is None
    for key, value in (("query_name", "other"), ("run_id", "run-2"), ("query_id", "q2"),
                       ("batch_id", 0), ("checkpoint", "/chk/v9")):
        why = core.row_mismatch({**row, key: value}, m)
        assert why is not None and "batch 4 of run run-1 of query 'counts'" in why, why
    assert core.recorded_problem({**row, "manifest": m.to_dict()}) is None
    assert "malformed" in str(core.recorded_problem({**row, "manifest": {}}))
    assert "names batch 4" in str(core.recorded_problem({**row, "batch_id": 0,
                                                         "manifest": m.to_dict()}))


def test_a_part_directory_holding_anything_else_spark_reads_is_refused(tmp_path: Path):
    """Spark's file index reads a ``_`` name that holds ``=`` (and
    ``_metadata``, and descends into directories): only what it never reads (``.crc``,
    ``_SUCCESS``, ``_temporary``) may sit beside the files the manifest lists."""
    root = tmp_path / "sp"
    part_dir = root / "operator=0" / "part=0"
    part_dir.mkdir(parents=True)
    (part_dir / "part-0.parquet").write_bytes(b"PAR1 data PAR1")
    for ignored in ("_SUCCESS", ".part-0.parquet.crc", "part-9.parquet._COPYING_"):
        (part_dir / ignored).write_bytes(b"")
    (part_dir / "_temporary").mkdir()
    (part_dir / "_temporary" / "part-7.parquet").write_bytes(b"old attempt")
    found = sums(str(root), "operator=0/part=0")
    assert list(found) == ["part-0.parquet"]
    m = _manifest(parts=[_part(files=found.values())])
    check_parts(str(root), m.parts)
    for name in ("_x=1.parquet", "_metadata", "_common_metadata"):
        (part_dir / name).write_bytes(b"PAR1 three more keys PAR1")
        with pytest.raises(SavepointError, match=f"{name} is not in the manifest: Spark would "
                                                 "read it"):
            check_parts(str(root), m.parts)
        (part_dir / name).unlink()
    (part_dir / "x=1").mkdir()
    (part_dir / "x=1" / "part-0.parquet").write_bytes(b"PAR1 data PAR1")
    with pytest.raises(SavepointError, match="x=1 is not in the manifest: Spark would read"):
        check_parts(str(root), m.parts)


def test_a_manifest_file_name_stays_in_its_part_directory():
    m = _manifest(parts=[_part(files=[FileSum("part-0.parquet", 1, "a" * 64)])])
    for name in ("../part-0.parquet", "sub/part-0.parquet", "..", "", "a\\b"):
        doc = m.to_dict()
        doc["parts"][0]["files"][0]["name"] = name
        with pytest.raises(SavepointError, match="manifest is malformed"):
            core.manifest_from_dict(doc)
