"""Small Kafka admin helpers (confluent-kafka): what a restart plan asks the cluster.

A plan needs three facts the journal cannot know: which partitions exist *now*, where
each partition's log starts (retention may have deleted journaled offsets) and where
it ends. Probing must not change the cluster, so consumers are made with
``allow.auto.create.topics=false``: asking about a deleted topic must not bring it back.

``commit_group`` writes journaled offsets into a consumer group, so the usual lag
tools (kafka-consumer-groups, Burrow) can watch a Spark query, which commits nothing
to Kafka itself.

Every failure comes out as :class:`KafkaAdminError` (or :class:`KafkaUnavailable` when the
cluster does not answer) with a one-line message; librdkafka's own chatter (one log
line per failed connect) goes to this module's logger at DEBUG.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..errors import KafkaAdminError, KafkaUnavailable
from ..offsets import KafkaOffsets
from ..values import parse_timeout
from .mirror import OffsetSync, SyncFormatError, decode_sync

log = logging.getLogger(__name__)

PartitionState = tuple[int, int]
"""(low watermark = log start offset, high watermark = next offset to be written)."""

TopicState = dict[str, dict[int, PartitionState]]
"""topic -> partition -> (low, high); a topic missing on the cluster is absent."""

# confluent-kafka's "no committed offset" value (OFFSET_INVALID).
_OFFSET_INVALID = -1001




class _DebugLogger:
    """librdkafka logs every failed connect attempt at ERROR, many times a second; the
    caller gets one exception instead, so the details are kept at DEBUG."""

    def log(self, level: int, fmt: str, *args: Any) -> None:
        log.debug("librdkafka: " + fmt, *args)


def confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError:  # pragma: no cover - the kafka extra is installed in dev
        raise KafkaAdminError(
            "confluent-kafka is not installed: pip install 'offset-journal[kafka]'"
        ) from None
    return confluent_kafka


def _consumer(bootstrap_servers: str, config: Mapping[str, Any] | None, group: str | None,
              timeout: float) -> Any:
    ck = confluent()
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group or "offset-journal-probe",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "allow.auto.create.topics": False,
        "socket.timeout.ms": max(1000, int(timeout * 1000)),
        "socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000)),
        "logger": _DebugLogger(),
    }
    conf.update(config or {})
    # Whatever the caller passes, a probe must never create topics.
    conf["allow.auto.create.topics"] = False
    if group is not None:
        conf["group.id"] = group
    try:
        return ck.Consumer(conf)
    except (ck.KafkaException, ValueError, TypeError) as exc:
        raise KafkaAdminError(f"bad Kafka client configuration: {one_line(exc)}") from None


def one_line(exc: BaseException) -> str:
    """One line out of a KafkaException (whose arg is a confluent KafkaError object) or anything."""
    arg = exc.args[0] if exc.args else exc
    text = arg.str() if hasattr(arg, "str") else str(arg)
    return " ".join(str(text).split()) or type(exc).__name__


def request_error(what: str, exc: BaseException, bootstrap_servers: str) -> KafkaAdminError:
    ck = confluent()
    arg: Any = exc.args[0] if exc.args else None
    code = arg.code() if arg is not None and hasattr(arg, "code") else None
    unavailable = code in (
        ck.KafkaError._TRANSPORT, ck.KafkaError._TIMED_OUT, ck.KafkaError._ALL_BROKERS_DOWN,
        ck.KafkaError._RESOLVE,
    )
    cls = KafkaUnavailable if unavailable else KafkaAdminError
    return cls(f"{what} at {bootstrap_servers}: {one_line(exc)}")


def cluster_metadata(consumer: Any, bootstrap_servers: str, timeout: float) -> Any:
    ck = confluent()
    try:
        # All topics: asking for one by name is a request to create it on clusters
        # that auto-create, and a cheap way to see which topics are gone.
        return consumer.list_topics(timeout=timeout)
    except ck.KafkaException as exc:
        raise request_error("cannot read cluster metadata", exc, bootstrap_servers) from None


def topic_state(bootstrap_servers: str, topics: Iterable[str], timeout: float = 10,
                config: Mapping[str, Any] | None = None) -> TopicState:
    """Each existing topic's partitions with their (low, high) watermarks.

    ``low`` is the first offset still in the log (older ones were deleted by retention
    or compaction), ``high`` the offset the next record will get. Topics that do not
    exist are left out of the answer rather than raising: for a restart plan a gone
    topic is a finding, not a failure.
    """
    wanted = sorted(set(topics))
    if not wanted:
        return {}
    consumer = _consumer(bootstrap_servers, config, None, timeout)
    try:
        return topic_state_with(consumer, wanted, timeout=timeout, where=bootstrap_servers)
    finally:
        consumer.close()


def topic_state_with(consumer: Any, topics: Iterable[str], *, timeout: float = 10,
                     where: str = "the cluster") -> TopicState:
    """:func:`topic_state` through an open confluent-kafka consumer (``where``: the
    cluster's name in error messages)."""
    ck = confluent()
    metadata = cluster_metadata(consumer, where, timeout)
    state: TopicState = {}
    for topic in sorted(set(topics)):
        meta = metadata.topics.get(topic)
        if meta is None or meta.error is not None:
            log.debug("topic %s not on the cluster (%s)", topic, meta.error if meta else None)
            continue
        parts: dict[int, PartitionState] = {}
        for partition in sorted(meta.partitions):
            try:
                low, high = consumer.get_watermark_offsets(
                    ck.TopicPartition(topic, partition), timeout=timeout, cached=False
                )
            except ck.KafkaException as exc:
                raise request_error(f"cannot read the offsets of {topic}-{partition}", exc,
                             where) from None
            parts[partition] = (int(low), int(high))
        state[topic] = parts
    return state


def partition_count(client: Any, topic: str, *, timeout: float = 10,
                    where: str = "the cluster") -> int:
    """How many partitions ``topic`` has (0: none such), through an open confluent-kafka
    client; asked of all topics, as :func:`cluster_metadata` does, so that asking never
    creates the topic on a cluster that auto-creates (an admin client would)."""
    meta = cluster_metadata(client, where, timeout).topics.get(topic)
    return len(meta.partitions) if meta is not None and meta.error is None else 0


def create_topic(admin: Any, topic: str, partitions: int, *,
                 config: Mapping[str, str] | None = None, replication_factor: int = 1,
                 timeout: float = 30, where: str = "the cluster") -> None:
    """Create ``topic`` through an open confluent-kafka AdminClient and wait (bounded by
    ``timeout``) until the metadata shows it. A topic that already exists with
    ``partitions`` partitions is not an error: on a just-started broker the client
    retries its own timed-out request and gets TOPIC_ALREADY_EXISTS, and a cluster that
    auto-creates may have made it on first use. With another partition count it is one
    line (:class:`KafkaAdminError`)."""
    ck = confluent()
    from confluent_kafka.admin import NewTopic

    request = NewTopic(topic, partitions, replication_factor, config=dict(config or {}))
    try:
        for future in admin.create_topics([request], operation_timeout=timeout,
                                          request_timeout=timeout).values():
            future.result(timeout)
    except ck.KafkaException as exc:
        arg: Any = exc.args[0] if exc.args else None
        if arg is None or not hasattr(arg, "code") or \
                arg.code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
            raise request_error(f"cannot create topic {topic}", exc, where) from None
        log.debug("topic %s already exists at %s", topic, where)
    deadline = time.monotonic() + timeout
    while not (found := partition_count(admin, topic, timeout=timeout, where=where)):
        if time.monotonic() > deadline:
            raise KafkaUnavailable(f"topic {topic} at {where} was not in the cluster's "
                                   f"metadata within {timeout:g} s of its creation")
        time.sleep(0.1)
    if found != partitions:
        raise KafkaAdminError(f"topic {topic} already exists at {where} with {found} "
                              f"partitions, not the {partitions} asked for")


def cluster_id(bootstrap_servers: str, *, timeout: float = 10,
               config: Mapping[str, Any] | None = None) -> str | None:
    """The id of the Kafka cluster at ``bootstrap_servers`` (its metadata's cluster id:
    KRaft's, or ZooKeeper's for an older cluster); None when it does not say one."""
    consumer = _consumer(bootstrap_servers, config, None, timeout)
    try:
        found = cluster_metadata(consumer, bootstrap_servers, timeout).cluster_id
    finally:
        consumer.close()
    return str(found) if found else None


def read_offset_syncs(bootstrap_servers: str, topic: str, *, timeout: float = 30,
                      config: Mapping[str, Any] | None = None) -> list[OffsetSync] | None:
    """Every MirrorMaker 2 offset sync in ``topic`` on the cluster, in each partition's
    order (None: no such topic). A record that is not a sync is skipped with a warning."""
    ck = confluent()
    consumer = _consumer(bootstrap_servers, {**(config or {}), "enable.partition.eof": True},
                         None, timeout)
    try:
        state = topic_state_with(consumer, [topic], timeout=timeout, where=bootstrap_servers)
        if topic not in state:
            return None
        ends = {p: high for p, (low, high) in state[topic].items() if high > low}
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in ends])
        return _read_syncs(consumer, ends, timeout, bootstrap_servers)
    finally:
        consumer.close()


