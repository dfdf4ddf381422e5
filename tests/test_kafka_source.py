"""The kafka-journal source against a real Kafka protocol peer and a real local Spark.

The broker is librdkafka's built-in mock cluster (no Docker, no JVM connector here).
It cannot add partitions to a topic (CreatePartitions hangs) nor delete records
(DeleteRecords is unsupported); a log start above 0 comes from its size retention
(about 5 MB per partition), which the data-loss tests use.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable

from offset_journal.kafka_source import (
    KAFKA_SCHEMA,
    SOURCE_NAME,
    KafkaDataLossError,
    KafkaSourceOptions,
    KafkaStreamReader,
    kafka_format,
    rate_limit,
    register,
    spark_kafka_available,
)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

confluent_kafka = pytest.importorskip("confluent_kafka")

Record = tuple[str, int, int, bytes | None, bytes | None]
"""(topic, partition, offset, key, value), what a test compares."""


# --------------------------------------------------------------------------- fixtures


@dataclass
class MockKafka:
    """librdkafka's mock cluster; it lives as long as its producer does."""

    producer: Any
    bootstrap: str
    delivered: list[Record] = field(default_factory=list)
    timestamps: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def produce(
        self,
        topic: str,
        partition: int,
        value: bytes | None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        # An explicit CreateTime per record, so the timestamp column can be checked exactly.
        timestamp_ms = 1_700_000_000_000 + 1_001 * len(self.delivered) + 7 * partition

        def on_delivery(err: Any, msg: Any) -> None:
            assert err is None, err
            self.delivered.append((msg.topic(), msg.partition(), msg.offset(), key, value))
            self.timestamps[(msg.topic(), msg.partition(), msg.offset())] = timestamp_ms

        self.producer.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            headers=headers,
            timestamp=timestamp_ms,
            on_delivery=on_delivery,
        )

    def flush(self) -> None:
        assert self.producer.flush(30) == 0, "messages left undelivered"

    def records(self, *topics: str) -> set[Record]:
        return {r for r in self.delivered if r[0] in topics}

    def end_offsets(self, topic: str) -> dict[str, int]:
        """Kafka's offsets JSON for the produced records: next offset per partition."""
        ends = {str(p): 0 for p in range(4)}
        for t, p, off, _, _ in self.delivered:
            if t == topic:
                ends[str(p)] = max(ends[str(p)], off + 1)
        return ends


@pytest.fixture(scope="module")
def kafka() -> Iterator[MockKafka]:
    producer = confluent_kafka.Producer({"test.mock.num.brokers": 1, "linger.ms": 0})
    brokers = producer.list_topics(timeout=10).brokers.values()
    yield MockKafka(producer, ",".join(f"{b.host}:{b.port}" for b in brokers))
    producer.flush(10)


@pytest.fixture(scope="module")
def fmt(spark: Any) -> str:
    """This source's format name, registered once on the shared session."""
    return register(spark)


def topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def fill(kafka: MockKafka, topic: str, counts: list[int], tag: str = "") -> None:
    for partition, n in enumerate(counts):
        for i in range(n):
            kafka.produce(
                topic,
                partition,
                f"v{tag}{partition}-{i}".encode(),
                key=f"k{partition}-{i}".encode(),
            )
    kafka.flush()


# --------------------------------------------------------------------------- query helpers


@dataclass
class Run:
    """What a query delivered: rows per batch (foreachBatch) and its progress JSON."""

    batches: list[tuple[int, list[Any]]] = field(default_factory=list)
    progress: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rows(self) -> list[Any]:
        return [row for _, rows in self.batches for row in rows]

    def records(self) -> set[Record]:
        return {
            (
                r.topic,
                r.partition,
                r.offset,
                None if r.key is None else bytes(r.key),
                None if r.value is None else bytes(r.value),
            )
            for r in self.rows
        }

    def assert_ordered_per_partition(self) -> None:
        last: dict[tuple[str, int], int] = {}
        for r in self.rows:
            tp = (r.topic, r.partition)
            assert r.offset > last.get(tp, -1), f"{tp} out of order at offset {r.offset}"
            last[tp] = r.offset


