"""The command line's argument types: each turns one typed word into a value, or into
argparse's error (one line, exit 2). The parsing itself is in :mod:`offset_journal.values`
and the health check's thresholds; these are argparse's adapters of them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, cast

from .. import values
from ..errors import InvalidValueError
from .plan_args import argument_type


def duration_arg(text: str) -> timedelta:
    """``10m``, ``1h30m``, ``'10 minutes'`` (offset_journal.values.parse_duration)."""
    return cast(timedelta, argument_type(values.parse_duration)(text))


def time_arg(text: str, now: datetime | None = None) -> datetime:
    """ISO 8601 (naive = UTC), ``now``, ``-2h`` (offset_journal.values.parse_time)."""
    return cast(datetime, argument_type(lambda t: values.parse_time(t, now))(text))


def past_time_arg(text: str) -> datetime:
    """:func:`time_arg`, refused when in the future (a count "since" then is of nothing)."""
    def past(t: str) -> datetime:
        value, now = values.parse_time(t), datetime.now(timezone.utc)
        if value > now:
            raise InvalidValueError(f"{value.isoformat().replace('+00:00', 'Z')} is in the future: "
                             "give a time that has passed (e.g. -1h)")
        return value

    return cast(datetime, argument_type(past)(text))


timeout_arg = argument_type(values.parse_timeout)


def name_arg(what: str) -> Callable[[str], str]:
    return argument_type(lambda text: values.check_name(text, what))


def batch_arg(text: str) -> tuple[str, int]:
    """``RUN_ID:BATCH_ID`` (offset_journal.values.parse_batch_ref)."""
    return cast(tuple[str, int], argument_type(values.parse_batch_ref)(text))


def key_value_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"bad Kafka setting {text!r}: use KEY=VALUE")
    return key.strip(), value


def topics_arg(text: str) -> list[str]:
    topics = [t.strip() for t in text.split(",") if t.strip()]
    if not topics:
        raise argparse.ArgumentTypeError(f"no topic in {text!r}")
    return topics


def directory_arg(text: str) -> str:
    """A directory or URL: an empty one would be read as the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give a directory or URL ('.' for the "
                                         "current directory)")
    return text


def non_negative_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


def positive_arg(text: str) -> int:
    value = non_negative_arg(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def lag_threshold_arg(text: str) -> Any:
    from ..health.check import parse_threshold

    return argument_type(lambda t: parse_threshold(t, count_value))(text)


def count_value(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidValueError(f"not a number: {text!r}") from None
    if value < 0:
        raise InvalidValueError(f"must be >= 0: {text!r}")
    return value


def duration_threshold_arg(minimum: bool) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        from ..health.check import parse_threshold

        return argument_type(lambda t: parse_threshold(t, values.parse_duration,
                                                       minimum=minimum))(text)

    convert.__name__ = "threshold"
    return convert


def bounded_arg(low: int, high: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        value = non_negative_arg(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}: {text!r}")
        return value

    convert.__name__ = "number"
    return convert
