"""Who asked: the host and operating-system user recorded with each restart plan and
savepoint handed out (never a database credential)."""

from __future__ import annotations

import getpass
import socket


def host_name() -> str | None:
    """This machine's host name (None when it cannot be had)."""
    try:
        return socket.gethostname() or None
    except OSError:
        return None


def os_user() -> str | None:
    """The operating-system user running this process (None when it cannot be had)."""
    try:
        return getpass.getuser() or None
    except (OSError, KeyError, ImportError):
        return None
