"""What every command shares: its exit codes, how it prints (stdout for programs, one
line on stderr for people), and the journal opened from its arguments."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from ..errors import OffsetJournalError
from ..formatting import cell, format_time
from ..redaction import redact
from .parser import PROG

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
"""``check``'s exit for every error (bad arguments, no answer): the monitoring plugins'
UNKNOWN, since its 1 and 2 mean warning and critical."""
EXIT_WARNING = 1
EXIT_CRITICAL = 2
"""A scheduled ``savepoint create`` (``--keep``/``--max-age``) exits as ``check``: 1 when
the savepoint was taken but something needs a person, 2 when none was taken."""


def say(text: str = "") -> None:
    print(text, file=sys.stdout)


def complain(kind: str, text: str) -> None:
    # One line whatever the text holds: a value with a line break must not split it.
    print(f"{PROG}: {kind}: {cell(redact(text))}", file=sys.stderr)


def iso(value: datetime | None) -> str:
    """A time in the command's tables and JSON: milliseconds, "" for none."""
    return format_time(value, "milliseconds") or ""


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def database_url(args: argparse.Namespace) -> str:
    from ..journal.db import resolve_url

    return resolve_url(args.database_url)


def open_journal(args: argparse.Namespace) -> Any:
    from ..journal import Journal

    return Journal(database_url(args))


class NotFound(OffsetJournalError, RuntimeError):
    """Nothing to show (unknown query, empty checkpoint): exit status 1."""

