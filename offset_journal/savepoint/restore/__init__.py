"""Restore a savepoint's state straight into a NEW checkpoint, at JVM speed, for the
built-in stateful operators too, into any number of shuffle partitions; and repartition
a stopped query's state in place.

:func:`restore_savepoint` runs the new query's own bootstrap batch (it reads nothing),
checks the savepoint's state layout against the new query's field by field
(:mod:`.layout`, :mod:`.matching`: pure), writes every operator's state with Spark's
internal state writer as the new checkpoint's next batch, and commits it with the old
query's watermark: the new query then starts on the checkpoint exactly after the
savepoint's batch. :func:`repartition_state` is Spark's offline repartition of a
RocksDB checkpoint, refused while its query runs.

The modules: ``layout`` and ``matching`` (what goes where, pure), ``_jvm`` (the ONE edge
to Spark's internals, through the Java helper in ``jvm/state-restore``: proven on Spark
4.2.x, as :mod:`offset_journal.spark_version` says), ``_frames`` (the rows written, as
DataFrames), ``_write`` (the restore), ``repartition`` (in place), ``recover`` (which
old batches a recovery reads again after its savepoint, pure) and ``_replay`` (one of
them run again on the recovered checkpoint). What needs Spark is
imported on first use.

May import what :mod:`offset_journal.savepoint` may: :mod:`offset_journal.checkpoint`,
:mod:`offset_journal.journal` and the shared modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import RestoreError
from .layout import Layout, OperatorPlan, Rules

if TYPE_CHECKING:
    from ._bootstrap import Bootstrap, file_sink_of, journal_bootstrap
    from ._jvm import PROVEN_SPARK, helper
    from ._replay import (
        discard_checkpoint,
        old_batches,
        replay_batch,
        writer_file_sink,
    )
    from ._write import Restored, restore_savepoint

_EDGE = {"restore_savepoint": "_write", "Restored": "_write", "PROVEN_SPARK": "_jvm",
         "helper": "_jvm", "Bootstrap": "_bootstrap", "journal_bootstrap": "_bootstrap",
         "replay_batch": "_replay", "old_batches": "_replay",
         "discard_checkpoint": "_replay", "file_sink_of": "_bootstrap",
         "writer_file_sink": "_replay"}


def __getattr__(name: str) -> Any:
    if name in _EDGE:
        import importlib

        return getattr(importlib.import_module(f".{_EDGE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PROVEN_SPARK", "Bootstrap", "Layout", "OperatorPlan", "RestoreError", "Restored",
           "Rules", "discard_checkpoint", "file_sink_of", "helper", "journal_bootstrap",
           "old_batches", "replay_batch", "restore_savepoint", "writer_file_sink"]
