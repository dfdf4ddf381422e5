"""Read Spark Structured Streaming checkpoint directories as plain data, without Spark.

A checkpoint is the other record of where a query got to: when the journal is missing
or behind, the checkpoint's ``offsets``/``commits`` logs say which batches finished and
what they read. Before starting a query on a *new* checkpoint it also matters whether
the location already holds offsets (Spark would then ignore ``startingOffsets``) and
whether a file sink's output already logs batches (the new query's first batches would
be skipped as "already committed").

Layout read here (all written by Spark's HDFSMetadataLog and friends)::

    metadata          {"id": "<query id>"}
    offsets/N         v1 | metadata JSON | one line per source: offset JSON or "-"
                      (v2, Spark 4.1+: "<sourceId>:<offset JSON or ->" per source)
    commits/N         v1 | {"nextBatchWatermarkMs": 0}   written once batch N finished
    sources/<i>/0     Kafka: NUL byte, v1, initial offsets JSON (other sources keep
                      other things there: the file source its file list, rate its
                      creation time)

Only names made of digits are log files; ``.N.crc``, ``.N.<uuid>.tmp`` and the like
are ignored. Local paths are read directly; URLs (``s3://``, ``hdfs://``, ``memory://``
...) go through fsspec, imported only when needed.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from .errors import CheckpointError
from .offsets import kafka_offsets, looks_like_kafka
from .values import url_scheme

log = logging.getLogger(__name__)

__all__ = [
    "Checkpoint",
    "CheckpointBatch",
    "CheckpointError",
    "file_sink_metadata",
    "is_new_checkpoint",
    "kafka_end_offsets",
    "read_checkpoint",
]

# Offset log versions this reader understands: v1 (one line per source, in source
# order) and v2 (Spark's OffsetMap: "<sourceId>:<offset>" per line).
_KNOWN_OFFSET_VERSIONS = (1, 2)
# Spark's marker for "this source has no offset yet" (OffsetSeqLog.SERIALIZED_VOID_OFFSET).
_VOID = "-"
# sources/<i>/0 is normally tiny for Kafka; the file source keeps its file list there.
_MAX_INITIAL_OFFSET_BYTES = 16 * 1024 * 1024

_BATCH_NAME = re.compile(r"[0-9]+")
_SINK_LOG_NAME = re.compile(r"([0-9]+)(?:\.compact)?")
_VERSION_LINE = re.compile(r"v([0-9]+)")



class _Malformed(ValueError):
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
        return tuple(sorted(self.initial_offsets, key=_source_sort_key))

    def start_offsets_of(self, batch_id: int) -> tuple[Any, ...] | None:
        """The offsets batch ``batch_id`` started from, one per source.

        A batch starts where the previous one ended, so this is batch N-1's offsets
        (``batch_id`` itself need not exist: ``last + 1`` gives where the next batch
        would start). For batch 0 it is each source's initial offsets from
        ``sources/<i>/0`` (None for a source without any). None when batch N-1's file
        is gone (Spark purges old batches) or unreadable.
        """
        if batch_id < 0:
            raise ValueError(f"batch id must be >= 0, got {batch_id}")
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


class _Store:
    """The few file operations the reader needs, over the local disk or fsspec."""

    def __init__(self, fs: Any = None) -> None:
        self.fs = fs

    def join(self, base: str, *parts: str) -> str:
        if self.fs is None:
            return os.path.join(base, *parts)
        return posixpath.join(base, *parts)

    def kind(self, path: str) -> str | None:
        """ "dir", "file" or None (missing)."""
        if self.fs is None:
            if os.path.isdir(path):
                return "dir"
            return "file" if os.path.exists(path) else None
        if self.fs.isdir(path):
            return "dir"
        return "file" if self.fs.exists(path) else None

    def files(self, path: str) -> list[str]:
        """Names of the regular files directly in ``path`` ([] when it is missing)."""
        return self._entries(path, "file")

    def dirs(self, path: str) -> list[str]:
        """Names of the directories directly in ``path``."""
        return self._entries(path, "directory")

    def _entries(self, path: str, kind: str) -> list[str]:
        if self.fs is None:
            try:
                with os.scandir(path) as entries:
                    return [e.name for e in entries
                            if (e.is_file() if kind == "file" else e.is_dir())]
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            listed = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        return [
            str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
            for e in listed
            if e.get("type") == kind
        ]

    def size(self, path: str) -> int:
        if self.fs is None:
            return os.path.getsize(path)
        return int(self.fs.size(path))

    def read(self, path: str) -> bytes:
        if self.fs is None:
            with open(path, "rb") as f:
                return f.read()
        return bytes(self.fs.cat_file(path))


def _open(path: str | os.PathLike[str], fs: Any) -> tuple[_Store, str]:
    """Pick local or fsspec access for ``path``; fsspec is optional, so import lazily."""
    text = os.fspath(path)
    if fs is not None:
        return _Store(fs), text
    scheme = url_scheme(text)
    if scheme is None:
        return _Store(), text
    try:
        import fsspec
    except ImportError:
        if scheme == "file":
            # file: URLs (Spark prints paths this way) need no extra package.
            return _Store(), unquote(urlparse(text).path)
        raise CheckpointError(
            f"reading {scheme}:// paths needs fsspec (pip install fsspec): {text}"
        ) from None
    try:
        filesystem, root = fsspec.core.url_to_fs(text)
    except (ImportError, ValueError) as exc:
        raise CheckpointError(f"cannot open {text} with fsspec: {exc}") from exc
    return _Store(filesystem), str(root)


def _batch_ids(store: _Store, directory: str) -> list[int]:
    """Batch ids of a metadata log: files named by digits only (crc and temp files skipped)."""
    ids = []
    for name in store.files(directory):
        if _BATCH_NAME.fullmatch(name):
            ids.append(int(name))
        else:
            log.debug("ignoring %s in %s", name, directory)
    return sorted(ids)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Malformed(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _snippet(text: str) -> str:
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class _Offsets:
    version: int
    timestamp_ms: int | None
    watermark_ms: int | None
    conf: dict[str, Any]
    source_ids: tuple[str, ...]
    offsets: tuple[Any, ...]
    raw: tuple[str, ...]


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _source_sort_key(source_id: str) -> tuple[int, int, str]:
    """Numeric ids in numeric order ("10" after "2"), named ones after them."""
    if source_id.isdigit():
        return (0, int(source_id), "")
    return (1, 0, source_id)


def _no_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def _loads(text: str) -> Any:
    """JSON as Spark writes it: NaN and Infinity are not JSON, and neither is nesting
    too deep to parse (both raise JSONDecodeError, like any other garbage)."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None


