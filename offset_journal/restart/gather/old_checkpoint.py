"""The OLD query's checkpoint (I/O: reads it; writes nothing), read first and digested
once into plain data for the sink step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...formatting import from_epoch_ms
from ...offsets import as_kafka_offsets
from .._inputs import OldBatch, OldCheckpoint
from ..request import PlanRequest

if TYPE_CHECKING:
    from ...checkpoint.model import Checkpoint


def old_checkpoint_facts(checkpoint: Checkpoint) -> OldCheckpoint:
    """The old checkpoint as plain data, digested once here (each batch's Kafka offsets
    as maps, its times as datetimes) so the sink step reads it in one pass."""
    initial = checkpoint.start_offsets_of(0)
    committed = checkpoint.last_committed
    return OldCheckpoint(
        checkpoint.path, checkpoint.query_id,
        tuple(OldBatch(b.batch_id, b.committed, b.problem, tuple(b.offsets),
                       tuple(as_kafka_offsets(o) for o in b.offsets),
                       from_epoch_ms(b.batch_timestamp_ms),
                       from_epoch_ms(b.batch_watermark_ms)) for b in checkpoint.batches),
        None if initial is None else tuple(as_kafka_offsets(o) for o in initial),
        None if committed is None else committed.batch_id)


def read_old_checkpoint(request: PlanRequest) -> Checkpoint | None:
    """The old query's checkpoint, read (None: not given). CheckpointError when it is
    missing or not a checkpoint."""
    if request.old_checkpoint is None:
        return None
    from ...checkpoint import read_checkpoint

    return read_checkpoint(request.old_checkpoint)


__all__ = ["old_checkpoint_facts", "read_old_checkpoint"]
