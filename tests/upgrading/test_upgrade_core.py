"""An upgrade in one call, its pure parts: v2's first batch against the plan, the
outcome said in a line or two, the row journaling it read back as the plan commands'
rows are, and the audit reading a roll back (v1 resumed on its own checkpoint, reading
again what v2 read) as planned only when the roll back is recorded and linked as it
should be. No Spark, no database."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from offset_journal.audit import audit_batches
from offset_journal.journal._plan_rows import recorded_plan
from offset_journal.offsets import PartitionOffset
from offset_journal.rows import AuditBatch, AuditSource, RecordedPlan
from offset_journal.upgrading import Upgrade, Verification, result_row, start_problems
from offset_journal.upgrading.model import planned_ends

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass
class _Source:
    index: int
    offsets: dict[str, dict[int, int]] | None
    log_starts: dict[tuple[str, int], int] = field(default_factory=dict)


def _progress(batch: int, start: dict[str, dict[str, int]]) -> dict[str, Any]:
    return {"batchId": batch, "sources": [{"startOffset": json.dumps(start)}]}


def test_v2s_first_batch_must_start_at_the_plans_offsets():
    planned = planned_ends([_Source(0, {"t": {0: 10, 1: 20, 2: -2}})])
    assert planned == {0: {"t": {0: 10, 1: 20}}}  # earliest: the log start, not compared
    assert start_problems(planned, _progress(1, {"t": {"0": 10, "1": 20, "2": 0}})) == []
    assert start_problems(planned, _progress(1, {"t": {"0": 10, "1": 25}})) == [
        "batch 1 started t-1 at 25, not at the planned 20"]
    assert start_problems(planned, {"batchId": 1, "sources": []}) == ["batch 1 has no source 0"]
    assert start_problems(planned, {"batchId": 1, "sources": [{"startOffset": None}]}) == [
        "batch 1 reports no start offsets for source 0"]


def test_the_outcome_is_said_in_a_line_or_two():
    ok = Verification((1, 2), ended=False)
    assert ok.passed and ok.explain() == ("v2 verified: 2 batch(es) (batches 1..2) completed, "
                                          "the first at the planned offsets")
    bad = Verification((1,), (), ("v2 failed: boom",))
    assert not bad.passed and bad.reasons == ("v2 failed: boom",)
    done = Upgrade("rolled-back", "totals", bad.reasons, object(), None, 4, 5, bad)
    assert done.explain() == (
        "rolled back 'totals': v1 runs again on its own checkpoint, after its savepoint "
        "(plan 4)\n  v2 failed its verification after 1 batch(es) (batch 1): v2 failed: boom")
    refused = Upgrade("refused", "totals", ("layout: no",), None)
    assert refused.explain().splitlines() == [
        "upgrade of 'totals' refused; v1 is left as it was, not running", "  layout: no"]


def _row(outcome: Any, **kw: Any) -> dict[str, Any]:
    return result_row("totals", outcome, plan_id=4, savepoint=(2, 3), checkpoint="/ck/v1",
                      new_checkpoint="/ck/v2", reasons=kw.pop("reasons", ()), **kw)


def _plan(row: dict[str, Any], pid: int, created: datetime,
          links: dict[str, datetime] | None = None) -> RecordedPlan:
    return recorded_plan({**row, "id": pid, "created_at": created, "host": None,
                          "os_user": None}, links or {})


def test_the_outcome_row_reads_back_and_a_forged_one_is_ignored():
    row = _row("rolled-back", reasons=("the check returned False",),
               verification=Verification((1, 2), (), ("the check returned False",)),
               resume={0: {"t": {0: 30}}})
    assert row["kafka_offsets"] == [[0, "t", 0, 30]] and row["command"] == "upgrade-result"
    plan = _plan(row, 5, T0)
    assert plan.rolled_back and plan.upgrade is not None
    assert plan.upgrade["reasons"] == ["the check returned False"] and not plan.ignored
    assert not _plan(_row("upgraded"), 6, T0).rolled_back  # no offsets: explains no run
    forged = {**row, "request": {"upgrade": {"outcome": "rolled-back", "reasons": "x"}}}
    read = _plan(forged, 7, T0)
    assert not read.rolled_back and read.ignored


def _batch(pk: int, run: str, query: str, batch: int, start: int | None, end: int,
           at: datetime) -> AuditBatch:
    rows = end - (start if start is not None else end)
    return AuditBatch(pk, run, query, batch, at, at,
                      (AuditSource(0, rows, (PartitionOffset("t", 0, start, end),)),))


def _history() -> list[AuditBatch]:
    """v1 (run a, checkpoint q1) to offset 30; v2's bootstrap (run b, q2, reads
    nothing) and its run c (batches 1, 2 to offset 50); v1 again on q1 (run d) from 30."""
    at = [T0 + timedelta(minutes=i) for i in range(8)]
    return [_batch(1, "a", "q1", 0, None, 10, at[0]), _batch(2, "a", "q1", 1, 10, 20, at[0]),
            _batch(3, "a", "q1", 2, 20, 30, at[1]), _batch(4, "b", "q2", 0, None, 30, at[3]),
            _batch(5, "c", "q2", 1, 30, 40, at[4]), _batch(6, "c", "q2", 2, 40, 50, at[4]),
            _batch(7, "d", "q1", 3, 30, 45, at[6]), _batch(8, "d", "q1", 4, 45, 60, at[7])]


def _upgrade_plan(created: datetime) -> RecordedPlan:
    return RecordedPlan(4, "totals", created, "savepoint", "stateless", "upgrade", True,
                        ((0, "t", 0, 30),), run_ids=("b",), linked_at={"b": created})


def test_the_audit_reads_a_recorded_roll_back_as_planned_and_only_then():
    at = T0 + timedelta(minutes=5)
    resume = {0: {"t": {0: 30}}}
    row = _row("rolled-back", reasons=("v2 failed: boom",), resume=resume)
    plans = [_upgrade_plan(T0 + timedelta(minutes=2)), _plan(row, 5, at, {"d": at})]
    report = audit_batches("totals", _history(), plans)
    assert report.ok, report.findings
    (overlap,) = report.planned
    assert (overlap.first, overlap.end, overlap.run_id, overlap.batch_count) == (30, 50, "d", 2)
    assert "roll back 5: v2 of upgrade plan 4 failed (v2 failed: boom)" in overlap.reason
    assert any(n.startswith("upgrade 5 by plan 4 (savepoint 2, after batch 3): rolled back "
                            "(v2 failed: boom); v1 resumed /ck/v1: d") for n in report.notes)
    run_d = next(r for r in report.runs if r.run_id == "d")
    assert (run_d.how, run_d.plan_id, run_d.link) == ("checkpoint", 5, "recorded")

    unlinked = audit_batches("totals", _history(), [plans[0], _plan(row, 5, at)])
    assert [f.kind for f in unlinked.unexplained] == ["overlap"]
    late = T0 + timedelta(minutes=7)
    linked_late = audit_batches("totals", _history(), [plans[0], _plan(row, 5, at, {"d": late})])
    assert not linked_late.ok and any("the link is not taken" in n for n in linked_late.notes)
    elsewhere = _row("rolled-back", resume={0: {"t": {0: 20}}})
    wrong = audit_batches("totals", _history(), [plans[0], _plan(elsewhere, 5, at, {"d": at})])
    assert not wrong.ok and any("not at the 20 v1 was to resume from" in n for n in wrong.notes)


def test_a_foreach_batch_error_is_named_and_a_quiet_v2_is_idle_not_failed():
    from offset_journal.upgrading._steps import failure_text

    wrapped = RuntimeError("[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred.\n"
                           "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                           "RuntimeError: v2 cannot write batch 2\n")
    assert failure_text(wrapped) == "RuntimeError: v2 cannot write batch 2"
    assert failure_text(ValueError("plain\nsecond")) == "plain"
    idle = Verification((1,), idle=True)
    assert idle.passed and idle.explain() == (
        "v2 verified: 1 batch(es) (batch 1) completed, then idle: no more records arrived "
        "in time, the first at the planned offsets")
    assert Verification(idle=True).explain() == (
        "v2 verified: no batch completed, then idle: no more records arrived in time")


def test_a_v1_that_does_not_start_again_is_said_so_by_the_result_and_the_audit():
    boom = "v1 did not start again: [STREAM_FAILED] cannot bind"
    refused = Upgrade("refused", "totals", ("layout: no", boom), None, restart_failed=True)
    assert refused.explain().splitlines() == [
        "upgrade of 'totals' refused; v1 was stopped and did NOT start again: nothing runs",
        f"  layout: no; {boom}"]
    bad = Verification((1,), (), ("v2 failed: boom",))
    rolled = Upgrade("rolled-back", "totals", (*bad.reasons, boom), None, None, 4, 5, bad)
    assert rolled.explain().splitlines() == [
        "rolled back 'totals': v1 was NOT started again on its own checkpoint, after its "
        "savepoint (plan 4)",
        "  v2 failed its verification after 1 batch(es) (batch 1): v2 failed: boom",
        f"  {boom}"]
    row = _row("rolled-back", reasons=("v2 failed: boom",), resume={0: {"t": {0: 30}}})
    history = _history()[:6]  # v1 never ran again
    report = audit_batches("totals", history, [_upgrade_plan(T0 + timedelta(minutes=2)),
                                                _plan(row, 5, T0 + timedelta(minutes=5))])
    (note,) = [n for n in report.notes if n.startswith("upgrade 5 ")]
    assert note.endswith("rolled back (v2 failed: boom); no run of v1 is linked: v1 was not "
                         "started again on /ck/v1 by the upgrade"), note


def test_a_checkpoint_an_upgrade_left_v2_running_on_is_known_as_such():
    from offset_journal.upgrading import upgraded_to

    ok = _plan({**_row("upgraded"), "checkpoint": "/ck/v2"}, 6, T0)
    rolled = _plan(_row("rolled-back", resume={0: {"t": {0: 30}}}), 7, T0)
    assert upgraded_to([ok], "/ck/v2/") is ok
    assert upgraded_to([ok], "/ck/v1") is None  # v1's: not where v2 runs
    assert upgraded_to([ok, rolled], "/ck/v2") is None  # the newest outcome there wins
    assert upgraded_to([_upgrade_plan(T0), rolled], "/ck/v2") is None


def test_a_roll_back_says_the_batch_v1_resumes_after_not_an_older_savepoints():
    """The journal was behind when the savepoint was taken (at batch 1): v1, resumed on
    its own checkpoint, goes on after its last committed batch (2), and the audit says
    that batch."""
    at = T0 + timedelta(minutes=5)
    row = result_row("totals", "rolled-back", plan_id=4, savepoint=(2, 1), checkpoint="/ck/v1",
                     new_checkpoint="/ck/v2", reasons=("v2 failed: boom",),
                     resume={0: {"t": {0: 30}}}, resumed_after=2)
    report = audit_batches("totals", _history(), [_upgrade_plan(T0 + timedelta(minutes=2)),
                                                  _plan(row, 5, at, {"d": at})])
    assert report.ok, report.findings
    (overlap,) = report.planned
    assert "run d is v1 resumed on its own checkpoint after batch 2:" in overlap.reason, \
        overlap.reason
