"""A ``commits/N`` file read (its log version and its metadata), and the state store
settings a checkpoint runs with: what a savepoint's export, a restore and a repartition
all read of a checkpoint's state, defined once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
"""The session setting (recorded in each ``offsets/N``'s conf) naming the state store."""
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
"""Spark's RocksDB state store: the one transformWithState (Spark refuses the
HDFS-backed provider for it), the state writer and the offline repartition take."""
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
"""Spark's default state store, as a checkpoint whose conf names none runs on."""
FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
"""RocksDB's checkpoint format: v2 commits (``commits/N`` starting ``v2``) name each
partition's state files by id, and Spark's reader follows them only when the SESSION
says so (it reads the format from this setting, not from the checkpoint)."""


@dataclass(frozen=True)
class Commit:
    """A ``commits/N`` file: its log version (2: RocksDB checkpoint format v2) and its
    metadata (``nextBatchWatermarkMs`` and, in v2, the stores' checkpoint ids; empty
    when it holds none or cannot be parsed)."""

    version: int
    metadata: dict[str, Any] = field(default_factory=dict)


def commit_version(data: bytes) -> int:
    """A ``commits/N`` file's log version; 1 when it cannot be told."""
    head = data.split(b"\n", 1)[0].strip()
    return int(head[1:]) if head[:1] == b"v" and head[1:].isdigit() else 1


def parse_commit(data: bytes) -> Commit:
    """A ``commits/N`` file's bytes as a :class:`Commit` (pure)."""
    lines = data.decode("utf-8", "replace").splitlines()
    try:
        found = json.loads(lines[1]) if len(lines) > 1 else None
    except ValueError:
        found = None
    return Commit(commit_version(data), found if isinstance(found, dict) else {})


def read_commit(checkpoint: str, batch_id: int) -> Commit | None:
    """``checkpoint``'s ``commits/batch_id``, None when it is not there."""
    from .store import open_store

    store, root = open_store(checkpoint, None)
    path = store.join(root, "commits", str(batch_id))
    if store.kind(path) != "file":
        return None
    return parse_commit(store.read(path))
