"""The ``offset-journal`` command: parse, call the library, print.

:mod:`.parser` is the grammar (argument types, subcommands; nothing runs there),
:mod:`.commands` the handlers, :mod:`.plan_args` the restart-plan options that jobs' own
command lines share, :mod:`._output` the history's table/CSV/JSON and :mod:`._deadline` a
command's client-side deadline. Errors of the one family (:class:`~offset_journal.errors.
OffsetJournalError`) are caught once, in :func:`main`, and printed as one line.

May import: every package below it (local, health, report, restart, savepoint,
checkpoint, audit, capture, journal, kafka) and the shared modules.
"""

from __future__ import annotations

from .commands import main

__all__ = ["main"]
