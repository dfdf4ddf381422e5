"""The ``offset-journal`` command: parse, call the library, print.

:mod:`.parser` is the grammar (nothing runs there), :mod:`.commands` names each
subcommand's handler; errors of the one family
(:class:`~offset_journal.errors.OffsetJournalError`) are caught once, in
:func:`~.commands.main`, and printed as one line. Its modules, and where it stands
among the packages: docs/architecture.md.

May import: every package below it (local, health, report, restart, upgrading, state,
savepoint, checkpoint, audit, capture, journal, kafka) and the shared modules.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The console script (``offset-journal``): the handlers load on first call, so a job
    that imports :mod:`.plan_args` does not load every command."""
    from .commands import main as run

    return run(argv)


__all__ = ["main"]
