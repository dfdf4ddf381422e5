"""Pure parsing and formatting of streaming source offsets.

Spark reports a source's offsets as JSON whose shape belongs to the source. Kafka's
is ``{"topic": {"0": 42, "1": 7}}`` (partition numbers as strings, next offset to
read as the value); Delta's, file's and rate's are something else. Everything here is
plain data in, plain data out: no Spark, no database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from itertools import groupby, repeat
from operator import itemgetter
from typing import Any, Literal, NamedTuple

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


class PartitionOffset(NamedTuple):
    """One Kafka topic-partition's offsets within a batch.

    ``start`` is inclusive and ``end`` exclusive, as Spark reports them: the batch read
    records ``start <= offset < end``. ``start`` is None for a partition that first
    appeared in this batch.

    A named tuple (immutable, ordered and hashed by its fields, like the frozen
    dataclass it was): a 10,000-partition batch builds 10,000 of them in the writer
    thread, and a tuple is built in C, about 10x faster than a frozen dataclass's
    ``__init__``.
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
        fast = _plain_partitions(parts)
        if fast is not None:
            out[topic] = fast
            continue
        converted: dict[int, int] = {}
        for key, offset in parts.items():
            if isinstance(key, str) and key.isdigit() and key.isascii() and len(key) < 11:
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


# A topic's partition numbers joined by commas, as JSON gives them: ASCII digits only.
_PARTITION_KEYS = re.compile(r"[0-9]{1,10}(?:,[0-9]{1,10})*")
_MISS = object()
_KEYS_CACHE: dict[str, tuple[tuple[int, ...], bool, bool] | None] = {}
_KEYS_CACHE_MAX = 4096


def _partition_numbers(parts: Mapping[Any, Any],
                       ) -> tuple[str, tuple[int, ...], bool, bool] | None:
    """One topic's partition keys (JSON object keys) as (the keys joined, the numbers in
    the object's order, whether they ascend strictly, whether each key is its number as
    ``str`` writes it: no leading zero); None when a key is not a partition number.
    Cached by the joined keys: a query reads the same partitions batch after batch, so
    the keys are checked and converted once, not 10,000 times per batch."""
    if type(parts) is not dict or not parts:
        return None
    try:
        keys = ",".join(parts)
    except TypeError:  # a key that is not a string
        return None
    hit = _KEYS_CACHE.get(keys, _MISS)
    if hit is _MISS:
        hit = None
        # As many commas as separators: no key holds one itself.
        if keys.count(",") == len(parts) - 1 and _PARTITION_KEYS.fullmatch(keys):
            numbers = tuple(map(int, parts))
            hit = (numbers, all(map(int.__lt__, numbers, numbers[1:])),
                   keys == ",".join(map(str, numbers)))
        if len(_KEYS_CACHE) >= _KEYS_CACHE_MAX:
            _KEYS_CACHE.clear()
        _KEYS_CACHE[keys] = hit
    return None if hit is None else (keys, *hit)  # type: ignore[misc]


def _plain_offsets(values: Any) -> bool:
    """All Java longs (no bools, floats or strings), checked in C."""
    return (set(map(type, values)) == {int} and min(values) >= -_LONG
            and max(values) < _LONG)


def _plain_partitions(parts: Mapping[Any, Any]) -> dict[int, int] | None:
    """One topic's partitions converted with whole-topic checks that run in C; None when
    they do not all hold, and the entry-by-entry check in :func:`as_kafka_offsets`
    decides. Accepts exactly what that check accepts."""
    numbers = _partition_numbers(parts)
    if numbers is None or not _plain_offsets(parts.values()):
        return None
    return dict(zip(numbers[1], parts.values(), strict=True))


def plain_kafka(obj: Any) -> bool:
    """A fast :func:`looks_like_kafka` for parsed JSON: True means Kafka's shape; False
    means only that the whole-topic checks did not all hold (ask looks_like_kafka)."""
    if type(obj) is not dict or not obj:
        return False
    for topic, parts in obj.items():
        if type(topic) is not str or _partition_numbers(parts) is None \
                or not _plain_offsets(parts.values()):
            return False
    return True


class PlainRows(NamedTuple):
    """What :func:`plain_kafka_rows` found: the partition rows, and whether the start and
    end JSON are exactly what :func:`offsets_json` rebuilds from them (every partition
    key written as ``str`` writes its number), so that neither needs keeping."""

    rows: list[PartitionOffset]
    rebuildable: bool


def plain_kafka_rows(start: Any, end: Any) -> PlainRows | None:
    """``pair_partitions(as_kafka_offsets(start), as_kafka_offsets(end))`` for the usual
    batch, from the parsed JSON directly: ``end`` Kafka-shaped, ``start`` None or
    Kafka-shaped with the same topics and partitions, partitions listed in ascending
    order, no offset going backwards. None for anything else (the general path decides,
    and explains)."""
    if type(end) is not dict or not end or (start is not None and (
            type(start) is not dict or start.keys() != end.keys())):
        return None
    rows: list[PartitionOffset] = []
    rebuildable = True
    for topic in sorted(end):
        ep = end[topic]
        numbers = _partition_numbers(ep) if type(topic) is str else None
        if numbers is None or not numbers[2] or not _plain_offsets(ep.values()):
            return None
        rebuildable = rebuildable and numbers[3]
        ends = ep.values()
        if start is None:
            starts: Any = repeat(None)
        else:
            sp = start[topic]
            if type(sp) is not dict or len(sp) != len(ep) or ",".join(sp) != numbers[0] \
                    or not _plain_offsets(sp.values()) or any(map(int.__lt__, ends, sp.values())):
                return None
            starts = sp.values()
        rows.extend(map(_new_tuple, repeat(PartitionOffset),
                        zip(repeat(topic), numbers[1], starts, ends)))
    return PlainRows(rows, rebuildable)


_new_tuple: Any = tuple.__new__  # tuple.__new__(PartitionOffset, fields): no Python frame


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
        if sp.keys() == ep.keys():  # the usual case, paired in C but for the rows
            parts = sorted(ep)
            rows.extend(map(_new_tuple, repeat(PartitionOffset),
                            zip(repeat(topic), parts, map(sp.__getitem__, parts),
                                map(ep.__getitem__, parts))))
            continue
        for part in sorted(set(sp) | set(ep)):
            rows.append(PartitionOffset(topic, part, sp.get(part), ep.get(part)))
    return rows


def offsets_json(rows: Iterable[PartitionOffset], *, use: Side = "end"
                 ) -> dict[str, dict[str, int]] | None:
    """Kafka offsets JSON (as Spark reports it) rebuilt from partition rows; None when no
    row has that offset (a first batch's start). The inverse of :func:`partition_offsets`
    for offsets in Spark's canonical form. Built a topic at a time (the journal checks
    every Kafka batch against it before writing)."""
    col = 3 if use == "end" else 2
    out: dict[str, dict[str, int]] = {}
    for topic, group in groupby(rows, key=itemgetter(0)):
        parts = list(group)
        values = list(map(itemgetter(col), parts))
        numbers = map(str, map(itemgetter(1), parts))
        if None in values:
            kept = {n: v for n, v in zip(numbers, values, strict=True) if v is not None}
        else:
            kept = dict(zip(numbers, values, strict=True))
        if kept:
            out.setdefault(topic, {}).update(kept)
    return out or None
