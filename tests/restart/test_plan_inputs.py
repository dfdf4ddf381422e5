"""A plan is decided from one literal PlanInputs alone: each kind of
start, from facts written out here, with no journal, cluster or file system; and the
journal's plan is exactly decide(gather(...))."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from offset_journal.journal import Journal
from offset_journal.kafka.mirror import OffsetSync, index_syncs
from offset_journal.offsets import PartitionOffset
from offset_journal.restart import (
    MODE_STATE_AWARE,
    ClusterFacts,
    JournalFacts,
    KafkaFacts,
    LocationFacts,
    MirrorFacts,
    PlanInputs,
    PlanRequest,
    RestartError,
    SavepointFacts,
)
from offset_journal.restart.decide.plan import decide
from offset_journal.restart.edge import gather, plan_from_journal
from offset_journal.restart.model import (
    POSITION_AT,
    POSITION_FROM_TIME,
    POSITION_SAVEPOINT,
)
from offset_journal.rows import Batch, RereadRun, SourceOffsets, SpoolLoss
from offset_journal.savepoint.model import Savepoint
from tests.savepoint.test_savepoint_core import _manifest
from tests.support import journal_batches, kafka_progress

T0 = datetime(2026, 11, 28, 10, 0, tzinfo=timezone.utc)
KAFKA = "KafkaV2[Subscribe[orders]]"


def batch(batch_id: int, start: int, end: int, *, minute: int | None = None,
          event_time_max: datetime | None = None, watermark: datetime | None = None) -> Batch:
    """A journaled batch of query q, run-1, that read orders-0 from ``start`` to ``end``."""
    source = SourceOffsets(0, KAFKA, "kafka", {"orders": {"0": start}},
                           {"orders": {"0": end}}, end - start,
                           (PartitionOffset("orders", 0, start, end),))
    return Batch("q", "qid-1", "run-1", batch_id,
                 T0 + timedelta(minutes=batch_id if minute is None else minute), 100,
                 end - start, watermark, None, event_time_max, (source,), pk=100 + batch_id)


LAST = batch(3, 30, 40)
BEFORE = batch(2, 20, 30)


def test_after_the_last_batch_starts_at_its_end_offsets() -> None:
    inputs = PlanInputs(PlanRequest("q"),
                        JournalFacts(LAST, before=BEFORE),
                        kafka=KafkaFacts(state={"orders": {0: (0, 55)}}))
    plan = decide(inputs)
    assert plan.ok, plan.errors
    assert plan.position == "after" and plan.source(0).offsets == {"orders": {0: 40}}
    assert "Starts AFTER batch 3 of run run-1" in plan.notes[0]
    assert "nothing skipped, nothing read twice" in plan.notes[0]


def test_at_a_batch_starts_at_its_start_offsets() -> None:
    plan = decide(PlanInputs(PlanRequest("q", batch=("run-1", 3)),
                             JournalFacts(LAST, position=POSITION_AT, before=BEFORE)))
    assert plan.position == "at" and plan.source(0).offsets == {"orders": {0: 30}}
    assert plan.start_batch is not None and plan.start_batch.batch_id == 3
    assert any("Starts AT batch 3" in n and "processed again" in n for n in plan.notes)


def test_from_a_record_time_starts_at_the_first_offset_at_or_after_it() -> None:
    when = T0 + timedelta(minutes=1)
    plan = decide(PlanInputs(PlanRequest("q", from_time=when, bootstrap_servers="broker:9092"),
                             JournalFacts(LAST, position=POSITION_FROM_TIME),
                             kafka=KafkaFacts(state={"orders": {0: (0, 55)}},
                                              time_lookup={"orders": {0: 12}},
                                              reread=[RereadRun("run-1", "qid-1", 1, 3, 3, T0,
                                                                T0 + timedelta(minutes=3))])))
    assert plan.ok, plan.errors
    assert plan.position == "from-time" and plan.from_time == when
    assert json.loads(plan.source(0).options["startingOffsets"]) == {"orders": {"0": 12}}
    assert plan.source(0).records_again == {"orders": {0: 28}}
    assert any("Starts at record time" in n for n in plan.notes)


def test_state_aware_rewinds_to_the_first_batch_with_records_of_open_windows() -> None:
    chain = [batch(0, 0, 10, event_time_max=T0 + timedelta(minutes=4), watermark=T0),
             batch(1, 10, 20, event_time_max=T0 + timedelta(minutes=12),
                   watermark=T0 + timedelta(minutes=4)),
             batch(2, 20, 30, event_time_max=T0 + timedelta(minutes=25),
                   watermark=T0 + timedelta(minutes=20))]
    plan = decide(PlanInputs(PlanRequest("q", mode=MODE_STATE_AWARE,
                                         window=timedelta(minutes=10)),
                             JournalFacts(chain[-1], chain=chain)))
    assert plan.position == "rewind"
    assert plan.event_time_cutoff == T0 + timedelta(minutes=20)
    assert plan.start_batch is not None and plan.start_batch.batch_id == 1
    assert plan.source(0).offsets == {"orders": {0: 10}}
    assert any("Rewinding to the START offsets of batch 1" in n for n in plan.notes)


def test_from_a_savepoint_starts_after_its_batch() -> None:
    anchor = batch(4, 40, 50)
    savepoint = Savepoint(_manifest(end={"orders": {"0": 50}}), "/sp", 7)
    plan = decide(PlanInputs(PlanRequest("q", savepoint="/sp", seed=(0,)),
                             JournalFacts(anchor, position=POSITION_SAVEPOINT),
                             savepoint_facts=SavepointFacts(loaded=savepoint, latest=anchor)))
    assert plan.position == "savepoint" and plan.savepoint_id == 7
    assert plan.starting_offsets() == '{"orders":{"0":50}}'
    assert [(c.operator_id, c.decision) for c in plan.state] == [(0, "seeded")]


def test_translated_starts_after_the_anchor_on_the_replica() -> None:
    syncs = index_syncs([OffsetSync("orders", 0, 0, 0), OffsetSync("orders", 0, 35, 7)])
    plan = decide(PlanInputs(PlanRequest("q", translate_from="primary",
                                         bootstrap_servers="replica:9092"),
                             JournalFacts(LAST),
                             kafka=KafkaFacts(cluster=ClusterFacts("primary-id", "replica-id",
                                                                   "replica:9092", "run-1"),
                                              mirror=MirrorFacts("primary", syncs))))
    assert plan.position == "after"
    assert plan.source(0).offsets == {"primary.orders": {0: 8}}  # 36..39 read again
    assert "translated to the replica's" in plan.notes[0]
    assert "up to 4 records" in plan.notes[0]


def test_the_gathered_read_only_facts_become_warnings_and_errors() -> None:
    """decide does no I/O: the Delta table's id is a fact; no table is on disk here."""
    table = f"/nowhere/{__name__}/table"
    delta = replace(LAST, sources=(SourceOffsets(
        0, f"DeltaSource[{table}]", "delta", None,
        {"sourceVersion": 1, "reservoirId": "old-id", "reservoirVersion": 5, "index": -1,
         "isStartingVersion": False}, 1),))
    assert not Path(table).exists()
    loss = SpoolLoss("q", 2, ("run-1",), 1, 2, T0, T0, ((0, "orders", 0, 10, 20),), "host-a",
                     T0)
    plan = decide(PlanInputs(PlanRequest("q"),
                             JournalFacts(delta, spool_losses=[loss], problems_cut=True,
                                          last_candidates=[delta]),
                             locations=LocationFacts(delta_tables={table: "new-id"})))
    assert any("holds table new-id now, not the journaled old-id" in e for e in plan.errors)
    assert any("dropped from a full listener spool" in w for w in plan.warnings)
    assert any("flagged problems on more batches" in w for w in plan.warnings)
    # Not gathered (compute_plan's inputs): nothing is checked, nothing read.
    assert decide(PlanInputs(PlanRequest("q"), JournalFacts(delta))).ok


def test_orders_that_disagree_on_the_last_batch_are_refused_from_the_facts() -> None:
    ahead = replace(batch(3, 30, 45), run_id="run-2", pk=999)
    with pytest.raises(RestartError, match="orders disagree on the last batch"):
        decide(PlanInputs(PlanRequest("q"),
                          JournalFacts(LAST, last_candidates=[LAST, ahead])))


def test_the_journals_plan_is_decide_of_gather(journal_url: str) -> None:
    journal_batches(journal_url, [
        kafka_progress(0, None, {"orders": {"0": 10}}, minute=0),
        kafka_progress(1, {"orders": {"0": 10}}, {"orders": {"0": 25}}, minute=1),
    ])
    request = PlanRequest("orders").checked()
    with Journal(journal_url) as j:
        inputs = gather(j, request)
        assert inputs.anchor.batch_id == 1 and [b.batch_id for b in
                                                inputs.journal.last_candidates][:1] == [1]
        assert inputs.locations.delta_tables == {} and inputs.journal.spool_losses == []
        assert plan_from_journal(j, request).to_dict() == decide(inputs).to_dict()
        assert decide(inputs).starting_offsets() == '{"orders":{"0":25}}'
