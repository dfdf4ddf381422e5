"""Spark's checkpoint log files parsed: offsets/N, commits/N, sources/<i>/0, metadata.

The layout (all written by Spark's HDFSMetadataLog and friends)::

    metadata          {"id": "<query id>"}
    offsets/N         v1 | metadata JSON | one line per source: offset JSON or "-"
                      (v2, Spark 4.1+: "<sourceId>:<offset JSON or ->" per source)
    commits/N         v1 | {"nextBatchWatermarkMs": 0}   written once batch N finished
    sources/<i>/0     Kafka: NUL byte, v1, initial offsets JSON (other sources keep
                      other things there: the file source its file list, rate its
                      creation time)

Only names made of digits are log files; ``.N.crc``, ``.N.<uuid>.tmp`` and the like
are ignored.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import CheckpointError
from ..offsets import looks_like_kafka
from .model import Malformed, source_sort_key
from .store import Store, decode, snippet

log = logging.getLogger(__name__)


# Offset log versions this reader understands: v1 (one line per source, in source
# order) and v2 (Spark's OffsetMap: "<sourceId>:<offset>" per line).
KNOWN_OFFSET_VERSIONS = (1, 2)
# Spark's marker for "this source has no offset yet" (OffsetSeqLog.SERIALIZED_VOID_OFFSET).
VOID = "-"
# sources/<i>/0 is normally tiny for Kafka; the file source keeps its file list there.
MAX_INITIAL_OFFSET_BYTES = 16 * 1024 * 1024

VERSION_LINE = re.compile(r"v([0-9]+)")


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class ParsedOffsets:
    version: int
    timestamp_ms: int | None
    watermark_ms: int | None
    conf: dict[str, Any]
    source_ids: tuple[str, ...]
    offsets: tuple[Any, ...]
    raw: tuple[str, ...]


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def no_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def loads(text: str) -> Any:
    """JSON as Spark writes it: NaN and Infinity are not JSON, and neither is nesting
    too deep to parse (both raise JSONDecodeError, like any other garbage)."""
    try:
        return json.loads(text, parse_constant=no_constant)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None


def parse_offset(line: str, what: str) -> Any:
    if line == VOID:
        return None
    try:
        return loads(line)
    except json.JSONDecodeError:
        raise Malformed(f"{what} is not JSON: {snippet(line)}") from None


def parse_offsets_file(text: str) -> ParsedOffsets:
    """Parse an ``offsets/N`` file as OffsetSeqLog writes it (v1 or v2)."""
    if not text.strip():
        raise Malformed("empty file")
    lines = [line.rstrip("\r") for line in text.split("\n")]
    if lines[-1] == "" and len(lines) > 1:
        lines.pop()  # Spark writes no final newline, but tolerate one
    version_match = VERSION_LINE.fullmatch(lines[0].strip())
    if version_match is None:
        raise Malformed(f"first line is not a log version like v1: {snippet(lines[0])}")
    version = int(version_match.group(1))
    if version not in KNOWN_OFFSET_VERSIONS:
        raise Malformed(f"unsupported offset log version v{version}")
    if len(lines) < 2:
        raise Malformed("truncated after the version line")

    meta: dict[str, Any] = {}
    if lines[1].strip():
        try:
            parsed = loads(lines[1])
        except json.JSONDecodeError:
            raise Malformed(f"batch metadata is not JSON: {snippet(lines[1])}") from None
        if not isinstance(parsed, dict):
            raise Malformed(f"batch metadata is not a JSON object: {snippet(lines[1])}")
        meta = parsed
    conf = meta.get("conf")

    source_lines = lines[2:]
    if not source_lines:
        raise Malformed("no source offset lines (truncated?)")
    if version == 1:
        ids = tuple(str(i) for i in range(len(source_lines)))
        raw = tuple(source_lines)
    else:
        pairs = []
        for line in source_lines:
            sid, sep, offset = line.partition(":")
            if not sep or not sid:
                raise Malformed(f"v2 source line is not <sourceId>:<offset>: {snippet(line)}")
            pairs.append((sid, offset))
        pairs.sort(key=lambda p: source_sort_key(p[0]))
        ids = tuple(p[0] for p in pairs)
        raw = tuple(p[1] for p in pairs)
    offsets = tuple(
        parse_offset(line, f"source {sid} offset") for sid, line in zip(ids, raw, strict=True)
    )
    return ParsedOffsets(
        version=version,
        timestamp_ms=int_or_none(meta.get("batchTimestampMs")),
        watermark_ms=int_or_none(meta.get("batchWatermarkMs")),
        conf=dict(conf) if isinstance(conf, dict) else {},
        source_ids=ids,
        offsets=offsets,
        raw=raw,
    )


def parse_commit_file(text: str) -> None:
    """Check a ``commits/N`` file: a version line, then optional JSON metadata."""
    lines = text.split("\n")
    if not VERSION_LINE.fullmatch(lines[0].strip()):
        raise Malformed(f"first line is not a log version like v1: {snippet(lines[0])}")
    if len(lines) > 1 and lines[1].strip():
        try:
            loads(lines[1])
        except json.JSONDecodeError:
            raise Malformed(f"commit metadata is not JSON: {snippet(lines[1])}") from None


def parse_initial_offset(data: bytes) -> Any:
    """Kafka initial offsets from ``sources/<i>/0``, else None.

    Kafka writes a NUL byte (for Spark 2.1.0 compatibility), ``v1`` and the offsets JSON.
    Only Kafka-shaped content is taken: other sources keep unrelated data in that file.
    """
    try:
        text = data.decode("utf-8").lstrip("\x00")
    except UnicodeDecodeError:
        return None
    head, sep, rest = text.partition("\n")
    body = rest if sep and VERSION_LINE.fullmatch(head.strip()) else text
    body = body.strip()
    if not body or "\n" in body:
        return None
    try:
        obj = loads(body)
    except json.JSONDecodeError:
        return None
    return obj if looks_like_kafka(obj) else None


# --------------------------------------------------------------------------- reading


def read_query_id(store: Store, root: str) -> str | None:
    path = store.join(root, "metadata")
    if store.kind(path) != "file":
        return None
    try:
        text = decode(store.read(path)).strip()
        obj = loads(text) if text else None
    except (Malformed, json.JSONDecodeError):
        obj = None
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise CheckpointError(f'{path}: not a stream metadata file (expected {{"id": ...}})')
    return str(obj["id"])


def read_initial_offsets(store: Store, root: str) -> dict[str, Any]:
    sources_dir = store.join(root, "sources")
    found: dict[str, Any] = {}
    for sid in sorted(store.dirs(sources_dir), key=source_sort_key):
        path = store.join(sources_dir, sid, "0")
        try:
            if store.size(path) > MAX_INITIAL_OFFSET_BYTES:
                log.debug("not reading %s: too large to be Kafka initial offsets", path)
                continue
            data = store.read(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot read: {exc}") from exc
        offset = parse_initial_offset(data)
        if offset is not None:
            found[sid] = offset
    return found


def gaps(ids: Iterable[int]) -> list[int]:
    ordered = sorted(ids)
    if not ordered:
        return []
    present = set(ordered)
    return [i for i in range(ordered[0], ordered[-1] + 1) if i not in present]
