"""A Kafka streaming source for PySpark 4 built on the Python Data Source API.

Spark's own Kafka connector is a JVM package (spark-sql-kafka) that has to be fetched
from Maven; where that is impossible this source reads Kafka with confluent-kafka
instead, while keeping what the journal depends on the same: the output schema, the
option names and semantics, and the offsets JSON (``{"topic": {"0": 42}}``, the next
offset to read per partition) in progress events and checkpoints. Jobs pick the format
with :func:`kafka_format` and are otherwise written the same for both.

Two differences cannot be helped from Python: Spark describes the source in progress
events by its class (``...python.PythonMicroBatchStreamWithTriggerAvailableNow@<hash>``,
not ``KafkaV2[...]``), so recognise Kafka offsets by their shape; and the checkpoint's
offsets line is written by Python's ``json.dumps`` (``{"t": {"0": 42}}``, with spaces),
so parse it rather than compare text.

Needs pyspark >= 4.2 (``latestOffset(start, limit)``, read limits, AvailableNow).
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Consumer, Message

log = logging.getLogger(__name__)

SOURCE_NAME = "kafka-journal"
"""The format name this source registers under; Spark refuses "kafka" even without its
connector (DATA_SOURCE_ALREADY_EXISTS)."""

SPARK_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"

EARLIEST = -2
LATEST = -1

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
"""Spark's Kafka source schema, column for column."""

HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)
"""Added to the schema by ``includeHeaders``, as Spark does."""

# librdkafka timestamp types -> Kafka's Java TimestampType ids, which Spark reports.
_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}

# Kafka consumer settings Spark's source refuses, with Spark's reasons.
_UNSUPPORTED_KAFKA_OPTIONS = {
    "auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
        "'startingOffsets' to 'earliest' or 'latest' to specify where to start."
    ),
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported, as keys are deserialized as "
        "byte arrays. Use DataFrame operations to explicitly deserialize the keys."
    ),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported, as values are deserialized as "
        "byte arrays. Use DataFrame operations to explicitly deserialize the values."
    ),
}

# Spark Kafka options whose semantics this source does not implement: refusing them beats
# silently reading something else than the same job would read with Spark's connector.
_UNSUPPORTED_OPTIONS = (
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
)

_DATA_LOSS_FAIL_HINT = (
    " Some data may have been lost because they are not available in Kafka any more; either "
    "the data was aged out by Kafka or the topic may have been deleted before all the data in "
    "the topic was processed. If you don't want your streaming query to fail on such cases, "
    'set the source option "failOnDataLoss" to "false".'
)
_DATA_LOSS_WARN_HINT = (
    " Some data may have been lost because they are not available in Kafka any more; either "
    "the data was aged out by Kafka or the topic may have been deleted before all the data in "
    "the topic was processed. If you want your streaming query to fail on such cases, set the "
    'source option "failOnDataLoss" to "true".'
)

_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

TopicPartitionKey = tuple[str, int]
PartitionOffsets = dict[TopicPartitionKey, int]


class KafkaDataLossError(RuntimeError):
    """Records the query should have read are gone (retention, deleted topic or partition)."""


