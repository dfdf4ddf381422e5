"""Values people type: durations, points in time, timeouts, names (pure, no I/O).

Each parser returns the value or raises ValueError with a message fit to show as is;
none lets an OverflowError, a NaN or an unbounded wait through. The command line
(cli/parser.py) and the jobs use them; so can a program.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

from .errors import InvalidValueError

MAX_DURATION = timedelta(days=100 * 366)
"""The longest duration taken (windows, relative times): a century."""
MAX_TIMEOUT = 24 * 3600.0
"""The longest timeout taken, in seconds."""

_UNITS = {
    "ms": timedelta(milliseconds=1), "millisecond": timedelta(milliseconds=1),
    "milliseconds": timedelta(milliseconds=1),
    "s": timedelta(seconds=1), "sec": timedelta(seconds=1), "secs": timedelta(seconds=1),
    "second": timedelta(seconds=1), "seconds": timedelta(seconds=1),
    "m": timedelta(minutes=1), "min": timedelta(minutes=1), "mins": timedelta(minutes=1),
    "minute": timedelta(minutes=1), "minutes": timedelta(minutes=1),
    "h": timedelta(hours=1), "hr": timedelta(hours=1), "hrs": timedelta(hours=1),
    "hour": timedelta(hours=1), "hours": timedelta(hours=1),
    "d": timedelta(days=1), "day": timedelta(days=1), "days": timedelta(days=1),
    "w": timedelta(weeks=1), "week": timedelta(weeks=1), "weeks": timedelta(weeks=1),
}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)")


def parse_duration(text: str) -> timedelta:
    """``10m``, ``10 minutes``, ``1h30m``, ``90s``, ``2 days`` (as Spark's window()):
    positive, and at most :data:`MAX_DURATION`."""
    value = text.strip().lower()
    seconds = 0.0
    pos = 0
    while pos < len(value):
        match = _DURATION_PART.match(value, pos)
        if match is None or match.group(2) not in _UNITS:
            raise InvalidValueError(f"bad duration {text!r}: use e.g. 10m, 1h30m, '10 minutes'")
        seconds += float(match.group(1)) * _UNITS[match.group(2)].total_seconds()
        pos = match.end()
        while pos < len(value) and value[pos] in " ,":
            pos += 1
    if not value or seconds <= 0:
        raise InvalidValueError(f"bad duration {text!r}: must be positive")
    if seconds > MAX_DURATION.total_seconds():
        raise InvalidValueError(f"bad duration {text!r}: longer than {MAX_DURATION.days} days")
    return timedelta(seconds=seconds)


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """ISO 8601 (naive = UTC), ``now``, or relative: ``-2h`` / ``2h ago``."""
    value = text.strip()
    now = now or datetime.now(timezone.utc)
    lowered = value.lower()
    if lowered == "now":
        return now
    relative = None
    if lowered.startswith("-"):
        relative = lowered[1:]
    elif lowered.endswith(" ago"):
        relative = lowered[: -len(" ago")]
    if relative is not None:
        try:
            ago = parse_duration(relative)
        except ValueError as exc:
            if "longer than" in str(exc):
                raise InvalidValueError(f"bad time {text!r}: {exc}") from None
        else:
            try:
                return now - ago
            except OverflowError:
                raise InvalidValueError(f"bad time {text!r}: before the year 1") from None
    iso = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        parsed = datetime.fromisoformat(iso)
    except ValueError:
        raise InvalidValueError(
            f"bad time {text!r}: use ISO 8601 like 2024-05-01T12:00:00Z, or -2h / '2h ago'"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def parse_timeout(text: str | float) -> float:
    """Seconds to wait: a finite number above 0, at most :data:`MAX_TIMEOUT`."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InvalidValueError(f"bad timeout {text!r}: not a number of seconds") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT:
        raise InvalidValueError(f"bad timeout {text!r}: use seconds above 0, at most "
                         f"{MAX_TIMEOUT:.0f}")
    return value


def check_name(text: str, what: str) -> str:
    """A query name, consumer group or the like: not empty, nor only blanks."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidValueError(f"{what} must not be empty")
    return text


def parse_batch_ref(text: str) -> tuple[str, int]:
    """``RUN_ID:BATCH_ID`` (a run id as ``runs`` prints it) -> (run id, batch id)."""
    run_id, sep, batch = text.strip().rpartition(":")
    if not sep or not run_id or not batch.isdigit():
        raise InvalidValueError(
            f"bad batch {text!r}: use RUN_ID:BATCH_ID, e.g. 88e2ff94-...-6316fbef529a:41"
        )
    return run_id, int(batch)


# A URL scheme needs two or more letters, so "C:\\..." stays a local path; Spark's own
# "file:/tmp/x" (one slash) counts as a URL.
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+):/")


def url_scheme(path: str) -> str | None:
    """The scheme of a checkpoint or output location given as a URL (lower case:
    ``s3a``, ``file``...), None for a local path."""
    match = _URL.match(path)
    return match.group(1).lower() if match else None


S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
"""The URL schemes read as S3: Hadoop's ``s3a`` and the ``s3``/``s3n`` people also write."""


def on_s3(*paths: str | None) -> bool:
    """Whether any of ``paths`` (None: not given) is on S3."""
    return any(p is not None and url_scheme(p) in S3_SCHEMES for p in paths)
