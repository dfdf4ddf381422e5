"""Record-time restarts, the pure core: no broker, no database.

What the cluster would answer (partitions, watermarks, offsetsForTimes) and what the
journal holds are given as plain values; the end-to-end proof on a real broker is in
tests/test_record_time.py.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from offset_journal.journal import Batch, SourceOffsets
from offset_journal.offsets import PartitionOffset
from offset_journal.restart import (
    MODE_STATE_AWARE,
    JournalFacts,
    KafkaFacts,
    PlanRequest,
    RestartError,
    compute_plan,
)
from offset_journal.restart.decide.from_time import chosen_offsets, records_again
from offset_journal.restart.model import POSITION_FROM_TIME, POSITIONS
from offset_journal.restart.request import check_request
from offset_journal.rows import RereadRun

T = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
T_MS = 1_795_161_600_000  # 2026-11-20T08:00:00Z in epoch millis


def _batch(ends: dict[str, dict[int, tuple[int, int]]], description: str = "") -> Batch:
    rows = tuple(PartitionOffset(t, p, s, e) for t in sorted(ends)
                 for p, (s, e) in sorted(ends[t].items()))
    start = {t: {str(p): s for p, (s, _e) in parts.items()} for t, parts in ends.items()}
    end = {t: {str(p): e for p, (_s, e) in parts.items()} for t, parts in ends.items()}
    src = SourceOffsets(0, description or f"KafkaV2[Subscribe[{', '.join(sorted(ends))}]]",
                        "kafka", start, end, 10, rows)
    return Batch("q", "qid", "run-1", 7, T + timedelta(hours=1), 100, 10, None, None, None,
                 (src,), pk=7)


def test_the_position_is_a_closed_set_with_from_time() -> None:
    assert POSITION_FROM_TIME == "from-time" and POSITION_FROM_TIME in POSITIONS
    check_request("stateless", POSITION_FROM_TIME)
    with pytest.raises(RestartError, match=r"as_of \(--as-of\), not from_time"):
        check_request(MODE_STATE_AWARE, POSITION_FROM_TIME)
    with pytest.raises(RestartError, match="unknown position"):
        check_request("stateless", "from_time")


def test_each_partition_starts_at_its_first_record_at_or_after_the_time_else_at_its_end():
    state = {"orders": {0: (0, 50), 1: (0, 40), 2: (0, 30)}}
    lookup: dict[str, dict[int, int | None]] = {"orders": {0: 20, 1: None, 2: 0}}
    assert chosen_offsets(lookup, state) == {"orders": {0: 20, 1: 40, 2: 0}}
    # journaled end - start, never negative
    assert records_again({"orders": {0: 50, 1: 35, 2: 12}},
                         {"orders": {0: 20, 1: 40, 2: 0}}) == {"orders": {0: 30, 1: 0, 2: 12}}


def test_the_plan_counts_what_is_read_again_and_names_the_batches() -> None:
    anchor = _batch({"orders": {0: (40, 50), 1: (30, 35)}})
    state = {"orders": {0: (0, 50), 1: (0, 40), 2: (0, 8)}}
    lookup: dict[str, dict[int, int | None]] = {"orders": {0: 20, 1: None, 2: 3}}
    reread = [RereadRun("run-1", "qid", 3, 7, 5, T, T + timedelta(hours=1))]
    plan = compute_plan("q",
                        JournalFacts(anchor, position=POSITION_FROM_TIME),
                        kafka=KafkaFacts(state=state, time_lookup=lookup, reread=reread),
                        from_time=T)
    assert plan.ok, plan.errors
    assert plan.position == "from-time" and plan.from_time == T
    src = plan.source(0)
    # every partition named, the one the journal lacks too (at ITS time, not earliest)
    assert json.loads(src.options["startingOffsets"]) == {"orders": {"0": 20, "1": 40, "2": 3}}
    assert src.records_again == {"orders": {0: 30, 1: 0, 2: 0}}
    assert src.by_timestamp_options() == {
        "startingOffsetsByTimestamp": json.dumps({"orders": {"0": T_MS, "1": T_MS,
                                                             "2": T_MS}}, separators=(",", ":")),
        "startingOffsetsByTimestampStrategy": "latest"}
    # orders-1: the journal ended at 35, its log at 40, and no record is at or after T
    assert any("orders-1 35..39 (5 records)" in w for w in plan.warnings), plan.warnings
    text = " ".join(plan.explain().split())
    assert "30 journaled records will be processed again" in text
    assert "orders-0 30 (offsets 20..49)" in text
    assert "batches 3..7 of run run-1 (5 journaled" in text
    assert "startingOffsetsByTimestampStrategy = latest" in text
    as_json = plan.to_dict()
    assert as_json["position"] == "from-time"
    assert as_json["reprocessed_batches"][0]["first_batch"] == 3
    assert as_json["sources"][0]["records_again_total"] == 30


def test_a_time_after_everything_read_processes_nothing_again() -> None:
    anchor = _batch({"orders": {0: (0, 10)}})
    plan = compute_plan("q",
                        JournalFacts(anchor, position=POSITION_FROM_TIME),
                        kafka=KafkaFacts(state={"orders": {0: (0, 10)}},
                                         time_lookup={"orders": {0: None}}, reread=[]),
                        from_time=T)
    assert plan.ok and plan.source(0).records_again == {"orders": {0: 0}}
    text = " ".join(plan.explain().split())
    assert "No journaled batch is processed again" in text
    assert "No journaled record is read again" in text
    assert not plan.warnings


def test_a_deleted_topic_is_left_out_with_a_warning_and_assign_keeps_its_partitions() -> None:
    anchor = _batch({"orders": {0: (0, 10)}, "gone": {0: (0, 4)}},
                    "KafkaV2[Assign[orders-0, gone-0]]")
    plan = compute_plan("q",
                        JournalFacts(anchor, position=POSITION_FROM_TIME),
                        kafka=KafkaFacts(state={"orders": {0: (0, 10), 1: (0, 10)}},
                                         time_lookup={"orders": {0: 4, 1: 4}}),
                        from_time=T)
    assert json.loads(plan.starting_offsets()) == {"orders": {"0": 4}}
    assert any("topic gone" in w and "no longer exists" in w for w in plan.warnings)


def test_without_the_cluster_there_is_nothing_to_start_from() -> None:
    plan = compute_plan("q",
                        JournalFacts(_batch({"orders": {0: (0, 10)}}), position=POSITION_FROM_TIME),
                        from_time=T)
    assert not plan.ok and "needs the Kafka cluster" in plan.errors[0]


def test_a_request_in_the_future_or_without_servers_is_refused() -> None:
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    with pytest.raises(RestartError, match="in the future"):
        PlanRequest("q", from_time=future, bootstrap_servers="k:9092").checked()
    with pytest.raises(RestartError, match="bootstrap servers"):
        PlanRequest("q", from_time=T).checked()
    with pytest.raises(RestartError, match="from_time .* not both"):
        PlanRequest("q", from_time=T, as_of=T, bootstrap_servers="k:9092").checked()
    naive = PlanRequest("q", from_time=T.replace(tzinfo=None),
                        bootstrap_servers="k:9092").checked()
    assert naive.from_time == T and naive.position == POSITION_FROM_TIME


def test_a_record_time_before_the_epoch_or_data_loss_without_a_cluster_is_refused() -> None:
    """-1 and -2 are Kafka's own markers (latest, earliest): a time just before 1970
    would otherwise start every partition at its log end without a word."""
    before = datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)
    with pytest.raises(RestartError, match="before 1970"):
        PlanRequest("q", from_time=before, bootstrap_servers="k:9092").checked()
    with pytest.raises(RestartError, match="allow_data_loss.*bootstrap servers"):
        PlanRequest("q", allow_data_loss=True).checked()
    assert PlanRequest("q", allow_data_loss=True, bootstrap_servers="k:9092").checked()


# --------------------------------------------------------------------------- async runs


def test_a_plan_after_an_async_run_names_the_batches_that_may_not_be_final() -> None:
    from offset_journal.restart import BatchRef
    from offset_journal.rows import AsyncTail

    anchor = _batch({"orders": {0: (40, 50)}})
    tail = AsyncTail("run-1", 1000, tuple(BatchRef("run-1", i, "qid", T) for i in (5, 6, 7)))
    plan = compute_plan("q",
                        JournalFacts(anchor, async_tail=tail))
    text = " ".join(" ".join(plan.warnings).split())
    assert "async progress tracking" in text and "every 1000 ms" in text
    assert "batches 5..7" in text and "--batch run-1:5" in text
    assert plan.ok  # a warning: the new checkpoint may take it as it is
    # AT a batch (its start offsets) does not take the end offsets at stake
    def asynchronous(plan: object) -> list[str]:
        return [w for w in plan.warnings if "async" in w]  # type: ignore[attr-defined]

    assert asynchronous(plan)
    assert not asynchronous(compute_plan("q",
                                         JournalFacts(anchor, async_tail=tail, position="at")))
    # a run whose tail does not hold the anchor (an older batch, via --as-of)
    older = AsyncTail("run-1", 1000, (BatchRef("run-1", 9, "qid", T),))
    assert not asynchronous(compute_plan("q",
                                         JournalFacts(anchor, async_tail=older)))


def test_a_recreated_topic_is_not_counted_as_read_again_silently() -> None:
    anchor = _batch({"orders": {0: (10, 20)}})
    plan = compute_plan("q",
                        JournalFacts(anchor, position=POSITION_FROM_TIME),
                        kafka=KafkaFacts(state={"orders": {0: (0, 3)}},
                                         time_lookup={"orders": {0: 0}}),
                        from_time=T)
    assert json.loads(plan.starting_offsets()) == {"orders": {"0": 0}}
    assert any("beyond the log end of orders-0" in w and "recreated" in w
               for w in plan.warnings), plan.warnings
