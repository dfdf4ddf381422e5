"""Plans on another Kafka cluster (pure): MM2's offset syncs decoded and indexed, offsets
translated never past the record, the re-read bound, the refusal on a foreign cluster,
and the audit reading a translated run as a new log. No Spark, no database, no broker
(the real MM2 and brokers: tests/kafka/test_failover.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offset_journal.audit import GAP, OVERLAP, PLANNED, UNEXPLAINED, audit_batches
from offset_journal.journal._plan_rows import recorded_plan
from offset_journal.kafka.mirror import (
    OffsetSync,
    SyncFormatError,
    decode_sync,
    encode_sync,
    index_syncs,
    offset_syncs_topic,
    replica_topic,
    translate_offset,
)
from offset_journal.restart import (
    ClusterFacts,
    KafkaFacts,
    MirrorFacts,
    RestartError,
    RestartPlan,
    compute_plan,
)
from offset_journal.restart.record import plan_row
from offset_journal.restart.request import PlanRequest
from offset_journal.rows import RecordedPlan
from tests.audit.test_audit_core import T0, Journal, plan
from tests.restart.test_restart import flat, kafka_src, mk

SYNCS = index_syncs([OffsetSync("orders", 0, 0, 0), OffsetSync("orders", 0, 100, 40),
                     OffsetSync("orders", 1, 0, 0)])


def test_a_sync_record_round_trips_and_a_foreign_one_is_refused() -> None:
    sync = OffsetSync("orders", 2, 12345678901, 42)
    key, value = encode_sync(sync)
    assert key == b"\x00\x06orders\x00\x00\x00\x02" and len(value) == 16
    assert decode_sync(key, value) == sync
    for bad_key, bad_value in [(key[:-1], value), (key, value[:-1]), (b"", b""),
                               (b"\x00\x02\xff\xfe\x00\x00\x00\x00", value)]:
        with pytest.raises(SyncFormatError):
            decode_sync(bad_key, bad_value)


def test_names_follow_the_replication_policy() -> None:
    assert replica_topic("orders", "primary", "default") == "primary.orders"
    assert replica_topic("orders", "primary", "identity") == "orders"
    assert offset_syncs_topic("primary") == "mm2-offset-syncs.primary.internal"


def test_an_offset_is_translated_to_its_record_or_just_before_it() -> None:
    pairs = SYNCS[("orders", 0)]
    assert translate_offset(100, pairs).offset == 40  # the synced record itself
    assert translate_offset(100, pairs).reread == 0
    found = translate_offset(130, pairs)  # 101..129 were read; they are at >= 41
    assert (found.offset, found.reread) == (41, 29)
    assert translate_offset(99, pairs).offset == 1  # the sync at 0 is the last below
    assert translate_offset(5, []).offset is None


def test_a_reset_replica_forgets_the_syncs_before_it() -> None:
    reset = index_syncs([OffsetSync("t", 0, 0, 500), OffsetSync("t", 0, 50, 550),
                         OffsetSync("t", 0, 60, 3)])  # the replica's topic began again
    assert reset[("t", 0)] == [(60, 3)]


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 50)), min_size=1, max_size=30),
       st.integers(0, 600))
def test_a_translation_never_passes_the_journaled_record(steps: list[tuple[int, int]],
                                                          journaled: int) -> None:
    """A replica that copies every record once, in order, plus MM2's duplicates: every
    upstream offset u lies at some downstream d(u), increasing. Whatever syncs MM2
    wrote, the translated start is at or before d(journaled), and the records between
    are at most the bound."""
    where: dict[int, int] = {}
    down = 0
    for up in range(601):
        down += 1 + (steps[up % len(steps)][1] if up % 97 == 0 else 0)  # duplicates
        where[up] = down
    synced = sorted({u for u, _ in steps})
    pairs = [(u, where[u]) for u in synced]
    found = translate_offset(journaled, pairs)
    if found.offset is None:
        assert journaled < synced[0]
        return
    assert found.offset <= where[journaled]
    records_between = sum(1 for u in range(journaled) if where[u] >= found.offset)
    assert records_between <= found.reread  # type: ignore[operator]


def anchor() -> object:
    return mk(5, kafka_src({("orders", 0): (120, 130), ("orders", 1): (0, 7),
                            ("orders", 2): (0, 9)}))


def test_a_plan_against_another_cluster_refuses_in_one_line() -> None:
    facts = ClusterFacts("journaled-id", "replica-id", "127.0.0.1:9093", "run-1")
    with pytest.raises(RestartError) as refused:
        compute_plan("orders",
                     anchor(),
                     kafka=KafkaFacts(cluster=facts))
    text = str(refused.value)
    assert "\n" not in text and "replica-id" in text and "journaled-id" in text
    assert "--translate-from" in text
    same = ClusterFacts("journaled-id", "journaled-id", "127.0.0.1:9092", "run-1")
    assert compute_plan("orders",
                        anchor(),
                        kafka=KafkaFacts(cluster=same)).ok
    with pytest.raises(RestartError, match="nothing to translate"):
        compute_plan("orders",
                     anchor(),
                     kafka=KafkaFacts(cluster=same),
                     translate_from="primary",
                     bootstrap_servers="127.0.0.1:9092")
    unknown = ClusterFacts(None, "replica-id", "127.0.0.1:9093", "run-1")
    unchecked = compute_plan("orders",
                             anchor(),
                             kafka=KafkaFacts(cluster=unknown))
    assert any("does not know which Kafka cluster" in n for n in unchecked.notes)
    assert not any("does not know which" in w for w in unchecked.warnings)


def test_a_translated_plan_names_each_partition_and_the_bound() -> None:
    facts = ClusterFacts("journaled-id", "replica-id", "127.0.0.1:9093", "run-1")
    mirror = MirrorFacts("primary", SYNCS)
    p = compute_plan("orders",
                     anchor(),
                     kafka=KafkaFacts(cluster=facts, mirror=mirror),
                     translate_from="primary",
                     bootstrap_servers="127.0.0.1:9093")
    assert p.source(0).offsets == {"primary.orders": {0: 41, 1: 1, 2: -2}}
    assert json.loads(p.starting_offsets()) == {"primary.orders": {"0": 41, "1": 1, "2": -2}}
    done = p.to_dict()["sources"][0]["translation"]
    assert done["reread_bound"] == 29 + 6 and done["partitions_without_sync"] == 1
    assert [r["journaled"] for r in done["partitions"]] == [130, 7, 9]
    assert any("orders-2" in w and "replica's earliest" in w for w in p.warnings)
    text = p.explain()
    assert "orders-0 130 -> primary.orders-0 41; read again at most: 29 records" in text


def test_a_translation_needs_the_replica_and_a_plain_alias() -> None:
    with pytest.raises(RestartError, match="bootstrap servers"):
        PlanRequest("q", translate_from="primary").checked()
    with pytest.raises(RestartError, match="not an MM2 cluster alias"):
        PlanRequest("q", translate_from="a.b", bootstrap_servers="x:1").checked()
    with pytest.raises(RestartError, match="replication policy"):
        PlanRequest("q", replication_policy="prefix").checked()  # type: ignore[arg-type]


def test_the_audit_reads_a_translated_run_as_a_new_log() -> None:
    """Identity policy: the replica's topic has the primary's name, and its offsets are
    lower. Without the translation, the run would be an overlap; from a translated plan
    it is a new log, planned, with a note."""
    a0 = ("orders", 0)
    j = Journal()
    j.add("r1", {a0: (None, 50)})
    j.add("r1", {a0: (50, 130)})
    translated = plan(1, {a0: 41}, minute=2.5, request={"translate_from": "primary"})
    j.add("r2", {a0: (None, 60)}, rows=19)
    report = audit_batches("q", j.batches, [translated])
    assert report.findings == [] and report.exit_code == 0
    assert any("translated" in note and "new log" in note for note in report.notes)
    untranslated = plan(1, {a0: 41}, minute=2.5)
    kinds = {f.kind for f in audit_batches("q", j.batches, [untranslated]).findings}
    assert kinds & {GAP, OVERLAP}


def test_a_source_topic_or_replica_reset_ends_the_sync_history_before_it() -> None:
    """The source topic recreated while MM2 ran: its offsets start again. Mixing the old
    generation's syncs with the new one's could translate 50 to 502, past the records
    the replica holds at 50..500."""
    recreated = index_syncs([OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 100, 100),
                             OffsetSync("t", 0, 500, 500), OffsetSync("t", 0, 0, 501),
                             OffsetSync("t", 0, 100, 601)])
    assert recreated[("t", 0)] == [(0, 501), (100, 601)]
    assert translate_offset(50, recreated[("t", 0)]).offset == 502  # within the new log


def test_subscribing_by_the_source_name_on_a_renaming_replica_is_an_error() -> None:
    facts = ClusterFacts("journaled-id", "replica-id", "127.0.0.1:9093", "run-1")
    p = compute_plan("orders",
                     anchor(),
                     kafka=KafkaFacts(cluster=facts, mirror=MirrorFacts("primary", SYNCS)),
                     translate_from="primary",
                     bootstrap_servers="127.0.0.1:9093",
                     subscribe=["orders"])
    assert not p.ok
    assert any("subscribe to primary.orders" in e for e in p.errors)


def test_a_record_time_plan_may_run_on_another_cluster_and_mixed_runs_refuse() -> None:
    other = ClusterFacts("journaled-id", "replica-id", "127.0.0.1:9093", "run-1")
    from offset_journal.restart.decide.cluster import cluster_findings, refuse_other_cluster

    refuse_other_cluster(other, None, by_time=True)  # looked up on the cluster itself
    assert any("record times are looked up here" in w
               for w in cluster_findings(other).warnings)
    mixed = ClusterFacts("journaled-id", "journaled-id", "127.0.0.1:9092", "run-2",
                         others=(("run-1", "replica-id"),))
    with pytest.raises(RestartError, match="runs on different Kafka clusters"):
        refuse_other_cluster(mixed, None)
    silent = ClusterFacts("journaled-id", None, "127.0.0.1:9092", "run-2")
    refuse_other_cluster(silent, None)  # a cluster that says no id: not checked
    assert any("does not say its id" in n for n in cluster_findings(silent).notes)


# ---------------------------------------------------------------------------


LOST = index_syncs([OffsetSync("orders", 0, 100, 0), OffsetSync("orders", 0, 200, 100)])
"""MM2 began copying orders-0 at upstream 100: the replica's first record is its 100."""
REPLICA: dict[str, dict[int, tuple[int, int]]] = {"primary.orders": {0: (0, 300)}}
OTHER = ClusterFacts("journaled-id", "replica-id", "127.0.0.1:9093", "run-1")