def _read_syncs(consumer: Any, ends: dict[int, int], timeout: float,
                where: str) -> list[OffsetSync]:
    """Poll until each partition's records up to its end (``ends``) are read."""
    out: list[OffsetSync] = []
    bad = 0
    left = dict(ends)
    deadline = time.monotonic() + timeout
    while left:
        if time.monotonic() > deadline:
            raise KafkaUnavailable(f"reading MM2's offset syncs at {where} did not finish "
                                   f"within {timeout:g} s")
        for msg in consumer.consume(num_messages=1000, timeout=0.5):
            if msg.error() is not None:
                if msg.error().code() == confluent().KafkaError._PARTITION_EOF:
                    left.pop(msg.partition(), None)  # compacted up to its end
                continue  # a transient error: the deadline decides
            try:
                out.append(decode_sync(msg.key() or b"", msg.value() or b""))
            except SyncFormatError as exc:
                bad += 1
                log.debug("skipped a record of the offset-syncs topic: %s", exc)
            if msg.offset() + 1 >= left.get(msg.partition(), 0):
                left.pop(msg.partition(), None)
    if bad:
        log.warning("%d record(s) of the offset-syncs topic at %s are not offset syncs: "
                    "skipped", bad, where)
    return out


TimeLookup = dict[str, dict[int, int | None]]
"""topic -> partition -> the first offset whose record timestamp is at or after a time
(None: the partition holds no such record)."""


