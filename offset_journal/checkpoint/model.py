"""What a checkpoint holds, as plain data: its batches and what is wrong with them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import CheckpointError


def source_sort_key(source_id: str) -> tuple[int, int, str]:
    """Numeric ids in numeric order ("10" after "2"), named ones after them."""
    if source_id.isdigit():
        return (0, int(source_id), "")
    return (1, 0, source_id)


class Malformed(ValueError):
    """A log file's content is not what Spark writes (internal; becomes a problem or error)."""


@dataclass(frozen=True)
class CheckpointBatch:
    """One ``offsets/N`` file, with whether ``commits/N`` exists.

    ``offsets`` holds each source's offset as parsed JSON (None for ``-``) in source
    order; ``raw_offsets`` the same lines verbatim, for output that must not reformat
    them. A batch whose file could not be read (a crash mid-write) has empty offsets and
    says why in ``problem``.
    """

    batch_id: int
    committed: bool
    version: int
    batch_timestamp_ms: int | None
    batch_watermark_ms: int | None
    conf: dict[str, Any]
    offsets: tuple[Any, ...]
    raw_offsets: tuple[str, ...]
    source_ids: tuple[str, ...] = ()
    problem: str | None = None

    @property
    def readable(self) -> bool:
        """False for an offsets file that was empty or garbage (see ``problem``)."""
        return self.problem is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (offsets stay parsed, so they nest as JSON, not as strings)."""
        return {
            "batch_id": self.batch_id,
            "committed": self.committed,
            "version": self.version,
            "batch_timestamp_ms": self.batch_timestamp_ms,
            "batch_watermark_ms": self.batch_watermark_ms,
            "conf": dict(self.conf),
            "source_ids": list(self.source_ids),
            "offsets": list(self.offsets),
            "raw_offsets": list(self.raw_offsets),
            "problem": self.problem,
        }


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint directory says about its query's batches.

    ``batches`` has one entry per ``offsets/N`` file, sorted by batch id. ``problems``
    lists what was odd but not fatal (an unreadable trailing offsets file, gaps);
    ``initial_offsets`` maps source id to the Kafka initial offsets found in
    ``sources/<id>/0``.
    """

    path: str
    query_id: str | None
    batches: tuple[CheckpointBatch, ...]
    problems: tuple[str, ...] = ()
    initial_offsets: Mapping[str, Any] = field(default_factory=dict)

    @property
    def last_committed(self) -> CheckpointBatch | None:
        """The highest batch that finished: its offsets are safe to restart after."""
        for batch in reversed(self.batches):
            if batch.committed:
                return batch
        return None

    @property
    def last_planned(self) -> CheckpointBatch | None:
        """The highest batch with readable offsets, finished or not.

        Spark re-runs an unfinished batch with the same offsets on restart, so this is
        where the old checkpoint would have gone next. An unreadable trailing file is
        skipped: it holds no offsets to plan from.
        """
        for batch in reversed(self.batches):
            if batch.readable:
                return batch
        return None

    @property
    def has_offsets(self) -> bool:
        """True when any offsets file exists: Spark then ignores ``startingOffsets``."""
        return bool(self.batches)

    def committed_batches(self) -> tuple[CheckpointBatch, ...]:
        """The batches whose commit file exists, in batch order."""
        return tuple(b for b in self.batches if b.committed)

    def batch(self, batch_id: int) -> CheckpointBatch | None:
        """The batch with this id, or None when its offsets file is not there."""
        for b in self.batches:
            if b.batch_id == batch_id:
                return b
        return None

    def source_ids(self) -> tuple[str, ...]:
        """The query's source ids ("0", "1", ... for v1 logs), from any readable batch."""
        for b in reversed(self.batches):
            if b.readable:
                return b.source_ids
        return tuple(sorted(self.initial_offsets, key=source_sort_key))

    def start_offsets_of(self, batch_id: int) -> tuple[Any, ...] | None:
        """The offsets batch ``batch_id`` started from, one per source.

        A batch starts where the previous one ended, so this is batch N-1's offsets
        (``batch_id`` itself need not exist: ``last + 1`` gives where the next batch
        would start). For batch 0 it is each source's initial offsets from
        ``sources/<i>/0`` (None for a source without any). None when batch N-1's file
        is gone (Spark purges old batches) or unreadable.
        """
        if batch_id < 0:
            raise CheckpointError(f"batch id must be >= 0, got {batch_id}")
        if batch_id == 0:
            ids = self.source_ids()
            if not ids:
                return None
            return tuple(self.initial_offsets.get(sid) for sid in ids)
        previous = self.batch(batch_id - 1)
        if previous is None or not previous.readable:
            return None
        return previous.offsets

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (for CLI output and reports)."""
        last_committed = self.last_committed
        last_planned = self.last_planned
        return {
            "path": self.path,
            "query_id": self.query_id,
            "has_offsets": self.has_offsets,
            "last_committed": last_committed.batch_id if last_committed else None,
            "last_planned": last_planned.batch_id if last_planned else None,
            "problems": list(self.problems),
            "initial_offsets": dict(self.initial_offsets),
            "batches": [b.to_dict() for b in self.batches],
        }


# --------------------------------------------------------------------------- storage
