"""A client-side deadline for a command: a database (or a pooler, or a Kafka cluster)
that accepts a connection and never answers must not hold a command forever.

The deadline is ``--timeout``, else ``$OFFSET_JOURNAL_TIMEOUT``, else
:data:`DEFAULT_TIMEOUT` (none for the commands in :data:`UNBOUNDED`). :func:`alarm_deadline`
enforces it in the main thread with SIGALRM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ConfigError
from ..values import parse_timeout

ENV_TIMEOUT = "OFFSET_JOURNAL_TIMEOUT"
DEFAULT_TIMEOUT = 120.0
"""Seconds a command may take before it gives up (--timeout, $OFFSET_JOURNAL_TIMEOUT)."""
UNBOUNDED = frozenset({"jars", "demo", "savepoint", "state"})
"""Commands that run as long as they need unless a deadline is asked for: a first
Maven download, the demo's streaming jobs, a savepoint's export of a large state, a
restore or repartition that writes a large state through Spark."""
GRACE = 5.0
"""Seconds past the deadline after which the last resort runs if unwinding hangs."""


class DeadlineExceeded(BaseException):
    """Raised in the main thread when the deadline passes. A BaseException, like
    KeyboardInterrupt: neither SQLAlchemy nor psycopg then tries a rollback or a cancel
    over the connection that does not answer."""


def command_deadline(timeout: float | None, command: str | None) -> float | None:
    """The command's deadline in seconds: ``timeout`` (--timeout), else
    $OFFSET_JOURNAL_TIMEOUT, else the default (none for the commands in UNBOUNDED)."""
    if timeout is not None:
        return float(timeout)
    env = os.environ.get(ENV_TIMEOUT, "").strip()
    if env:
        try:
            return parse_timeout(env)
        except ValueError as exc:
            raise ConfigError(f"{ENV_TIMEOUT}: {exc}") from None
    return None if command in UNBOUNDED else DEFAULT_TIMEOUT


def timed_out_line(seconds: float) -> str:
    """What a command says when its deadline passed."""
    return (f"no answer within {seconds:g} s: the database (or Kafka cluster, or object "
            f"store) stopped answering (raise the limit with --timeout SECONDS or "
            f"{ENV_TIMEOUT})")


@contextlib.contextmanager
def alarm_deadline(seconds: float | None, *,
             last_resort: Callable[[float], None] | None = None) -> Iterator[None]:
    """Bound the block's time: SIGALRM raises :class:`DeadlineExceeded` in the main
    thread (a blocking wait on a socket is interrupted by it); ``last_resort(seconds)``
    (the console script ends the process) runs :data:`GRACE` seconds later if unwinding
    hangs too. A host that already uses SIGALRM keeps it: then nothing is set."""
    usable = (seconds is not None and threading.current_thread() is threading.main_thread()
              and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
              and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))
    if not usable:
        yield
        return
    assert seconds is not None

    def fire(signum: int, frame: Any) -> None:
        raise DeadlineExceeded(seconds)

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    timer = (threading.Timer(seconds + GRACE, last_resort, args=(seconds,))
             if last_resort is not None else None)
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        if timer is not None:
            timer.cancel()
