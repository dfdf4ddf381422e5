"""A client-side deadline for the writer's transactions: a database (or a pooler, or the
network) that keeps the connection open and never answers would otherwise hold the
writer thread for good. ``statement_timeout`` cannot fire when nothing answers.

One thread watches one transaction at a time and cuts its connection (shuts the socket
down) when it outlives its deadline; the driver then raises a connection error, which
the writer treats as an outage like any other. The thread lives as long as its writer:
a timer started per transaction cost a thread start per batch (about 0.1 ms here, as
much as the rest of a small batch's client time).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger("offset_journal.capture.writer")


@dataclass(frozen=True)
class _Watch:
    token: int
    deadline: float  # time.monotonic()
    fd: int
    seconds: float


class Watchdog:
    """Cuts the connection of a transaction that outlives its deadline (:meth:`watch`)."""

    def __init__(self, name: str = "offset-journal-watchdog") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._watch: _Watch | None = None
        self._tokens = 0
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextlib.contextmanager
    def watch(self, fd: int | None, seconds: float) -> Iterator[None]:
        """The ``with`` body is one transaction on the socket ``fd`` (None: nothing to
        watch); past ``seconds`` the socket is shut down. Once the body has left, its
        socket is never touched."""
        if fd is None:
            yield
            return
        with self._cond:
            self._tokens += 1
            token = self._tokens
            self._watch = _Watch(token, time.monotonic() + seconds, fd, seconds)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name,
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                if self._watch is not None and self._watch.token == token:
                    self._watch = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                watch = self._watch
                if watch is None:
                    self._cond.wait()
                    continue
                left = watch.deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                # Under the lock: the transaction cannot have left in between.
                self._watch = None
                log.warning("offset-journal: the journal database did not answer within "
                            "%.1fs; cutting the connection", watch.seconds)
                cut(watch.fd)


def cut(fd: int) -> None:
    """Shut a socket down (the driver's own descriptor stays its to close)."""
    with contextlib.suppress(OSError):
        s = socket.socket(fileno=os.dup(fd))
        try:
            s.shutdown(socket.SHUT_RDWR)
        finally:
            s.close()
