"""A whole checkpoint read and checked: :func:`read_checkpoint`, and the Kafka end
offsets of one of its batches."""

from __future__ import annotations

import logging
import os
from typing import Any

from ..errors import CheckpointError
from ..offsets import kafka_offsets, looks_like_kafka
from ._parse import gaps, parse_commit_file, parse_offsets_file, read_initial_offsets, read_query_id
from .model import Checkpoint, CheckpointBatch, Malformed
from .store import Store, batch_ids, decode, open_store

log = logging.getLogger(__name__)


def read_checkpoint(path: str | os.PathLike[str], *, fs: Any = None) -> Checkpoint:
    """Read a checkpoint directory's metadata, offsets and commits.

    ``fs`` is an fsspec filesystem to read ``path`` with; by default local paths are
    read directly and URLs through fsspec. Raises CheckpointError when the directory is
    missing or not a checkpoint, ``metadata`` is garbage, or a committed (or non-final)
    batch's offsets cannot be parsed. An unreadable *final, uncommitted* offsets file is
    what a crash while writing it leaves: that batch is kept with ``problem`` set and
    reading goes on.
    """
    store, root = open_store(path, fs)
    shown = os.fspath(path)
    offsets_dir, commits_dir = _check_layout(store, root, shown)
    query_id = read_query_id(store, root)
    # Commits first: Spark writes offsets/N before commits/N, so listing in this order
    # never sees a commit whose offsets file appeared after the listing (a live query).
    commit_ids = set(batch_ids(store, commits_dir))
    offset_ids = batch_ids(store, offsets_dir)
    problems: list[str] = []
    batches = _read_batches(store, offsets_dir, (offset_ids, commit_ids), problems, shown)

    _check_source_counts(batches, problems, shown)
    missing = gaps(b.batch_id for b in batches)
    if missing:
        problems.append(f"offsets files missing for batches {_ranges(missing)}")
    last_id = offset_ids[-1] if offset_ids else None
    orphans = sorted(i for i in commit_ids if last_id is None or i > last_id)
    if orphans:
        problems.append(f"commits without offsets for batches {_ranges(orphans)}")
    if commit_ids:
        _check_last_commit(store, commits_dir, max(commit_ids), problems)

    return Checkpoint(
        path=shown,
        query_id=query_id,
        batches=tuple(batches),
        problems=tuple(problems),
        initial_offsets=read_initial_offsets(store, root),
    )


def _check_layout(store: Store, root: str, shown: str) -> tuple[str, str]:
    """The offsets/ and commits/ paths of a checkpoint; CheckpointError when ``root`` is
    missing, not a directory, or holds neither metadata nor offsets/ nor commits/."""
    kind = store.kind(root)
    if kind is None:
        raise CheckpointError(f"checkpoint directory does not exist: {shown}")
    if kind != "dir":
        raise CheckpointError(f"checkpoint location is not a directory: {shown}")
    offsets_dir = store.join(root, "offsets")
    commits_dir = store.join(root, "commits")
    offsets_kind = store.kind(offsets_dir)
    commits_kind = store.kind(commits_dir)
    metadata_kind = store.kind(store.join(root, "metadata"))
    if offsets_kind is None and commits_kind is None and metadata_kind is None:
        raise CheckpointError(
            f"not a Spark checkpoint (no metadata file, offsets/ or commits/): {shown}"
        )
    for sub, sub_kind in (("offsets", offsets_kind), ("commits", commits_kind)):
        if sub_kind == "file":
            raise CheckpointError(f"not a Spark checkpoint ({sub} is a file): {shown}")
    return offsets_dir, commits_dir


