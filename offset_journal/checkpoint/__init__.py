"""Read Spark Structured Streaming checkpoint directories as plain data, without Spark.

A checkpoint is the other record of where a query got to: when the journal is missing
or behind, the checkpoint's ``offsets``/``commits`` logs say which batches finished and
what they read. Before starting a query on a *new* checkpoint it also matters whether
the location already holds offsets (Spark would then ignore ``startingOffsets``) and
whether a file sink's output already logs batches (the new query's first batches would
be skipped as "already committed").

Layout read here (all written by Spark's HDFSMetadataLog and friends)::

    metadata          {"id": "<query id>"}
    offsets/N         v1 | metadata JSON | one line per source: offset JSON or "-"
                      (v2, Spark 4.1+: "<sourceId>:<offset JSON or ->" per source)
    commits/N         v1 | {"nextBatchWatermarkMs": 0}   written once batch N finished
    sources/<i>/0     Kafka: NUL byte, v1, initial offsets JSON (other sources keep
                      other things there: the file source its file list, rate its
                      creation time)

Only names made of digits are log files; ``.N.crc``, ``.N.<uuid>.tmp`` and the like
are ignored. Local paths are read directly; URLs (``s3://``, ``hdfs://``, ``memory://``
...) go through fsspec, imported only when needed.

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
