"""Read Spark Structured Streaming checkpoint directories as plain data, without Spark:
the other record of where a query got to (``offsets/N``, ``commits/N``, ``metadata``,
``sources/``), whether a location is a NEW checkpoint, and what a file sink's or a
Delta table's log says the sink holds. Local paths are read directly, URLs (``s3a://``
...) through fsspec. The layout read: ``_parse``; the modules: docs/architecture.md.

May import: :mod:`offset_journal.journal` (checkpoint import writes to it) and the
shared modules.
"""

from __future__ import annotations

from ..errors import CheckpointError
from ._read import kafka_end_offsets, read_checkpoint
from .model import Checkpoint, CheckpointBatch
from .store import file_sink_metadata, is_new_checkpoint

__all__ = [
    "Checkpoint",
    "CheckpointBatch",
    "CheckpointError",
    "file_sink_metadata",
    "is_new_checkpoint",
    "kafka_end_offsets",
    "read_checkpoint",
]