def offsets_for_time(bootstrap_servers: str, topics: Iterable[str], when_ms: int, *,
                     timeout: float = 10, config: Mapping[str, Any] | None = None,
                     ) -> tuple[TopicState, TimeLookup]:
    """Each existing topic's state (:func:`topic_state`) and, per partition, the first
    offset whose record timestamp is at or after ``when_ms`` (Kafka's offsetsForTimes,
    as ``kafka-consumer-groups --reset-offsets --to-datetime`` uses). Topics that do not
    exist are left out of both."""
    wanted = sorted(set(topics))
    if not wanted:
        return {}, {}
    consumer = _consumer(bootstrap_servers, config, None, timeout)
    try:
        state = topic_state_with(consumer, wanted, timeout=timeout, where=bootstrap_servers)
        pairs = [(t, p) for t in sorted(state) for p in sorted(state[t])]
        found = offsets_for_time_with(consumer, pairs, when_ms, timeout=timeout,
                                      where=bootstrap_servers)
    finally:
        consumer.close()
    lookup: TimeLookup = {}
    for (topic, partition), offset in found.items():
        lookup.setdefault(topic, {})[partition] = offset
    return state, lookup


def offsets_for_time_with(consumer: Any, partitions: Iterable[tuple[str, int]], when_ms: int,
                          *, timeout: float = 10, where: str = "the cluster",
                          ) -> dict[tuple[str, int], int | None]:
    """:func:`offsets_for_time` for (topic, partition) pairs through an open consumer:
    per pair the first offset stamped at or after ``when_ms`` (None: no such record)."""
    ck = confluent()
    tps = [ck.TopicPartition(t, p, int(when_ms)) for t, p in sorted(set(partitions))]
    if not tps:
        return {}
    try:
        found = consumer.offsets_for_times(tps, timeout=timeout)
    except ck.KafkaException as exc:
        raise request_error("cannot look offsets up by time", exc, where) from None
    out: dict[tuple[str, int], int | None] = {}
    for tp in found:
        if tp.error is not None:
            raise KafkaAdminError(f"cannot look up {tp.topic}-{tp.partition} by time at "
                                  f"{where}: {one_line(ck.KafkaException(tp.error))}")
        out[(tp.topic, tp.partition)] = int(tp.offset) if tp.offset >= 0 else None
    return out


RecordSample = tuple[int, "int | None", int, int]
"""The first record read at or after an offset: its offset and timestamp (epoch ms;
None when it has none), and the records and bytes (keys, values and headers) read from
there to size them."""

