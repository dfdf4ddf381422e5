"""offset-journal: keep Spark Structured Streaming offsets outside the checkpoint.

Attach the listener, and every completed micro-batch's offsets are journaled in
Postgres; a job that must start over with a new checkpoint then starts from them.

    import offset_journal
    offset_journal.attach(spark, database_url="postgresql://...")

Where things are: a restart plan is decided in :mod:`offset_journal.restart` (its
docstring maps the package); every error derives from
:class:`~offset_journal.errors.OffsetJournalError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ConfigError, JournalError, OffsetJournalError, RestartError
from .redaction import redact
from .rows import Batch, Run, SourceOffsets

if TYPE_CHECKING:
    from .capture.listener import OffsetJournalListener, attach
    from .journal import Journal


def __getattr__(name: str) -> Any:
    # The listener imports PySpark (0.26 s): only code that attaches it pays for that,
    # not the command (``offset-journal starting-offsets``) or the journal's readers.
    # The Journal loads SQLAlchemy: the pure core (plans, audits, records) loads without.
    if name in ("OffsetJournalListener", "attach"):
        from .capture import listener

        return getattr(listener, name)
    if name == "Journal":
        from .journal import Journal

        return Journal
    raise AttributeError(f"module 'offset_journal' has no attribute {name!r}")

__all__ = [
    "Batch",
    "ConfigError",
    "Journal",
    "JournalError",
    "OffsetJournalError",
    "OffsetJournalListener",
    "RestartError",
    "Run",
    "SourceOffsets",
    "attach",
    "redact",
]
__version__ = "0.1.0"
