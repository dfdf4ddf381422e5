"""Restart plans: pure planning over hand-built batches, then against Postgres and Kafka."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offset_journal.checkpoint.importing import checkpoint_run_id, import_checkpoint
from offset_journal.journal import Batch, Journal, SourceOffsets
from offset_journal.offsets import EARLIEST, PartitionOffset
from offset_journal.overlap import RunSpan, concurrent_runs
from offset_journal.restart import (
    MODE_STATE_AWARE,
    JournalFacts,
    KafkaFacts,
    LocationFacts,
    RestartError,
    compute_plan,
    plan_restart,
)
from offset_journal.restart.compare import (
    OffsetComparison,
    compare_offsets,
    comparison_verdict,
    group_offsets,
)
from offset_journal.restart.decide.kafka_offsets import check_against_cluster, kafka_strategy
from offset_journal.restart.model import CheckpointState, SinkState
from offset_journal.rows import source_kind
from offset_journal.testing import KafkaCluster
from tests.payloads import kafka_source, progress
from tests.support import at, fill, journal_batches, kafka_progress, ts, write_checkpoint

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
SUB = "KafkaV2[Subscribe[orders]]"

Parts = dict[tuple[str, int], tuple[int | None, int | None]]


def kafka_src(parts: Parts, *, index: int = 0, description: str = SUB,
              first: bool = False) -> SourceOffsets:
    """A Kafka source as the journal returns it; ``first``: no start offsets at all
    (Spark reports none for a checkpoint's first batch)."""
    start: dict[str, dict[str, int]] = {}
    end: dict[str, dict[str, int]] = {}
    for (t, p), (s, e) in parts.items():
        if s is not None:
            start.setdefault(t, {})[str(p)] = s
        if e is not None:
            end.setdefault(t, {})[str(p)] = e
    rows = tuple(
        PartitionOffset(t, p, None if first else s, e) for (t, p), (s, e) in sorted(parts.items())
    )
    return SourceOffsets(index, description, "kafka", None if first else start, end, 10, rows)


def other_src(description: str, start: Any, end: Any, index: int = 0) -> SourceOffsets:
    return SourceOffsets(index, description, "other", start, end, 10)


def mk(batch_id: int, *sources: SourceOffsets, run: str = "run-1", query: str = "qid-1",
       minute: int | None = None, watermark: datetime | None = None,
       et_max: datetime | None = None, rows: int | None = 10) -> Batch:
    minute = batch_id if minute is None else minute
    return Batch(
        query_name="orders", query_id=query, run_id=run, batch_id=batch_id,
        trigger_at=T0 + timedelta(minutes=minute), batch_duration_ms=100, num_input_rows=rows,
        watermark=watermark, event_time_min=None, event_time_max=et_max,
        sources=tuple(sources), pk=1000 + minute,
    )


def flat(text: str) -> str:
    """explain() wraps lines for terminals; compare phrases on one line."""
    return " ".join(text.split())




# --------------------------------------------------------------------------- positions


def test_after_last_batch_starts_at_its_end_offsets() -> None:
    anchor = mk(5, kafka_src({("orders", 0): (10, 20), ("orders", 1): (3, 7)}))
    plan = compute_plan("orders", anchor)
    assert plan.position == "after"
    assert plan.starting_offsets() == '{"orders":{"0":20,"1":7}}'
    assert plan.options() == {"startingOffsets": '{"orders":{"0":20,"1":7}}'}
    assert plan.source(0).offsets == {"orders": {0: 20, 1: 7}}
    text = flat(plan.explain())
    assert "Starts AFTER batch 5 of run run-1" in text and "END offsets" in text
    assert "nothing skipped, nothing read twice" in text
    # Not checked against a cluster: said so.
    assert any("not checked against a Kafka cluster" in w for w in plan.warnings)
    assert plan.errors == []
    json.dumps(plan.to_dict())


@pytest.mark.parametrize("end", [-1, -2, -7])
def test_a_journaled_end_offset_below_zero_is_never_handed_out(end: int) -> None:
    """-1 in startingOffsets means latest and -2 earliest: a forged end offset (the
    database refuses them since 0015; a row from before is skipped on read) would send
    the new query elsewhere. The planner refuses it too."""
    plan = compute_plan("orders", mk(5, kafka_src({("orders", 0): (10, 20),
                                                   ("orders", 1): (3, end)})))
    assert not plan.ok
    assert any("end offsets below 0" in e and f"orders-1 at {end}" in e for e in plan.errors)


def test_partition_without_end_is_left_out_with_a_note() -> None:
    anchor = mk(5, kafka_src({("orders", 0): (10, 20), ("gone", 0): (4, None)}))
    plan = compute_plan("orders", anchor)
    assert plan.source(0).offsets == {"orders": {0: 20}}
    assert any("gone-0" in n and "stopped reading" in n for n in plan.source(0).notes)


def test_at_batch_starts_at_its_start_offsets() -> None:
    before = mk(4, kafka_src({("orders", 0): (5, 10)}))
    anchor = mk(5, kafka_src({("orders", 0): (10, 20), ("orders", 1): (None, 7)}))
    plan = compute_plan("orders",
                        JournalFacts(anchor, position="at", before=before))
    assert plan.position == "at"
    # orders-1 appeared during the batch: Spark read it from earliest, so -2.
    assert plan.source(0).offsets == {"orders": {0: 10, 1: EARLIEST}}
    assert "Starts AT batch 5" in flat(plan.explain()) and "START offsets" in flat(plan.explain())
    assert plan.start_batch is not None and plan.start_batch.batch_id == 5


def test_at_first_batch_of_a_checkpoint_uses_the_batch_before() -> None:
    before = mk(9, kafka_src({("orders", 0): (5, 10)}), run="old", query="qid-old")
    anchor = mk(0, kafka_src({("orders", 0): (10, 20), ("orders", 1): (0, 4)}, first=True),
                minute=10)
    plan = compute_plan("orders",
                        JournalFacts(anchor, position="at", before=before))
    assert plan.source(0).offsets == {"orders": {0: 10, 1: EARLIEST}}
    assert any("first batch of its checkpoint" in w for w in plan.warnings)
    assert any("does not know where orders-1 started" in w for w in plan.warnings)
    alone = compute_plan("orders",
                         JournalFacts(anchor, position="at"))
    assert alone.source(0).offsets == {"orders": {0: EARLIEST, 1: EARLIEST}}


def test_as_of_is_explained() -> None:
    plan = compute_plan("orders", mk(3, kafka_src({("orders", 0): (1, 2)})), as_of=at(3.5))
    assert "triggered at or before 2024-01-01T00:03:30Z" in flat(plan.explain())
    assert "still running" not in flat(plan.explain())
    # mk() batches run 100 ms: one triggered 50 ms before as_of was still running then.
    running = compute_plan("orders", mk(3, kafka_src({("orders", 0): (1, 2)})),
                           as_of=at(3) + timedelta(milliseconds=50))
    assert "still running at 2024-01-01T00:03:00.050000Z" in flat(running.explain())


def test_source_selection() -> None:
    anchor = mk(1, kafka_src({("a", 0): (0, 1)}),
                kafka_src({("b", 0): (0, 9)}, index=1, description="KafkaV2[Subscribe[b]]"))
    plan = compute_plan("orders", anchor, source=1)
    assert [s.index for s in plan.sources] == [1]
    assert plan.starting_offsets(1) == '{"b":{"0":9}}'
    with pytest.raises(RestartError, match="no source 0 in this plan"):
        plan.options(0)
    with pytest.raises(RestartError, match="has no source 7"):
        compute_plan("orders", anchor, source=7)


def test_unreadable_kafka_payload_is_an_error() -> None:
    anchor = mk(1, SourceOffsets(0, SUB, "kafka", None, {"garbage": 1}, 1, ()))
    plan = compute_plan("orders", anchor)
    assert plan.errors and "no Kafka partition offsets" in plan.errors[0]


# --------------------------------------------------------------------------- the cluster


def test_new_partitions_are_added_at_earliest_for_subscriptions() -> None:
    offsets, found = check_against_cluster(
        {"orders": {0: 5, 1: 6}}, {"orders": {p: (0, 100) for p in range(4)}},
        strategy="subscribe", subscribed=["orders"],
    )
    notes, warnings, errors = found.notes, found.warnings, found.errors
    assert offsets == {"orders": {0: 5, 1: 6, 2: EARLIEST, 3: EARLIEST}}
    assert any("orders-2, orders-3" in n for n in notes)
    assert (warnings, errors) == ([], [])


def test_assign_adds_no_partition() -> None:
    offsets, found = check_against_cluster(
        {"orders": {0: 5}}, {"orders": {0: (0, 9), 1: (0, 9)}}, strategy="assign")
    notes = found.notes
    assert offsets == {"orders": {0: 5}}
    assert any("assigns fixed partitions" in n for n in notes)


def test_subscribed_topic_missing_from_journal_is_added() -> None:
    offsets, _ = check_against_cluster(
        {"a": {0: 5}}, {"a": {0: (0, 9)}, "b": {0: (0, 3)}, "c": {0: (0, 1)}},
        strategy="subscribe", subscribed=["a", "b"])
    assert offsets == {"a": {0: 5}, "b": {0: EARLIEST}}


def test_deleted_topic_and_vanished_partition_are_dropped_with_warnings() -> None:
    offsets, found = check_against_cluster(
        {"orders": {0: 5, 7: 1}, "deleted": {0: 3}}, {"orders": {0: (0, 9)}})
    warnings, errors = found.warnings, found.errors
    assert offsets == {"orders": {0: 5}}
    assert any("topic deleted" in w and "no longer exists" in w for w in warnings)
    assert any("orders-7" in w for w in warnings)
    assert errors == []


def test_offset_below_log_start_is_data_loss() -> None:
    _, found = check_against_cluster({"orders": {0: 5, 1: 50}},
                                     {"orders": {0: (8, 20), 1: (0, 60)}})
    errors = found.errors
    assert len(errors) == 1
    assert errors[0].startswith("DATA LOSS") and "orders-0 starts at 5" in errors[0]
    assert "records 5..7 were deleted" in errors[0]


def test_offset_beyond_log_end_is_suspicious() -> None:
    # Beyond the log end is an error now (was a warning), so that
    # starting-offsets does not hand it out with exit 0.
    _, found = check_against_cluster({"orders": {0: 50}}, {"orders": {0: (0, 20)}})
    warnings, errors = found.warnings, found.errors
    assert warnings == [] and any("beyond its log end 20" in e for e in errors)


def test_data_loss_names_journaled_offset_log_start_and_count_per_partition() -> None:
    offsets, found = check_against_cluster({"orders": {0: 5, 1: 50, 2: 7}},
                                           {"orders": {0: (8, 20), 1: (0, 60), 2: (17, 30)}})
    assert offsets == {"orders": {0: 5, 1: 50, 2: 7}}  # refused: nothing moved
    (error,) = found.errors
    assert error.startswith("DATA LOSS: 13 records in 2 partitions were deleted")
    assert "orders-0 starts at 5 but its log starts at 8: records 5..7" in error
    assert "(journaled offset 5, log start 8, 3 records lost)" in error
    assert "(journaled offset 7, log start 17, 10 records lost)" in error
    assert "orders-1" not in error and "--allow-data-loss" in error


def test_allow_data_loss_starts_at_the_log_start_and_says_so() -> None:
    offsets, found = check_against_cluster({"orders": {0: 5, 1: 50, 2: EARLIEST}},
                                           {"orders": {0: (8, 20), 1: (0, 60), 2: (4, 9)}},
                                           allow_data_loss=True)
    assert offsets == {"orders": {0: 8, 1: 50, 2: EARLIEST}}
    assert found.errors == []
    (warning,) = found.warnings
    assert warning.startswith("DATA LOSS accepted (--allow-data-loss): 3 records in 1 partition")
    assert "orders-0 starts at its log start 8, not at the journaled 5: records 5..7 " \
           "(3 records) are lost" in warning


def test_allow_data_loss_does_not_accept_offsets_beyond_the_log_end() -> None:
    _, found = check_against_cluster({"orders": {0: 50}}, {"orders": {0: (0, 20)}},
                                     allow_data_loss=True)
    assert any("beyond its log end 20" in e for e in found.errors)


def test_a_recreated_topic_is_explained_per_partition_and_refused() -> None:
    offsets, found = check_against_cluster({"orders": {0: 20, 1: 20}, "other": {0: 4}},
                                           {"orders": {0: (0, 3), 1: (0, 3)},
                                            "other": {0: (0, 9)}})
    assert offsets == {"orders": {0: 20, 1: 20}, "other": {0: 4}}
    (error,) = found.errors
    assert error.startswith("orders-0 starts at 20, beyond its log end 3; orders-1 starts at "
                            "20, beyond its log end 3: ")
    assert "does not have in every partition" in error
    assert "probably deleted and recreated" in error
    assert "--restart-recreated-topic orders" in error and "other-0" not in error


def test_restart_recreated_topic_starts_every_partition_at_earliest_with_a_warning() -> None:
    offsets, found = check_against_cluster(
        {"orders": {0: 20, 1: 20}, "other": {0: 4}},
        {"orders": {0: (0, 3), 1: (0, 3), 2: (0, 1)}, "other": {0: (0, 9)}},
        strategy="subscribe", subscribed=["orders", "other"], recreated=["orders"])
    assert offsets == {"orders": {0: EARLIEST, 1: EARLIEST, 2: EARLIEST}, "other": {0: 4}}
    assert found.errors == []
    (warning,) = [w for w in found.warnings if "--restart-recreated-topic" in w]
    assert "topic orders starts at -2 (earliest) in all 3 partitions" in warning
    assert "the 7 records it holds now are read from its start" in warning
    assert "(orders-0: 20, orders-1: 20) belong to the topic as it was" in warning
    assert "nothing shows" not in warning


def test_restart_recreated_topic_without_sign_of_recreation_is_refused() -> None:
    # The flag on a topic that was not recreated (its log still holds
    # the journaled offsets) used to pass with a warning that records "are read again".
    offsets, found = check_against_cluster({"orders": {0: 2}}, {"orders": {0: (0, 3)}},
                                           recreated=["orders"])
    assert offsets == {"orders": {0: 2}}
    (error,) = found.errors
    assert "named as recreated (--restart-recreated-topic), but no journaled offset lies " \
           "beyond its log end (orders-0 journaled 2, log 0..3)" in error
    assert "Plan without --restart-recreated-topic orders" in error
    assert not any("read again" in w for w in found.warnings)


def test_restart_recreated_topic_that_lost_records_to_retention_is_data_loss() -> None:
    # Not recreated, and retention deleted records 2..9 before any
    # job read them: the refusal of the flag, and DATA LOSS from the journaled offset.
    offsets, found = check_against_cluster({"orders": {0: 2}}, {"orders": {0: (10, 30)}},
                                           recreated=["orders"])
    assert any("named as recreated" in e for e in found.errors)
    (loss,) = [e for e in found.errors if e.startswith("DATA LOSS")]
    assert "orders-0 starts at 2 but its log starts at 10: records 2..9" in loss
    assert offsets == {"orders": {0: 2}}


def test_recreated_topic_whose_new_log_lost_its_start_is_data_loss() -> None:
    # A topic really recreated (journaled 20 beyond the log end 12), whose first 5
    # records were deleted by retention before any job read them.
    offsets, found = check_against_cluster({"orders": {0: 20}}, {"orders": {0: (5, 12)}},
                                           recreated=["orders"])
    (loss,) = found.errors
    assert loss.startswith("DATA LOSS: 5 records in 1 partition were deleted")
    assert "(a partition the journal never read begins at 0, log start 5, 5 records lost)" \
        in loss
    offsets, found = check_against_cluster({"orders": {0: 20}}, {"orders": {0: (5, 12)}},
                                           recreated=["orders"], allow_data_loss=True)
    assert found.errors == [] and offsets == {"orders": {0: 5}}


def test_new_partition_below_its_log_start_is_data_loss() -> None:
    # Partitions added while the job was down, and retention deleted the
    # first 15 records of one before any job read it: it began at 0, so DATA LOSS.
    state = {"orders": {0: (0, 10), 1: (0, 40), 2: (15, 30)}}
    offsets, found = check_against_cluster({"orders": {0: 10}}, state, strategy="subscribe",
                                           subscribed=["orders"])
    assert offsets == {"orders": {0: 10, 1: EARLIEST, 2: EARLIEST}}  # refused: not moved
    (loss,) = found.errors
    assert loss.startswith("DATA LOSS: 15 records in 1 partition were deleted")
    assert "orders-2 starts at 0 but its log starts at 15: records 0..14" in loss
    assert "orders-1" not in loss and "--allow-data-loss" in loss
    offsets, found = check_against_cluster({"orders": {0: 10}}, state, strategy="subscribe",
                                           subscribed=["orders"], allow_data_loss=True)
    assert found.errors == [] and offsets == {"orders": {0: 10, 1: EARLIEST, 2: 15}}
    (accepted,) = [w for w in found.warnings if w.startswith("DATA LOSS accepted")]
    assert "orders-2 starts at its log start 15, not at 0, where a partition the journal " \
           "never read begins: records 0..14 (15 records) are lost" in accepted


def test_topic_new_to_the_subscription_is_not_data_loss() -> None:
    # A topic the old job never subscribed to: what retention deleted from it was never
    # this job's to read, so no DATA LOSS (it still starts at earliest).
    offsets, found = check_against_cluster({"orders": {0: 10}},
                                           {"orders": {0: (0, 10)}, "fresh": {0: (7, 9)}},
                                           strategy="subscribe", subscribed=["orders", "fresh"])
    assert found.errors == [] and offsets["fresh"] == {0: EARLIEST}


def test_restart_recreated_topic_that_is_gone_is_an_error() -> None:
    offsets, found = check_against_cluster({"orders": {0: 2}, "a": {0: 1}},
                                           {"a": {0: (0, 3)}}, recreated=["orders"])
    assert offsets == {"a": {0: 1}}
    assert any("named as recreated" in e and "does not exist" in e for e in found.errors)


def test_a_deleted_topic_says_what_to_do_with_the_subscription() -> None:
    _, found = check_against_cluster({"gone": {0: 5, 1: 6}, "a": {0: 1}}, {"a": {0: (0, 3)}})
    (warning,) = found.warnings
    assert "topic gone (partitions 0, 1) no longer exists" in warning
    assert "deleted and not created again" in warning and "gone-0: 5, gone-1: 6" in warning
    assert "Subscribe the new job without gone" in warning
    assert "UnknownTopicOrPartitionException" in warning


def test_plan_with_recreated_topics_refuses_unknown_topics_and_needs_a_cluster() -> None:
    anchor = mk(2, kafka_src({("orders", 0): (0, 20)}))
    state = {"orders": {0: (0, 3)}}
    with pytest.raises(RestartError, match="neither journaled nor subscribes to topic 'ordrs'"):
        compute_plan("orders",
                     anchor,
                     kafka=KafkaFacts(state=state),
                     recreated_topics=["ordrs"])
    with pytest.raises(RestartError, match="needs the cluster"):
        compute_plan("orders", anchor, recreated_topics=["orders"])
    refused = compute_plan("orders",
                           anchor,
                           kafka=KafkaFacts(state=state))
    assert not refused.ok
    chosen = compute_plan("orders",
                          anchor,
                          kafka=KafkaFacts(state=state),
                          recreated_topics=["orders"])
    assert chosen.ok and chosen.starting_offsets() == '{"orders":{"0":-2}}'
    assert any("--restart-recreated-topic" in w for w in chosen.warnings)


def test_a_plan_records_the_log_start_each_earliest_offset_stood_for() -> None:
    """The audit matches a plan no job linked to a run only where the
    run starts exactly at the plan's offsets, so a plan at -2 (earliest) records where
    that was on the cluster when it was made."""
    from offset_journal.restart import PlanRequest
    from offset_journal.restart.record import plan_row

    anchor = mk(2, kafka_src({("orders", 0): (0, 20)}, description="KafkaV2[Subscribe[orders]]"))
    state = {"orders": {0: (0, 3), 1: (2, 9)}, "new": {0: (5, 7)}}
    chosen = compute_plan("orders",
                          anchor,
                          kafka=KafkaFacts(state=state),
                          recreated_topics=["orders"],
                          subscribe=["orders", "new"])
    assert chosen.source(0).offsets == {"orders": {0: EARLIEST, 1: EARLIEST},
                                        "new": {0: EARLIEST}}
    assert chosen.source(0).log_starts == {("orders", 0): 0, ("orders", 1): 2, ("new", 0): 5}
    row = plan_row(chosen, PlanRequest("orders"), "plan")
    assert row["request"]["log_starts"] == [["new", 0, 5], ["orders", 0, 0], ["orders", 1, 2]]
    # Not asked (no cluster), or no offset at earliest: nothing to record.
    first = mk(0, kafka_src({("orders", 0): (0, 20)}, first=True))
    blind = compute_plan("orders",
                         JournalFacts(first, position="at"))
    assert blind.starting_offsets() == '{"orders":{"0":-2}}'
    assert "log_starts" not in plan_row(blind, PlanRequest("orders"), "plan")["request"]
    plain = compute_plan("orders",
                         anchor,
                         kafka=KafkaFacts(state={"orders": {0: (0, 30)}}))
    assert plain.source(0).log_starts == {}
    assert "log_starts" not in plan_row(plain, PlanRequest("orders"), "plan")["request"]


def test_plan_with_allow_data_loss_is_ok_and_starts_at_the_log_start() -> None:
    anchor = mk(2, kafka_src({("orders", 0): (0, 5), ("orders", 1): (0, 5)}))
    state = {"orders": {0: (9, 20), 1: (0, 20)}}
    assert not compute_plan("orders",
                            anchor,
                            kafka=KafkaFacts(state=state)).ok
    plan = compute_plan("orders",
                        anchor,
                        kafka=KafkaFacts(state=state),
                        allow_data_loss=True)
    assert plan.ok and json.loads(plan.starting_offsets()) == {"orders": {"0": 9, "1": 5}}
    assert any(w.startswith("source 0: DATA LOSS accepted") for w in plan.warnings)
    assert "DATA LOSS accepted" in flat(plan.explain())


def test_a_subscribed_topic_the_cluster_lacks_is_an_error() -> None:
    anchor = mk(2, kafka_src({("orders", 0): (0, 5)}))
    plan = compute_plan("orders",
                        anchor,
                        kafka=KafkaFacts(state={"orders": {0: (0, 9)}}),
                        subscribe=["orders", "ordres"])
    assert any("subscribes to ordres, which the cluster does not have" in e
               for e in plan.errors)


def test_new_subscription_adds_and_drops_topics() -> None:
    anchor = mk(2, kafka_src({("orders", 0): (0, 5), ("old", 0): (1, 2)},
                             description="KafkaV2[Subscribe[old, orders]]"))
    state = {"orders": {0: (0, 9)}, "old": {0: (0, 9)}, "new": {0: (0, 1), 1: (0, 1)}}
    plan = compute_plan("orders",
                        anchor,
                        kafka=KafkaFacts(state=state),
                        subscribe=["orders", "new"])
    assert plan.source(0).offsets == {"orders": {0: 5}, "new": {0: EARLIEST, 1: EARLIEST}}
    notes = plan.source(0).notes
    assert any("not subscribed by the new job, left out: old" in n for n in notes)
    assert any("subscribed but never journaled" in n and "new" in n for n in notes)
    blind = compute_plan("orders", anchor, subscribe=["orders", "new"])
    assert blind.source(0).offsets == {"orders": {0: 5}}
    assert any("their partitions are unknown" in w for w in blind.warnings)


def test_pattern_subscription_gets_a_note() -> None:
    _, found = check_against_cluster({"o": {0: 1}}, {"o": {0: (0, 1)}}, strategy="pattern")
    notes = found.notes
    assert any("by pattern" in n for n in notes)


def test_plan_with_data_loss_has_errors_before_the_job_starts() -> None:
    anchor = mk(2, kafka_src({("orders", 0): (0, 5)}))
    plan = compute_plan("orders",
                        anchor,
                        kafka=KafkaFacts(state={"orders": {0: (9, 20)}}))
    assert not plan.ok
    assert plan.errors[0].startswith("source 0: DATA LOSS")
    assert "ERRORS" in flat(plan.explain())


def test_every_topic_gone_leaves_nothing_to_start_from() -> None:
    plan = compute_plan("orders",
                        mk(2, kafka_src({("orders", 0): (0, 5)})),
                        kafka=KafkaFacts(state={}))
    assert any("no partition is left" in e for e in plan.errors)


@pytest.mark.parametrize("description,expected", [
    ("KafkaV2[Subscribe[orders]]", ("subscribe", ["orders"])),
    ("KafkaV2[Subscribe[a, b]]", ("subscribe", ["a", "b"])),
    ("KafkaV2[SubscribePattern[orders-.*]]", ("pattern", ["orders-.*"])),
    ("KafkaV2[Assign[orders-0, orders-1]]", ("assign", ["orders-0", "orders-1"])),
    ("KafkaSource[Subscribe[x]]", ("subscribe", ["x"])),
    (None, ("unknown", [])),
    ("PythonMicroBatchStream", ("unknown", [])),
])
def test_kafka_strategy(description: str | None, expected: tuple[str, list[str]]) -> None:
    assert kafka_strategy(description) == expected


# --------------------------------------------------------------------------- other sources


DELTA = "DeltaSource[file:/data/events]"


def _delta(version: int, index: int, starting: bool = False) -> dict[str, Any]:
    return {"sourceVersion": 1, "reservoirId": "r", "reservoirVersion": version, "index": index,
            "isStartingVersion": starting}


def test_delta_fully_processed_version() -> None:
    plan = compute_plan("orders", mk(1, other_src(DELTA, _delta(3, -1), _delta(5, -1))))
    assert plan.source(0).kind == "delta"
    assert plan.options() == {"startingVersion": "5"}
    assert json.loads(plan.starting_offsets())["reservoirVersion"] == 5
    assert plan.warnings == []


def test_delta_partly_processed_version_is_read_again() -> None:
    plan = compute_plan("orders", mk(1, other_src(DELTA, _delta(3, -1), _delta(5, 2))))
    assert plan.options() == {"startingVersion": "5"}
    assert any("partly processed" in w for w in plan.warnings)


def test_delta_inside_initial_snapshot_sets_no_option() -> None:
    plan = compute_plan("orders", mk(1, other_src(DELTA, None, _delta(5, 7, starting=True))))
    assert plan.options() == {}
    assert any("initial snapshot" in w for w in plan.warnings)


def test_delta_partly_processed_version_names_the_files_read_twice() -> None:
    plan = compute_plan("orders", mk(1, other_src(DELTA, _delta(3, -1), _delta(5, 2))))
    warning = flat(" ".join(plan.warnings))
    assert "data files 0..2" in warning and "3 file(s)" in warning
    assert "startingVersion = 6 instead would skip the rest of version 5" in warning


def test_delta_offset_at_a_schema_change_index_read_nothing_of_that_version() -> None:
    # sourceVersion 3 offsets stop at -20/-19 (a metadata change) before the version's
    # data files: startingVersion = that version, nothing read twice.
    end = {**_delta(7, -20), "sourceVersion": 3}
    plan = compute_plan("orders", mk(1, other_src(DELTA, _delta(6, -1), end)))
    assert plan.options() == {"startingVersion": "7"}
    assert plan.warnings == []


def test_delta_snapshot_not_started_starts_without_starting_version() -> None:
    plan = compute_plan("orders", mk(1, other_src(DELTA, None, _delta(4, -1, starting=True))))
    assert plan.options() == {}
    assert plan.warnings == [] and plan.ok
    assert any("without startingVersion" in n for n in plan.source(0).notes)


def test_delta_inside_snapshot_says_what_each_choice_costs() -> None:
    plan = compute_plan("orders", mk(1, other_src(DELTA, None, _delta(5, 7, starting=True))))
    warning = flat(" ".join(plan.warnings))
    assert "files 0..7 of it, 8 file(s)" in warning
    assert "startingVersion = 6 would skip the rest of the snapshot" in warning


def test_foreach_batch_sink_warns_about_delta_txn_app_id() -> None:
    batch = mk(4, other_src(DELTA, _delta(3, -1), _delta(5, -1)))
    plain = compute_plan("orders", batch)
    assert not any("txnAppId" in w for w in plain.warnings)
    fb = compute_plan("orders", replace(batch, sink_description="ForeachBatchSink"))
    assert any("NEW txnAppId" in flat(w) for w in fb.warnings)
    delta_sink = compute_plan("orders", replace(batch, sink_description="DeltaSink[/out]"))
    assert not any("txnAppId" in w for w in delta_sink.warnings)


def test_delta_at_batch_uses_start_offset() -> None:
    plan = compute_plan("orders",
                        JournalFacts(mk(1, other_src(DELTA, _delta(3, -1), _delta(5, -1))),
                                     position="at"))
    assert plan.options() == {"startingVersion": "3"}


def test_file_and_rate_and_unknown_sources_are_explained() -> None:
    anchor = mk(1, other_src("FileStreamSource[file:/in]", {"logOffset": 1}, {"logOffset": 2}),
                other_src("RateStreamV2[rowsPerSecond=1]", 3, 5, index=1),
                other_src("MySource", "a", "b", index=2))
    plan = compute_plan("orders", anchor)
    assert [s.kind for s in plan.sources] == ["file", "rate", "other"]
    assert plan.options(0) == plan.options(1) == plan.options(2) == {}
    assert plan.starting_offsets(0) == '{"logOffset":2}'
    assert any("no starting-position option" in w for w in plan.source(0).warnings)
    assert any("nothing to resume" in n for n in plan.source(1).notes)
    assert any("no option is known" in w for w in plan.source(2).warnings)
    assert not any("Kafka cluster" in w for w in plan.warnings)


def test_source_kind_from_shape() -> None:
    assert source_kind(other_src("x", None, {"reservoirId": "r", "reservoirVersion": 1})) == "delta"
    assert source_kind(other_src(None, None, {"logOffset": 1})) == "file"  # type: ignore[arg-type]
    assert source_kind(other_src(None, None, {"t": {"0": 1}})) == "kafka"  # type: ignore[arg-type]


# --------------------------------------------------------------------------- guards


def test_checkpoint_with_offsets_is_refused() -> None:
    anchor = mk(1, kafka_src({("orders", 0): (0, 5)}), query="qid-1")
    with pytest.raises(RestartError) as info:
        compute_plan("orders",
                     anchor,
                     locations=LocationFacts(checkpoint=CheckpointState(
                         "/ck", True, query_id="qid-1", last_batch_id=4)))
    message = str(info.value)
    assert "\n" not in message and "/ck already holds batches up to 4" in message
    assert "ignore startingOffsets" in message and "journaled query itself" in message
    ok = compute_plan("orders",
                      anchor,
                      locations=LocationFacts(checkpoint=CheckpointState("/new", False)))
    assert "will honour startingOffsets" in flat(ok.explain())


def test_file_sink_log_in_output_path_warns() -> None:
    anchor = mk(1, kafka_src({("orders", 0): (0, 5)}))
    plan = compute_plan("orders",
                        anchor,
                        locations=LocationFacts(output=SinkState("/out", 12)))
    assert any("_spark_metadata" in w and "0..12" in w for w in plan.warnings)
    clean = compute_plan("orders",
                         anchor,
                         locations=LocationFacts(output=SinkState("/out", None)))
    assert not any("_spark_metadata" in w for w in clean.warnings)


def test_concurrent_runs() -> None:
    a = RunSpan("A", "q1", at(0), at(10), True)
    b = RunSpan("B", "q2", at(5), at(20))
    c = RunSpan("C", "q1", at(10), at(30))  # starts as A ends: sequential
    d = RunSpan("D", "q1", None, None)
    assert [(x.run_id, y.run_id) for x, y in concurrent_runs([a, b, c, d])] == [
        ("A", "B"), ("B", "C")
    ]
    plan = compute_plan("orders",
                        JournalFacts(mk(40, kafka_src({("orders", 0): (0, 5)})), runs=[a, b, c]))
    warned = [w for w in plan.warnings if "same time" in w]
    assert len(warned) == 2 and "A and B" in warned[0]
    # Runs that started after the anchor do not matter to it.
    early = compute_plan("orders",
                         JournalFacts(mk(1, kafka_src({("orders", 0): (0, 5)})), runs=[b, c]))
    assert not any("same time" in w for w in early.warnings)


# --------------------------------------------------------------------------- state-aware


def _stateful_chain() -> list[Batch]:
    """A windowed aggregation: 10-minute windows, watermark 5 minutes behind.

    Batch 3 ran with watermark 00:20 (so windows ending at or before 00:20 are
    emitted); records with event times from 00:10 on may belong to open windows.
    """
    return [
        mk(0, kafka_src({("orders", 0): (0, 10)}, first=True), watermark=T0, et_max=at(4)),
        mk(1, kafka_src({("orders", 0): (10, 20)}), watermark=at(0), et_max=at(9)),
        mk(2, kafka_src({("orders", 0): (20, 30), ("orders", 1): (None, 4)}),
           watermark=at(4), et_max=at(12)),
        mk(3, kafka_src({("orders", 0): (30, 40), ("orders", 1): (4, 9)}),
           watermark=at(20), et_max=at(25)),
        mk(4, kafka_src({("orders", 0): (40, 40), ("orders", 1): (9, 9)}),
           watermark=at(20), et_max=None, rows=0),
    ]


def test_state_aware_rewinds_to_the_earliest_batch_with_open_window_records() -> None:
    chain = _stateful_chain()
    plan = compute_plan("orders",
                        JournalFacts(chain[-1], chain=chain),
                        mode=MODE_STATE_AWARE,
                        window=timedelta(minutes=10))
    assert plan.position == "rewind"
    assert plan.event_time_cutoff == at(20)
    # cutoff 00:20 - window 10 min = 00:10: batch 2 (max 00:12) is the earliest.
    assert plan.start_batch is not None and plan.start_batch.batch_id == 2
    # orders-1 first appeared in batch 2 without a start: -2.
    assert plan.source(0).offsets == {"orders": {0: 20, 1: EARLIEST}}
    text = flat(plan.explain())
    assert "event_time_cutoff = 2024-01-01T00:20:00Z" in text
    assert "Rewinding to the START offsets of batch 2" in text
    assert "later than the watermark" in text
    assert plan.to_dict()["event_time_cutoff"] == "2024-01-01T00:20:00Z"
    assert plan.to_dict()["window_seconds"] == 600


def test_state_aware_without_window_uses_the_cutoff_and_warns() -> None:
    chain = _stateful_chain()
    plan = compute_plan("orders",
                        JournalFacts(chain[-1], chain=chain),
                        mode=MODE_STATE_AWARE)
    assert plan.start_batch is not None and plan.start_batch.batch_id == 3
    assert plan.source(0).offsets == {"orders": {0: 30, 1: 4}}
    assert any("no window length" in w for w in plan.warnings)


def test_state_aware_long_window_reaches_the_checkpoints_first_batch() -> None:
    chain = _stateful_chain()
    before = mk(7, kafka_src({("orders", 0): (0, 0)}), run="old", query="qid-0", minute=-1)
    plan = compute_plan("orders",
                        JournalFacts(chain[-1], chain=chain, before=before),
                        mode=MODE_STATE_AWARE,
                        window=timedelta(hours=1))
    assert plan.start_batch is not None and plan.start_batch.batch_id == 0
    assert plan.source(0).offsets == {"orders": {0: 0, 1: EARLIEST}}


def test_state_aware_as_of_cuts_the_chain() -> None:
    chain = _stateful_chain()
    plan = compute_plan("orders",
                        JournalFacts(chain[2], chain=chain),
                        mode=MODE_STATE_AWARE,
                        window=timedelta(minutes=10),
                        as_of=at(2.5))
    assert plan.event_time_cutoff == at(4)
    assert plan.anchor.batch_id == 2
    # Threshold 23:54 the day before: everything of the chain up to batch 2.
    assert plan.start_batch is not None and plan.start_batch.batch_id == 0
    assert plan.source(0).offsets == {"orders": {0: EARLIEST, 1: EARLIEST}}


def test_state_aware_with_nothing_open_starts_after() -> None:
    chain = [
        mk(0, kafka_src({("orders", 0): (0, 10)}), watermark=at(60), et_max=at(30)),
        mk(1, kafka_src({("orders", 0): (10, 12)}), watermark=at(60), et_max=at(40)),
    ]
    plan = compute_plan("orders",
                        JournalFacts(chain[-1], chain=chain),
                        mode=MODE_STATE_AWARE,
                        window=timedelta(minutes=10))
    assert plan.position == "after" and plan.start_batch is None
    assert plan.source(0).offsets == {"orders": {0: 12}}
    assert "held no window still open" in flat(plan.explain())


def test_state_aware_falls_back_to_an_earlier_watermark() -> None:
    chain = [
        mk(0, kafka_src({("orders", 0): (0, 10)}), watermark=at(5), et_max=at(9)),
        mk(1, kafka_src({("orders", 0): (10, 12)}), watermark=None, et_max=at(10)),
    ]
    plan = compute_plan("orders",
                        JournalFacts(chain[-1], chain=chain),
                        mode=MODE_STATE_AWARE,
                        window=timedelta(minutes=1))
    assert plan.event_time_cutoff == at(5)
    assert any("reported no watermark" in w for w in plan.warnings)


def test_state_aware_without_event_times_rewinds_to_the_first_batch() -> None:
    chain = [
        mk(0, kafka_src({("orders", 0): (0, 10)}), watermark=at(5)),
        mk(1, kafka_src({("orders", 0): (10, 12)}), watermark=at(6)),
    ]
    plan = compute_plan("orders",
                        JournalFacts(chain[-1], chain=chain),
                        mode=MODE_STATE_AWARE)
    assert plan.source(0).offsets == {"orders": {0: 0}}
    assert any("no event times" in w for w in plan.warnings)


def test_state_aware_rewinds_over_batches_whose_event_times_are_unknown() -> None:
    # Batches 0-1 journaled by the listener (old event times); batches 2-3 imported from
    # the checkpoint afterwards (`checkpoint import`: no event times, row counts unknown).
    # The imported ones may hold records of windows still open: they must be re-read.
    chain = [
        mk(0, kafka_src({("orders", 0): (0, 10)}), watermark=at(0), et_max=at(2)),
        mk(1, kafka_src({("orders", 0): (10, 20)}), watermark=at(1), et_max=at(3)),
        mk(2, kafka_src({("orders", 0): (20, 30)}), watermark=at(30), rows=None),
        mk(3, kafka_src({("orders", 0): (30, 40)}), watermark=at(40), rows=None),
    ]
    plan = compute_plan("orders",
                        JournalFacts(chain[-1], chain=chain),
                        mode=MODE_STATE_AWARE,
                        window=timedelta(minutes=10))
    assert plan.event_time_cutoff == at(40)
    assert plan.position == "rewind"
    assert plan.start_batch is not None and plan.start_batch.batch_id == 2
    assert plan.source(0).offsets == {"orders": {0: 20}}
    assert any("no journaled event times" in w for w in plan.warnings)


def test_state_aware_needs_a_watermark() -> None:
    chain = [mk(0, kafka_src({("orders", 0): (0, 10)}))]
    with pytest.raises(RestartError, match="withWatermark"):
        compute_plan("orders",
                     JournalFacts(chain[0], chain=chain),
                     mode=MODE_STATE_AWARE)


def test_state_aware_refuses_a_batch_position() -> None:
    anchor = mk(0, kafka_src({("orders", 0): (0, 10)}), watermark=T0)
    with pytest.raises(RestartError, match="use as_of"):
        compute_plan("orders",
                     JournalFacts(anchor, position="at"),
                     mode=MODE_STATE_AWARE)
    with pytest.raises(RestartError, match="unknown mode"):
        compute_plan("orders", anchor, mode="clever")
    # The request's own mode is refused before the places it names are judged.
    used = LocationFacts(checkpoint=CheckpointState("/ck", True, last_batch_id=4))
    with pytest.raises(RestartError, match="unknown mode"):
        compute_plan("orders", anchor, mode="clever", locations=used)


def test_state_aware_delta_source_rewinds_to_the_start_version() -> None:
    chain = [
        mk(0, other_src(DELTA, _delta(1, -1), _delta(2, -1)), watermark=at(0), et_max=at(1)),
        mk(1, other_src(DELTA, _delta(2, -1), _delta(3, -1)), watermark=at(9), et_max=at(30)),
    ]
    plan = compute_plan("orders",
                        JournalFacts(chain[-1], chain=chain),
                        mode=MODE_STATE_AWARE,
                        window=timedelta(minutes=5))
    assert plan.options() == {"startingVersion": "2"}


# --------------------------------------------------------------------------- properties


@st.composite
def chains(draw: st.DrawFn) -> list[Batch]:
    """A checkpoint's batches: offsets only grow, partitions may appear late, the first
    batch may be the checkpoint's first (no start offsets), watermarks never go down."""
    n = draw(st.integers(1, 7))
    keys = draw(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3)),
                         min_size=1, max_size=5, unique=True))
    appear = {k: (0 if i == 0 else draw(st.integers(0, n - 1))) for i, k in enumerate(keys)}
    first_of_checkpoint = draw(st.booleans())
    position = {k: draw(st.integers(0, 500)) for k in keys}
    watermark = T0
    batches = []
    for i in range(n):
        parts: Parts = {}
        for k in keys:
            if appear[k] > i:
                continue
            start: int | None = position[k]
            if appear[k] == i and i > 0:
                start = None
            end = position[k] + draw(st.integers(0, 40))
            parts[k] = (start, end)
            position[k] = end
        watermark = watermark + timedelta(minutes=draw(st.integers(0, 5)))
        et_max = draw(st.none() | st.integers(-30, 60).map(at))
        batches.append(mk(i, kafka_src(parts, first=(i == 0 and first_of_checkpoint)),
                          watermark=watermark, et_max=et_max))
    return batches


