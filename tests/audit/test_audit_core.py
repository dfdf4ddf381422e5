"""The audit's pure walk (offset_journal.audit._core): no Spark, no database."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offset_journal.audit import (
    GAP,
    OVERLAP,
    PLANNED,
    UNEXPLAINED,
    UNEXPLAINED_START,
    UNKNOWN_START,
    AuditBatch,
    AuditSource,
    audit_batches,
    fits,
    format_json,
    format_table,
)
from offset_journal.journal._plan_rows import recorded_plan
from offset_journal.offsets import PartitionOffset
from offset_journal.rows import RecordedPlan

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Journal:
    """Batches as the listener would journal them, numbered in journal order."""

    def __init__(self) -> None:
        self.batches: list[AuditBatch] = []
        self.next_batch: dict[str, int] = {}

    def add(self, run: str, parts: dict[tuple[str, int], tuple[int | None, int]],
            rows: int | None = None, query_id: str | None = None) -> AuditBatch:
        pk = len(self.batches) + 1
        batch_id = self.next_batch.get(run, 0)
        self.next_batch[run] = batch_id + 1
        partitions = tuple(PartitionOffset(t, p, s, e) for (t, p), (s, e) in sorted(parts.items()))
        if rows is None:
            rows = sum(e - s for s, e in parts.values() if s is not None)
        when = T0 + timedelta(minutes=pk)
        batch = AuditBatch(pk, run, query_id or f"q-{run}", batch_id, when, when,
                           (AuditSource(0, rows, partitions),))
        self.batches.append(batch)
        return batch


def plan(plan_id: int, offsets: dict[tuple[str, int], int], position: str = "after",
         minute: float = 0, run_ids: tuple[str, ...] = (),
         request: dict[str, Any] | None = None) -> RecordedPlan:
    return RecordedPlan(plan_id, "q", T0 + timedelta(minutes=minute), position, "stateless",
                        "plan", True, tuple((0, t, p, o) for (t, p), o in offsets.items()),
                        run_ids=run_ids, request=request or {})


A0 = ("orders", 0)
A1 = ("orders", 1)


def test_runs_resuming_and_restarting_from_a_plan_are_contiguous() -> None:
    j = Journal()
    j.add("r1", {A0: (None, 5), A1: (None, 3)})  # the first run, from earliest
    j.add("r1", {A0: (5, 9), A1: (3, 4)})
    j.add("r2", {A0: (9, 12), A1: (4, 4)})  # the same checkpoint, resumed
    p = plan(1, {A0: 12, A1: 4}, minute=3.5)
    j.add("r3", {A0: (None, 15), A1: (None, 6)}, rows=5)  # a new checkpoint, from plan 1
    j.add("r3", {A0: (15, 20), A1: (6, 6)})
    report = audit_batches("q", j.batches, [p])
    assert report.findings == [] and report.ok and report.exit_code == 0
    assert [(r.run_id, r.how, r.plan_id, r.link) for r in report.runs] == [
        ("r1", "origin", None, None), ("r2", "checkpoint", None, None),
        ("r3", "plan", 1, "matched")]
    assert report.batches == 5 and report.partitions == 2


def test_the_header_names_runs_started_from_a_plan_apart_from_planned_findings() -> None:
    """A run started from plan 1 is a planned restart, not a planned finding: the header
    used to read "(0 planned)" above it, as if no plan had been followed."""
    j = Journal()
    j.add("r1", {A0: (None, 5), A1: (None, 3)})
    j.add("r2", {A0: (None, 9), A1: (None, 4)}, rows=5)  # a new checkpoint, from plan 1
    j.add("r2", {A0: (9, 12), A1: (4, 4)})
    report = audit_batches("q", j.batches, [plan(1, {A0: 5, A1: 3}, minute=1.5)])
    assert report.ok and report.planned == [] and report.runs[-1].plan_id == 1
    assert format_table(report).splitlines()[0] == (
        "Audit of query 'q': 3 batches, 2 partitions, 2 runs (1 started from a recorded "
        "plan); findings: 0 unexplained, 0 planned (a rewind, skip or loss a plan asked "
        "for)")


def test_a_restart_from_latest_is_a_gap_and_from_an_older_checkpoint_an_overlap() -> None:
    j = Journal()
    j.add("r1", {A0: (None, 10)})
    j.add("r2", {A0: (None, 25)}, rows=0)  # new checkpoint at latest: nothing read, 10..24 lost
    j.add("r3", {A0: (4, 30)}, query_id="q-r1")  # a copy of r1's checkpoint at offset 4
    j.add("r3", {A0: (30, 31)})
    report = audit_batches("q", j.batches)
    gap, overlap = report.findings
    assert (gap.kind, gap.status, gap.first, gap.end, gap.records) == (GAP, UNEXPLAINED, 10, 25,
                                                                      15)
    assert [b.label() for b in gap.earlier] == ["r1:0"] and gap.batches[0].label() == "r2:0"
    assert "no recorded plan" in gap.reason
    assert (overlap.kind, overlap.first, overlap.end, overlap.records) == (OVERLAP, 4, 25, 21)
    assert [b.label() for b in overlap.earlier] == ["r1:0"]  # r2:0 read nothing
    assert "resumed a checkpoint" in overlap.reason
    assert report.exit_code == 3 and not report.ok


def test_a_planned_rewind_is_planned_across_the_batches_that_reread() -> None:
    j = Journal()
    for end in (10, 20, 30, 40):
        j.add("r1", {A0: (None if end == 10 else end - 10, end)})
    # recorded before r2's first batch (minute 5), as a real plan is
    p = plan(7, {A0: 15}, position="at", minute=4.5, run_ids=("r2",))
    j.add("r2", {A0: (None, 22)}, rows=7)
    j.add("r2", {A0: (22, 35)})
    j.add("r2", {A0: (35, 45)})  # past where r1 had got: new records from 40
    report = audit_batches("q", j.batches, [p])
    (f,) = report.findings
    assert (f.kind, f.status, f.first, f.end, f.records, f.plan_id) == (OVERLAP, PLANNED, 15,
                                                                        40, 25, 7)
    assert [b.label() for b in f.batches] == ["r2:0", "r2:1", "r2:2"] and f.batch_count == 3
    assert report.ok and report.exit_code == 0
    assert report.runs[-1].link == "recorded" and report.runs[-1].position == "at"


def test_a_plan_after_the_last_batch_that_went_stale_is_not_an_excuse() -> None:
    j = Journal()
    j.add("r1", {A0: (None, 10)})
    p = plan(1, {A0: 10}, minute=1.5)
    j.add("r1", {A0: (10, 14)})  # the old job ran on after the plan was made
    j.add("r2", {A0: (None, 16)}, rows=6)
    (f,) = audit_batches("q", j.batches, [p]).findings
    assert (f.kind, f.status, f.first, f.end, f.plan_id) == (OVERLAP, UNEXPLAINED, 10, 14, 1)
    assert "out of date" in f.reason


def test_a_plan_matches_only_a_run_that_read_what_it_said() -> None:
    j = Journal()
    j.add("r1", {A0: (None, 10), A1: (None, 10)})
    p = plan(1, {A0: 10, A1: 10}, minute=1.5)  # asked for, never used
    latest = j.add("r2", {A0: (None, 18), A1: (None, 12)}, rows=0)  # started at latest
    assert not fits(p, latest)
    report = audit_batches("q", j.batches, [p])
    assert [(f.kind, f.topic, f.partition, f.first, f.end) for f in report.findings] == [
        (GAP, "orders", 0, 10, 18), (GAP, "orders", 1, 10, 12)]
    assert report.runs[-1].how == "no-plan"
    used = j.add("r3", {A0: (None, 20), A1: (None, 13)}, rows=3)
    assert fits(p, used) is False  # 18->20 and 12->13 are 3 records, but from 10 they are 13
    # A plan made after the run's first batch was journaled cannot have started it.
    late = plan(2, {A0: 18, A1: 12}, minute=99)
    assert audit_batches("q", j.batches, [late]).runs[-1].how == "no-plan"


def test_a_recreated_topic_read_from_its_start_by_a_plan_is_a_new_log() -> None:
    """--restart-recreated-topic: the plan starts the new topic at earliest (-2), far
    below where the old topic's offsets had got; the new run's batches continue the new
    log, not an overlap with the old one."""
    j = Journal()
    j.add("r1", {A0: (None, 100), A1: (None, 80)})
    j.add("r1", {A0: (100, 120), A1: (80, 90)})
    p = plan(1, {A0: -2, A1: -2}, minute=2.5, request={
        "recreated_topics": ["orders"], "log_starts": [["orders", 0, 0], ["orders", 1, 0]]})
    j.add("r2", {A0: (None, 5), A1: (None, 3)}, rows=8)
    j.add("r2", {A0: (5, 9), A1: (3, 4)})
    j.add("r2", {A0: (9, 12), A1: (4, 4)})
    report = audit_batches("q", j.batches, [p])
    assert report.findings == [] and report.exit_code == 0
    assert report.runs[-1].plan_id == 1
    restarted = [n for n in report.notes if "new log" in n]
    assert len(restarted) == 2 and all("recreated" in n and "plan 1" in n for n in restarted)
    assert "orders-0" in restarted[0] and "r2:0" in restarted[0]
    # The new log is audited like any other: a later run skipping ahead is a gap.
    j.add("r3", {A0: (20, 25), A1: (4, 4)}, query_id="q-r2")
    (gap,) = audit_batches("q", j.batches, [p]).findings
    assert (gap.kind, gap.status, gap.first, gap.end) == (GAP, UNEXPLAINED, 12, 20)


def test_a_plan_that_accepted_data_loss_shows_its_gap_as_planned() -> None:
    """--allow-data-loss: the plan starts a partition at its log start, above where the
    journal had got (retention deleted the rest); a recorded decision, not a defect."""
    j = Journal()
    j.add("r1", {A0: (None, 10), A1: (None, 10)})
    j.add("r1", {A0: (10, 14), A1: (10, 12)})
    p = plan(1, {A0: 30, A1: 12}, minute=2.5, request={"allow_data_loss": True})
    j.add("r2", {A0: (None, 35), A1: (None, 12)}, rows=5)
    report = audit_batches("q", j.batches, [p])
    (gap,) = report.findings
    assert (gap.kind, gap.status, gap.first, gap.end, gap.plan_id) == (GAP, PLANNED, 14, 30, 1)
    assert "data loss accepted by plan 1 (--allow-data-loss)" in gap.reason
    assert "out of date" not in gap.reason
    assert report.ok and report.exit_code == 0 and report.planned == [gap]
    text = " ".join(format_table(report).split())
    assert "PLANNED gap orders-0 14..29 16" in text and "3 batches" in text
    assert "data loss accepted by plan 1 (--allow-data-loss)" in text
    assert json.loads(format_json(report))["findings"][0]["reason"] == gap.reason
    # Without the plan's acceptance, the same gap is a defect.
    plain = plan(1, {A0: 30, A1: 12}, minute=2.5)
    (unplanned,) = audit_batches("q", j.batches, [plain]).findings
    assert unplanned.status == UNEXPLAINED and audit_batches(
        "q", j.batches, [plain]).exit_code == 3


def test_a_data_loss_plan_does_not_excuse_what_it_did_not_hand_out() -> None:
    j = Journal()
    j.add("r1", {A0: (None, 10)})
    p = plan(1, {A0: 20}, minute=1.5, request={"allow_data_loss": True})
    j.add("r2", {A0: (None, 25)}, rows=0)  # started at 25 (read nothing), not at 20
    report = audit_batches("q", j.batches, [p])
    (gap,) = report.findings
    assert (gap.kind, gap.status, gap.first, gap.end) == (GAP, UNEXPLAINED, 10, 25)
    assert report.runs[-1].how == "no-plan"
    j2 = Journal()  # a stale plan with data loss accepted: its overlap is still no excuse
    j2.add("r1", {A0: (None, 10)})
    j2.add("r1", {A0: (10, 14)})
    p2 = plan(1, {A0: 10}, minute=1.5, request={"allow_data_loss": True}, run_ids=("r2",))
    j2.add("r2", {A0: (None, 16)}, rows=6)
    (over,) = audit_batches("q", j2.batches, [p2]).findings
    assert (over.kind, over.status) == (OVERLAP, UNEXPLAINED) and "out of date" in over.reason


def test_a_new_checkpoints_start_that_cannot_be_known_is_reported() -> None:
    j = Journal()
    j.add("r1", {A0: (None, 10), A1: (None, 10)})
    j.add("r2", {A0: (None, 14), A1: (None, 15)}, rows=6)  # several partitions, records read
    report = audit_batches("q", j.batches)
    assert {(f.kind, f.status) for f in report.findings} == {(UNKNOWN_START, UNEXPLAINED)}
    assert report.exit_code == 3


def test_partitions_appearing_later() -> None:
    j = Journal()
    j.add("r1", {A0: (None, 10)})
    j.add("r1", {A0: (10, 12), A1: (None, 3)})  # added while running: Spark reads its start
    j.add("r2", {A0: (None, 12), A1: (None, 3), ("refunds", 0): (None, 9)}, rows=0)
    report = audit_batches("q", j.batches)
    (f,) = report.findings  # a topic first read at 9 by a run from no plan
    assert (f.kind, f.topic, f.first, f.end, f.status) == (UNEXPLAINED_START, "refunds", 0, 9,
                                                           UNEXPLAINED)
    # A plan that started refunds at earliest, its log start then 9 (recorded with it).
    p = plan(1, {A0: 12, A1: 3, ("refunds", 0): -2}, minute=2.5,
             request={"log_starts": [["refunds", 0, 9]]})
    assert audit_batches("q", j.batches, [p]).findings == []


def test_concurrent_runs_show_as_one_growing_overlap() -> None:
    j = Journal()
    j.add("a", {A0: (None, 5)})
    j.add("b", {A0: (None, 3)}, rows=3)  # a second driver, new checkpoint, from earliest
    j.add("a", {A0: (5, 8)})
    j.add("b", {A0: (3, 6)})
    j.add("b", {A0: (6, 10)})
    j.add("a", {A0: (8, 12)})
    report = audit_batches("q", j.batches, concurrent=[("a", "b")])
    assert [(f.kind, f.run_id, f.first, f.end, f.batch_count) for f in report.findings] == [
        (OVERLAP, "b", 0, 8, 3), (OVERLAP, "a", 8, 10, 1)]
    assert report.concurrent == [("a", "b")] and any("same time" in n for n in report.notes)


def test_since_reports_only_what_began_after_it() -> None:
    j = Journal()
    j.add("r1", {A0: (None, 10)})
    j.add("r2", {A0: (None, 20)}, rows=0)
    j.add("r2", {A0: (20, 30)})
    j.add("r3", {A0: (25, 31)}, query_id="q-r2")
    everything = audit_batches("q", j.batches)
    assert [f.kind for f in everything.findings] == [GAP, OVERLAP]
    later = audit_batches("q", j.batches, since=j.batches[3].trigger_at)
    assert [f.kind for f in later.findings] == [OVERLAP]
    assert [r.run_id for r in later.runs] == ["r3"] and later.batches == 4


def test_the_report_as_json_and_as_a_table() -> None:
    j = Journal()
    j.add("r1", {A0: (None, 10)})
    j.add("r2", {A0: (None, 25)}, rows=0)
    report = audit_batches("q", j.batches)
    data = json.loads(format_json(report))
    assert data["ok"] is False and data["exit_code"] == 3 and data["unexplained"] == 1
    (f,) = data["findings"]
    assert f == {"kind": "gap", "status": "unexplained", "topic": "orders", "partition": 0,
                 "first_offset": 10, "end_offset": 25, "records": 15, "run_id": "r2",
                 "batches": [{"pk": 2, "run_id": "r2", "batch_id": 0,
                              "trigger_at": "2026-01-01T00:02:00Z"}],
                 "batch_count": 1,
                 "earlier": [{"pk": 1, "run_id": "r1", "batch_id": 0,
                              "trigger_at": "2026-01-01T00:01:00Z"}],
                 "plan_id": None, "reason": f["reason"]}
    text = format_table(report)
    assert "NOT OK: 1 unexplained finding" in text and "orders-0" in text and "10..24" in text


# --------------------------------------------------------------------------- properties


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    """Batches of one partition, (run, start, end), every start reported: each batch
    continues its run, or jumps anywhere when a new run starts."""
    out: list[tuple[str, int, int]] = []
    position, run = 0, 0
    for _ in range(draw(st.integers(1, 25))):
        if out and draw(st.booleans()) and draw(st.booleans()):
            run += 1
            position = draw(st.integers(0, position + 20))
        end = position + draw(st.integers(0, 10))
        out.append((f"r{run}", position, end))
        position = end
    return out


@settings(max_examples=200, deadline=None)
@given(histories())
def test_the_frontier_moves_by_what_was_read_plus_gaps_minus_overlaps(
        history: list[tuple[str, int, int]]) -> None:
    j = Journal()
    for run, start, end in history:
        j.add(run, {A0: (start, end)}, query_id="one-checkpoint")
    report = audit_batches("q", j.batches)
    gaps = sum(f.records or 0 for f in report.findings if f.kind == GAP)
    overlaps = sum(f.records or 0 for f in report.findings if f.kind == OVERLAP)
    frontier = max(end for _r, _s, end in history)
    read = sum(end - start for _r, start, end in history)
    assert frontier - history[0][1] == gaps + read - overlaps
    assert report.ok == (report.findings == [])
    frontiers = [max([history[0][1]] + [e for _r, _s, e in history[:i]])
                 for i in range(len(history))]
    # Contiguous: each batch starts at the frontier, or reads nothing below it.
    contiguous = all(s == f or s == e < f
                     for f, (_r, s, e) in zip(frontiers, history, strict=True))
    assert report.ok == contiguous
    for f in report.findings:
        assert f.first is not None and f.end is not None and f.first < f.end


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=20), st.integers(1, 3))
def test_contiguous_batches_split_in_any_way_are_clean(sizes: list[int], parts: int) -> None:
    j = Journal()
    ends = [0] * parts
    for i, size in enumerate(sizes):
        run = f"r{i // 4}"  # a run every four batches, each resuming the checkpoint
        j.add(run, {("t", p): (None if i == 0 else ends[p], ends[p] + size + p)
                    for p in range(parts)})
        ends = [e + size + p for p, e in enumerate(ends)]
    report = audit_batches("q", j.batches)
    assert report.findings == [] and report.exit_code == 0


def _linked(plan_id: int, offsets: dict[tuple[str, int], int], run: str, *, minute: float,
            linked_minute: float, position: str = "after") -> RecordedPlan:
    """A plan recorded at ``minute``, linked to ``run`` at ``linked_minute`` (the
    database's clock)."""
    p = plan(plan_id, offsets, position=position, minute=minute, run_ids=(run,))
    return RecordedPlan(p.id, p.query_name, p.created_at, p.position, p.mode, p.command,
                        p.ok, p.kafka_offsets, run_ids=(run,),
                        linked_at={run: T0 + timedelta(minutes=linked_minute)})


def test_a_linked_plan_the_first_batch_contradicts_is_not_taken() -> None:
    # Run r2 is linked to a plan at 50, but its first batch read 10
    # records ending at 100 (90..99): the link is not taken, and 50..89 is a gap.
    j = Journal()
    j.add("r1", {A0: (None, 50)})
    j.add("r2", {A0: (None, 100)}, rows=10)  # journaled at minute 2
    linked = _linked(1, {A0: 50}, "r2", minute=1.5, linked_minute=1.8)
    report = audit_batches("q", j.batches, [linked])
    (gap,) = report.findings
    assert (gap.kind, gap.status, gap.first, gap.end) == (GAP, UNEXPLAINED, 50, 90)
    assert report.exit_code == 3 and report.runs[1].how == "no-plan"
    assert any("linked to plan 1" in n and "did not start at the plan's offsets" in n
               for n in report.notes)
    # The same link, where the run did start at 50, holds.
    j = Journal()
    j.add("r1", {A0: (None, 50)})
    j.add("r2", {A0: (None, 100)}, rows=50)
    report = audit_batches("q", j.batches, [linked])
    assert report.ok and report.runs[1].link == "recorded"


def test_a_plan_recorded_after_the_run_began_explains_nothing() -> None:
    # A writer inserts a plan that fits the gap, and links it, after the
    # run's batches were journaled: the gap 20..39 stays unexplained (exit 3).
    j = Journal()
    j.add("r1", {A0: (None, 20)})
    j.add("r2", {A0: (None, 50)}, rows=10)  # read 40..49: 20..39 never read
    j.add("r2", {A0: (50, 60)})
    forged = _linked(7, {A0: 40}, "r2", minute=30, linked_minute=30, position="at")
    report = audit_batches("q", j.batches, [forged])
    (gap,) = report.findings
    assert (gap.kind, gap.status, gap.first, gap.end) == (GAP, UNEXPLAINED, 20, 40)
    assert report.exit_code == 3
    assert any("plan 7" in n and "recorded at 2026-01-01 00:30:00, after the run's first "
               "batch was journaled (2026-01-01 00:02:00)" in n for n in report.notes)
    # Unlinked, a plan recorded after the run began is not matched either.
    unlinked = plan(7, {A0: 40}, position="at", minute=30)
    assert audit_batches("q", j.batches, [unlinked]).exit_code == 3


def test_a_link_recorded_after_the_first_batch_is_said_and_only_a_match_explains() -> None:
    # A plan recorded before the run, linked late: the link is not taken, but the plan
    # still matches on time and offsets (a job that linked slowly), so the run is clean.
    j = Journal()
    j.add("r1", {A0: (None, 20)})
    j.add("r2", {A0: (None, 30)}, rows=10)
    late = _linked(3, {A0: 20}, "r2", minute=1.5, linked_minute=9)
    report = audit_batches("q", j.batches, [late])
    assert report.ok and report.runs[1].link == "matched" and report.runs[1].plan_id == 3
    assert any("the link was recorded at 2026-01-01 00:09:00, after the run's first batch"
               in n for n in report.notes)


def _row(request: Any, options: Any, kafka_offsets: Any) -> dict[str, Any]:
    """A restart_plans row as the database returns it (its JSON decoded)."""
    return {"id": 5, "query_name": "q", "created_at": T0, "position": "at",
            "mode": "stateless", "command": "plan", "ok": True, "checkpoint": None,
            "host": None, "os_user": None, "anchor_run_id": "r1", "anchor_batch_id": 0,
            "request": request, "options": options, "kafka_offsets": kafka_offsets}


WRITTEN = {"allow_data_loss": True, "recreated_topics": ["orders"], "warnings": ["w"],
           "translate_from": "west", "as_of": "2026-01-01T00:00:00Z",
           "accept_cluster": "c-1",
           "translation": [[0, "orders", 0, 50, "west.orders", 0, 0, 50],
                           [0, "orders", 1, 7, "west.orders", 3, 2]]}


def test_a_plan_row_as_the_plan_commands_write_it_is_read_whole() -> None:
    rec = recorded_plan(_row(WRITTEN, {"0": {"startingOffsets": "{}"}},
                             [[0, "orders", 0, 12], [0, "orders", 1, -2]]), {})
    assert rec.ignored == () and rec.request == WRITTEN
    assert rec.kafka_offsets == ((0, "orders", 0, 12), (0, "orders", 1, -2))
    assert (rec.allow_data_loss, rec.recreated_topics, rec.warnings, rec.translated_from) == (
        True, ("orders",), ("w",), "west")
    assert rec.accepted_cluster == "c-1"
    assert rec.not_replicated == {("west.orders", 0): ("orders", 0, 50, 50)}


@pytest.mark.parametrize(("column", "value", "named"), [
    ("request", {"recreated_topics": 5}, "request field recreated_topics"),
    ("request", {"recreated_topics": "orders"}, "request field recreated_topics"),
    ("request", {"warnings": [1, 2]}, "request field warnings"),
    ("request", {"allow_data_loss": "false"}, "request field allow_data_loss"),
    ("request", {"translate_from": ["west"]}, "request field translate_from"),
    ("request", {"accept_cluster": 7}, "request field accept_cluster"),
    ("request", {"translation": [[0, "orders", 0, "50", "west.orders", 0, 0, 50]]},
     "request field translation"),
    ("request", {"translation": {"orders": 1}}, "request field translation"),
    ("request", [1], "request"), ("request", None, "request"),
    ("options", "x", "options"), ("options", {"0": 5}, "options"),
    ("kafka_offsets", {"orders": 1}, "kafka_offsets"),
    ("kafka_offsets", [[0, "orders", 0, "40"]], "kafka_offsets"),
    ("kafka_offsets", [[0, "orders", 0, True]], "kafka_offsets"),
    ("kafka_offsets", [[0, "orders", 0, 12.5]], "kafka_offsets"),
    ("kafka_offsets", [[0, "orders", 0, -1]], "kafka_offsets"),
    ("kafka_offsets", [[0, "orders", 0, 12], 7], "kafka_offsets"),
    ("kafka_offsets", [[0, "orders", 0]], "kafka_offsets"),
])
def test_a_field_no_plan_command_writes_is_left_out_with_a_note(
        column: str, value: Any, named: str) -> None:
    """A row a writer role wrote by hand is read without its malformed
    field, which a note names; the audit walks on and says so."""
    row: dict[str, Any] = {"request": dict(WRITTEN), "options": {},
                           "kafka_offsets": [[0, "orders", 0, -2]]}
    if column == "request" and isinstance(value, dict):  # one bad field among good ones
        row["request"].update(value)
    else:
        row[column] = value
    rec = recorded_plan(_row(**row), {"r2": T0})
    (note,) = rec.ignored
    assert note.startswith(f"plan 5: {named} is not what a plan command writes (")
    assert "\n" not in note and note.endswith(("ignored", "explains no run"))
    bad = value if column == "request" and isinstance(value, dict) else {}
    assert rec.request == ({} if named == "request" else
                           {k: v for k, v in WRITTEN.items() if k not in bad})
    # The plan at earliest, linked to the run that began a new log with it: the audit
    # reads every property of the plan (recreated topics here) and does not fail.
    j = Journal()
    j.add("r1", {A0: (None, 20)})
    j.add("r2", {A0: (None, 5)}, rows=5)
    report = audit_batches("q", j.batches, [rec])
    assert report.ignored == [note] and note in " ".join(format_table(report).split())
    assert json.loads(format_json(report))["ignored"] == [note]
    assert report.runs[1].plan_id == (None if column == "kafka_offsets" else 5)


def test_a_forged_value_is_shown_short_and_on_one_line() -> None:
    rec = recorded_plan(_row({"warnings": "\x1b[2J\nlooks fine" + "x" * 200}, {}, []), {})
    (note,) = rec.ignored
    assert "\x1b" not in note and "\n" not in note and len(note) < 160


def test_an_unlinked_plan_at_earliest_explains_only_a_run_from_its_recorded_log_start() -> None:
    """A plan at earliest asked for and never used explained any later
    new checkpoint's run, one from latest too, hiding the offsets it skipped. Unlinked,
    earliest stands for the log start the plan recorded, and the run must start there."""
    j = Journal()
    j.add("r1", {A0: (None, 30)})
    unused = plan(1, {A0: -2}, minute=1.5, position="at",
                  request={"log_starts": [["orders", 0, 0]]})
    j.add("r2", {A0: (None, 110)}, rows=10)  # from latest: 100..109 read, 30..99 skipped
    for p in (unused, plan(1, {A0: -2}, minute=1.5, position="at")):  # recorded no start
        report = audit_batches("q", j.batches, [p])
        assert report.runs[1].how == "no-plan" and report.exit_code == 3
        assert [(f.kind, f.status, f.first, f.end) for f in report.findings] == [
            (GAP, UNEXPLAINED, 30, 100)]
    # A run that did start at the recorded log start is explained by the plan.
    k = Journal()
    k.add("r1", {A0: (None, 30)})
    k.add("r2", {A0: (None, 10)}, rows=10)
    used = audit_batches("q", k.batches, [unused])
    assert used.ok and (used.runs[1].plan_id, used.runs[1].link) == (1, "matched")
    # Nor does one partition the plan resolves hide another it cannot: the plan's log
    # start for orders-1 is not known.
    m = Journal()
    m.add("r1", {A0: (None, 30), A1: (None, 30)})
    m.add("r2", {A0: (None, 10), A1: (None, 110)}, rows=20)
    half = plan(1, {A0: -2, A1: -2}, minute=1.5, position="at",
                request={"log_starts": [["orders", 0, 0]]})
    assert audit_batches("q", m.batches, [half]).runs[1].how == "no-plan"
    # Linked (the job's word, recorded before its first batch), earliest only bounds
    # the records read, as before: the job did start from the plan.
    linked = _linked(1, {A0: -2}, "r2", minute=1.5, linked_minute=1.5, position="at")
    report = audit_batches("q", j.batches, [linked])
    assert (report.runs[1].plan_id, report.runs[1].link) == (1, "recorded")


def _batch(pk: int, run: str, batch_id: int, start: int) -> AuditBatch:
    return AuditBatch(pk, run, "q1", batch_id, None, None, (AuditSource(0, 10, (
        PartitionOffset("t", 0, start if batch_id else None, start + 10),)),))


def test_batch_ids_missing_inside_a_run_are_journal_rows_lost():
    # batches 3..5 of the run are not in the journal (lost with a primary)
    batches = [_batch(pk, "r", b, 10 * b) for pk, b in enumerate((0, 1, 2, 6, 7), 1)]
    report = audit_batches("q", batches)
    assert report.exit_code == 3
    [finding] = report.findings
    assert (finding.kind, finding.status, finding.first, finding.end) == (GAP, UNEXPLAINED,
                                                                           30, 60)
    assert "journal rows lost: batches 3..5 of query id q1 are not in the journal" in (
        finding.reason)
    assert "resumed a checkpoint" not in finding.reason
    assert ("`offset-journal checkpoint import CHECKPOINT --query-name q` (CHECKPOINT: the "
            "location of query id q1)") in finding.reason
    # journaled late (a spool replayed after the run went on): they fill the gap, a note
    # says so, and nothing reads as processed twice
    late = audit_batches("q", [*batches, _batch(6, "r", 4, 40), _batch(7, "r", 3, 30),
                               _batch(8, "r", 5, 50)])
    assert late.ok and late.findings == []
    assert any("batches 3..5 of query id q1 were journaled only after r:6" in n
               for n in late.notes)
    # some of them: the gap is what is still missing, and says which came
    part = audit_batches("q", [*batches, _batch(6, "r", 3, 30), _batch(7, "r", 5, 50)])
    [rest] = part.findings
    assert (rest.status, rest.first, rest.end) == (UNEXPLAINED, 40, 50)
    assert "batch 4 of query id q1 is not in the journal (batches 3, 5 came later)" in (
        rest.reason)
    # on a standby, ids that never came may only not be replayed yet: a note
    standby = audit_batches("q", batches, standby="h2:5432, a standby 3.0 s behind")
    assert standby.exit_code == 0 and standby.findings == []
    assert any("batches 3..5 of query id q1 (before r:6; offsets 30..59 of t-0) are not on this "
               "standby: h2:5432, a standby 3.0 s behind" in n for n in standby.notes)


def test_batches_imported_from_the_checkpoint_fill_what_the_listener_lost() -> None:
    """Spark's listener bus dropped batches 3..5's events: `checkpoint import` journals
    them under the checkpoint's own run (same query id), after the run went on. They
    fill the gap rather than reading as another run re-reading offsets; a batch of
    another query id, or with other offsets, fills nothing."""
    batches = [_batch(pk, "r", b, 10 * b) for pk, b in enumerate((0, 1, 2, 6, 7), 1)]
    imported = [_batch(pk, "ckpt", b, 10 * b) for pk, b in ((6, 3), (7, 4), (8, 5))]
    report = audit_batches("q", [*batches, *imported])
    assert report.ok and report.findings == [], report.findings
    assert [r.run_id for r in report.runs] == ["r"]
    # another query id (another checkpoint) fills nothing: it is a run of its own
    other = [AuditBatch(b.pk, "x", "q2", b.batch_id, None, None, b.sources)
             for b in imported]
    assert [(f.kind, f.first, f.end) for f in audit_batches(
        "q", [*batches, *other]).findings][0] == (GAP, 30, 60)
    # the listener lost the last batches of a run, and a run resuming the checkpoint
    # journaled on: the same ids missing, not an older checkpoint copy
    resumed = [*batches[:3], _batch(4, "r2", 6, 60), _batch(5, "r2", 7, 70)]
    [gap] = audit_batches("q", resumed).findings
    assert "batches 3..5 of query id q1 are not in the journal" in gap.reason
    assert "resumed a checkpoint" not in gap.reason
    assert audit_batches("q", [*resumed, *imported]).ok
    # offsets that do not lie inside the gap fill nothing either
    wrong = [_batch(6, "ckpt", 3, 25)]
    assert not audit_batches("q", [*batches, *wrong]).ok


# --------------------------------------------------------------------------- recorded losses


def _recorded(first: int, end: int, *, acked: tuple[Any, ...] = (), **kw: Any) -> Any:
    from offset_journal.health_rows import RecordedLoss

    base: dict[str, Any] = {"id": 1, "query_name": "q", "source_index": 0, "topic": "orders",
                            "partition": 0, "first_offset": first, "end_offset": end,
                            "first_recorded_at": T0 + timedelta(minutes=3),
                            "anchor_run_id": "r1", "anchor_batch_id": 1,
                            "acknowledgements": acked,
                            "acknowledged_end": max((a.end_offset for a in acked), default=None)}
    base.update(kw)
    return RecordedLoss(**base)


def test_a_recorded_loss_no_batch_shows_is_a_gap_until_a_decision_covers_it() -> None:
    """A job with failOnDataLoss=false reads on past records retention
    deleted (its batch starts where the last ended): the walk sees nothing, the loss
    `retention --record` recorded is an unexplained gap, planned once acknowledged or
    accepted by a plan after the same batch with --allow-data-loss."""
    from offset_journal.audit import add_recorded_losses, open_losses
    from offset_journal.health_rows import LossAcknowledgement

    j = Journal()
    j.add("r1", {A0: (None, 100)})
    j.add("r1", {A0: (100, 120)})
    j.add("r1", {A0: (120, 300)})  # read on past 120..159, deleted before it got there
    walked = audit_batches("q", j.batches, [])
    assert walked.ok
    loss = _recorded(120, 160)
    report = add_recorded_losses(audit_batches("q", j.batches, []), [loss], [])
    [gap] = report.findings
    assert (gap.kind, gap.status, gap.first, gap.end, gap.run_id, gap.records) == (
        GAP, UNEXPLAINED, 120, 160, "r1", 40)
    assert "after batch r1:1" in gap.reason and not report.ok and report.exit_code == 3
    assert "`offset-journal losses acknowledge q --reason TEXT`" in gap.reason
    assert "orders-0" in format_table(report) and json.loads(format_json(report))["unexplained"]
    # Partly acknowledged: the rest is the gap; all of it: planned, with who and why.
    ack = LossAcknowledgement(7, 140, "replayed", T0, "host-a", "ana")
    [part] = add_recorded_losses(audit_batches("q", j.batches, []),
                                 [_recorded(120, 160, acked=(ack,))], []).findings
    assert (part.status, part.first, part.end) == (UNEXPLAINED, 140, 160)
    done = LossAcknowledgement(8, 160, "replayed the rest", T0, "host-a", "ana")
    report = add_recorded_losses(audit_batches("q", j.batches, []),
                                 [_recorded(120, 160, acked=(ack, done))], [])
    assert report.ok and report.findings[0].status == PLANNED
    assert report.findings[0].reason.endswith("acknowledged by ana@host-a at "
                                              "2026-01-01T00:00:00Z: replayed the rest")
    # A plan after the batch the loss was recorded after, accepting data loss there.
    accepted = plan(4, {A0: -2}, request={"allow_data_loss": True})
    accepted = RecordedPlan(**{**accepted.__dict__, "anchor_run_id": "r1",
                               "anchor_batch_id": 1})
    report = add_recorded_losses(audit_batches("q", j.batches, []), [loss], [accepted])
    assert report.ok and report.findings[0].plan_id == 4
    assert open_losses([loss], [accepted]) == [] and open_losses([loss], []) == [loss]
    for other in ({**accepted.__dict__, "anchor_batch_id": 0},  # after another batch
                  {**accepted.__dict__, "request": {}},  # no --allow-data-loss
                  {**accepted.__dict__, "kafka_offsets": ((0, "orders", 1, -2),)}):
        assert open_losses([loss], [RecordedPlan(**other)]) == [loss]
    # With --since: an open loss always, a settled one only when recorded since.
    later = T0 + timedelta(hours=1)
    assert len(add_recorded_losses(audit_batches("q", j.batches, [], since=later), [loss],
                                   []).findings) == 1
    assert add_recorded_losses(audit_batches("q", j.batches, [], since=later), [loss],
                               [accepted]).findings == []


def test_a_recorded_loss_inside_a_gap_the_walk_found_is_that_gap() -> None:
    j = Journal()
    j.add("r1", {A0: (None, 100)})
    j.add("r2", {A0: (170, 200)})  # a restart further on: the walk's own gap 100..169
    report = add_recorded_losses_to(j, _recorded(100, 160))
    assert [(f.first, f.end) for f in report.findings] == [(100, 170)]


def add_recorded_losses_to(j: Journal, loss: Any) -> Any:
    from offset_journal.audit import add_recorded_losses

    return add_recorded_losses(audit_batches("q", j.batches, []), [loss], [])
