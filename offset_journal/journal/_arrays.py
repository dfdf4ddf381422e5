"""A Kafka source's offsets as the journal stores them (pure): a *layout* (the ordered
(topic, partition) list, stored once and shared) and three arrays in its order.

Migration 0013 moved the offsets from one row per partition into the source's row:
``end_offsets`` (8 bytes each), ``read_spans`` = end - start and ``latest_lags`` =
latest - end (per batch these are record counts, not positions: 2 bytes each when all
of a source's fit, else 4, in the ``_wide`` columns). A
source the arrays cannot hold exactly (a partition without an end offset, a span or a
lag beyond 2^31) is written one row per partition, as before (``None`` from
:func:`encode`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter, sub
from typing import NamedTuple

from ..offsets import PartitionOffset

_INT4_MIN, _INT4_MAX = -(2 ** 31), 2 ** 31 - 1
_INT2_MIN, _INT2_MAX = -(2 ** 15), 2 ** 15 - 1

class Layout(NamedTuple):
    """A layout: the topics and partition numbers, in the order of the arrays (two
    tuples built in C from a batch's partitions, rather than 10,000 pairs)."""

    topics: tuple[str, ...]
    partitions: tuple[int, ...]


def layout_id(layout: Layout) -> bytes:
    """The key of a layout: what the database's ``offset_journal.kafka_layout_id``
    computes (its CHECK refuses any other), the first 16 bytes of a SHA-256 over
    ``<bytes of topic>:<topic>:<partition>`` joined by commas."""
    text = ",".join(f"{len(t.encode())}:{t}:{p}" for t, p in zip(*layout, strict=True))
    return hashlib.sha256(text.encode()).digest()[:16]


@dataclass(frozen=True)
class Arrays:
    """A Kafka source's offsets in its layout's order; ``*_narrow``: every value fits 2
    bytes (the ``read_spans``/``latest_lags`` columns, else the ``_wide`` ones)."""

    layout: Layout
    end_offsets: list[int]
    read_spans: list[int | None]
    latest_lags: list[int | None]
    spans_narrow: bool = True
    lags_narrow: bool = True


def _differences(a: list[int | None], b: list[int]) -> list[int | None]:
    """a - b element by element (None where a is None); at C speed when none is."""
    if None in a:
        return [None if x is None else x - y for x, y in zip(a, b, strict=True)]
    return list(map(sub, a, b))


def _bounds(values: list[int | None]) -> tuple[int, int]:
    known = [v for v in values if v is not None] if None in values else values
    return (min(known), max(known)) if known else (0, 0)  # type: ignore[type-var,return-value]


def encode(parts: Sequence[PartitionOffset], latests: Sequence[int | None]) -> Arrays | None:
    """The arrays for ``parts`` (and the latest offset of each, or None); None when they
    cannot hold them exactly. Built from whole lists (a batch may have 10,000
    partitions, and this runs in the writer thread)."""
    ends: list[int] = list(map(itemgetter(3), parts))
    if None in ends:
        return None
    starts: list[int | None] = list(map(itemgetter(2), parts))
    spans = ([None if s is None else e - s for e, s in zip(ends, starts, strict=True)]
             if None in starts else list(map(sub, ends, starts)))
    lags = _differences(list(latests), ends)  # latest - end
    (span_lo, span_hi), (lag_lo, lag_hi) = _bounds(spans), _bounds(lags)
    if min(span_lo, lag_lo) < _INT4_MIN or max(span_hi, lag_hi) > _INT4_MAX:
        return None
    layout = Layout(tuple(map(itemgetter(0), parts)), tuple(map(itemgetter(1), parts)))
    return Arrays(layout, ends, spans, lags,
                  spans_narrow=_INT2_MIN <= span_lo and span_hi <= _INT2_MAX,
                  lags_narrow=_INT2_MIN <= lag_lo and lag_hi <= _INT2_MAX)


def array_literal(values: list[int] | list[int | None]) -> str:
    """A Postgres array literal of integers (``{1, NULL, 3}``): the list's own repr
    between braces (array input allows the spaces), twice as fast as joining ``str``s."""
    if None in values:
        return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"
    return "{" + repr(values)[1:-1] + "}"


def latest_json(parts: Sequence[PartitionOffset], latests: Sequence[int | None],
                ) -> dict[str, dict[str, int]] | None:
    """Spark's latestOffset JSON as the partition values rebuild it (what the
    ``source_offsets`` view gives); None when some partition has no latest."""
    out: dict[str, dict[str, int]] = {}
    for p, latest in zip(parts, latests, strict=True):
        if latest is None:
            return None
        out.setdefault(p.topic, {})[str(p.partition)] = latest
    return out or None