def _anchor_end(anchor: Batch) -> dict[tuple[str, int], int]:
    return {(p.topic, p.partition): p.end for p in anchor.source(0).partitions
            if p.end is not None}


def _flat(offsets: dict[str, dict[int, int]] | None) -> dict[tuple[str, int], int]:
    assert offsets is not None
    return {(t, p): o for t, parts in offsets.items() for p, o in parts.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains())
def test_property_after_is_exactly_the_last_end(chain: list[Batch]) -> None:
    """Never beyond the last durable end, never backwards, no partition dropped."""
    plan = compute_plan("orders", chain[-1])
    assert _flat(plan.source(0).offsets) == _anchor_end(chain[-1])
    assert plan.errors == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains(), extra=st.integers(0, 3), slack=st.integers(0, 50))
def test_property_cluster_check_keeps_journaled_offsets(chain: list[Batch], extra: int,
                                                        slack: int) -> None:
    """A healthy cluster only adds partitions (at -2); journaled ones stay as they are."""
    end = _anchor_end(chain[-1])
    state: dict[str, dict[int, tuple[int, int]]] = {}
    for (t, p), o in end.items():
        state.setdefault(t, {})[p] = (0, o + slack)
    for t in list(state):
        for p in range(4, 4 + extra):
            state[t][p] = (0, 5)
    plan = compute_plan("orders",
                        chain[-1],
                        kafka=KafkaFacts(state=state))
    got = _flat(plan.source(0).offsets)
    assert {k: v for k, v in got.items() if k in end} == end
    assert all(v == EARLIEST for k, v in got.items() if k not in end)
    assert plan.errors == []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains(), window=st.integers(0, 90), cut=st.integers(0, 6),
       at_batch=st.booleans())
