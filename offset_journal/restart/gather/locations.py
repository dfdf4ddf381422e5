"""What the places on storage hold now (I/O: reads them, writes nothing): the NEW
checkpoint location, the output path, and the anchor's Delta source tables."""

from __future__ import annotations

import logging

from ...errors import CheckpointError
from ...rows import KIND_DELTA, Batch, source_kind
from .._delta_log import delta_table_id
from .._inputs import LocationFacts
from ..decide.other_sources import delta_path
from ..decide.refuse import refuse_used_checkpoint
from ..model import CheckpointState, SinkState
from ..request import PlanRequest

log = logging.getLogger(__name__)


def checkpoint_state(path: str) -> CheckpointState:
    """What a NEW checkpoint location holds (a missing directory holds nothing)."""
    from ...checkpoint import is_new_checkpoint, read_checkpoint

    if is_new_checkpoint(path):
        return CheckpointState(str(path), False)
    try:
        ckpt = read_checkpoint(path)
    except CheckpointError as exc:
        # Offsets files exist, readable or not: Spark would still resume from them.
        log.debug("checkpoint %s holds offsets but cannot be read: %s", path, exc)
        return CheckpointState(str(path), True)
    last = ckpt.batches[-1].batch_id if ckpt.batches else None
    return CheckpointState(str(path), True, ckpt.query_id, last)


def locations(request: PlanRequest) -> LocationFacts:
    """What the new checkpoint location and the output path hold; RestartError when
    the checkpoint location is not new."""
    ckpt_state = checkpoint_state(request.checkpoint) if request.checkpoint else None
    if ckpt_state is not None:
        refuse_used_checkpoint(ckpt_state)
    if not request.output_path:
        return LocationFacts(ckpt_state)
    from ...checkpoint import file_sink_metadata

    return LocationFacts(ckpt_state, SinkState(str(request.output_path),
                                              file_sink_metadata(request.output_path)))


def delta_tables(anchor: Batch) -> dict[str, str | None | Exception]:
    """Per Delta source path of the anchor, the table id there now, from its
    transaction log (None: no table; the exception when it cannot be read)."""
    tables: dict[str, str | None | Exception] = {}
    for source in anchor.sources:
        path = delta_path(source.description) if source_kind(source) == KIND_DELTA else None
        if path is None or path in tables:
            continue
        try:
            tables[path] = delta_table_id(path)
        except (OSError, ValueError) as exc:
            tables[path] = exc
    return tables

__all__ = ["checkpoint_state", "delta_tables", "locations"]
