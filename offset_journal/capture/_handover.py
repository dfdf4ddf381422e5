"""The writer's side of the failover window (_recent.py): which server it writes to, what
it journaled there kept in the window, and, found on another server, what the window
holds of the servers before handed to the spool, to be journaled again ahead of anything
newer (docs/operations.md, "When the journal's database fails over").

Everything here runs on the writer's thread, and never fails a write: a fault of the
window costs its protection (counted in ``unprotected``), and is said.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..formatting import first_line
from ..journal import Journal
from ..journal.server import ServerIdentity, expect_server
from ..redaction import redact
from ._faults import Standby, Switched
from ._recent import RecentWindow

log = logging.getLogger("offset_journal.capture.writer")  # said as the writer's, as before

REJOURNAL = "rejournal"
"""The key that marks an event taken back from the failover window, to be journaled
again on a new server (counted apart: it was counted when first journaled)."""

Keep = Callable[[list[dict[str, Any]]], None]
"""Holds events of a server before durably (the spool, ahead of what waits there), or
raises: then the window keeps them."""


def rejournaled(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Window events of a server before, marked to be journaled (and counted) again."""
    return [{**ev, REJOURNAL: True} for ev in events]


class Failover:
    """The server a writer writes to, and its failover window."""

    def __init__(self, window: RecentWindow, *, database_url: str, spool_dir: str,
                 quiet: float) -> None:
        self.window = window
        self.server: ServerIdentity | None = None
        self.unprotected = 0
        """Events not kept in the window for a fault of offset-journal's own."""
        self._url = database_url
        self._spool_dir = spool_dir
        self._quiet = quiet  # seconds between two warnings of the window's trouble
        self._warned_at = float("-inf")

    def connected(self, journal: Journal, seen: ServerIdentity, keep: Keep) -> None:
        """A new connection is on ``seen``, before anything was written on it: a standby
        is an outage (Standby); on another server than before, what the window holds
        goes to ``keep`` first, and the events at hand wait behind it (Switched)."""
        if seen.in_recovery:
            raise Standby("the journal database is a standby (in recovery): waiting for "
                          "a primary")
        if self.arrive(journal, seen, keep):
            raise Switched()

    def arrive(self, journal: Journal, server: ServerIdentity, keep: Keep) -> int:
        """The writer is on ``server`` (the first it knows, or another than before): its
        transactions refuse any other from now on; on another, the Journal forgets what
        it remembers of the one before. The window's events of the servers before go to
        ``keep`` first; returns how many."""
        if self.server is not None and server.key != self.server.key:
            log.warning("offset-journal: the journal database %s is another server now "
                        "(%s): it may lack what was journaled last on the one before (a "
                        "failover with asynchronous replication)%s",
                        redact(self._url), server.describe(),
                        "; journaling again what the failover window holds"
                        if self.window.enabled else " (no failover window: failover_window=0)")
            journal.forget_remembered()
        self.server = server
        expect_server(journal.engine, server)
        return self.check(keep)

    def journaled(self, events: list[dict[str, Any]], keep: Keep) -> None:
        """``events`` were just committed on the server the writer expects: they join
        the window, and what it held long enough there is let go."""
        if self.server is None or not self.window.enabled:
            return
        try:  # the window never fails the write: at worst they are not kept
            self.window.append(events, self.server.key)
        except Exception as exc:
            self.unprotected += len(events)
            self._trouble(f"{len(events)} event(s) journaled are not kept in the failover "
                          "window", exc)
        self.check(keep)

    def check(self, keep: Keep) -> int:
        """Let the window go of what is safe, and hand what it holds of other servers to
        ``keep``; how many events it handed over."""
        assert self.server is not None
        try:
            taken = self.window.check(self.server.key, keep)
        except Exception as exc:  # the window keeps them; the next check tries again
            self._trouble(f"cannot move the failover window to the spool {self._spool_dir}; "
                          "tried again after the next transaction", exc)
            return 0
        if taken:
            log.warning("offset-journal: %d event(s) journaled on a server before this one "
                        "go through the spool again, first (journaled where missing)", taken)
        return taken

    def holds_other(self) -> bool:
        """Whether the window still holds events of another server than the one written
        to (handing them over failed): flush() is not done."""
        return self.server is not None and self.window.holds_other_than(self.server.key)

    def _trouble(self, what: str, exc: BaseException) -> None:
        """Say a fault of the window, once per ``quiet`` seconds (with its traceback when
        it is not a disk error: ours)."""
        now = time.monotonic()
        if now < self._warned_at + self._quiet:
            return
        self._warned_at = now
        cause = (exc.strerror or type(exc).__name__) if isinstance(exc, OSError) \
            else f"{type(exc).__name__}: {first_line(exc)}"
        log.warning("offset-journal: %s (%s)", what, cause,
                    exc_info=None if isinstance(exc, OSError) else exc)
