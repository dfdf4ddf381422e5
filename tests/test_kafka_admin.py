"""offset_journal.kafka against librdkafka's mock cluster (a real Kafka protocol peer)."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from offset_journal.kafka import (
    KafkaError,
    KafkaUnavailable,
    commit_group,
    committed_offsets,
    topic_state,
)

confluent_kafka = pytest.importorskip("confluent_kafka")


class _Quiet:
    def log(self, level: int, fmt: str, *args: Any) -> None:
        pass


@dataclass
class MockKafka:
    """A mock cluster; it lives as long as ``producer``."""

    bootstrap_servers: str
    producer: Any

    def produce(self, topic: str, per_partition: dict[int, int]) -> None:
        """Write ``n`` records to each given partition (the topic is auto-created with 4)."""
        for partition, n in per_partition.items():
            for i in range(n):
                self.producer.produce(topic, value=b"v%d" % i, partition=partition)
        assert self.producer.flush(10) == 0


@pytest.fixture(scope="module")
def kafka() -> Iterator[MockKafka]:
    producer = confluent_kafka.Producer({"test.mock.num.brokers": 1, "logger": _Quiet()})
    brokers = producer.list_topics(timeout=5).brokers.values()
    yield MockKafka(",".join(f"{b.host}:{b.port}" for b in brokers), producer)
    producer.flush(5)


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_topic_state_reports_every_partition_with_watermarks(kafka: MockKafka) -> None:
    topic = _topic()
    kafka.produce(topic, {0: 5, 1: 3, 2: 0, 3: 1})
    state = topic_state(kafka.bootstrap_servers, [topic], timeout=5)
    assert state == {topic: {0: (0, 5), 1: (0, 3), 2: (0, 0), 3: (0, 1)}}


def test_missing_topic_is_absent_and_not_created(kafka: MockKafka) -> None:
    present, missing = _topic(), _topic()
    kafka.produce(present, {0: 1})
    # Even a caller's config asking for auto-creation must not create topics.
    state = topic_state(kafka.bootstrap_servers, [present, missing], timeout=5,
                        config={"allow.auto.create.topics": True})
    assert set(state) == {present}
    metadata = kafka.producer.list_topics(timeout=5)
    assert missing not in metadata.topics or metadata.topics[missing].error is not None


def test_no_topics_asks_nothing() -> None:
    assert topic_state("127.0.0.1:1", [], timeout=1) == {}


def test_commit_group_then_read_back(kafka: MockKafka) -> None:
    topic = _topic()
    kafka.produce(topic, {0: 10, 1: 10, 2: 10, 3: 10})
    group = f"g-{uuid.uuid4().hex[:8]}"
    commit_group(kafka.bootstrap_servers, group, {topic: {0: 7, 1: 2, 2: -2}}, timeout=5)
    # -2 (earliest) is a position for Spark, not an offset to commit: left out.
    assert committed_offsets(kafka.bootstrap_servers, group, [topic], timeout=5) == {
        topic: {0: 7, 1: 2}
    }
    commit_group(kafka.bootstrap_servers, group, {topic: {0: 9}}, timeout=5)
    assert committed_offsets(kafka.bootstrap_servers, group, [topic, _topic()], timeout=5) == {
        topic: {0: 9, 1: 2}
    }


def test_commit_group_needs_a_concrete_offset(kafka: MockKafka) -> None:
    with pytest.raises(KafkaError, match="nothing to commit"):
        commit_group(kafka.bootstrap_servers, "g", {"t": {0: -2}}, timeout=5)


def test_unreachable_cluster_is_one_quick_line() -> None:
    servers = f"127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with pytest.raises(KafkaUnavailable) as info:
        topic_state(servers, ["orders"], timeout=1)
    assert time.monotonic() - started < 10
    message = str(info.value)
    assert "\n" not in message and servers in message
    with pytest.raises(KafkaUnavailable):
        commit_group(servers, "g", {"orders": {0: 1}}, timeout=1)
    with pytest.raises(KafkaUnavailable):
        committed_offsets(servers, "g", ["orders"], timeout=1)


def test_bad_client_configuration_is_a_kafka_error(kafka: MockKafka) -> None:
    with pytest.raises(KafkaError, match="configuration"):
        topic_state(kafka.bootstrap_servers, ["x"], config={"no.such.property": "1"})