def test_property_rewinds_stay_within_the_journal(chain: list[Batch], window: int, cut: int,
                                                  at_batch: bool) -> None:
    """as_of/batch/state-aware plans may move back, but never beyond the anchor's end,
    keep every partition the anchor tracks, and (state-aware) re-read every batch that
    may hold a record of a window still open."""
    anchor = chain[min(cut, len(chain) - 1)]
    end = _anchor_end(anchor)
    if at_batch:
        plan = compute_plan("orders",
                            JournalFacts(anchor, position="at",
                                         before=chain[chain.index(anchor) - 1]
                                         if anchor.batch_id else None))
    else:
        plan = compute_plan("orders",
                            JournalFacts(anchor, chain=chain),
                            mode=MODE_STATE_AWARE,
                            window=timedelta(minutes=window) if window else None)
    got = _flat(plan.source(0).offsets)
    assert set(got) == set(end)
    for key, value in got.items():
        assert value == EARLIEST or 0 <= value <= end[key]
    if not at_batch and plan.event_time_cutoff is not None:
        threshold = plan.event_time_cutoff - timedelta(minutes=window)
        upto = chain[: chain.index(anchor) + 1]
        for b in upto:
            if b.event_time_max is None or b.event_time_max < threshold:
                continue
            for row in b.source(0).partitions:
                if row.start is not None and (row.topic, row.partition) in got:
                    value = got[(row.topic, row.partition)]
                    assert value == EARLIEST or value <= row.start


