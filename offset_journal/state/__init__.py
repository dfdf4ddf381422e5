"""State rewriting: a savepoint's state restored straight into a NEW checkpoint, at JVM
speed, for every stateful operator and any number of shuffle partitions
(:func:`restore_savepoint`); a stopped query's state repartitioned in place
(:func:`repartition_state`); a broken checkpoint's old batches read again after a
restore. Spark's internals are reached through ``_jvm`` alone. Its modules:
docs/architecture.md. What needs Spark is imported on first use.

May import: :mod:`offset_journal.savepoint`, :mod:`offset_journal.checkpoint`,
:mod:`offset_journal.journal` and the shared modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import RestoreError
from .layout import Layout, OperatorPlan, Rules

if TYPE_CHECKING:
    from ._bootstrap import Bootstrap, file_sink_of, journal_bootstrap
    from ._jvm import PROVEN_SPARK, checkpoint_root, helper
    from ._replay import (
        discard_checkpoint,
        old_batches,
        replay_batch,
        writer_file_sink,
    )
    from ._write import Restored, restore_savepoint

_EDGE = {"restore_savepoint": "_write", "Restored": "_write", "PROVEN_SPARK": "_jvm",
         "helper": "_jvm", "checkpoint_root": "_jvm", "Bootstrap": "_bootstrap",
         "journal_bootstrap": "_bootstrap",
         "replay_batch": "_replay", "old_batches": "_replay",
         "discard_checkpoint": "_replay", "file_sink_of": "_bootstrap",
         "writer_file_sink": "_replay"}


def __getattr__(name: str) -> Any:
    if name in _EDGE:
        import importlib

        return getattr(importlib.import_module(f".{_EDGE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PROVEN_SPARK", "Bootstrap", "Layout", "OperatorPlan", "RestoreError", "Restored",
           "Rules", "checkpoint_root", "discard_checkpoint", "file_sink_of", "helper",
           "journal_bootstrap",
           "old_batches", "replay_batch", "restore_savepoint", "writer_file_sink"]