def _parse_offset(line: str, what: str) -> Any:
    if line == _VOID:
        return None
    try:
        return _loads(line)
    except json.JSONDecodeError:
        raise _Malformed(f"{what} is not JSON: {_snippet(line)}") from None


def _parse_offsets_file(text: str) -> _Offsets:
    """Parse an ``offsets/N`` file as OffsetSeqLog writes it (v1 or v2)."""
    if not text.strip():
        raise _Malformed("empty file")
    lines = [line.rstrip("\r") for line in text.split("\n")]
    if lines[-1] == "" and len(lines) > 1:
        lines.pop()  # Spark writes no final newline, but tolerate one
    version_match = _VERSION_LINE.fullmatch(lines[0].strip())
    if version_match is None:
        raise _Malformed(f"first line is not a log version like v1: {_snippet(lines[0])}")
    version = int(version_match.group(1))
    if version not in _KNOWN_OFFSET_VERSIONS:
        raise _Malformed(f"unsupported offset log version v{version}")
    if len(lines) < 2:
        raise _Malformed("truncated after the version line")

    meta: dict[str, Any] = {}
    if lines[1].strip():
        try:
            parsed = _loads(lines[1])
        except json.JSONDecodeError:
            raise _Malformed(f"batch metadata is not JSON: {_snippet(lines[1])}") from None
        if not isinstance(parsed, dict):
            raise _Malformed(f"batch metadata is not a JSON object: {_snippet(lines[1])}")
        meta = parsed
    conf = meta.get("conf")

    source_lines = lines[2:]
    if not source_lines:
        raise _Malformed("no source offset lines (truncated?)")
    if version == 1:
        ids = tuple(str(i) for i in range(len(source_lines)))
        raw = tuple(source_lines)
    else:
        pairs = []
        for line in source_lines:
            sid, sep, offset = line.partition(":")
            if not sep or not sid:
                raise _Malformed(f"v2 source line is not <sourceId>:<offset>: {_snippet(line)}")
            pairs.append((sid, offset))
        pairs.sort(key=lambda p: _source_sort_key(p[0]))
        ids = tuple(p[0] for p in pairs)
        raw = tuple(p[1] for p in pairs)
    offsets = tuple(
        _parse_offset(line, f"source {sid} offset") for sid, line in zip(ids, raw, strict=True)
    )
    return _Offsets(
        version=version,
        timestamp_ms=_int_or_none(meta.get("batchTimestampMs")),
        watermark_ms=_int_or_none(meta.get("batchWatermarkMs")),
        conf=dict(conf) if isinstance(conf, dict) else {},
        source_ids=ids,
        offsets=offsets,
        raw=raw,
    )