# --------------------------------------------------------------------------- helpers


def test_compare_offsets_and_verdict() -> None:
    rows = compare_offsets({0: {"t": {0: 5, 1: 3}}}, {0: {"t": {0: 4, 1: 3}}})
    assert [r.ahead for r in rows] == ["checkpoint", "equal"]
    assert comparison_verdict(rows) == "checkpoint ahead"
    assert comparison_verdict(compare_offsets({0: {"t": {0: 1}}}, {0: {"t": {0: 2}}})) \
        == "journal ahead"
    assert comparison_verdict(compare_offsets({0: {"t": {0: 1, 1: 9}}},
                                              {0: {"t": {0: 2, 1: 1}}})) == "mixed"
    assert comparison_verdict(compare_offsets({0: {"t": {0: 1}}}, {0: {"u": {0: 1}}})) \
        == "disjoint"
    assert comparison_verdict([]) == "nothing to compare"
    assert OffsetComparison(0, "t", 0, 1, 1).ahead == "equal"


def test_group_offsets() -> None:
    batch = mk(1, kafka_src({("a", 0): (0, 5)}),
               kafka_src({("a", 0): (0, 7)}, index=1, description="KafkaV2[Subscribe[a]]"))
    with pytest.raises(RestartError, match="choose one with --source"):
        group_offsets(batch)
    assert group_offsets(batch, source=1) == {"a": {0: 7}}
    with pytest.raises(RestartError, match="no Kafka offsets"):
        group_offsets(mk(1, other_src(DELTA, None, _delta(1, -1))))