def reader(spark: Any, fmt: str, kafka: MockKafka, **options: str) -> Any:
    stream = spark.readStream.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap)
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream.load()


def start(df: Any, checkpoint: Path, run: Run, **trigger: Any) -> Any:
    def collect(batch: Any, batch_id: int) -> None:
        run.batches.append((batch_id, batch.collect()))

    return (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def run_available_now(
    spark: Any, fmt: str, kafka: MockKafka, checkpoint: Path, **options: str
) -> Run:
    run = Run()
    query = start(reader(spark, fmt, kafka, **options), checkpoint, run, availableNow=True)
    query.awaitTermination(120)
    assert not query.isActive, "availableNow query did not finish in 120 s"
    run.progress = [json.loads(p.json) for p in query.recentProgress]
    return run


def wait_for(query: Any, condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll ``condition`` until it holds; fail on timeout or if the query died."""
    deadline = time.monotonic() + timeout
    while not condition():
        if not query.isActive:
            raise AssertionError(f"query stopped while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def end_offsets(query: Any) -> dict[str, Any]:
    """The source's endOffset in the query's last progress, parsed from Spark's JSON."""
    progress = query.lastProgress
    if progress is None:
        return {}
    return json.loads(progress.json)["sources"][0]["endOffset"] or {}


def checkpoint_offsets(checkpoint: Path, batch_id: int) -> Any:
    """The source offset Spark wrote to the checkpoint's offsets log for a batch."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- a first run


@pytest.fixture(scope="module")
def earliest_run(
    spark: Any, fmt: str, kafka: MockKafka, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Run, Path]:
    """One topic read from earliest: several tests look at the same run."""
    topic = topic_name("basic")
    fill(kafka, topic, [9, 6, 3, 2])
    kafka.produce(topic, 3, b"", key=None)  # null key, empty value: both kept as they are
    kafka.flush()
    checkpoint = tmp_path_factory.mktemp("ck") / "basic"
    run = run_available_now(
        spark, fmt, kafka, checkpoint, subscribe=topic, startingOffsets="earliest"
    )
    return topic, run, checkpoint


@pytest.mark.spark
def test_reads_exactly_the_produced_records_in_order(
    earliest_run: tuple[str, Run, Path], kafka: MockKafka
) -> None:
    topic, run, _ = earliest_run
    assert run.records() == kafka.records(topic)
    assert len(run.rows) == 21
    run.assert_ordered_per_partition()
    by_offset = {(r.topic, r.partition, r.offset): r for r in run.rows}
    assert by_offset[(topic, 3, 2)].key is None and by_offset[(topic, 3, 2)].value == b""
    for r in run.rows:
        assert r.timestampType == 0  # CreateTime, as Kafka's Java client numbers it
        produced_ms = kafka.timestamps[(r.topic, r.partition, r.offset)]
        assert round(r.timestamp.timestamp() * 1000) == produced_ms


@pytest.mark.spark
def test_schema_is_spark_kafka_schema(spark: Any, fmt: str, kafka: MockKafka) -> None:
    df = reader(spark, fmt, kafka, subscribe="any")
    assert df.schema == KAFKA_SCHEMA
    assert [(f.name, f.dataType.simpleString()) for f in df.schema] == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
    ]


@pytest.mark.spark
def test_progress_offsets_have_kafka_shape(
    earliest_run: tuple[str, Run, Path], kafka: MockKafka
) -> None:
    topic, run, _ = earliest_run
    sources = [p["sources"][0] for p in run.progress if p["sources"][0]["numInputRows"]]
    assert len(sources) == 1
    end = sources[0]["endOffset"]
    assert isinstance(end, dict)
    assert end == {topic: kafka.end_offsets(topic)} == {topic: {"0": 9, "1": 6, "2": 3, "3": 3}}
    assert sources[0]["latestOffset"] == end
    assert sources[0]["startOffset"] is None  # first batch of a new checkpoint, as Kafka's
    # Spark's Python sources describe themselves by class, not "KafkaV2[...]".
    assert "PythonMicroBatchStream" in sources[0]["description"]


@pytest.mark.spark
def test_checkpoint_offsets_have_kafka_shape(earliest_run: tuple[str, Run, Path]) -> None:
    topic, _, checkpoint = earliest_run
    assert checkpoint_offsets(checkpoint, 0) == {topic: {"0": 9, "1": 6, "2": 3, "3": 3}}


# --------------------------------------------------------------------------- offsets


@pytest.mark.spark
def test_starting_offsets_apply_to_a_new_checkpoint_only(
    spark: Any, fmt: str, kafka: MockKafka, tmp_path: Path
) -> None:
    topic = topic_name("start")
    fill(kafka, topic, [4, 4, 4, 4])
    specific = json.dumps({topic: {"0": 1, "1": -2, "2": -1, "3": 3}})
    first = run_available_now(
        spark, fmt, kafka, tmp_path / "ck", subscribe=topic, startingOffsets=specific
    )
    expected = {
        r
        for r in kafka.records(topic)
        if (r[1] == 0 and r[2] >= 1) or r[1] == 1 or (r[1] == 3 and r[2] >= 3)
    }
    assert first.records() == expected
    assert first.progress[-1]["sources"][0]["endOffset"] == {
        topic: {"0": 4, "1": 4, "2": 4, "3": 4}
    }

    before = kafka.records(topic)
    fill(kafka, topic, [2, 0, 1, 0], tag="new")
    # Same checkpoint, different startingOffsets: ignored, the query resumes.
    second = run_available_now(
        spark, fmt, kafka, tmp_path / "ck", subscribe=topic, startingOffsets="earliest"
    )
    assert second.records() == kafka.records(topic) - before
    assert len(second.rows) == 3
    assert second.progress[0]["sources"][0]["startOffset"] == {
        topic: {"0": 4, "1": 4, "2": 4, "3": 4}
    }
    assert second.progress[-1]["sources"][0]["endOffset"] == {
        topic: {"0": 6, "1": 4, "2": 5, "3": 4}
    }


@pytest.mark.spark
def test_specific_starting_offsets_must_name_every_partition(
    spark: Any, fmt: str, kafka: MockKafka, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException

    topic = topic_name("partial")
    fill(kafka, topic, [1, 1, 1, 1])
    with pytest.raises(
        StreamingQueryException,
        match="If startingOffsets contains specific offsets, you must specify all TopicPartitions",
    ):
        run_available_now(
            spark,
            fmt,
            kafka,
            tmp_path / "ck",
            subscribe=topic,
            startingOffsets=json.dumps({topic: {"0": 0, "1": -2}}),
        )


@pytest.mark.spark
def test_assign_reads_only_the_assigned_partitions_with_headers(
    spark: Any, fmt: str, kafka: MockKafka, tmp_path: Path
) -> None:
    topic = topic_name("assign")
    for partition in range(4):
        kafka.produce(topic, partition, b"v", key=b"k", headers=[("h", str(partition).encode())])
    kafka.flush()
    run = run_available_now(
        spark,
        fmt,
        kafka,
        tmp_path / "ck",
        assign=json.dumps({topic: [0, 2]}),
        startingOffsets="earliest",
        includeHeaders="true",
    )
    assert {(r.partition, r.offset) for r in run.rows} == {(0, 0), (2, 0)}
    assert {r.partition: [(h.key, bytes(h.value)) for h in r.headers] for r in run.rows} == {
        0: [("h", b"0")],
        2: [("h", b"2")],
    }
    assert run.progress[-1]["sources"][0]["endOffset"] == {topic: {"0": 1, "2": 1}}


# --------------------------------------------------------------------------- rate limit


@pytest.mark.spark
def test_max_offsets_per_trigger(spark: Any, fmt: str, kafka: MockKafka, tmp_path: Path) -> None:
    topic = topic_name("rate")
    fill(kafka, topic, [13, 7, 3, 0])
    run = run_available_now(
        spark,
        fmt,
        kafka,
        tmp_path / "ck",
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="5",
    )
    sizes = [p["sources"][0]["numInputRows"] for p in run.progress]
    assert all(n <= 5 for n in sizes)
    assert [n for n in sizes if n] == [4, 4, 5, 5, 5]  # Spark's proration, rounded down
    assert run.records() == kafka.records(topic)
    run.assert_ordered_per_partition()


def spark_rate_limit(limit: int, start: dict, latest: dict) -> dict:
    """KafkaMicroBatchStream.rateLimit from Spark, transcribed (the reference)."""
    sizes = {tp: latest[tp] - start[tp] for tp in latest if latest[tp] - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp in sizes:
            prorate = limit * (sizes[tp] / total)
            prorate_long = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
            out[tp] = min(end, start[tp] + prorate_long)
        else:
            out[tp] = end
    return out


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(1, 50),
    spans=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 40)), min_size=1, max_size=8),
)
def test_rate_limit_is_sparks_but_never_exceeds(limit: int, spans: list[tuple[int, int]]) -> None:
    start = {("t", p): s for p, (s, _) in enumerate(spans)}
    latest = {("t", p): s + n for p, (s, n) in enumerate(spans)}
    end = rate_limit(limit, start, latest)
    assert end == rate_limit(limit, dict(reversed(start.items())), latest)  # deterministic
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in latest)
    taken = sum(end[tp] - start[tp] for tp in latest)
    backlog = sum(latest[tp] - start[tp] for tp in latest)
    assert taken <= limit
    assert taken >= min(1, backlog)  # always progress
    spark_end = spark_rate_limit(limit, start, latest)
    if sum(spark_end[tp] - start[tp] for tp in latest) <= limit:
        assert end == spark_end  # Spark's split wherever Spark keeps to the limit


def test_rate_limit_examples() -> None:
    start = {("a", 0): 0, ("a", 1): 10, ("b", 0): 0}
    latest = {("a", 0): 60, ("a", 1): 40, ("b", 0): 10}
    assert rate_limit(10, start, latest) == {("a", 0): 6, ("a", 1): 13, ("b", 0): 1}
    # Spark would take 2 + 1 + 1 = 4 here; the excess comes off the largest share.
    start = {("a", 0): 0, ("a", 1): 0, ("b", 0): 0}
    latest = {("a", 0): 100, ("a", 1): 1, ("b", 0): 1}
    assert rate_limit(3, start, latest) == {("a", 0): 1, ("a", 1): 1, ("b", 0): 1}


# --------------------------------------------------------------------------- a running query


@pytest.mark.spark
def test_a_record_produced_while_running_is_read_by_a_later_batch(
    spark: Any, fmt: str, kafka: MockKafka, tmp_path: Path
) -> None:
    topic = topic_name("live")
    fill(kafka, topic, [2, 1, 0, 0])
    run = Run()
    query = start(
        reader(spark, fmt, kafka, subscribe=topic, startingOffsets="earliest"),
        tmp_path / "ck",
        run,
        processingTime="200 milliseconds",
    )
    try:
        wait_for(query, lambda: len(run.rows) == 3, "the first 3 records")
        first_batches = {batch_id for batch_id, rows in run.batches if rows}
        kafka.produce(topic, 2, b"late", key=b"late")
        kafka.flush()
        wait_for(query, lambda: len(run.rows) == 4, "the late record")
    finally:
        query.stop()
    late = [(batch_id, r) for batch_id, rows in run.batches for r in rows if r.value == b"late"]
    assert len(late) == 1
    assert late[0][0] > max(first_batches)
    assert (late[0][1].partition, late[0][1].offset) == (2, 0)
    assert run.records() == kafka.records(topic)


@pytest.mark.spark
def test_a_new_topic_matching_the_pattern_is_read_from_earliest(
    spark: Any, fmt: str, kafka: MockKafka, tmp_path: Path
) -> None:
    prefix = topic_name("pat")
    old, new = f"{prefix}.old", f"{prefix}.new"
    fill(kafka, old, [3, 0, 0, 0])
    kafka.produce(f"x{prefix}.old", 0, b"not matched")  # a full match is required
    kafka.flush()
    run = Run()
    # startingOffsets=latest: the old records are skipped, the new topic's are not.
    df = reader(spark, fmt, kafka, subscribePattern=f"{prefix}\\..*", startingOffsets="latest")
    query = start(df, tmp_path / "ck", run, processingTime="200 milliseconds")
    try:
        wait_for(query, lambda: bool(query.recentProgress), "a first progress")
        kafka.produce(old, 1, b"after start")
        kafka.flush()
        wait_for(query, lambda: len(run.rows) == 1, "the record produced after start")
        fill(kafka, new, [2, 0, 1, 0])
        wait_for(query, lambda: len(run.rows) == 4, "the new topic's records")
        # Rows reach foreachBatch before the batch's progress is reported.
        wait_for(query, lambda: new in end_offsets(query), "a progress with the new topic")
    finally:
        query.stop()
    assert run.records() == kafka.records(new) | {(old, 1, 0, None, b"after start")}
    assert end_offsets(query) == {
        new: {"0": 2, "1": 0, "2": 1, "3": 0},
        old: {"0": 3, "1": 1, "2": 0, "3": 0},
    }


# --------------------------------------------------------------------------- data loss


@pytest.fixture(scope="module")
def aged_out_topic(kafka: MockKafka) -> str:
    """Partition 0 has lost its first records to the mock's ~5 MB size retention."""
    topic = topic_name("aged")
    payload = b"x" * 900_000
    for i in range(7):
        kafka.produce(topic, 0, payload + str(i).encode())
        kafka.flush()  # one message set per record, so retention drops whole records
    consumer = confluent_kafka.Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "t"})
    try:
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, 0), timeout=10
        )
    finally:
        consumer.close()
    assert (low, high) == (2, 7), "the mock cluster's retention changed"
    return topic