def _parse_commit_file(text: str) -> None:
    """Check a ``commits/N`` file: a version line, then optional JSON metadata."""
    lines = text.split("\n")
    if not _VERSION_LINE.fullmatch(lines[0].strip()):
        raise _Malformed(f"first line is not a log version like v1: {_snippet(lines[0])}")
    if len(lines) > 1 and lines[1].strip():
        try:
            _loads(lines[1])
        except json.JSONDecodeError:
            raise _Malformed(f"commit metadata is not JSON: {_snippet(lines[1])}") from None


def _parse_initial_offset(data: bytes) -> Any:
    """Kafka initial offsets from ``sources/<i>/0``, else None.

    Kafka writes a NUL byte (for Spark 2.1.0 compatibility), ``v1`` and the offsets JSON.
    Only Kafka-shaped content is taken: other sources keep unrelated data in that file.
    """
    try:
        text = data.decode("utf-8").lstrip("\x00")
    except UnicodeDecodeError:
        return None
    head, sep, rest = text.partition("\n")
    body = rest if sep and _VERSION_LINE.fullmatch(head.strip()) else text
    body = body.strip()
    if not body or "\n" in body:
        return None
    try:
        obj = _loads(body)
    except json.JSONDecodeError:
        return None
    return obj if looks_like_kafka(obj) else None


# --------------------------------------------------------------------------- reading


def _read_query_id(store: _Store, root: str) -> str | None:
    path = store.join(root, "metadata")
    if store.kind(path) != "file":
        return None
    try:
        text = _decode(store.read(path)).strip()
        obj = _loads(text) if text else None
    except (_Malformed, json.JSONDecodeError):
        obj = None
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise CheckpointError(f'{path}: not a stream metadata file (expected {{"id": ...}})')
    return str(obj["id"])