def _read_batches(store: Store, offsets_dir: str, ids: tuple[list[int], set[int]],
                  problems: list[str], shown: str) -> list[CheckpointBatch]:
    """Each offsets file as a batch (``ids``: offsets files' and commits' batch ids). An
    unreadable final, uncommitted one is kept with ``problem`` set (a crash while
    writing it); any other unreadable one raises CheckpointError."""
    offset_ids, commit_ids = ids
    batches: list[CheckpointBatch] = []
    last_id = offset_ids[-1] if offset_ids else None
    # All at once: on an object store, one request per file, in flight together.
    contents = store.read_many([store.join(offsets_dir, str(i)) for i in offset_ids])
    for batch_id in offset_ids:
        committed = batch_id in commit_ids
        file_path = store.join(offsets_dir, str(batch_id))
        try:
            data = contents[file_path]
            if isinstance(data, BaseException):
                raise data
            parsed = parse_offsets_file(decode(data))
        except FileNotFoundError:
            log.debug("%s vanished while reading (purged by a running query?)", file_path)
            continue
        except OSError as exc:
            raise CheckpointError(f"{file_path}: cannot read: {exc}") from exc
        except Malformed as exc:
            if committed or batch_id != last_id:
                state = "committed" if committed else "non-final"
                raise CheckpointError(
                    f"{file_path}: offsets of {state} batch {batch_id} are unreadable: {exc}"
                ) from None
            problem = f"offsets/{batch_id}: {exc}; treated as an unfinished batch"
            log.warning("%s: %s", shown, problem)
            problems.append(problem)
            batches.append(_unreadable(batch_id, str(exc)))
            continue
        batches.append(
            CheckpointBatch(
                batch_id=batch_id, committed=committed, version=parsed.version,
                batch_timestamp_ms=parsed.timestamp_ms,
                batch_watermark_ms=parsed.watermark_ms, conf=parsed.conf,
                offsets=parsed.offsets, raw_offsets=parsed.raw, source_ids=parsed.source_ids,
            )
        )
    return batches


def _unreadable(batch_id: int, reason: str, version: int = 0) -> CheckpointBatch:
    """An offsets file kept for the record but with no offsets to trust (version 0: unknown)."""
    return CheckpointBatch(
        batch_id=batch_id,
        committed=False,
        version=version,
        batch_timestamp_ms=None,
        batch_watermark_ms=None,
        conf={},
        offsets=(),
        raw_offsets=(),
        problem=reason,
    )


def _check_source_counts(batches: list[CheckpointBatch], problems: list[str], shown: str) -> None:
    """Flag batches whose source count differs from the batch before.

    A query's sources cannot change within a checkpoint, so a final uncommitted batch
    with another count was most likely cut off at a line boundary: it is marked
    unreadable rather than trusted. Elsewhere the difference is only reported.
    """
    previous: CheckpointBatch | None = None
    for index, batch in enumerate(batches):
        if not batch.readable:
            continue
        if previous is not None and len(batch.offsets) != len(previous.offsets):
            what = (
                f"offsets/{batch.batch_id} has {len(batch.offsets)} sources, "
                f"batch {previous.batch_id} has {len(previous.offsets)}"
            )
            if index == len(batches) - 1 and not batch.committed:
                reason = f"{what} (truncated?)"
                problems.append(f"{what}; treated as an unfinished batch")
                log.warning("%s: %s", shown, problems[-1])
                batches[index] = _unreadable(batch.batch_id, reason, batch.version)
                continue
            problems.append(what)
        previous = batch


def _check_last_commit(store: Store, commits_dir: str, batch_id: int, problems: list[str]) -> None:
    """Spark reads the latest commit on restart and fails on a torn one: report it."""
    path = store.join(commits_dir, str(batch_id))
    try:
        text = decode(store.read(path))
        if not text.strip():
            raise Malformed("empty file")
        parse_commit_file(text)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc}") from exc
    except Malformed as exc:
        problems.append(f"commits/{batch_id}: {exc} (Spark would fail to restart from it)")


def _ranges(ids: list[int]) -> str:
    """Compact "3-5, 9" rendering, so a long gap stays a one-line message."""
    spans: list[tuple[int, int]] = []
    for i in ids:
        if spans and i == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], i)
        else:
            spans.append((i, i))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def kafka_end_offsets(batch: CheckpointBatch) -> dict[int, dict[str, dict[int, int]]]:
    """Source index -> topic -> partition -> offset, for the sources shaped like Kafka.

    These are the offsets batch ``batch`` read up to (exclusive): a new query started
    with them as ``startingOffsets`` continues right after that batch.
    """
    return {
        index: kafka_offsets(offset)
        for index, offset in enumerate(batch.offsets)
        if looks_like_kafka(offset)
    }
