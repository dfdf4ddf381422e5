"""The audit reads the sink facts a plan recorded. A run that starts
after the sink's last batch is planned, even where the batches the plan took from the
sink are not in the journal; and a batch of them that Spark ran again on resuming the old
checkpoint is not an overlap the sink received twice (pure: no Spark, no database)."""

from __future__ import annotations

from typing import Any

from offset_journal.audit import GAP, OVERLAP, PLANNED, UNEXPLAINED, audit_batches
from tests.audit.test_audit_core import A0, Journal, plan


def sink(taken: list[int], ends: list[int], query_id: str = "q-r1") -> dict[str, Any]:
    """What a plan records of the sink it read: batches ``taken`` of run r1, batch i
    reading orders-0 from ends[i] to ends[i + 1]."""
    return {"kind": "file", "path": "/lake/out", "found_by": "journaled", "app_id": None,
            "last_batch": taken[-1], "journal_batch": taken[0] - 1, "query_id": query_id,
            "run_id": "r1", "taken": taken, "bytes_read": 100,
            "offsets": [[b, 0, "orders", 0, ends[i], ends[i + 1]] for i, b in enumerate(taken)]}


def _old_run(j: Journal) -> None:
    for end in (10, 20, 30):  # batches 0..2 journaled; 3 and 4 reached the sink only
        j.add("r1", {A0: (None if end == 10 else end - 10, end)})


def test_a_run_after_the_sinks_last_batch_is_planned_though_the_journal_lacks_them():
    j = Journal()
    _old_run(j)
    taken = plan(1, {A0: 50}, minute=3.5, run_ids=("r2",),
                 request={"sink": sink([3, 4], [30, 40, 50])})
    j.add("r2", {A0: (None, 60)}, rows=10)
    report = audit_batches("q", j.batches, [taken])
    (gap,) = report.findings
    assert (gap.kind, gap.status, gap.first, gap.end) == (GAP, PLANNED, 30, 50)
    assert "after batch 4, the last the old query's sink held (/lake/out)" in gap.reason
    assert "batches 3..4 of run r1" in gap.reason
    assert report.ok

    # The same run from a plan that did not read the sink: the gap is the plan's fault.
    blind = plan(1, {A0: 50}, minute=3.5, run_ids=("r2",))
    (gap,) = audit_batches("q", j.batches, [blind]).findings
    assert (gap.kind, gap.status) == (GAP, UNEXPLAINED)


def test_a_run_after_the_sink_with_its_batches_journaled_is_contiguous():
    j = Journal()
    _old_run(j)
    j.add("r1", {A0: (30, 40)})  # journaled by the plan, as run r1's
    j.add("r1", {A0: (40, 50)})
    taken = plan(1, {A0: 50}, minute=5.5, run_ids=("r2",),
                 request={"sink": sink([3, 4], [30, 40, 50])})
    j.add("r2", {A0: (None, 60)}, rows=10)
    report = audit_batches("q", j.batches, [taken])
    assert report.findings == [] and report.runs[-1].plan_id == 1


def test_a_batch_the_sink_held_run_again_on_the_old_checkpoint_is_not_read_twice():
    """The plan journaled batches 3 and 4 (the sink held them); someone resumed the OLD
    checkpoint after: Spark ran its batch 4 again (commits/4 was missing) with the same
    offsets, and the file sink skipped it. Another offset range would be a real re-read."""
    j = Journal()
    _old_run(j)
    j.add("r1", {A0: (30, 40)})
    j.add("r1", {A0: (40, 50)})
    taken = plan(1, {A0: 50}, minute=5.5, run_ids=("r2",),
                 request={"sink": sink([3, 4], [30, 40, 50])})
    j.add("r2", {A0: (None, 60)}, rows=10)
    j.next_batch["r3"] = 4
    j.add("r3", {A0: (40, 50)}, query_id="q-r1")  # the old checkpoint, resumed
    (rerun,) = audit_batches("q", j.batches, [taken]).findings
    assert (rerun.kind, rerun.status, rerun.first, rerun.end) == (OVERLAP, PLANNED, 40, 50)
    assert "Spark ran batch 4 again with the same offsets" in rerun.reason
    assert "the sink skips a batch it holds" in rerun.reason

    j.next_batch["r4"] = 4
    j.add("r4", {A0: (35, 50)}, query_id="q-r1")  # not the batch the sink held
    findings = audit_batches("q", j.batches, [taken]).findings
    assert [(f.kind, f.status) for f in findings] == [(OVERLAP, PLANNED),
                                                      (OVERLAP, UNEXPLAINED)]