def _failover(syncs: Any = LOST, **given: Any) -> RestartPlan:
    """The journal at 50 on orders-0, translated to the replica through ``syncs``."""
    return compute_plan("orders",
                        mk(5, kafka_src({("orders", 0): (40, 50)})),
                        kafka=KafkaFacts(cluster=OTHER, mirror=MirrorFacts("primary", syncs),
                                         state=REPLICA),
                        translate_from="primary",
                        bootstrap_servers="127.0.0.1:9093",
                        **given)


def test_records_that_never_reached_the_replica_are_data_loss() -> None:
    """The journal at 50, MM2's first sync at upstream 100 -> 0 and the
    replica holding nothing before it: records 50..99 were never replicated. As records
    lost to retention on the primary, that is DATA LOSS unless accepted."""
    refused = _failover()
    assert not refused.ok
    (error,) = refused.errors
    assert "DATA LOSS" in error and "50..99" in error and "50 records" in error
    assert "--allow-data-loss" in error
    accepted = _failover(allow_data_loss=True)
    assert accepted.ok and accepted.source(0).offsets == {"primary.orders": {0: 0}}
    assert any("DATA LOSS accepted" in w and "50..99" in w for w in accepted.warnings)
    done = accepted.to_dict()["sources"][0]["translation"]
    assert done["not_replicated"] == 50 and done["partitions"][0]["not_replicated"] == 50


