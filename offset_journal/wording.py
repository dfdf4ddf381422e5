"""How plans word things: counts, partitions, wrapped lines (pure)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable


def count(n: int, noun: str) -> str:
    """``1 batch``, ``2 batches``... (regular plurals only)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def fill(text: str, first: str = "", rest: str | None = None) -> str:
    """Wrap for a terminal; JSON and long tokens are never split."""
    return textwrap.fill(text, width=100, initial_indent=first,
                         subsequent_indent=rest if rest is not None else " " * len(first),
                         break_long_words=False, break_on_hyphens=False)


def ids_text(ids: Iterable[int]) -> str:
    """Batch ids as people read them: ``batch 4``, ``batches 4, 7..9``."""
    ordered = sorted(ids)
    spans: list[list[int]] = []
    for i in ordered:
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in spans)
    return f"batch {text}" if len(ordered) == 1 else f"batches {text}"


def tp(topic: str, partition: int) -> str:
    """Kafka's name for a partition: ``topic-3``."""
    return f"{topic}-{partition}"


def tp_list(pairs: Iterable[tuple[str, int]], limit: int = 8) -> str:
    """Partitions, sorted, at most ``limit`` named."""
    items = [tp(t, p) for t, p in sorted(pairs)]
    if len(items) > limit:
        return ", ".join(items[:limit]) + f" and {len(items) - limit} more"
    return ", ".join(items)
