"""offset-journal: keep Spark Structured Streaming offsets outside the checkpoint.

Attach the listener, and every completed micro-batch's offsets are journaled in
Postgres; a job that must start over with a new checkpoint then starts from them.

    import offset_journal
    offset_journal.attach(spark, database_url="postgresql://...")
"""

from __future__ import annotations

from .db import ConfigError, redact
from .journal import Batch, Journal, JournalError, Run, SourceOffsets
from .listener import OffsetJournalListener, attach

__all__ = [
    "Batch",
    "ConfigError",
    "Journal",
    "JournalError",
    "OffsetJournalListener",
    "Run",
    "SourceOffsets",
    "attach",
    "redact",
]
__version__ = "0.1.0"