def test_a_compacted_sync_history_is_not_taken_for_a_loss() -> None:
    """MM2's syncs topic is compacted by partition: only a partition's latest sync may be
    left. When the replica holds records before the first sync's, the journaled ones may
    be among them: the partition starts at the replica's earliest (nothing skipped),
    with a warning, and no loss is claimed."""
    compacted = index_syncs([OffsetSync("orders", 0, 200, 150)])
    p = _failover(compacted)
    assert p.ok and p.source(0).offsets == {"primary.orders": {0: -2}}
    assert not any("DATA LOSS" in w for w in p.warnings)
    assert any("replica's earliest" in w and "150 records" in w for w in p.warnings)
    assert p.to_dict()["sources"][0]["translation"]["not_replicated"] == 0


def _recorded(p: RestartPlan, request: PlanRequest, minute: float) -> RecordedPlan:
    """``p`` as the journal records it (JSON) and the audit reads it back: through the
    reader of restart_plans rows, which must take every field the planner writes."""
    row = json.loads(json.dumps(plan_row(p, request, "plan"), default=str))
    row.update(id=1, query_name="q", created_at=T0 + timedelta(minutes=minute))
    recorded = recorded_plan(row, {})
    assert recorded.ignored == ()
    return recorded


def test_a_translated_plan_is_read_back_whole_with_partitions_no_sync_bounds() -> None:
    """The translation rows of a plan whose partitions have no sync at or below the
    journaled offset (read again: unbounded, None) are the planner's own: kept, with the
    records never replicated of the others."""
    compacted = _failover(index_syncs([OffsetSync("orders", 0, 200, 150)]))
    assert [row[6] for row in plan_row(compacted, PlanRequest("orders"), "plan")["request"][
        "translation"]] == [None]
    _recorded(compacted, PlanRequest("orders", translate_from="primary"), minute=1)
    lost = _recorded(_failover(allow_data_loss=True),
                     PlanRequest("orders", translate_from="primary", allow_data_loss=True), 1)
    assert lost.not_replicated == {("primary.orders", 0): ("orders", 0, 50, 50)}


