"""offset_journal.kafka.admin against the test Kafka (testcontainers, a named cluster, or the
real single-node broker the test plugin starts)."""

from __future__ import annotations

import socket
import time
import uuid

import pytest

from offset_journal.kafka.admin import (
    KafkaAdminError,
    KafkaUnavailable,
    commit_group,
    committed_offsets,
    create_topic,
    record_probe,
    records_at_with,
    topic_state,
)
from offset_journal.testing import KafkaCluster
from tests.support import fill

pytest.importorskip("confluent_kafka")





def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_topic_state_reports_every_partition_with_watermarks(kafka_cluster: KafkaCluster) -> None:
    topic = _topic()
    fill(kafka_cluster, topic, {0: 5, 1: 3, 2: 0, 3: 1})
    state = topic_state(kafka_cluster.bootstrap_servers, [topic], timeout=5)
    assert state == {topic: {0: (0, 5), 1: (0, 3), 2: (0, 0), 3: (0, 1)}}


def test_missing_topic_is_absent_and_not_created(kafka_cluster: KafkaCluster) -> None:
    present, missing = _topic(), _topic()
    fill(kafka_cluster, present, {0: 1})
    # Even a caller's config asking for auto-creation must not create topics.
    state = topic_state(kafka_cluster.bootstrap_servers, [present, missing], timeout=5,
                        config={"allow.auto.create.topics": True})
    assert set(state) == {present}
    assert kafka_cluster.partitions(missing, timeout=5) == 0


def test_records_at_reads_each_offset_through_one_consumer_and_never_a_later_one(
        kafka_cluster: KafkaCluster) -> None:
    """A partition asked at three offsets: three rounds of one consumer, each the record
    asked for. An offset deleted meanwhile is no answer (retention's forecast would go by
    a later record's timestamp), nor is the log end."""
    topic = _topic()
    fill(kafka_cluster, topic, {0: 10, 1: 10})
    kafka_cluster.delete_records(topic, {1: 5})
    wanted = [(topic, 0, 7), (topic, 0, 0), (topic, 0, 2), (topic, 1, 2), (topic, 1, 6),
              (topic, 1, 10)]
    with record_probe(kafka_cluster.bootstrap_servers, timeout=10) as consumer:
        found = records_at_with(consumer, wanted, timeout=10, sample=3)
    assert {k: v[0] for k, v in found.items()} == {
        (topic, 0, 0): 0, (topic, 0, 2): 2, (topic, 0, 7): 7, (topic, 1, 6): 6}
    now_ms = time.time() * 1000
    assert all(now_ms - 60_000 < (v[1] or 0) <= now_ms + 1000 for v in found.values())
    # sizes from the records read after it (up to the sample): "v7".."v9" are 2 bytes
    assert found[(topic, 0, 7)][2:] == (3, 6)


def test_no_topics_asks_nothing() -> None:
    assert topic_state("127.0.0.1:1", [], timeout=1) == {}


def test_commit_group_then_read_back(kafka_cluster: KafkaCluster) -> None:
    topic = _topic()
    fill(kafka_cluster, topic, {0: 10, 1: 10, 2: 10, 3: 10})
    group = f"g-{uuid.uuid4().hex[:8]}"
    commit_group(kafka_cluster.bootstrap_servers, group, {topic: {0: 7, 1: 2, 2: -2}}, timeout=5)
    # -2 (earliest) is a position for Spark, not an offset to commit: left out.
    assert committed_offsets(kafka_cluster.bootstrap_servers, group, [topic], timeout=5) == {
        topic: {0: 7, 1: 2}
    }
    commit_group(kafka_cluster.bootstrap_servers, group, {topic: {0: 9}}, timeout=5)
    servers = kafka_cluster.bootstrap_servers
    assert committed_offsets(servers, group, [topic, _topic()], timeout=5) == {
        topic: {0: 9, 1: 2}
    }


def test_commit_group_needs_a_concrete_offset(kafka_cluster: KafkaCluster) -> None:
    with pytest.raises(KafkaAdminError, match="nothing to commit"):
        commit_group(kafka_cluster.bootstrap_servers, "g", {"t": {0: -2}}, timeout=5)


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


def test_bad_client_configuration_is_a_kafka_error(kafka_cluster: KafkaCluster) -> None:
    with pytest.raises(KafkaAdminError, match="configuration"):
        topic_state(kafka_cluster.bootstrap_servers, ["x"], config={"no.such.property": "1"})


def test_creating_a_topic_that_exists_with_the_asked_partitions_is_not_an_error(
        kafka_cluster: KafkaCluster) -> None:
    """As on a just-started broker, where the client retries its own timed-out create
    request, or a cluster that auto-creates made the topic first: it is there as asked."""
    topic = _topic()
    kafka_cluster.create_topic(topic, 3)
    kafka_cluster.create_topic(topic, 3)
    create_topic(kafka_cluster.admin(), topic, 3, timeout=5)
    assert kafka_cluster.partitions(topic) == 3
    assert len(kafka_cluster.produce(topic, 6)) == 6


def test_a_topic_that_exists_with_other_partitions_is_one_line(
        kafka_cluster: KafkaCluster) -> None:
    topic = _topic()
    kafka_cluster.create_topic(topic, 3)
    servers = kafka_cluster.bootstrap_servers
    with pytest.raises(KafkaAdminError) as info:
        kafka_cluster.create_topic(topic, 2)
    assert str(info.value) == (f"topic {topic} already exists at {servers} with 3 partitions, "
                               "not the 2 asked for")
    assert kafka_cluster.partitions(topic) == 3  # left as it was
