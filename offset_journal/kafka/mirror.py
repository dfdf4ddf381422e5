"""MirrorMaker 2's offset syncs, read as plain data (pure: no client, no I/O).

MM2 replicates a topic of a source cluster (alias ``primary``) to a replica, where a
record gets another offset. Every so often it writes an *offset sync* to
``mm2-offset-syncs.<alias>.internal``: "upstream offset U of this partition is
downstream offset D". The syncs topic lives on the replica when MM2 runs with
``offset-syncs.topic.location = target``, and only then does it outlive the source
cluster; with MM2's default (``source``) it is lost with the cluster it describes.

A sync is written for a partition's first record, then whenever the two clusters'
offsets drift apart by ``offset.lag.max`` or more records (100 by default) or stop
moving in step (a gap upstream, a reset downstream). So for any upstream offset X
there is a sync (U, D) with U <= X close below it, and X's record lies at or after
D + 1 on the replica (X > U) or exactly at D (X == U): starting there skips nothing and
reads again at most X - U - 1 records the old job had already read.

Records (Kafka's protocol ``Struct`` encoding, big-endian): key = topic (int16 length,
UTF-8) + partition (int32); value = upstream offset (int64) + downstream offset (int64).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..errors import InvalidValueError

ReplicationPolicy = Literal["default", "identity"]
"""How MM2 names a replicated topic: ``default`` (DefaultReplicationPolicy:
``<alias>.<topic>``) or ``identity`` (IdentityReplicationPolicy: the same name)."""
REPLICATION_POLICIES: tuple[ReplicationPolicy, ...] = ("default", "identity")
POLICY_DEFAULT: ReplicationPolicy = "default"
POLICY_IDENTITY: ReplicationPolicy = "identity"

_INT64 = struct.Struct(">qq")
_KEY_HEAD = struct.Struct(">h")
_PARTITION = struct.Struct(">i")


class SyncFormatError(ValueError):
    """An offset-sync record that is not in MM2's format."""


@dataclass(frozen=True, order=True)
class OffsetSync:
    """Upstream offset ``upstream`` of ``topic``/``partition`` (source cluster names)
    is ``downstream`` on the replica."""

    topic: str
    partition: int
    upstream: int
    downstream: int


SyncIndex = Mapping[tuple[str, int], Sequence[tuple[int, int]]]
"""(source topic, partition) -> [(upstream, downstream), ...] sorted by upstream."""


def offset_syncs_topic(alias: str) -> str:
    """The syncs topic MM2 writes for source cluster ``alias`` on the replica
    (``offset-syncs.topic.location = target``)."""
    return f"mm2-offset-syncs.{alias}.internal"


def replica_topic(topic: str, alias: str, policy: ReplicationPolicy) -> str:
    """The replica's name of the source cluster's ``topic``."""
    return topic if policy == POLICY_IDENTITY else f"{alias}.{topic}"


def check_alias(alias: str) -> str:
    """``alias`` when MM2 could have named a cluster so; ValueError otherwise."""
    if not alias or not alias.strip() or alias != alias.strip() or "." in alias \
            or not alias.isprintable():
        raise InvalidValueError(f"not an MM2 cluster alias: {alias!r} (the name given to the "
                         "source cluster in MM2's `clusters` setting, such as primary)")
    return alias


def read_string(buf: bytes, at: int) -> tuple[str, int]:
    """A Kafka protocol STRING at ``at`` (int16 length, UTF-8) and the offset after it;
    SyncFormatError when there is none."""
    try:
        (length,) = _KEY_HEAD.unpack_from(buf, at)
        if length < 0 or len(buf) < at + 2 + length:
            raise SyncFormatError(f"a {length}-byte string in {len(buf) - at} bytes")
        return buf[at + 2:at + 2 + length].decode("utf-8"), at + 2 + length
    except (struct.error, UnicodeDecodeError) as exc:
        raise SyncFormatError(f"not a protocol string: {exc}") from None


def decode_sync(key: bytes, value: bytes) -> OffsetSync:
    """One record of the syncs topic; SyncFormatError when it is not one."""
    topic, at = read_string(key, 0)
    try:
        if len(key) != at + 4:
            raise SyncFormatError(f"offset-sync key of {len(key)} bytes for a "
                                  f"{at - 2}-byte topic name")
        (partition,) = _PARTITION.unpack_from(key, at)
        if len(value) != _INT64.size:
            raise SyncFormatError(f"offset-sync value of {len(value)} bytes, not 16")
        upstream, downstream = _INT64.unpack(value)
    except struct.error as exc:
        raise SyncFormatError(f"not an offset sync: {exc}") from None
    if partition < 0 or upstream < 0 or downstream < 0:
        raise SyncFormatError(f"offset sync with a negative number: {topic}-{partition} "
                              f"{upstream} -> {downstream}")
    return OffsetSync(topic, partition, upstream, downstream)


def encode_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    """The record MM2 writes for ``sync`` (for tests and fixtures)."""
    name = sync.topic.encode("utf-8")
    return (_KEY_HEAD.pack(len(name)) + name + _PARTITION.pack(sync.partition),
            _INT64.pack(sync.upstream, sync.downstream))


def index_syncs(syncs: Iterable[OffsetSync]) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """Syncs by partition, sorted by upstream offset. In the topic's order both offsets
    only grow while MM2 copies one log to one log; a sync where either goes back (the
    replica's topic reset, the source topic recreated, a task replaying from its last
    commit) ends the history before it: only what came after describes the replica
    now, and mixing the two could translate an offset past its record."""
    by_partition: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for s in syncs:  # in the topic's order: later syncs describe the replica's present
        pairs = by_partition.setdefault((s.topic, s.partition), [])
        if pairs and (s.downstream < pairs[-1][1] or s.upstream < pairs[-1][0]):
            pairs.clear()
        pairs.append((s.upstream, s.downstream))
    return {key: sorted(set(pairs)) for key, pairs in by_partition.items()}


@dataclass(frozen=True)
class Translated:
    """One journaled offset on the replica: ``offset`` (None: no sync at or below the
    journaled offset, so the replica's earliest) and at most ``reread`` records the old
    job had already read."""

    offset: int | None
    reread: int | None
    sync: tuple[int, int] | None


def translate_offset(journaled: int, pairs: Sequence[tuple[int, int]]) -> Translated:
    """Where the record at upstream offset ``journaled`` (the next one the old job
    would have read) is on the replica, never after it: the downstream offset of the
    last sync at or below it, plus one when that sync is for an earlier record."""
    at = bisect.bisect_right(pairs, (journaled, float("inf"))) - 1
    if at < 0:
        return Translated(None, None, None)
    upstream, downstream = pairs[at]
    if upstream == journaled:
        return Translated(downstream, 0, (upstream, downstream))
    return Translated(downstream + 1, journaled - upstream - 1, (upstream, downstream))