class KafkaReadTimeoutError(TimeoutError):
    """A partition's planned offset range could not be fetched within the poll timeout."""


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Parsed and validated source options; plain data so it pickles to the workers."""

    kafka_conf: dict[str, str]
    strategy: Literal["subscribe", "subscribepattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartitionKey, ...] = ()
    starting: str | dict[TopicPartitionKey, int] = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1_000
    group_id_prefix: str = "spark-kafka-source"
    query_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        """Validate options as Spark's Kafka source does, with its error messages."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        kafka_conf = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
        if not kafka_conf.get("bootstrap.servers"):
            raise ValueError(
                "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"
            )
        for key, message in _UNSUPPORTED_KAFKA_OPTIONS.items():
            if key in kafka_conf:
                raise ValueError(message)
        for name in _UNSUPPORTED_OPTIONS:
            if name.lower() in opts:
                raise ValueError(f"Option '{name}' is not supported by the {SOURCE_NAME} source")

        strategies = [s for s in ("assign", "subscribe", "subscribepattern") if s in opts]
        if not strategies:
            raise ValueError(
                "One of the following options must be specified for Kafka source: subscribe, "
                "subscribePattern, assign. See the docs for more details."
            )
        if len(strategies) > 1:
            raise ValueError(
                "Only one of the following options can be specified for Kafka source: "
                "subscribe, subscribePattern, assign. See the docs for more details."
            )
        strategy = strategies[0]
        topics: tuple[str, ...] = ()
        pattern: str | None = None
        assigned: tuple[TopicPartitionKey, ...] = ()
        if strategy == "subscribe":
            topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
            if not topics:
                raise ValueError(
                    f"No topics to subscribe to as specified value for option "
                    f"'subscribe' is '{opts['subscribe']}'"
                )
        elif strategy == "subscribepattern":
            pattern = opts["subscribepattern"].strip()
            if not pattern:
                raise ValueError(
                    "Pattern to subscribe is empty as specified value for option "
                    f"'subscribePattern' is '{opts['subscribepattern']}'"
                )
            re.compile(pattern)
        else:
            assigned = _parse_assign(opts["assign"])

        max_offsets: int | None = None
        if "maxoffsetspertrigger" in opts:
            max_offsets = int(opts["maxoffsetspertrigger"])
            if max_offsets <= 0:
                raise ValueError("Option 'maxOffsetsPerTrigger' must be a positive number")

        return cls(
            kafka_conf=kafka_conf,
            strategy=strategy,
            topics=topics,
            pattern=pattern,
            assigned=assigned,
            starting=_parse_starting_offsets(opts.get("startingoffsets", "latest")),
            max_offsets_per_trigger=max_offsets,
            fail_on_data_loss=_parse_bool(opts.get("failondataloss", "true"), "failOnDataLoss"),
            include_headers=_parse_bool(opts.get("includeheaders", "false"), "includeHeaders"),
            poll_timeout_ms=int(opts.get("kafkaconsumer.polltimeoutms", "120000")),
            fetch_offset_num_retries=int(opts.get("fetchoffset.numretries", "3")),
            fetch_offset_retry_interval_ms=int(opts.get("fetchoffset.retryintervalms", "1000")),
            group_id_prefix=opts.get("groupidprefix", "spark-kafka-source"),
        )

    def consumer_conf(self, role: str) -> dict[str, Any]:
        """confluent-kafka settings: the user's ``kafka.*`` options plus what reading needs.

        Offsets are tracked by Spark, never by Kafka, hence no auto commit; the isolation
        level defaults to the Java client's (read_uncommitted) so both connectors agree.
        """
        conf: dict[str, Any] = dict(self.kafka_conf)
        conf.setdefault("group.id", f"{self.group_id_prefix}-{self.query_id}-{role}")
        conf.setdefault("isolation.level", "read_uncommitted")
        conf["enable.auto.commit"] = False
        conf["enable.auto.offset.store"] = False
        return conf


def _parse_bool(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"Option '{name}' must be 'true' or 'false', got '{value}'")


def _parse_assign(text: str) -> tuple[TopicPartitionKey, ...]:
    example = 'Expected e.g. {"topicA":[0,1],"topicB":[0,1]}, got ' + text
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(example) from exc
    if not isinstance(obj, dict) or not all(
        isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in ps)
        for ps in obj.values()
    ):
        raise ValueError(example)
    return tuple(sorted({(str(t), int(p)) for t, ps in obj.items() for p in ps}))


def _parse_starting_offsets(text: str) -> str | dict[TopicPartitionKey, int]:
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    example = 'Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got ' + text
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(example) from exc
    try:
        return offsets_from_json(obj)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValueError(example) from exc


# --------------------------------------------------------------------------- offsets


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Spark Kafka's offset shape: topic -> {"partition": next offset}, in a stable order."""
    out: dict[str, dict[str, int]] = {}
    for topic, part in sorted(offsets):
        out.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    return out


def offsets_from_json(obj: Mapping[str, Mapping[str, Any]]) -> PartitionOffsets:
    """The inverse of :func:`offsets_to_json`."""
    out: PartitionOffsets = {}
    for topic, parts in obj.items():
        for part, offset in parts.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"offset for {topic}-{part} is not an integer: {offset!r}")
            out[(str(topic), int(part))] = offset
    return out


