"""Compare a checkpoint's offsets with the journal's, and turn a journaled batch into
a consumer group's offsets (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import RestartError
from ..offsets import KafkaOffsets
from ..rows import KIND_KAFKA, Batch, BatchRef, source_kind
from .decide.kafka_offsets import end_offsets_of


@dataclass(frozen=True)
class OffsetComparison:
    """One Kafka partition's offset in a checkpoint and in the journal."""

    source_index: int
    topic: str
    partition: int
    checkpoint: int | None
    journal: int | None

    @property
    def ahead(self) -> str:
        if self.checkpoint is None:
            return "journal only"
        if self.journal is None:
            return "checkpoint only"
        if self.checkpoint == self.journal:
            return "equal"
        return "checkpoint" if self.checkpoint > self.journal else "journal"


def compare_offsets(checkpoint_offsets: Mapping[int, KafkaOffsets],
                    journal_offsets: Mapping[int, KafkaOffsets]) -> list[OffsetComparison]:
    """Pair a checkpoint's and the journal's Kafka offsets per source and partition."""
    rows = []
    for index in sorted(set(checkpoint_offsets) | set(journal_offsets)):
        c, j = checkpoint_offsets.get(index, {}), journal_offsets.get(index, {})
        for topic in sorted(set(c) | set(j)):
            for part in sorted(set(c.get(topic, {})) | set(j.get(topic, {}))):
                rows.append(OffsetComparison(index, topic, part, c.get(topic, {}).get(part),
                                             j.get(topic, {}).get(part)))
    return rows


def comparison_verdict(rows: Sequence[OffsetComparison]) -> str:
    """One word for the whole comparison: checkpoint/journal ahead, same, mixed, disjoint."""
    kinds = {r.ahead for r in rows}
    if not rows:
        return "nothing to compare"
    if kinds == {"equal"}:
        return "same"
    if kinds <= {"equal", "checkpoint", "checkpoint only"}:
        return "checkpoint ahead"
    if kinds <= {"equal", "journal", "journal only"}:
        return "journal ahead"
    if "equal" not in kinds and kinds <= {"checkpoint only", "journal only"}:
        return "disjoint"
    return "mixed"


def journal_kafka_offsets(batch: Batch) -> dict[int, KafkaOffsets]:
    """Source index -> END offsets, for a batch's Kafka sources."""
    out = {}
    for s in batch.sources:
        if source_kind(s) == KIND_KAFKA:
            out[s.source_index] = end_offsets_of(batch, s.source_index)[0]
    return out


def group_offsets(batch: Batch, source: int | None = None) -> KafkaOffsets:
    """The offsets to commit for a consumer group: a batch's Kafka end offsets.

    With several Kafka sources reading one topic-partition at different offsets, the
    caller must pick a source.
    """
    merged: KafkaOffsets = {}
    for index, offsets in journal_kafka_offsets(batch).items():
        if source is not None and index != source:
            continue
        for topic, parts in offsets.items():
            for part, off in parts.items():
                have = merged.get(topic, {}).get(part)
                if have is not None and have != off:
                    raise RestartError(
                        f"sources read {topic}-{part} at different offsets ({have}, {off}): "
                        "choose one with --source"
                    )
                merged.setdefault(topic, {})[part] = off
    if not merged:
        which = f"source {source}" if source is not None else "any Kafka source"
        raise RestartError(f"{BatchRef.of(batch).label()} has no Kafka offsets for {which}")
    return merged



__all__ = ["OffsetComparison", "compare_offsets", "comparison_verdict", "group_offsets",
           "journal_kafka_offsets"]
