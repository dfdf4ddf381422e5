"""The ``offset-journal`` command: parse, call the library, print.

:mod:`.parser` is the grammar (argument types, subcommands; nothing runs there),
:mod:`.commands` the handlers, :mod:`.demo` the demo, :mod:`.plan_args` the restart-plan
options that jobs' own command lines share, :mod:`._output` the history's table/CSV/JSON,
:mod:`._savepoints` what the commands say about savepoints and :mod:`._deadline` a
command's client-side deadline. Errors of the one family
(:class:`~offset_journal.errors.OffsetJournalError`) are caught once, in
:func:`~.commands.main`, and printed as one line.

May import: every package below it (local, health, report, restart, savepoint,
checkpoint, audit, capture, journal, kafka) and the shared modules.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The console script (``offset-journal``): the handlers load on first call, so a job
    that imports :mod:`.plan_args` does not load every command."""
    from .commands import main as run

    return run(argv)


__all__ = ["main"]