PROBE_FETCH_BYTES = 16 * 1024
"""What a probe fetches of a partition at a time: one record's timestamp and a sample of
sizes, not the 1 MiB a consumer fetches by default (times thousands of partitions). A
larger record still comes whole (Kafka returns at least one batch)."""


@contextmanager
def record_probe(bootstrap_servers: str, config: Mapping[str, Any] | None = None,
                 timeout: float = 10) -> Iterator[Any]:
    """One consumer for :func:`topic_state_with`, :func:`offsets_for_time_with` and
    :func:`records_at_with`: small fetches, end of partition reported, and an offset
    deleted meanwhile an error (``auto.offset.reset=error``) rather than a later record
    taken for it. Closed on exit; nothing is committed."""
    consumer = _consumer(bootstrap_servers, {
        **(config or {}), "enable.partition.eof": True, "auto.offset.reset": "error",
        "max.partition.fetch.bytes": PROBE_FETCH_BYTES, "fetch.wait.max.ms": 100}, None,
        timeout)
    try:
        yield consumer
    finally:
        consumer.close()


def records_at_with(consumer: Any, wanted: Iterable[tuple[str, int, int]], *,
                    timeout: float = 10, sample: int = 20,
                    ) -> dict[tuple[str, int, int], RecordSample]:
    """The first record at or after each (topic, partition, offset), through a
    :func:`record_probe` consumer: its offset and timestamp (Kafka's own: CreateTime or
    LogAppendTime, the one retention goes by), with up to ``sample`` records' sizes from
    the same fetch.

    One consumer for all: each round reads one offset per partition (a partition asked
    at several offsets takes several rounds, the consumer seeking between them). An
    offset with no record there (its end reached, only markers left, deleted meanwhile)
    or not answered within ``timeout`` is left out, and so are that partition's later
    offsets when it did not answer: one slow partition costs its own answer, not the
    others'."""
    todo = sorted(set(wanted))
    out: dict[tuple[str, int, int], RecordSample] = {}
    silent: set[tuple[str, int]] = set()
    while todo:
        round_: dict[tuple[str, int], int] = {}
        rest = []
        for t, p, o in todo:
            if (t, p) in silent:
                continue
            if (t, p) in round_:
                rest.append((t, p, o))
            else:
                round_[(t, p)] = o
        if not round_:
            break
        found, unanswered = _first_records(consumer, round_, timeout, sample)
        out.update({(t, p, round_[(t, p)]): v for (t, p), v in found.items()})
        silent |= unanswered
        todo = rest
    if silent:
        log.debug("no answer within %g s for %d partitions: %s", timeout, len(silent),
                  sorted(silent)[:8])
    return out


def _first_records(consumer: Any, offsets: Mapping[tuple[str, int], int], timeout: float,
                   sample: int) -> tuple[dict[tuple[str, int], RecordSample],
                                         set[tuple[str, int]]]:
    """One round of :func:`records_at_with`: what was found, and the partitions that did
    not answer within ``timeout``."""
    ck = confluent()
    consumer.assign([ck.TopicPartition(t, p, int(o)) for (t, p), o in sorted(offsets.items())])
    found: dict[tuple[str, int], list[Any]] = {}
    waiting = set(offsets)
    sampling = set(offsets)
    paused: list[Any] = []
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        full = []
        for msg in consumer.consume(num_messages=1000, timeout=0.05):
            key = (msg.topic(), msg.partition())
            if key not in sampling:
                continue
            if msg.error() is not None:
                if msg.error().code() in (ck.KafkaError._PARTITION_EOF,
                                          ck.KafkaError._AUTO_OFFSET_RESET):
                    waiting.discard(key)  # nothing there (deleted meanwhile: not a later one)
                    sampling.discard(key)
                continue  # a transient error: the deadline decides
            if msg.offset() < offsets[key]:
                continue  # fetched before the seek
            size = len(msg.key() or b"") + len(msg.value() or b"") + sum(
                len(k) + len(v or b"") for k, v in (msg.headers() or ()))
            if key not in found:
                kind, stamp = msg.timestamp()
                known = kind != ck.TIMESTAMP_NOT_AVAILABLE and stamp >= 0
                found[key] = [int(msg.offset()), int(stamp) if known else None, 1, size]
                waiting.discard(key)
            else:
                found[key][2] += 1
                found[key][3] += size
            if found[key][2] >= sample:
                sampling.discard(key)
                full.append(ck.TopicPartition(*key))
        if full:
            consumer.pause(full)  # sized: fetch no more of them
            paused += full
    if paused:
        consumer.resume(paused)  # a pause outlives the assignment: the next round's own
    consumer.assign([])
    return {k: (v[0], v[1], v[2], v[3]) for k, v in found.items()}, waiting