def test_checkpoint_run_id_is_deterministic(tmp_path: Path) -> None:
    a = checkpoint_run_id("q", str(tmp_path))
    assert a == checkpoint_run_id("q", str(tmp_path) + "/")
    assert a != checkpoint_run_id("q2", str(tmp_path))
    assert uuid.UUID(a).version == 5


# --------------------------------------------------------------------------- the database


def test_unknown_query_is_refused(journal_url: str) -> None:
    with pytest.raises(RestartError, match="no journaled batches for query 'nope'"):
        plan_restart(journal_url, "nope")


def test_plan_from_the_journal(journal_url: str) -> None:
    journal_batches(journal_url, [
        kafka_progress(0, None, {"orders": {"0": 10, "1": 5}}, minute=0),
        kafka_progress(1, {"orders": {"0": 10, "1": 5}}, {"orders": {"0": 20, "1": 9}}, minute=1),
        kafka_progress(2, {"orders": {"0": 20, "1": 9}}, {"orders": {"0": 25, "1": 9}}, minute=2),
    ])
    last = plan_restart(journal_url, "orders")
    assert last.starting_offsets() == '{"orders":{"0":25,"1":9}}'
    assert last.anchor.batch_id == 2
    as_of = plan_restart(journal_url, "orders", as_of=at(1.5))
    assert as_of.anchor.batch_id == 1 and as_of.starting_offsets() == '{"orders":{"0":20,"1":9}}'
    naive = plan_restart(journal_url, "orders", as_of=at(1.5).replace(tzinfo=None))
    assert naive.anchor.batch_id == 1
    reprocess = plan_restart(journal_url, "orders", batch=("run-a", 1))
    assert reprocess.starting_offsets() == '{"orders":{"0":10,"1":5}}'
    # Batch 0 has no start offsets and nothing was journaled before it.
    first = plan_restart(journal_url, "orders", batch=("run-a", 0))
    assert first.starting_offsets() == '{"orders":{"0":-2,"1":-2}}'
    with pytest.raises(RestartError, match="triggered at or before"):
        plan_restart(journal_url, "orders", as_of=at(-5))
    with pytest.raises(RestartError, match="no journaled batch 9 of run run-a"):
        plan_restart(journal_url, "orders", batch=("run-a", 9))
    with pytest.raises(RestartError, match="not both"):
        plan_restart(journal_url, "orders", batch=("run-a", 1), as_of=at(1))
    with Journal(journal_url) as journal:  # a caller's journal is reused, not closed
        assert plan_restart(None, "orders", journal=journal).anchor.batch_id == 2
        assert journal.last_batch("orders") is not None