def _tp_str(tps: Sequence[TopicPartitionKey] | set[TopicPartitionKey]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


def rate_limit(
    limit: int,
    start: Mapping[TopicPartitionKey, int],
    latest: Mapping[TopicPartitionKey, int],
) -> PartitionOffsets:
    """Cap a batch at ``limit`` records, shared across partitions by their backlog.

    Spark's maxOffsetsPerTrigger split, computed the same way (same floating point, so
    the same offsets): each partition gets ``limit * backlog / total`` rounded down, but
    at least one record. That rounding up can take Spark past the limit (more partitions
    with a backlog than the limit allows); then the excess is taken back here from the
    largest shares, ties broken by a rotation derived from the start offsets so no
    partition is skipped every time. Deterministic: the same input gives the same split.
    ``start`` must cover every partition of ``latest`` (new ones at their earliest).
    """
    sizes = {tp: latest[tp] - start[tp] for tp in sorted(latest) if latest[tp] > start[tp]}
    total = float(sum(sizes.values()))
    out = dict(latest)
    if total < 1:
        return out
    shares: dict[TopicPartitionKey, int] = {}
    for tp, size in sizes.items():
        prorate = limit * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        shares[tp] = min(share, size)
    excess = sum(shares.values()) - limit
    if excess > 0:
        order = list(shares)
        rotation = sum(start[tp] for tp in order) % len(order)
        rank = {tp: (i - rotation) % len(order) for i, tp in enumerate(order)}
        for _ in range(excess):
            tp = max(order, key=lambda t: (shares[t], -rank[t]))
            shares[tp] -= 1
    for tp, share in shares.items():
        out[tp] = start[tp] + share
    return out


# --------------------------------------------------------------------------- source


class KafkaDataSource(DataSource):
    """``spark.readStream.format("kafka-journal")``: Kafka via confluent-kafka.

    Options follow Spark's Kafka source: kafka.bootstrap.servers, one of subscribe /
    subscribePattern / assign, startingOffsets, maxOffsetsPerTrigger, failOnDataLoss,
    includeHeaders, kafkaConsumer.pollTimeoutMs, fetchOffset.numRetries,
    fetchOffset.retryIntervalMs, groupIdPrefix, and ``kafka.*`` passed to the consumer.
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        opts = KafkaSourceOptions.parse(self.options)
        return _schema_for(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaSourceOptions.parse(self.options), schema)


def _schema_for(opts: KafkaSourceOptions) -> StructType:
    if opts.include_headers:
        return StructType([*KAFKA_SCHEMA.fields, HEADERS_FIELD])
    return KAFKA_SCHEMA


class KafkaInputPartition(InputPartition):
    """One topic-partition's records ``start <= offset < end``: a fixed, replayable range."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches from Kafka's offsets; reads each partition range on the workers.

    Spark keeps one instance alive on the driver for the whole query (offset planning)
    and pickles it into each read task, so the driver's consumer is created lazily and
    left out of the pickle.
    """

    def __init__(self, options: KafkaSourceOptions, schema: StructType) -> None:
        self.opts = options
        self.schema = schema
        self._consumer: Consumer | None = None
        self._available_now: PartitionOffsets | None = None
        self._initial: PartitionOffsets | None = None
        self._latest: PartitionOffsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_consumer"] = None
        return state

    # ---- driver side

    def _driver(self) -> Consumer:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(self.opts.consumer_conf("driver"), logger=log)
        return self._consumer

    def _with_retries(self, what: str, fn: Any) -> Any:
        """Spark's fetchOffset.numRetries: brokers move leaders; one failed call is no outage."""
        attempts = max(1, self.opts.fetch_offset_num_retries)
        for attempt in range(1, attempts + 1):
            try:
                return fn()
            except Exception as exc:
                if attempt == attempts:
                    raise
                log.warning("%s failed (attempt %d/%d): %s", what, attempt, attempts, exc)
                time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def _timeout_s(self) -> float:
        return min(self.opts.poll_timeout_ms / 1000, 60.0)

    def _topic_partitions(self) -> list[TopicPartitionKey]:
        """The partitions the query reads now: fixed for assign, from metadata otherwise."""
        opts = self.opts
        if opts.strategy == "assign":
            return list(opts.assigned)
        # All-topics metadata: asking for a named topic can auto-create it on the broker.
        metadata = self._with_retries(
            "list_topics", lambda: self._driver().list_topics(timeout=self._timeout_s())
        )
        if opts.strategy == "subscribe":
            wanted = set(opts.topics)
            topics = [t for t in metadata.topics if t in wanted]
        else:
            regex = re.compile(opts.pattern or "")
            topics = [
                t for t in metadata.topics if t not in _INTERNAL_TOPICS and regex.fullmatch(t)
            ]
        out: list[TopicPartitionKey] = []
        for topic in sorted(topics):
            tmeta = metadata.topics[topic]
            if tmeta.error is not None:
                log.info("skipping topic %s for now: %s", topic, tmeta.error)
                continue
            out.extend((topic, p) for p in sorted(tmeta.partitions))
        return out

    def _fetch(
        self, tps: Sequence[TopicPartitionKey], which: int, *, partial: bool = False
    ) -> PartitionOffsets:
        """Earliest (-2) or latest (-1) offsets of ``tps`` in one ListOffsets round trip.

        Retried like Spark's fetchOffset.numRetries. With ``partial``, partitions still
        failing after the retries are left out (the caller reports them) instead of
        failing the call.
        """
        if not tps:
            return {}
        from confluent_kafka import TopicPartition

        kind = "earliest" if which == EARLIEST else "latest"
        attempts = max(1, self.opts.fetch_offset_num_retries)
        for attempt in range(1, attempts + 1):
            out: PartitionOffsets = {}
            failed: list[str] = []
            call_failed = False
            try:
                # Kafka's special timestamps -2/-1 ask for the log start and end (the LSO
                # under read_committed), batched per broker.
                found = self._driver().offsets_for_times(
                    [TopicPartition(t, p, which) for t, p in tps], timeout=self._timeout_s()
                )
            except Exception as exc:
                call_failed = True
                failed.append(str(exc))
            else:
                for tp in found:
                    if tp.error is not None or tp.offset < 0:
                        failed.append(f"{tp.topic}-{tp.partition}: {tp.error}")
                    else:
                        out[(tp.topic, tp.partition)] = tp.offset
            if not failed or (partial and not call_failed and attempt == attempts):
                break
            problem = f"fetching {kind} offsets failed: {'; '.join(failed)}"
            if attempt == attempts:
                raise RuntimeError(f"{problem} (after {attempts} attempts)")
            log.warning("%s (attempt %d/%d)", problem, attempt, attempts)
            time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000)
        self._driver().poll(0)  # hands librdkafka's queued log lines to `log`
        return out

    def _report_data_loss(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise KafkaDataLossError(message + _DATA_LOSS_FAIL_HINT)
        log.warning("%s%s", message, _DATA_LOSS_WARN_HINT)

    def initialOffset(self) -> dict:
        """Where a new checkpoint starts; Spark never asks once the checkpoint has a batch.

        Resolved once per run: Spark asks again when it plans the first batch, and
        "latest" must not move in between (records produced meanwhile would be skipped).
        """
        if self._initial is None:
            self._initial = self._resolve_starting_offsets()
        return offsets_to_json(self._initial)

    def _resolve_starting_offsets(self) -> PartitionOffsets:
        tps = self._topic_partitions()
        starting = self.opts.starting
        if starting == "earliest":
            offsets = self._fetch(tps, EARLIEST)
        elif starting == "latest":
            offsets = self._fetch(tps, LATEST)
        else:
            assert isinstance(starting, dict)
            if set(tps) != set(starting):
                raise ValueError(
                    "If startingOffsets contains specific offsets, you must specify all "
                    "TopicPartitions.\nUse -1 for latest, -2 for earliest.\n"
                    f"Specified: {{{_tp_str(set(starting))}}} Assigned: {{{_tp_str(tps)}}}"
                )
            earliest = self._fetch([tp for tp, o in starting.items() if o == EARLIEST], EARLIEST)
            latest = self._fetch([tp for tp, o in starting.items() if o == LATEST], LATEST)
            offsets = {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in starting.items()}
        log.info("initial offsets (%s): %s", _describe_starting(starting), offsets_to_json(offsets))
        return offsets

    def prepareForTriggerAvailableNow(self) -> None:
        """Pin the end of an AvailableNow run to what exists now, as Spark's source does."""
        self._available_now = self._fetch(self._topic_partitions(), LATEST)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The next batch's end: the partitions' ends, capped by the read limit."""
        start_offsets = offsets_from_json(start)
        if self._available_now is not None:
            latest = dict(self._available_now)
        else:
            latest = self._fetch(self._topic_partitions(), LATEST)
        self._latest = latest
        if isinstance(limit, ReadMaxRows):
            new = [tp for tp in latest if tp not in start_offsets]
            begin = {**self._fetch(new, EARLIEST), **start_offsets}
            # An end below its start is left as is here and reported when planned.
            begin = {tp: min(begin.get(tp, latest[tp]), latest[tp]) for tp in latest}
            latest = rate_limit(limit.max_rows, begin, latest)
        return offsets_to_json(latest)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """One task per topic-partition with records in [start, end)."""
        from_offsets = offsets_from_json(start)
        until = offsets_from_json(end)
        new = sorted(set(until) - set(from_offsets))
        new_start = self._fetch(new, EARLIEST, partial=True)
        missing = set(new) - set(new_start)
        if missing:
            self._report_data_loss(
                f"Cannot find earliest offsets of {{{_tp_str(missing)}}}. "
                "Some data may have been missed"
            )
        for tp, off in sorted(new_start.items()):
            if off != 0:
                self._report_data_loss(
                    f"Added partition {tp[0]}-{tp[1]} starts from {off} instead of 0. "
                    "Some data may have been missed"
                )
        if new_start:
            log.info("partitions added: %s", offsets_to_json(new_start))
        deleted = set(from_offsets) - set(until)
        if deleted:
            self._report_data_loss(
                f"{{{_tp_str(deleted)}}} are gone. Some data may have been missed"
            )
        out: list[InputPartition] = []
        for tp in sorted(until):
            begin = from_offsets.get(tp, new_start.get(tp))
            if begin is None:
                continue
            stop = until[tp]
            if stop < begin:
                self._report_data_loss(
                    f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin} to {stop}, "
                    "some data may have been missed"
                )
                continue
            if stop > begin:
                out.append(KafkaInputPartition(tp[0], tp[1], begin, stop))
        return out

    def commit(self, end: dict) -> None:
        """Nothing to do: like Spark's source, offsets live in the checkpoint, not in Kafka."""

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # ---- worker side

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        return read_partition(self.opts, partition, self.schema)


def _describe_starting(starting: str | dict[TopicPartitionKey, int]) -> str:
    return starting if isinstance(starting, str) else "specific offsets"


# --------------------------------------------------------------------------- reading

_BATCH_ROWS = 10_000


class _BatchBuilder:
    """Collects messages column by column into Arrow batches of the source's schema."""

    def __init__(self, schema: StructType, include_headers: bool) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self.columns: list[list[Any]] = [[] for _ in self.arrow_schema.names]

    def __len__(self) -> int:
        return len(self.columns[0])

    def append(self, msg: Message) -> None:
        ts_type, ts_ms = msg.timestamp()
        cols = self.columns
        cols[0].append(msg.key())
        cols[1].append(msg.value())
        cols[2].append(msg.topic())
        cols[3].append(msg.partition())
        cols[4].append(msg.offset())
        cols[5].append(ts_ms * 1000 if ts_type else -1000)
        cols[6].append(_TIMESTAMP_TYPES.get(ts_type, -1))
        if self.include_headers:
            headers: Any = msg.headers()
            cols[7].append(
                None if headers is None else [{"key": k, "value": v} for k, v in headers]
            )

    def flush(self) -> pa.RecordBatch:
        import pyarrow as pa

        arrays = [
            pa.array(col, type=f.type)
            for col, f in zip(self.columns, self.arrow_schema, strict=True)
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)


def read_partition(
    opts: KafkaSourceOptions, part: KafkaInputPartition, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """Yield exactly the records of ``part`` in offset order, as Arrow batches.

    The consumer is assigned the start offset explicitly and reads until the end offset
    is passed. Offsets missing inside the range (compacted records, transaction markers)
    are skipped, as Spark does; an end-of-partition event at or beyond ``end`` also
    finishes the range, since the last offsets may be such markers. If nothing arrives
    for kafkaConsumer.pollTimeoutMs the read fails rather than hanging the batch.
    """
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    conf = opts.consumer_conf("executor")
    conf["enable.partition.eof"] = True
    conf["auto.offset.reset"] = "error"  # out of range must surface, not silently reset
    builder = _BatchBuilder(schema, opts.include_headers)
    timeout_s = opts.poll_timeout_ms / 1000
    consumer = Consumer(conf, logger=log)
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        next_offset = part.start
        deadline = time.monotonic() + timeout_s
        while next_offset < part.end:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaReadTimeoutError(
                    f"Cannot fetch records of {part.topic}-{part.partition} in "
                    f"[{next_offset}, {part.end}) within {opts.poll_timeout_ms} ms "
                    "(kafkaConsumer.pollTimeoutMs)"
                )
            messages = consumer.consume(
                num_messages=min(part.end - next_offset, 100_000), timeout=min(remaining, 1.0)
            )
            for msg in messages:
                err = msg.error()
                offset = msg.offset()
                if err is None:
                    if offset is None or offset < next_offset:
                        continue
                    if offset >= part.end:
                        next_offset = part.end
                        break
                    builder.append(msg)
                    next_offset = offset + 1
                    deadline = time.monotonic() + timeout_s
                    if len(builder) >= _BATCH_ROWS:
                        yield builder.flush()
                elif err.code() == KafkaError._PARTITION_EOF:
                    if (offset or 0) >= part.end:
                        next_offset = part.end
                        break
                    if (offset or 0) >= next_offset:  # the log ends before the planned end?
                        next_offset = _check_lost_records(consumer, opts, part, next_offset)
                elif err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    next_offset = _check_lost_records(consumer, opts, part, next_offset)
                    deadline = time.monotonic() + timeout_s
                    break
                else:
                    raise KafkaException(err)
        if len(builder):
            yield builder.flush()
    finally:
        consumer.close()


def _check_lost_records(
    consumer: Consumer, opts: KafkaSourceOptions, part: KafkaInputPartition, wanted: int
) -> int:
    """Compare the wanted offset with the partition's log now; returns where to go on.

    Below the log start: records aged out (or the topic was recreated). Past the log
    end: the log was truncated. Either is data loss, which fails the query unless
    failOnDataLoss is false; then the lost records are skipped with a warning.
    """
    from confluent_kafka import TopicPartition

    tp_name = f"{part.topic}-{part.partition}"
    low, high = consumer.get_watermark_offsets(
        TopicPartition(part.topic, part.partition), timeout=opts.poll_timeout_ms / 1000
    )
    if wanted < low:
        resume = min(low, part.end)
        message = (
            f"Cannot fetch offsets [{wanted}, {resume}) of {tp_name}: the earliest "
            f"available offset is {low}."
        )
    elif high < part.end and wanted >= high:
        resume = part.end
        message = (
            f"Cannot fetch offsets [{wanted}, {part.end}) of {tp_name}: the partition now "
            f"ends at offset {high}."
        )
    else:
        resume = wanted  # a transient state; fetch again from where we were
        message = ""
    if message:
        if opts.fail_on_data_loss:
            raise KafkaDataLossError(message + _DATA_LOSS_FAIL_HINT)
        log.warning("%s%s", message, _DATA_LOSS_WARN_HINT)
    if resume < part.end:
        consumer.assign([TopicPartition(part.topic, part.partition, resume)])
    return resume


# --------------------------------------------------------------------------- registration


def register(spark: Any) -> str:
    """Register this source on a classic or Spark Connect session; returns its format name."""
    spark.dataSource.register(KafkaDataSource)
    return SOURCE_NAME


def spark_kafka_available(spark: Any) -> bool:
    """True when Spark's own Kafka connector (spark-sql-kafka) is usable by this session.

    Classic sessions ask the JVM whether the provider class loads (covers --packages,
    --jars and jars baked into the image); Connect sessions have no JVM handle, so they
    fall back to the session's spark.jars.packages / spark.jars settings.
    """
    try:
        jvm = spark._jvm
    except Exception:
        jvm = None
    if jvm is not None:
        try:
            return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(SPARK_KAFKA_PROVIDER))
        except Exception:
            log.debug("cannot ask the JVM for %s", SPARK_KAFKA_PROVIDER, exc_info=True)
    for key in ("spark.jars.packages", "spark.jars"):
        try:
            value = spark.conf.get(key, "") or ""
        except Exception:
            continue
        if "spark-sql-kafka" in value:
            return True
    return False


def kafka_format(spark: Any) -> str:
    """The ``readStream.format`` to use for Kafka: "kafka" if Spark's connector is there,
    else this source, registered on ``spark``, as "kafka-journal"."""
    if spark_kafka_available(spark):
        return "kafka"
    return register(spark)


__all__ = [
    "KAFKA_SCHEMA",
    "SOURCE_NAME",
    "KafkaDataLossError",
    "KafkaDataSource",
    "KafkaInputPartition",
    "KafkaReadTimeoutError",
    "KafkaSourceOptions",
    "KafkaStreamReader",
    "kafka_format",
    "offsets_from_json",
    "offsets_to_json",
    "rate_limit",
    "read_partition",
    "register",
    "spark_kafka_available",
]
