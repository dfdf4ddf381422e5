"""offset-journal: keep Spark Structured Streaming offsets outside the checkpoint.

Attach the listener, and every completed micro-batch's offsets are journaled in
Postgres; a job that must start over with a new checkpoint then starts from them.

    import offset_journal
    offset_journal.attach(spark, database_url="postgresql://...")

Where things are, in the order data flows: :mod:`~offset_journal.capture` (the listener
and its writer) -> :mod:`~offset_journal.journal` (storage, its schema and roles) ->
:mod:`~offset_journal.restart` (plans), :mod:`~offset_journal.audit`,
:mod:`~offset_journal.report`, :mod:`~offset_journal.health`,
:mod:`~offset_journal.savepoint`, :mod:`~offset_journal.upgrading` (an upgrade in one
call) -> :mod:`~offset_journal.cli` (the command). Beside
them: :mod:`~offset_journal.checkpoint` (reading Spark checkpoints),
:mod:`~offset_journal.kafka` (what a cluster is asked), :mod:`~offset_journal.local`
(services for tests and the demo), :mod:`~offset_journal.testing` (the pytest plugin),
and the shared pure modules at the top (:mod:`~offset_journal.rows` is what the journal
returns, :mod:`~offset_journal.records` what the listener hands the writer). Every error
derives from :class:`~offset_journal.errors.OffsetJournalError`. docs/architecture.md
draws the arrows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _moved
from .errors import ConfigError, JournalError, OffsetJournalError, RestartError
from .redaction import redact
from .rows import Batch, Run, SourceOffsets

if TYPE_CHECKING:
    from .capture.listener import OffsetJournalListener, attach
    from .journal import Journal
    from .upgrading import upgrade


def __getattr__(name: str) -> Any:
    # The listener imports PySpark (0.26 s): only code that attaches it pays for that,
    # not the command (``offset-journal starting-offsets``) or the journal's readers.
    # The Journal loads SQLAlchemy: the pure core (plans, audits, records) loads without.
    if name in ("OffsetJournalListener", "attach"):
        from . import capture  # which loads its listener on first use, too

        return getattr(capture, name)
    if name == "Journal":
        from .journal import Journal

        return Journal
    if name == "upgrade":  # loads the savepoint and restore edges: on first use
        from .upgrading import upgrade

        return upgrade
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
    "upgrade",
]
__version__ = "0.2.0"

_moved.install()  # the old module paths, deprecated (CHANGELOG.md)