def test_concurrent_runs_from_the_journal(journal_url: str) -> None:
    journal_batches(journal_url, [
        kafka_progress(0, {"orders": {"0": 0}}, {"orders": {"0": 5}}, minute=0, run_id="run-x"),
        kafka_progress(0, {"orders": {"0": 0}}, {"orders": {"0": 3}}, minute=1, run_id="run-y",
                       query_id="qid-y"),
        kafka_progress(1, {"orders": {"0": 5}}, {"orders": {"0": 8}}, minute=2, run_id="run-x"),
        kafka_progress(1, {"orders": {"0": 3}}, {"orders": {"0": 4}}, minute=3, run_id="run-y",
                       query_id="qid-y"),
    ])
    plan = plan_restart(journal_url, "orders")
    assert any("run-x and run-y" in w for w in plan.warnings)


def test_state_aware_from_the_journal(journal_url: str) -> None:
    def et(wm: float, lo: float, hi: float) -> dict[str, str]:
        return {"watermark": ts(wm), "min": ts(lo), "max": ts(hi), "avg": ts(lo)}

    journal_batches(journal_url, [
        # An earlier checkpoint: not part of the chain.
        kafka_progress(7, {"orders": {"0": 0}}, {"orders": {"0": 10}}, minute=-10,
                       run_id="old", query_id="qid-old", event_time=et(-60, -60, 40)),
        kafka_progress(0, None, {"orders": {"0": 20}}, minute=0, event_time=et(0, 0, 4)),
        kafka_progress(1, {"orders": {"0": 20}}, {"orders": {"0": 30}}, minute=1,
                       event_time=et(0, 5, 12)),
        kafka_progress(0, {"orders": {"0": 30}}, {"orders": {"0": 35}}, minute=2,
                       run_id="run-b", event_time=et(7, 13, 25)),
        kafka_progress(1, {"orders": {"0": 35}}, {"orders": {"0": 36}}, minute=3,
                       run_id="run-b", event_time={"watermark": ts(20)}),
    ])
    plan = plan_restart(journal_url, "orders", mode=MODE_STATE_AWARE,
                        window=timedelta(minutes=10))
    assert plan.event_time_cutoff == at(20)
    assert plan.start_batch is not None
    assert (plan.start_batch.run_id, plan.start_batch.batch_id) == ("run-a", 1)
    assert plan.starting_offsets() == '{"orders":{"0":20}}'
    wide = plan_restart(journal_url, "orders", mode=MODE_STATE_AWARE, window=timedelta(hours=2))
    # The chain's first batch has no start offsets: the journal's batch before it gives one.
    assert wide.start_batch is not None and wide.start_batch.batch_id == 0
    assert wide.starting_offsets() == '{"orders":{"0":10}}'
    with pytest.raises(RestartError, match="use as_of"):
        plan_restart(journal_url, "orders", mode=MODE_STATE_AWARE, batch=("run-a", 1))


