"""Pure parsing and formatting of streaming source offsets.

Spark reports a source's offsets as JSON whose shape belongs to the source. Kafka's
is ``{"topic": {"0": 42, "1": 7}}`` (partition numbers as strings, next offset to
read as the value); Delta's, file's and rate's are something else. Everything here is
plain data in, plain data out: no Spark, no database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .errors import OffsetFormatError

# Kafka's special offset for "from the log's start" in startingOffsets JSON (-1, latest,
# is never planned).
EARLIEST = -2
# Kafka offsets are Java longs (and the journal's columns bigint).
_LONG = 2**63

KafkaOffsets = dict[str, dict[int, int]]
"""topic -> partition -> offset."""

Side = Literal["start", "end"]
"""Which offsets of a batch's partition rows: where it started, or where it ended."""



@dataclass(frozen=True, order=True)
class PartitionOffset:
    """One Kafka topic-partition's offsets within a batch.

    ``start`` is inclusive and ``end`` exclusive, as Spark reports them: the batch read
    records ``start <= offset < end``. ``start`` is None for a partition that first
    appeared in this batch.
    """

    topic: str
    partition: int
    start: int | None
    end: int | None


def parse_offset_json(value: Any) -> Any:
    """Return an offset as plain JSON data.

    Progress events carry offsets already parsed (inside ``progress.json``), checkpoint
    files carry them as text; both come out the same.
    """
    if value is None or isinstance(value, (dict, list, int, float, bool)):
        return value
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise OffsetFormatError(f"offset is not JSON: {text[:80]!r}") from exc
        except RecursionError:
            raise OffsetFormatError("offset JSON is nested too deeply") from None
    raise OffsetFormatError(f"offset of unexpected type {type(value).__name__}")


def is_kafka_description(description: str | None) -> bool:
    """Spark's Kafka source describes itself as ``KafkaV2[...]`` (or ``KafkaSource[...]``)."""
    return bool(description) and str(description).lstrip().startswith("Kafka")


KAFKA_SHAPE_ERROR = "offsets do not have Kafka's shape {topic: {partition: offset}}"


def as_kafka_offsets(obj: Any) -> KafkaOffsets | None:
    """Parsed JSON with Kafka's offset shape as topic -> partition -> offset, in one pass;
    None for anything else (also for None and ``{}``). Partitions are ASCII-digit strings
    (or ints) below 2^31, offsets Java longs; bools are neither."""
    if not isinstance(obj, Mapping) or not obj:
        return None
    out: KafkaOffsets = {}
    for topic, parts in obj.items():
        if not isinstance(topic, str) or not isinstance(parts, Mapping):
            return None
        converted: dict[int, int] = {}
        for key, offset in parts.items():
            if type(key) is str and key.isdigit() and key.isascii() and len(key) < 11:
                partition = int(key)
            elif type(key) is int and 0 <= key < 2**31:
                partition = key
            else:
                return None
            if type(offset) is not int or not -_LONG <= offset < _LONG:
                return None
            converted[partition] = offset
        out[topic] = converted
    return out


def looks_like_kafka(obj: Any) -> bool:
    """True when ``obj`` has Kafka's offset shape: topic -> {"partition": int}."""
    return as_kafka_offsets(obj) is not None


def kafka_offsets(value: Any) -> KafkaOffsets:
    """Parse Kafka offsets JSON (text or parsed) into topic -> partition -> offset.

    Raises OffsetFormatError when the payload does not have Kafka's shape.
    """
    obj = parse_offset_json(value)
    if obj is None:
        return {}
    offsets = as_kafka_offsets(obj)
    if offsets is None:
        raise OffsetFormatError(KAFKA_SHAPE_ERROR)
    return offsets


def format_kafka_offsets(offsets: Mapping[str, Mapping[int, int]]) -> str:
    """Format offsets as the JSON Spark's ``startingOffsets`` takes, in a stable order."""
    ordered = {
        topic: {str(p): int(offsets[topic][p]) for p in sorted(offsets[topic])}
        for topic in sorted(offsets)
    }
    return json.dumps(ordered, separators=(",", ":"))


def partition_offsets(start: Any, end: Any) -> list[PartitionOffset]:
    """Pair a Kafka batch's start and end offsets per topic-partition.

    A partition in ``end`` but not in ``start`` appeared during the batch (start None).
    A partition only in ``start`` is kept with end None: Spark stopped reporting it
    (its topic was deleted or unsubscribed).
    """
    return pair_partitions(kafka_offsets(start), kafka_offsets(end))


def pair_partitions(s: KafkaOffsets, e: KafkaOffsets) -> list[PartitionOffset]:
    """:func:`partition_offsets` for offsets already parsed."""
    rows: list[PartitionOffset] = []
    for topic in sorted(set(s) | set(e)):
        sp, ep = s.get(topic, {}), e.get(topic, {})
        for part in sorted(set(sp) | set(ep)):
            rows.append(PartitionOffset(topic, part, sp.get(part), ep.get(part)))
    return rows


def rows_to_offsets(rows: Iterable[PartitionOffset], *, use: Side = "end") -> KafkaOffsets:
    """Collect partition rows back into topic -> partition -> offset (start or end)."""
    out: KafkaOffsets = {}
    for row in rows:
        value = row.end if use == "end" else row.start
        if value is None:
            continue
        out.setdefault(row.topic, {})[row.partition] = value
    return out


def offsets_json(rows: Iterable[PartitionOffset], *, use: Side = "end"
                 ) -> dict[str, dict[str, int]] | None:
    """Kafka offsets JSON (as Spark reports it) rebuilt from partition rows; None when no
    row has that offset (a first batch's start). The inverse of :func:`partition_offsets`
    for offsets in Spark's canonical form."""
    offsets = rows_to_offsets(rows, use=use)
    return {t: {str(p): o for p, o in parts.items()} for t, parts in offsets.items()} or None
