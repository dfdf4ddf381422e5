"""State rewriting: a savepoint's state restored straight into a NEW checkpoint, at JVM
speed, for the built-in stateful operators too, into any number of shuffle partitions;
a stopped query's state repartitioned in place; a broken checkpoint's old batches read
again after a restore.

:func:`restore_savepoint` runs the new query's own bootstrap batch (it reads nothing),
checks the savepoint's state layout against the new query's field by field
(:mod:`.layout`, :mod:`.matching`: pure), writes every operator's state with Spark's
internal state writer as the new checkpoint's next batch, and commits it with the old
query's watermark: the new query then starts on the checkpoint exactly after the
savepoint's batch. :func:`repartition_state` is Spark's offline repartition of a
RocksDB checkpoint, refused while its query runs.

The modules: ``layout`` and ``matching`` (what goes where, pure), ``_nested`` (nested
types compared and converted, pure), ``_jvm`` (the ONE edge to Spark's internals,
through the Java helper in ``jvm/state-restore``: proven on the Spark versions
:mod:`offset_journal.spark_version` names), ``_frames`` (the rows written, as
DataFrames), ``_bootstrap`` (the new query's bootstrap batch, and its journaling),
``_write`` (the restore), ``offsets`` (a plan's start offsets made concrete),
``repartition`` (in place), ``recover`` (which old batches a recovery reads again after
its savepoint, pure) and ``_replay`` (one of them run again on the recovered
checkpoint). What needs Spark is imported on first use. The flows that plan as well
(a restore from a plan, a recovery) live where plans do, in :mod:`offset_journal.restart`.

May import: :mod:`offset_journal.savepoint`, :mod:`offset_journal.checkpoint`,
:mod:`offset_journal.journal` and the shared modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import RestoreError
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