# --------------------------------------------------------------------------- checkpoints


def test_seeding_a_used_checkpoint_is_refused(journal_url: str, tmp_path: Path) -> None:
    journal_batches(journal_url, [kafka_progress(0, None, {"orders": {"0": 1}}, minute=0)])
    used = write_checkpoint(tmp_path / "ck", "qid-a", [([{"orders": {"0": 1}}], True)])
    with pytest.raises(RestartError, match="already holds batches up to 0"):
        plan_restart(journal_url, "orders", checkpoint=str(used))
    torn = write_checkpoint(tmp_path / "torn", "q", [([{"orders": {"0": 1}}], True)])
    (torn / "offsets" / "0").write_text("garbage")
    with pytest.raises(RestartError, match="torn already holds offsets"):
        plan_restart(journal_url, "orders", checkpoint=str(torn))
    fresh = plan_restart(journal_url, "orders", checkpoint=str(tmp_path / "new"))
    assert fresh.checkpoint == str(tmp_path / "new")
    out = tmp_path / "out"
    (out / "_spark_metadata").mkdir(parents=True)
    (out / "_spark_metadata" / "3").write_text("v1\n")
    warned = plan_restart(journal_url, "orders", output_path=str(out))
    assert any("up to batch 3" in w for w in warned.warnings)