@pytest.mark.spark
def test_data_loss_fails_the_query_by_default(
    spark: Any, fmt: str, kafka: MockKafka, aged_out_topic: str, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException

    offsets = json.dumps({aged_out_topic: {"0": 0, "1": -2, "2": -2, "3": -2}})
    with pytest.raises(StreamingQueryException, match=r"Cannot fetch offsets \[0, 2\)"):
        run_available_now(
            spark, fmt, kafka, tmp_path / "ck", subscribe=aged_out_topic, startingOffsets=offsets
        )


@pytest.mark.spark
def test_data_loss_is_skipped_without_fail_on_data_loss(
    spark: Any, fmt: str, kafka: MockKafka, aged_out_topic: str, tmp_path: Path
) -> None:
    offsets = json.dumps({aged_out_topic: {"0": 0, "1": -2, "2": -2, "3": -2}})
    run = run_available_now(
        spark,
        fmt,
        kafka,
        tmp_path / "ck",
        subscribe=aged_out_topic,
        startingOffsets=offsets,
        failOnDataLoss="false",
    )
    assert [r.offset for r in run.rows] == [2, 3, 4, 5, 6]
    assert [bytes(r.value)[-1:] for r in run.rows] == [b"2", b"3", b"4", b"5", b"6"]
    assert run.progress[-1]["sources"][0]["endOffset"] == {
        aged_out_topic: {"0": 7, "1": 0, "2": 0, "3": 0}
    }


# --------------------------------------------------------------------------- the driver side alone


def stream_reader(kafka: MockKafka, **options: str) -> KafkaStreamReader:
    opts = KafkaSourceOptions.parse({"kafka.bootstrap.servers": kafka.bootstrap, **options})
    return KafkaStreamReader(opts, KAFKA_SCHEMA)


def test_latest_starting_offsets_are_resolved_once_per_run(kafka: MockKafka) -> None:
    # Spark asks for the initial offset again when it plans the first batch.
    topic = topic_name("once")
    fill(kafka, topic, [1, 1, 0, 0])
    reader_ = stream_reader(kafka, subscribe=topic)
    try:
        first = reader_.initialOffset()
        fill(kafka, topic, [1, 0, 0, 0])
        assert reader_.initialOffset() == first == {topic: {"0": 1, "1": 1, "2": 0, "3": 0}}
        assert reader_.latestOffset(first, ReadAllAvailable()) == {
            topic: {"0": 2, "1": 1, "2": 0, "3": 0}
        }
    finally:
        reader_.stop()


def test_the_reader_pickles_without_its_consumer(kafka: MockKafka) -> None:
    topic = topic_name("pickle")
    fill(kafka, topic, [1, 0, 0, 0])
    reader_ = stream_reader(kafka, subscribe=topic)
    try:
        reader_.initialOffset()  # creates the driver's consumer
        copy = pickle.loads(pickle.dumps(reader_))
        assert copy._consumer is None and copy.opts == reader_.opts
    finally:
        reader_.stop()


def test_planning_reports_partitions_that_are_gone(kafka: MockKafka) -> None:
    gone = {"deleted-topic": {"0": 5}}
    with pytest.raises(KafkaDataLossError, match=r"\{deleted-topic-0\} are gone"):
        stream_reader(kafka, subscribe="deleted-topic").partitions(gone, {})
    lenient = stream_reader(kafka, subscribe="deleted-topic", failOnDataLoss="false")
    assert lenient.partitions(gone, {}) == []


def test_planning_reports_a_new_partition_that_lost_records(
    kafka: MockKafka, aged_out_topic: str
) -> None:
    end = {aged_out_topic: {"0": 7, "1": 0, "2": 0, "3": 0}}
    strict = stream_reader(kafka, subscribe=aged_out_topic)
    with pytest.raises(
        KafkaDataLossError,
        match=rf"Added partition {aged_out_topic}-0 starts "
        "from 2 instead of 0",
    ):
        strict.partitions({}, end)
    lenient = stream_reader(kafka, subscribe=aged_out_topic, failOnDataLoss="false")
    assert [repr(p) for p in lenient.partitions({}, end)] == [
        f"KafkaInputPartition({aged_out_topic}-0 [2, 7))"
    ]


# --------------------------------------------------------------------------- options


def test_options_follow_spark() -> None:
    base = {"kafka.bootstrap.servers": "b:9092"}
    with pytest.raises(ValueError, match="'kafka.bootstrap.servers' must be specified"):
        KafkaSourceOptions.parse({"subscribe": "t"})
    with pytest.raises(ValueError, match="One of the following options must be specified"):
        KafkaSourceOptions.parse(base)
    with pytest.raises(ValueError, match="Only one of the following options"):
        KafkaSourceOptions.parse({**base, "subscribe": "t", "assign": '{"t":[0]}'})
    with pytest.raises(ValueError, match="'auto.offset.reset' is not supported"):
        KafkaSourceOptions.parse({**base, "subscribe": "t", "kafka.auto.offset.reset": "x"})
    with pytest.raises(ValueError, match=r'Expected e.g. \{"topicA":\[0,1\]'):
        KafkaSourceOptions.parse({**base, "assign": "t:0"})
    with pytest.raises(ValueError, match=r'Expected e.g. \{"topicA":\{"0":23'):
        KafkaSourceOptions.parse({**base, "subscribe": "t", "startingOffsets": "{bad"})
    with pytest.raises(ValueError, match="'endingOffsets' is not supported"):
        KafkaSourceOptions.parse({**base, "subscribe": "t", "endingOffsets": "latest"})

    opts = KafkaSourceOptions.parse(
        {
            **base,
            "subscribe": "a, b",
            "startingOffsets": "EARLIEST",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.enable.auto.commit": "true",
            "maxOffsetsPerTrigger": "100",
            "failOnDataLoss": "false",
        }
    )
    assert (opts.topics, opts.starting, opts.max_offsets_per_trigger) == (
        ("a", "b"),
        "earliest",
        100,
    )
    assert opts.fail_on_data_loss is False
    conf = opts.consumer_conf("driver")
    assert conf["bootstrap.servers"] == "b:9092"
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["enable.auto.commit"] is False  # offsets belong to the checkpoint
    assert conf["isolation.level"] == "read_uncommitted"  # the Java client's default


@pytest.mark.spark
def test_kafka_format_picks_sparks_connector_only_when_it_is_there(spark: Any, fmt: str) -> None:
    assert fmt == SOURCE_NAME == "kafka-journal"
    expected = "kafka" if spark_kafka_available(spark) else "kafka-journal"
    assert kafka_format(spark) == expected  # registering again is harmless
