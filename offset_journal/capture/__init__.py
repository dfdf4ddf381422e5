"""Capture: Spark's progress events in, journal records out, written in the background.

The listener (:mod:`.listener`) turns each completed micro-batch into a record and hands
it to the writer (:mod:`.writer`), which journals it on its own thread; what the database
cannot take yet waits in the spool (:mod:`._spool`), what it took recently stays in the
failover window (:mod:`._recent`) until a standby has it, and events it refused are kept
aside (:mod:`.rejected`). The stream never waits on any of it.

Its modules, and where it stands among the packages: docs/architecture.md.

May import: :mod:`offset_journal.journal`, :mod:`offset_journal.kafka` (a run's cluster id)
and the shared modules (records, errors, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .listener import OffsetJournalListener, attach


def __getattr__(name: str) -> Any:
    # The listener imports PySpark: the writer and spool load without it.
    if name in ("OffsetJournalListener", "attach"):
        from . import listener

        return getattr(listener, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OffsetJournalListener", "attach"]
