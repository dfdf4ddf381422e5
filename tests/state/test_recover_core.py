"""The pure core of a recovery from a savepoint: which savepoint, which old batches are
read again with what offsets, watermark and timestamp, and the ``offsets/N`` each runs
from. No Spark, no database."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from offset_journal.errors import RestoreError
from offset_journal.rows import Batch, SourceOffsets
from offset_journal.state.recover import (
    Candidate,
    Replay,
    choose,
    explain,
    offsets_file,
    replays,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _batch(batch_id: int, end: int, *, wm_s: int = 0) -> Batch:
    when = datetime.fromtimestamp(T0.timestamp() + batch_id, timezone.utc)
    wm = datetime.fromtimestamp(wm_s, timezone.utc)
    src = SourceOffsets(0, "KafkaV2[Subscribe[t]]", "kafka", {"t": {"0": end - 1}},
                        {"t": {"0": end}}, 1)
    return Batch("q", "qid", "run", batch_id, when, 10, 1, wm, None, None, (src,))


def test_choose_takes_the_newest_usable() -> None:
    found = choose("q", [Candidate(9, 30, "was deleted by retention"), Candidate(7, 20)])
    assert found.savepoint_id == 7


def test_choose_refuses_in_one_line_naming_the_newest_and_the_stateless_plan() -> None:
    with pytest.raises(RestoreError) as err:
        choose("q", [Candidate(9, 30, "is unusable: checksum of part-0 differs"),
                     Candidate(7, 20, "was deleted by retention")])
    text = str(err.value)
    assert "\n" not in text
    assert "savepoint 9 (batch 30), is unusable: checksum of part-0 differs" in text
    assert "nor any of the 1 older" in text
    assert "`offset-journal plan q`" in text


def test_choose_refuses_when_none_is_recorded() -> None:
    with pytest.raises(RestoreError, match="no savepoint of query 'q' is recorded"):
        choose("q", [])


def test_replays_are_the_batches_after_the_savepoints_in_order() -> None:
    got = replays(3, [_batch(6, 60, wm_s=5), _batch(2, 20), _batch(4, 40), _batch(5, 50)])
    assert [(r.old_batch_id, r.new_batch_id) for r in got] == [(4, 1), (5, 2), (6, 3)]
    assert json.loads(got[2].ends[0] or "") == {"t": {"0": 60}}
    assert got[2].watermark_ms == 5000
    assert got[0].timestamp_ms == int(T0.timestamp() * 1000) + 4000


def test_replays_take_the_old_checkpoints_watermark_and_timestamp_first() -> None:
    got = replays(3, [_batch(4, 40, wm_s=1)], {4: (777, 888)})
    assert (got[0].watermark_ms, got[0].timestamp_ms) == (777, 888)


def test_a_journaled_batch_other_than_the_old_checkpoints_is_refused() -> None:
    """The old checkpoint's offsets/5 ended at 50; the journal's batch 5 (a copy of the
    checkpoint run under the same query id) at 55: replaying it would read 50..54 again
    into state and the new query resume after 55, skipping records the sink never got."""
    batches = [_batch(4, 40), _batch(5, 55), _batch(6, 60)]
    agreed = {4: ({"t": {"0": 40}},), 6: ({"t": {"0": 60}},)}
    assert len(replays(3, batches, None, {**agreed, 5: ({"t": {"0": 55}},)})) == 3
    with pytest.raises(RestoreError) as err:
        replays(3, batches, None, {**agreed, 5: ({"t": {"0": 50}},)})
    text = str(err.value)
    assert "\n" not in text and "the journal's batch 5 (run run) ended source 0 at " \
        '{"t":{"0":55}}, the old checkpoint\'s offsets/5 at {"t":{"0":50}}' in text


def test_nothing_to_replay_after_the_last_batch() -> None:
    assert replays(6, [_batch(6, 60), _batch(5, 50)]) == ()


def test_a_batch_missing_between_is_refused() -> None:
    with pytest.raises(RestoreError, match="lacks the old query's batch 5 between"):
        replays(3, [_batch(4, 40), _batch(6, 60)])


def test_offsets_file_keeps_the_log_version_and_conf() -> None:
    before = "\n".join(["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1,
                                          "conf": {"spark.sql.shuffle.partitions": "3"}}),
                        '{"t":{"0":10}}'])
    text = offsets_file(before, Replay(4, 1, ('{"t":{"0":40}}',), 1234, 5678))
    lines = text.split("\n")
    assert lines[0] == "v1" and lines[2] == '{"t":{"0":40}}'
    meta = json.loads(lines[1])
    assert meta == {"batchWatermarkMs": 1234, "batchTimestampMs": 5678,
                    "conf": {"spark.sql.shuffle.partitions": "3"}}


def test_offsets_file_refuses_another_log_version_or_source_count() -> None:
    with pytest.raises(RestoreError, match="not v1"):
        offsets_file("v2\n{}\n{}", Replay(4, 1, ("{}",), 0, 0))
    with pytest.raises(RestoreError, match="has 2 sources, the new query 1"):
        offsets_file("v1\n{}\n{}", Replay(4, 1, ("{}", "{}"), 0, 0))


def test_explain_names_the_decision() -> None:
    done = (Replay(4, 1, (), 0, 0), Replay(5, 2, (), 0, 0))
    assert explain(7, 3, done, False) == ("recovered from savepoint 7 (batch 3): batches "
                                          "4..5 read again into state, not written")
    assert "2 batch(es) it sees twice" in explain(7, 3, done, True)
    assert "no batch after it" in explain(7, 3, (), False)


# --------------------------------------------------------------------------- the audit

NOTE = "recovered from savepoint 5 (batch 1): batches 2..3 read again into state, not written"
RECOVERY = {"savepoint_id": 5, "savepoint_batch": 1, "old_batches": [2, 3],
            "new_batches": [1, 2], "reread_sink": False, "note": NOTE}


def _audit_batch(pk: int, run: str, query_id: str, batch_id: int, start: int | None,
                 end: int) -> Any:
    from offset_journal.audit import AuditBatch, AuditSource
    from offset_journal.offsets import PartitionOffset

    when = T0 + timedelta(minutes=pk)
    rows = 0 if start is None else end - start
    return AuditBatch(pk, run, query_id, batch_id, when, when,
                      (AuditSource(0, rows, (PartitionOffset("t", 0, start, end),)),))


def _recovered_history(replay_query_id: str = "new") -> list[Any]:
    """The old checkpoint's batches 0..3 (10 records each), a savepoint at batch 1; the
    recovery's restore run (batch 0 of the new checkpoint, reading nothing at 20), its
    two replay runs (old batches 2 and 3), then the recovered query going on."""
    old = [_audit_batch(i + 1, "r1", "old", i, None if i == 0 else 10 * i, 10 * (i + 1))
           for i in range(4)]
    return [*old, _audit_batch(5, "boot", "new", 0, None, 20),
            _audit_batch(6, "p1", replay_query_id, 1, 20, 30),
            _audit_batch(7, "p2", replay_query_id, 2, 30, 40),
            _audit_batch(8, "real", replay_query_id, 3, 40, 50)]


def _recovery_plan(request: dict[str, Any]) -> Any:
    from offset_journal.rows import RecordedPlan

    return RecordedPlan(9, "q", T0, "savepoint", "stateless", "state-recover", True,
                        ((0, "t", 0, 20),), run_ids=("boot",), request=request,
                        linked_at={"boot": T0})


def test_the_audit_reads_a_recoverys_replays_as_planned_by_its_decision() -> None:
    from offset_journal.audit import audit_batches

    report = audit_batches("q", _recovered_history(), [_recovery_plan({"recovery": RECOVERY})])
    assert report.ok and report.findings
    assert all(f.status == "planned" and NOTE in f.reason for f in report.findings)
    assert {f.run_id for f in report.findings} == {"p1", "p2"}
    assert f"run boot started from plan 9: {NOTE}" in report.notes


def test_the_audit_does_not_take_a_recovery_for_another_checkpoint_or_without_one() -> None:
    from offset_journal.audit import audit_batches

    plain = audit_batches("q", _recovered_history(), [_recovery_plan({})])
    other = audit_batches("q", _recovered_history("elsewhere"),
                          [_recovery_plan({"recovery": RECOVERY})])
    for report in (plain, other):
        assert not report.ok
        assert {f.run_id for f in report.findings if f.status == "unexplained"} >= {"p1",
                                                                                   "p2"}


def test_a_recovery_field_not_as_the_command_writes_it_is_ignored() -> None:
    from offset_journal.journal._plan_rows import recorded_plan

    row = {"id": 9, "query_name": "q", "created_at": T0, "position": "savepoint",
           "mode": "stateless", "command": "state-recover", "ok": True,
           "kafka_offsets": [[0, "t", 0, 20]], "options": {}, "checkpoint": None,
           "host": None, "os_user": None, "anchor_run_id": None, "anchor_batch_id": None,
           "request": {"recovery": {**RECOVERY, "new_batches": ["1"]}}}
    found = recorded_plan(row, {})
    assert "recovery" not in found.request and "request field recovery" in found.ignored[0]
    row["request"] = {"recovery": RECOVERY}
    assert recorded_plan(row, {}).request["recovery"] == RECOVERY
