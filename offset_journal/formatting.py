"""How values are shown (pure): times, epoch milliseconds, an error's first line,
tables. The command line, the demo, the jobs and the plans all use these."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, Literal

from .errors import OffsetJournalError
from .redaction import redact

TimeSpec = Literal["auto", "milliseconds"]


def format_time(value: datetime | None, timespec: TimeSpec = "auto") -> str | None:
    """ISO 8601 in UTC with a ``Z`` (a naive time is taken as UTC); None for None.
    Plans show every digit ("auto"); the command line's tables milliseconds."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec=timespec).replace("+00:00", "Z")


def from_epoch_ms(value: int | None) -> datetime | None:
    """Milliseconds since the epoch (as checkpoints keep times) -> a UTC datetime."""
    if value is None:
        return None
    return datetime.fromtimestamp(value / 1000, tz=timezone.utc)


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (of the driver's error when SQLAlchemy
    wraps one), else its type's name. Not redacted: see :func:`one_line`."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def escape_line(text: str) -> str:
    """``text`` on one line: line breaks and other control characters escaped (``\\n``),
    so a value inside a message (a URL, a path, a name) cannot split it in two."""
    return cell(text)


def one_line(exc: BaseException) -> str:
    """An error as one line fit to show: its first line, credentials redacted, a
    database driver's error said to be one. Our own errors are one line by design: a
    line break in a value they quote is escaped, not taken for the end of the message."""
    if getattr(exc, "orig", None) is None and isinstance(exc, OffsetJournalError):
        return escape_line(redact(str(exc).strip()) or type(exc).__name__)
    first = first_line(exc)
    if getattr(exc, "orig", None) is not None:
        first = f"database error: {first}"
    return redact(first)


def cell(value: Any) -> str:
    """A table cell on one line: line breaks and other control characters escaped
    (``\\n``), so a query name cannot break the table or forge a row."""
    text = "" if value is None else str(value)
    if text.isprintable():
        return text
    return "".join(ch.encode("unicode_escape").decode("ascii")
                   if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch for ch in text)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, rule: bool = False) -> str:
    """Columns padded to their widest cell; ``rule``: a line of dashes under the headers."""
    cells = [[str(h) for h in headers]] + [[cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in cells]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