def admin_client(bootstrap_servers: str, config: Mapping[str, Any] | None = None) -> Any:
    """A confluent-kafka AdminClient with the caller's settings (security, SASL), its
    connect chatter at DEBUG."""
    ck = confluent()
    from confluent_kafka.admin import AdminClient

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "logger": _DebugLogger(),
                            **dict(config or {})}
    try:
        return AdminClient(conf)
    except (ck.KafkaException, ValueError, TypeError) as exc:
        raise KafkaAdminError(f"bad Kafka client configuration: {one_line(exc)}") from None


def commit_group(bootstrap_servers: str, group: str, offsets: Mapping[str, Mapping[int, int]],
                 config: Mapping[str, Any] | None = None, timeout: float = 10) -> None:
    """Commit ``offsets`` (topic -> partition -> next offset to read) for ``group``.

    The commit is made by a consumer outside the group's membership (generation -1),
    which brokers accept while the group has no active members; a group that is in
    use by running consumers is refused with the broker's error.
    """
    if not isinstance(group, str) or not group.strip():
        # librdkafka aborts the process on an empty group id: refuse it first.
        raise KafkaAdminError("the consumer group id must not be empty")
    try:
        timeout = parse_timeout(timeout)
    except ValueError as exc:
        raise KafkaAdminError(str(exc)) from None
    ck = confluent()
    tps = [
        ck.TopicPartition(topic, int(partition), int(offset))
        for topic in sorted(offsets)
        for partition, offset in sorted(offsets[topic].items())
        if int(offset) >= 0
    ]
    if not tps:
        raise KafkaAdminError("nothing to commit: no partition has a concrete offset")
    consumer = _consumer(bootstrap_servers, config, group, timeout)
    try:
        # Fail fast on an unreachable cluster: commit() itself would wait for the
        # group coordinator much longer than ``timeout``.
        cluster_metadata(consumer, bootstrap_servers, timeout)
        try:
            result = consumer.commit(offsets=tps, asynchronous=False)
        except ck.KafkaException as exc:
            raise request_error(f"cannot commit offsets for group {group!r}", exc,
                         bootstrap_servers) from None
        failed = [tp for tp in result or () if tp.error is not None]
        if failed:
            first = failed[0]
            raise KafkaAdminError(
                f"cannot commit offsets for group {group!r}: {first.topic}-{first.partition}: "
                f"{one_line(ck.KafkaException(first.error))}"
                + (f" (and {len(failed) - 1} more partitions)" if len(failed) > 1 else "")
            )
        log.info("committed %d partition offsets for group %s", len(tps), group)
    finally:
        consumer.close()


def committed_offsets(bootstrap_servers: str, group: str, topics: Iterable[str],
                      config: Mapping[str, Any] | None = None,
                      timeout: float = 10) -> KafkaOffsets:
    """The offsets ``group`` has committed for ``topics`` (partitions without one left out)."""
    ck = confluent()
    consumer = _consumer(bootstrap_servers, config, group, timeout)
    try:
        metadata = cluster_metadata(consumer, bootstrap_servers, timeout)
        tps = [
            ck.TopicPartition(topic, partition)
            for topic in sorted(set(topics))
            if topic in metadata.topics and metadata.topics[topic].error is None
            for partition in sorted(metadata.topics[topic].partitions)
        ]
        if not tps:
            return {}
        try:
            result = consumer.committed(tps, timeout=timeout)
        except ck.KafkaException as exc:
            raise request_error(f"cannot read the offsets of group {group!r}", exc,
                         bootstrap_servers) from None
    finally:
        consumer.close()
    out: KafkaOffsets = {}
    for tp in result:
        if tp.error is None and tp.offset != _OFFSET_INVALID and tp.offset >= 0:
            out.setdefault(tp.topic, {})[tp.partition] = int(tp.offset)
    return out


__all__ = [
    "KafkaAdminError",
    "KafkaUnavailable",
    "PartitionState",
    "admin_client",
    "RecordSample",
    "TimeLookup",
    "TopicState",
    "commit_group",
    "committed_offsets",
    "create_topic",
    "offsets_for_time",
    "offsets_for_time_with",
    "PROBE_FETCH_BYTES",
    "record_probe",
    "records_at_with",
    "partition_count",
    "topic_state",
    "topic_state_with",
]
