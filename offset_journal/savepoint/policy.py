"""What a savepoint schedule decides (pure): when the next savepoint is due, and which
old savepoints its retention deletes.

* :class:`Cadence`: every N batches and/or every interval, counted from the batch (and
  the time) a savepoint was last due, taken or skipped: a savepoint that runs longer
  than the interval makes the next due points skip, never pile up;
* :class:`Retention` and :func:`decide`: by count (the newest N) and by age, as Flink's
  savepoint history is kept, and never the newest, never one a recorded restart plan
  starts from, never a row that is not a savepoint (its location may be anything: any
  role that may record a savepoint could have written it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..errors import ConfigError
from ..formatting import format_time
from ..rows import RecordedPlan, RecordedSavepoint
from ..values import parse_duration, url_scheme
from .core import recorded_problem


def duration_of(value: str | timedelta | None, what: str) -> timedelta | None:
    """A duration given as text (``15m``, ``1h30m``) or a timedelta: positive;
    ConfigError in one line otherwise."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise ConfigError(f"{what} must be a positive duration, not {value}")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a duration such as '15m' or '1h30m', not "
                          f"{value!r}")
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def count_of(value: Any, what: str) -> int | None:
    """A count of 1 or more (None: not given); ConfigError in one line otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what} must be a whole number of 1 or more, not {value!r}")
    return value


# --------------------------------------------------------------------------- cadence


@dataclass
class Cadence:
    """When a scheduled savepoint is due: ``every_batches`` batches and/or ``every``
    seconds after the last due point (whichever comes first). The first due point is
    counted from the first batch seen; a batch id below the last one seen (the query on
    a new checkpoint) starts the count again."""

    every_batches: int | None = None
    every_seconds: float | None = None
    _next_batch: int | None = None
    _next_time: float | None = None
    _last_batch: int | None = None

    def due(self, batch_id: int, now: float) -> bool:
        """Whether a savepoint is due at ``batch_id`` (``now``: a monotonic clock); a
        due point moves the next one on, whether the savepoint is then taken or
        skipped."""
        fresh = self._last_batch is None or batch_id < self._last_batch
        self._last_batch = batch_id
        if fresh:
            self._arm(batch_id, now)
            return False
        hit = ((self._next_batch is not None and batch_id >= self._next_batch)
               or (self._next_time is not None and now >= self._next_time))
        if hit:
            self._arm(batch_id, now)
        return hit

    def _arm(self, batch_id: int, now: float) -> None:
        self._next_batch = batch_id + self.every_batches if self.every_batches else None
        self._next_time = now + self.every_seconds if self.every_seconds else None


# --------------------------------------------------------------------------- retention


@dataclass(frozen=True)
class Retention:
    """How many savepoints a schedule keeps (``keep``: the newest N) and for how long
    (``max_age``); a savepoint goes when it is past either. None: not bounded by it."""

    keep: int | None = None
    max_age: timedelta | None = None

    @classmethod
    def of(cls, keep: Any = None, max_age: str | timedelta | None = None) -> Retention:
        """From what a person typed (``keep=5``, ``max_age="7d"``); ConfigError."""
        return cls(count_of(keep, "keep"), duration_of(max_age, "max_age"))

    @property
    def bounded(self) -> bool:
        return self.keep is not None or self.max_age is not None


@dataclass(frozen=True)
class Verdict:
    """What retention does with one savepoint: delete it or keep it, and why."""

    savepoint: RecordedSavepoint
    delete: bool
    why: str


def _normal(location: str) -> str:
    if url_scheme(location) is None:
        return os.path.normpath(os.path.abspath(location))
    return location.rstrip("/")


def within(location: str, scope: str) -> bool:
    """Whether ``location`` is directly in the directory (or prefix) ``scope``: a
    schedule's retention deletes only what it could have written (its savepoints are
    the location's children), never a savepoint made by hand elsewhere, deeper below
    included (``--to ./sp --keep 1`` in a home directory names the home directory).
    URLs are compared as written (``s3a://`` is not ``s3://``)."""
    local = url_scheme(location) is None
    if local != (url_scheme(scope) is None):
        return False
    if not local and any(part in (".", "..") for part in location.split("/")):
        return False  # an object store takes '..' as a name, its reader may not
    loc, root = _normal(location), _normal(scope)
    sep = os.sep if local else "/"
    parent, _sep, name = loc.rstrip(sep).rpartition(sep)
    return bool(name) and parent == root.rstrip(sep)


def plan_naming(plans: Iterable[RecordedPlan], row: RecordedSavepoint) -> int | None:
    """The first recorded plan that starts from ``row`` (by its id, or its manifest's
    SHA-256 for a plan from its directory), None when none does."""
    for plan in plans:
        named = plan.request.get("savepoint")
        if not isinstance(named, dict):
            continue
        if named.get("id") == row.id or (
                named.get("sha256") is not None and named.get("sha256") == row.manifest_sha256):
            return plan.id
    return None


def decide(rows: Sequence[RecordedSavepoint], plans: Sequence[RecordedPlan],
           retention: Retention, scope: str, now: datetime) -> list[Verdict]:
    """Which of a query's savepoints under ``scope`` retention deletes, newest first.
    Only rows not yet deleted, whose recorded manifest is a savepoint manifest of their
    own batch, are considered; among them the newest always stays, so does one a
    recorded plan starts from; the others go when past the ``keep`` newest or older than
    ``max_age`` (by the database's clock, ``now``)."""
    candidates = sorted((r for r in rows if r.deleted_at is None and within(r.location, scope)
                         and recorded_problem(r) is None), key=lambda r: r.id, reverse=True)
    out: list[Verdict] = []
    for rank, row in enumerate(candidates):
        plan = plan_naming(plans, row)
        too_many = retention.keep is not None and rank >= retention.keep
        age = now - row.created_at
        too_old = retention.max_age is not None and age > retention.max_age
        if rank == 0:
            out.append(Verdict(row, False, "the newest"))
        elif plan is not None:
            out.append(Verdict(row, False, f"restart plan {plan} starts from it"))
        elif too_many:
            out.append(Verdict(row, True, f"beyond the {retention.keep} newest kept"))
        elif too_old:
            out.append(Verdict(row, True, f"older than {_days(retention.max_age)} (made "
                                          f"{format_time(row.created_at)})"))
        else:
            out.append(Verdict(row, False, "within the retention"))
    return out


def _days(value: timedelta | None) -> str:
    """A retention age for people: ``90 s``, ``45 min``, ``12 h``, ``7 days``."""
    seconds = value.total_seconds() if value is not None else 0.0
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"
