"""Savepoints: a stateful query's state and offsets taken from the SAME batch, so an
upgraded query on a NEW checkpoint keeps its state, exactly once.

``offset-journal savepoint create QUERY --checkpoint OLD --to DIR`` (or
:func:`create_savepoint`) finds the newest batch B both the old checkpoint committed and
the journal holds, exports every stateful operator's state at B with Spark's State Data
Source to Parquet under DIR, with a manifest (query, run, B, B's end offsets, operators,
state schemas, row counts, checksums), and records it in the journal (``savepoints``).
A plan from it (``plan QUERY --savepoint ID|DIR``) starts right after B, and
:func:`initial_state` gives the new query's ``transformWithState(initialState=...)``.

On a schedule, with retention: :class:`SavepointSchedule` from the driver
(``attach(spark, url, savepoints=SavepointSchedule(...))``), and ``savepoint create
--under DIR --keep N --max-age D`` from cron, both through :mod:`.periodic`.

The modules: ``model.py`` (the data), ``core.py`` (the decisions, pure), ``_files.py``
(the directory: manifest, checksums), ``_load.py`` (find and check a savepoint),
``spark.py`` (the Spark edge), ``_verified.py`` (a part read back as exactly the bytes
checked, at every read), ``policy.py`` (a schedule's cadence and retention, pure),
``periodic.py`` (a scheduled savepoint and its retention), ``schedule.py`` (the
driver's schedule), ``restore/`` (a savepoint's state written into a new checkpoint, and
a stopped query's state repartitioned, at JVM speed). The plan's side is
:mod:`offset_journal.restart.decide.seeding`. The map of every package: docs/architecture.md.
What needs Spark is imported on first use.

May import: :mod:`offset_journal.checkpoint`, :mod:`offset_journal.journal` and the
shared modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import SavepointError
from ._files import probe_writable, require_empty
from ._load import load_planned_savepoint, load_savepoint
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
           "load_savepoint", "prepare_savepoint", "probe_writable", "require_empty",
           "state_frame"]
