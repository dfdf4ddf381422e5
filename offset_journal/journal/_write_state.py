"""What a Journal remembers between the batches it writes (pure data)."""

from __future__ import annotations

from dataclasses import dataclass

from ._checks import PartitionEnds

NO_ENDS = PartitionEnds((), (), [])


@dataclass(frozen=True)
class Ends:
    """One side of a batch's Kafka offsets (its ends, or the starts of the batch after
    it), per source index."""

    batch_id: int
    ends: dict[int, PartitionEnds]


REMEMBERED_RUNS = 64

