"""Savepoints: a stateful query's state and offsets taken from the SAME batch, so an
upgraded query on a NEW checkpoint keeps its state, exactly once.

:func:`create_savepoint` (``offset-journal savepoint create``) exports every stateful
operator's state at the newest batch both the checkpoint and the journal hold, with a
manifest and checksums; :func:`initial_state` reads it back; :class:`SavepointSchedule`
takes them on a schedule, with retention. Writing one into a new checkpoint is
:mod:`offset_journal.state`. Its modules: docs/architecture.md. What needs Spark is
imported on first use.

May import: :mod:`offset_journal.checkpoint`, :mod:`offset_journal.journal` and the
shared modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import SavepointError
from ._files import probe_writable, require_empty
from ._load import load_planned_savepoint, load_savepoint
from ._verified import read_part
from .model import BUILT_IN, Manifest, Operator, OperatorKind, Part, PartKind, Savepoint
from .policy import Retention
from .schedule import SavepointSchedule, ScheduleStats

if TYPE_CHECKING:
    from .spark import (
        ROCKSDB_PROVIDER,
        create_savepoint,
        initial_state,
        prepare_savepoint,
        state_frame,
    )

_EDGE = ("ROCKSDB_PROVIDER", "create_savepoint", "initial_state", "prepare_savepoint",
         "state_frame")


def __getattr__(name: str) -> Any:
    if name in _EDGE:
        from . import spark

        return getattr(spark, name)
    raise AttributeError(f"module 'offset_journal.savepoint' has no attribute {name!r}")


__all__ = ["BUILT_IN", "ROCKSDB_PROVIDER", "Manifest", "Operator", "OperatorKind", "Part",
           "PartKind", "Retention", "Savepoint", "SavepointError", "SavepointSchedule",
           "ScheduleStats", "create_savepoint", "initial_state", "load_planned_savepoint",
           "load_savepoint", "prepare_savepoint", "probe_writable", "read_part",
           "require_empty", "state_frame"]