def _read_initial_offsets(store: _Store, root: str) -> dict[str, Any]:
    sources_dir = store.join(root, "sources")
    found: dict[str, Any] = {}
    for sid in sorted(store.dirs(sources_dir), key=_source_sort_key):
        path = store.join(sources_dir, sid, "0")
        try:
            if store.size(path) > _MAX_INITIAL_OFFSET_BYTES:
                log.debug("not reading %s: too large to be Kafka initial offsets", path)
                continue
            data = store.read(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot read: {exc}") from exc
        offset = _parse_initial_offset(data)
        if offset is not None:
            found[sid] = offset
    return found


def _gaps(ids: Iterable[int]) -> list[int]:
    ordered = sorted(ids)
    if not ordered:
        return []
    present = set(ordered)
    return [i for i in range(ordered[0], ordered[-1] + 1) if i not in present]


def read_checkpoint(path: str | os.PathLike[str], *, fs: Any = None) -> Checkpoint:
    """Read a checkpoint directory's metadata, offsets and commits.

    ``fs`` is an fsspec filesystem to read ``path`` with; by default local paths are
    read directly and URLs through fsspec. Raises CheckpointError when the directory is
    missing or not a checkpoint, ``metadata`` is garbage, or a committed (or non-final)
    batch's offsets cannot be parsed. An unreadable *final, uncommitted* offsets file is
    what a crash while writing it leaves: that batch is kept with ``problem`` set and
    reading goes on.
    """
    store, root = _open(path, fs)
    shown = os.fspath(path)
    offsets_dir, commits_dir = _check_layout(store, root, shown)
    query_id = _read_query_id(store, root)
    # Commits first: Spark writes offsets/N before commits/N, so listing in this order
    # never sees a commit whose offsets file appeared after the listing (a live query).
    commit_ids = set(_batch_ids(store, commits_dir))
    offset_ids = _batch_ids(store, offsets_dir)
    problems: list[str] = []
    batches = _read_batches(store, offsets_dir, (offset_ids, commit_ids), problems, shown)

    _check_source_counts(batches, problems, shown)
    missing = _gaps(b.batch_id for b in batches)
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
        initial_offsets=_read_initial_offsets(store, root),
    )


def _check_layout(store: _Store, root: str, shown: str) -> tuple[str, str]:
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


def _read_batches(store: _Store, offsets_dir: str, ids: tuple[list[int], set[int]],
                  problems: list[str], shown: str) -> list[CheckpointBatch]:
    """Each offsets file as a batch (``ids``: offsets files' and commits' batch ids). An
    unreadable final, uncommitted one is kept with ``problem`` set (a crash while
    writing it); any other unreadable one raises CheckpointError."""
    offset_ids, commit_ids = ids
    batches: list[CheckpointBatch] = []
    last_id = offset_ids[-1] if offset_ids else None
    for batch_id in offset_ids:
        committed = batch_id in commit_ids
        file_path = store.join(offsets_dir, str(batch_id))
        try:
            parsed = _parse_offsets_file(_decode(store.read(file_path)))
        except FileNotFoundError:
            log.debug("%s vanished while reading (purged by a running query?)", file_path)
            continue
        except OSError as exc:
            raise CheckpointError(f"{file_path}: cannot read: {exc}") from exc
        except _Malformed as exc:
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


def _check_last_commit(store: _Store, commits_dir: str, batch_id: int, problems: list[str]) -> None:
    """Spark reads the latest commit on restart and fails on a torn one: report it."""
    path = store.join(commits_dir, str(batch_id))
    try:
        text = _decode(store.read(path))
        if not text.strip():
            raise _Malformed("empty file")
        _parse_commit_file(text)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc}") from exc
    except _Malformed as exc:
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


def is_new_checkpoint(path: str | os.PathLike[str], *, fs: Any = None) -> bool:
    """True when a query started at ``path`` would honour ``startingOffsets``.

    That is a missing directory or one without offsets files; anything else resumes
    from the checkpoint instead.
    """
    store, root = _open(path, fs)
    kind = store.kind(root)
    if kind is None:
        return True
    if kind != "dir":
        raise CheckpointError(f"checkpoint location is not a directory: {os.fspath(path)}")
    return not _batch_ids(store, store.join(root, "offsets"))


def file_sink_metadata(output_path: str | os.PathLike[str], *, fs: Any = None) -> int | None:
    """Highest batch id logged in a file sink's ``_spark_metadata``, else None.

    The file sink skips any batch id at or below this one as already written, so a
    query on a NEW checkpoint (batch ids from 0 again) writing into the same output
    path silently drops its first batches.
    """
    store, root = _open(output_path, fs)
    log_dir = store.join(root, "_spark_metadata")
    if store.kind(log_dir) != "dir":
        return None
    ids = []
    for name in store.files(log_dir):
        match = _SINK_LOG_NAME.fullmatch(name)
        if match:
            ids.append(int(match.group(1)))
    return max(ids) if ids else None


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
