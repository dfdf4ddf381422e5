"""What a Journal remembers between the batches it writes (pure data)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ends:
    """A batch's Kafka end offsets: source index -> (topic, partition) -> end."""

    batch_id: int
    ends: dict[int, dict[tuple[str, int], int]]


REMEMBERED_RUNS = 64