def test_import_checkpoint_is_idempotent(journal_url: str, tmp_path: Path) -> None:
    ck = write_checkpoint(tmp_path / "ck", "qid-ck", [
        ([{"orders": {"0": 10, "1": 4}}], True),
        ([{"orders": {"0": 15, "1": 4}}], True),
        ([{"orders": {"0": 20, "1": 6}}], False),  # planned, never finished
    ], initial={"0": {"orders": {"0": 0, "1": 0}}})
    with Journal(journal_url) as journal:
        first = import_checkpoint(journal, str(ck), "legacy")
        assert (first.imported, first.already) == (2, 0)
        assert any("batch 2: not committed" in s for s in first.skipped)
        again = import_checkpoint(journal, str(ck), "legacy")
        assert (again.imported, again.already, again.run_id) == (0, 2, first.run_id)
        history = journal.history("legacy")
        assert [b.batch_id for b in history] == [0, 1]
        assert history[0].trigger_at == datetime(2024, 1, 1, tzinfo=timezone.utc)
        assert history[1].watermark == at(1)
        rows = {(p.topic, p.partition): (p.start, p.end) for p in history[0].sources[0].partitions}
        assert rows == {("orders", 0): (0, 10), ("orders", 1): (0, 4)}
        assert [r.run_id for r in journal.runs("legacy")] == [first.run_id]
    plan = plan_restart(journal_url, "legacy")
    assert plan.starting_offsets() == '{"orders":{"0":15,"1":4}}'


def test_import_skips_batches_the_listener_journaled(journal_url: str, tmp_path: Path) -> None:
    journal_batches(journal_url, [
        kafka_progress(0, None, {"orders": {"0": 10}}, minute=0, query_id="qid-ck"),
    ])
    ck = write_checkpoint(tmp_path / "ck", "qid-ck", [
        ([{"orders": {"0": 10}}], True), ([{"orders": {"0": 12}}], True)])
    with Journal(journal_url) as journal:
        result = import_checkpoint(journal, str(ck), "orders")
    assert result.imported == 1
    assert any("already journaled by the listener" in s for s in result.skipped)


def test_import_of_nothing_is_refused(journal_url: str, tmp_path: Path) -> None:
    empty = write_checkpoint(tmp_path / "e", "q", [])
    pending = write_checkpoint(tmp_path / "p", "q", [([{"t": {"0": 1}}], False)])
    with Journal(journal_url) as journal:
        with pytest.raises(RestartError, match="no batches"):
            import_checkpoint(journal, str(empty), "x")
        with pytest.raises(RestartError, match="no committed batch"):
            import_checkpoint(journal, str(pending), "x")


# --------------------------------------------------------------------------- Kafka


def test_plan_against_the_cluster(journal_url: str, kafka_cluster: KafkaCluster) -> None:
    topic, deleted = f"orders-{uuid.uuid4().hex[:6]}", f"deleted-{uuid.uuid4().hex[:6]}"
    fill(kafka_cluster, topic, {0: 6, 1: 6, 2: 2, 3: 1})
    # The job journaled only partitions 0-1 of the topic, and a topic since deleted.
    journal_batches(journal_url, [
        progress(4, name="orders", timestamp=ts(0), sources=[kafka_source(
            f"{topic},{deleted}",
            {topic: {"0": 1, "1": 2}, deleted: {"0": 3}},
            {topic: {"0": 5, "1": 6}, deleted: {"0": 7}},
        )]),
    ])
    plan = plan_restart(journal_url, "orders", bootstrap_servers=kafka_cluster.bootstrap_servers,
                        kafka_timeout=5)
    assert plan.kafka_checked
    assert plan.source(0).offsets == {topic: {0: 5, 1: 6, 2: EARLIEST, 3: EARLIEST}}
    assert plan.errors == []  # valid offsets: no data loss
    assert any(f"topic {deleted}" in w and "no longer exists" in w for w in plan.warnings)
    assert any(f"{topic}-2, {topic}-3" in n for n in plan.source(0).notes)
    # Probing must not have created the deleted topic again.
    assert kafka_cluster.partitions(deleted, timeout=5) == 0


def test_plan_sees_offsets_beyond_the_log(journal_url: str, kafka_cluster: KafkaCluster) -> None:
    topic = f"short-{uuid.uuid4().hex[:6]}"
    fill(kafka_cluster, topic, {0: 2, 1: 2, 2: 2, 3: 2})
    journal_batches(journal_url, [
        progress(1, name="orders", timestamp=ts(0), sources=[kafka_source(
            topic, {topic: {str(p): 0 for p in range(4)}},
            {topic: {"0": 2, "1": 2, "2": 2, "3": 900}})]),
    ])
    plan = plan_restart(journal_url, "orders", bootstrap_servers=kafka_cluster.bootstrap_servers)
    assert any(f"{topic}-3 starts at 900, beyond its log end 2" in e for e in plan.errors)


def test_missing_database_url_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from offset_journal.journal.db import ENV_URL, ConfigError

    monkeypatch.delenv(ENV_URL, raising=False)
    with pytest.raises(ConfigError):
        plan_restart(None, "orders")


def test_a_delta_plan_is_held_against_the_table_id_at_its_path() -> None:
    from offset_journal.restart.decide.other_sources import check_delta_table, delta_path
    from offset_journal.restart.model import SourcePlan
    from offset_journal.rows import KIND_DELTA

    def plan() -> SourcePlan:
        return SourcePlan(0, "DeltaSource[file:/t]", KIND_DELTA, {"startingVersion": "3"},
                          None, {"reservoirId": "old", "reservoirVersion": 3, "index": -1})

    assert delta_path("DeltaSource[file:/t]") == "file:/t" and delta_path("Kafka") is None
    same = plan()
    check_delta_table(same, "file:/t", "old", recreated=False)
    assert same.errors == [] and same.options == {"startingVersion": "3"}
    changed = plan()
    check_delta_table(changed, "file:/t", "new", recreated=False)
    (error,) = changed.errors
    assert "holds table new now, not the journaled old" in error
    gone = plan()
    check_delta_table(gone, "file:/t", None, recreated=False)
    assert "holds no Delta table now" in gone.errors[0]
    told = plan()
    check_delta_table(told, "file:/t", "new", recreated=True)
    assert told.errors == [] and told.options == {} and "from its start" in told.warnings[0]
    wrong = plan()
    check_delta_table(wrong, "file:/t", "old", recreated=True)
    assert "still table old" in wrong.errors[0]
    unreadable = plan()
    check_delta_table(unreadable, "s3://b/t", OSError("only local tables"), recreated=False)
    assert unreadable.errors == [] and "could not be read" in unreadable.warnings[0]


def test_the_positions_a_plan_records_are_the_ones_the_table_takes() -> None:
    """restart/record.py's Literal and the table's CHECK (built from RECORDED_POSITIONS)
    must name the same positions, or a plan is refused at its INSERT."""
    from typing import get_args

    from offset_journal.journal.schema import RECORDED_POSITIONS, restart_plans
    from offset_journal.restart.record import RecordedPosition

    assert get_args(RecordedPosition) == RECORDED_POSITIONS
    (check,) = [c for c in restart_plans.constraints
                if getattr(c, "name", None) == "restart_plans_position_check"]
    assert str(check.sqltext) == ("position IN ('after', 'at', 'as-of', 'rewind', "
                                  "'from-time', 'savepoint')")
