"""The local MirrorMaker 2 (offset_journal.local.mirror), for real: two local KRaft
brokers and MM2 in dedicated mode between them.

Records reach the replica under the replication policy's name, keyed as produced and in
the same partitions; the offset syncs are on the replica (where a failover still reads
them) in the format of Kafka's OffsetSync.java: key Struct(topic: STRING, partition:
INT32), value Struct(upstreamOffset: INT64, offset: INT64), no version prefix."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from offset_journal.kafka.mirror import decode_sync
from offset_journal.local.kafka import LocalKafka, start_local_kafka
from offset_journal.local.mirror import LocalMirror, MirrorSettings, start_local_mirror
from offset_journal.local.services import KafkaCluster

pytestmark = pytest.mark.services

WAIT_S = 60.0
RECORDS = 300
PARTITIONS = 3
T = TypeVar("T")


@pytest.fixture(scope="module")
def brokers() -> Iterator[tuple[LocalKafka, LocalKafka]]:
    """A primary and a replica, started side by side, for the whole module."""
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(start_local_kafka, heap="384m") for _ in range(2)]
    started = [f.result() for f in futures if f.exception() is None]
    try:
        for f in futures:
            f.result()  # the one that failed to start raises here
        yield started[0], started[1]
    finally:
        for broker in started:
            broker.stop()


def _until(what: str, probe: Callable[[], T | None], mirror: LocalMirror) -> T:
    """``probe()`` once it returns something, polled for at most WAIT_S seconds."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        assert mirror.running(), f"MM2 exited; its last lines:\n{mirror.log_tail()}"
        time.sleep(0.5)
    raise AssertionError(f"not within {WAIT_S:.0f} s: {what}; MM2's last lines:\n"
                         f"{mirror.log_tail()}")


def _read_all(bootstrap: str, topic: str) -> list[Any] | None:
    """Every record of ``topic`` now (None while the topic does not exist)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "oj-test-mirror-reader",
                  "enable.auto.commit": False, "allow.auto.create.topics": False})
    try:
        md = c.list_topics(topic, timeout=5).topics.get(topic)
        if md is None or md.error is not None or not md.partitions:
            return None
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                for p in md.partitions}
        want = {p: end for p, end in ends.items() if end > 0}
        c.assign([TopicPartition(topic, p, 0) for p in want])
        out: list[Any] = []
        seen = {p: 0 for p in want}
        deadline = time.monotonic() + 15
        while any(seen[p] < want[p] for p in want) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            out.append(msg)
            seen[msg.partition()] = msg.offset() + 1
        return out
    finally:
        c.close()


def decode_offset_sync(key: bytes, value: bytes) -> tuple[str, int, int, int]:
    """(topic, partition, upstream offset, downstream offset), by the library's decoder
    (offset_journal.kafka.mirror.decode_sync: what a translated plan reads)."""
    sync = decode_sync(key, value)
    return sync.topic, sync.partition, sync.upstream, sync.downstream


def test_mm2_replicates_and_writes_its_offset_syncs_on_the_replica(
        brokers: tuple[LocalKafka, LocalKafka]) -> None:
    primary, replica = brokers
    source = KafkaCluster(primary.bootstrap_servers, "local")
    source.create_topic("orders", PARTITIONS)
    produced = source.produce("orders", RECORDS, partitions=PARTITIONS)
    expected = {(p, key) for p, _, key, _ in produced}
    last_upstream = {p: max(o for q, o, _, _ in produced if q == p) for p in range(PARTITIONS)}

    mirror = start_local_mirror(primary, replica, MirrorSettings(topics="orders"))
    try:
        assert mirror.offset_syncs_topic == "mm2-offset-syncs.primary.internal"
        assert mirror.remote_topic("orders") == "primary.orders"

        def replicated() -> list[Any] | None:
            records = _read_all(replica.bootstrap_servers, "primary.orders")
            keys = {(m.partition(), m.key()) for m in records or []}
            return records if keys >= expected else None

        records = _until("all records on primary.orders", replicated, mirror)
        assert {(m.partition(), m.key()) for m in records} == expected  # same partitions
        extra = len(records) - RECORDS  # duplicates MM2 may write (none in a clean run)

        def synced() -> list[tuple[str, int, int, int]] | None:
            msgs = _read_all(replica.bootstrap_servers, mirror.offset_syncs_topic) or []
            syncs = [decode_offset_sync(m.key(), m.value()) for m in msgs]
            newest = {p: max((u for _, q, u, _ in syncs if q == p), default=-1)
                      for p in range(PARTITIONS)}
            return syncs if newest == last_upstream else None

        # every partition synced up to its last record: the held-back syncs went out at
        # the next offset commit (offset.flush.interval.ms), not a minute later
        syncs = _until("offset syncs up to each partition's last record", synced, mirror)
        assert {t for t, _, _, _ in syncs} == {"orders"}
        assert {p for _, p, _, _ in syncs} == set(range(PARTITIONS))
        for _, p, upstream, downstream in syncs:
            assert 0 <= upstream <= last_upstream[p]
            assert upstream <= downstream <= upstream + extra, (p, upstream, downstream)
        for p in range(PARTITIONS):
            ups = [u for _, q, u, _ in syncs if q == p]
            assert ups == sorted(ups) and ups[0] == 0, (p, ups)  # the first record syncs
            assert len(ups) >= 2, (p, ups)  # 100 records with offset.lag.max 100
        # the source cluster holds nothing of MM2's
        assert set(source.admin().list_topics(timeout=5).topics) == {"orders"}
    finally:
        mirror.stop()


def test_identity_policy_keeps_the_topic_name(
        brokers: tuple[LocalKafka, LocalKafka]) -> None:
    primary, replica = brokers
    source = KafkaCluster(primary.bootstrap_servers, "local")
    source.create_topic("invoices", 2)
    produced = source.produce("invoices", 20, partitions=2)
    # other aliases: with the same ones it would join the first mirror's Connect group
    mirror = start_local_mirror(primary, replica, MirrorSettings(
        source_alias="east", target_alias="west", topics="invoices", identity_policy=True))
    try:
        assert mirror.remote_topic("invoices") == "invoices"

        def replicated() -> list[Any] | None:
            records = _read_all(replica.bootstrap_servers, "invoices")
            keys = {m.key() for m in records or []}
            return records if keys >= {key for _, _, key, _ in produced} else None

        _until("all records on the replica's invoices", replicated, mirror)
        names = set(KafkaCluster(replica.bootstrap_servers, "local")
                    .admin().list_topics(timeout=5).topics)
        assert "east.invoices" not in names and "mm2-offset-syncs.east.internal" in names
    finally:
        mirror.stop()