def test_the_audit_shows_records_a_failover_lost() -> None:
    """A run started from a translated plan that accepted the loss is
    a planned gap of the journaled partition (as other accepted data loss), not a clean
    new log; from a plan that refused it (used anyway: --force), unexplained."""
    asked = PlanRequest("orders", translate_from="primary", bootstrap_servers="x:1",
                        allow_data_loss=True)
    j = Journal()
    j.add("r1", {("orders", 0): (None, 50)})
    j.add("r2", {("primary.orders", 0): (None, 60)}, rows=60)  # from the plan, on the replica
    accepted = _recorded(_failover(allow_data_loss=True), asked, minute=1.5)
    report = audit_batches("q", j.batches, [accepted])
    (gap,) = report.findings
    assert (gap.kind, gap.status, gap.topic, gap.partition, gap.first, gap.end) == (
        GAP, PLANNED, "orders", 0, 50, 100)
    assert "--allow-data-loss" in gap.reason and "replica" in gap.reason
    assert [b.run_id for b in gap.earlier] == ["r1"] and report.exit_code == 0
    forced = _recorded(_failover(), replace(asked, allow_data_loss=False), minute=1.5)
    (gap,) = audit_batches("q", j.batches, [forced]).findings
    assert (gap.status, gap.first, gap.end) == (UNEXPLAINED, 50, 100)


def test_a_translated_plan_does_not_say_record_times_are_looked_up() -> None:
    """That warning is for a record-time plan on another cluster."""
    p = compute_plan("orders",
                     anchor(),
                     kafka=KafkaFacts(cluster=OTHER, mirror=MirrorFacts("primary", SYNCS)),
                     translate_from="primary",
                     bootstrap_servers="127.0.0.1:9093")
    assert not any("record times are looked up" in w for w in p.warnings)
    assert any("replica-id" in n and "--translate-from" in n for n in p.notes)


def test_a_translated_plans_header_agrees_with_its_re_read_bound() -> None:
    """The header said "nothing skipped, nothing read twice" above a
    bound of records read again."""
    p = compute_plan("orders",
                     anchor(),
                     kafka=KafkaFacts(cluster=OTHER, mirror=MirrorFacts("primary", SYNCS)),
                     translate_from="primary",
                     bootstrap_servers="127.0.0.1:9093")
    text = flat(p.explain())
    assert "nothing read twice" not in text
    assert "records may be read again, up to 35 records" in flat(p.notes[0])
    plain = compute_plan("orders", anchor())
    assert "nothing skipped, nothing read twice" in flat(plain.notes[0])


def test_a_replication_policy_without_a_translation_is_refused() -> None:
    """It was ignored, and the plan handed out."""
    for policy in ("identity", "default"):
        with pytest.raises(RestartError, match="--translate-from"):
            PlanRequest("q", replication_policy=policy).checked()  # type: ignore[arg-type]
    asked = PlanRequest("q", translate_from="primary", bootstrap_servers="x:1").checked()
    assert asked.policy == "default"
