"""Savepoints taken from the driver while the query runs:
``attach(spark, url, savepoints=SavepointSchedule(...))``.

The listener hands the schedule each progress event's JSON and returns at once (an
append under a lock: the callback's cost is that, whatever the event's size). A thread
of the schedule's own reads the events, each query's, and decides whether a savepoint is
due (:class:`~.policy.Cadence`); a due savepoint runs on the schedule's one savepoint
thread, so ONE at a time: a savepoint due while the previous one still runs is skipped,
with a WARNING and a count (:meth:`SavepointSchedule.stats`). One thread for the
schedule's life, not one per savepoint: in PySpark's pinned thread mode each Python
thread that calls Spark holds a JVM thread that a plain thread's end does not release.

A savepoint is :func:`~.periodic.take_savepoint`, the same as ``savepoint create
--under --keep --max-age`` from cron: the listener's events flushed to the journal first
(bounded), the state at the newest batch both the checkpoint committed and the journal
holds, then retention. Nothing it does raises into Spark: a failed savepoint is a
WARNING and a count, and the stream goes on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError, OffsetJournalError
from ..formatting import first_line
from .policy import Cadence, Retention, count_of, duration_of

if TYPE_CHECKING:
    from ..journal import Journal
    from .periodic import Taken

log = logging.getLogger(__name__)

Outcome = Literal["taken", "unchanged", "failed"]

HISTORY = 100
"""The most recent savepoint attempts :meth:`SavepointSchedule.stats` keeps."""
PENDING = 1000
"""Progress events kept for the schedule's thread (the oldest dropped past it: a due
point is caught up at its query's next batch)."""


@dataclass(frozen=True)
class Attempt:
    """One savepoint the schedule ran: the batch it was due at, when it started and
    ended (``time.monotonic()``), and what came of it: ``taken`` (``savepoint_id``),
    ``unchanged`` (the newest already held the batch) or ``failed`` (``error``)."""

    due_batch: int
    started: float
    ended: float
    outcome: Outcome
    savepoint_id: int | None = None
    batch_id: int | None = None
    deleted: tuple[int, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class ScheduleStats:
    """Savepoints taken, found unchanged, failed, skipped (due while the previous one
    still ran), deleted by retention, and the recent attempts, oldest first."""

    taken: int = 0
    unchanged: int = 0
    failed: int = 0
    skipped: int = 0
    deleted: int = 0
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)


class SavepointSchedule:
    """Savepoints of query ``query`` (its checkpoint ``checkpoint``) every
    ``every_batches`` batches and/or ``every`` (a duration: ``"15m"``), whichever comes
    first, each in a new directory under ``under`` (local or ``s3a://``), recorded in
    the journal; then the query's savepoints there beyond the ``keep`` newest or older
    than ``max_age`` are deleted, never the newest nor one a recorded plan starts from.
    Give it to :func:`offset_journal.attach` (``savepoints=``). ``flush_timeout``: how
    long a savepoint waits for the listener's events to reach the journal first.
    ConfigError (one line) for a value that is not a count or a duration, a schedule
    with neither, and (when attached) a location that is not writable."""

    def __init__(self, query: str, *, checkpoint: str, under: str,
                 every_batches: int | None = None, every: str | timedelta | None = None,
                 keep: int | None = None, max_age: str | timedelta | None = None,
                 flush_timeout: float = 30.0) -> None:
        for what, value in (("query", query), ("checkpoint", checkpoint), ("under", under)):
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"savepoint schedule: {what} must be a non-empty string, "
                                  f"not {value!r}")
        self.query, self.checkpoint, self.under = query, checkpoint, under
        self.every_batches = count_of(every_batches, "savepoint schedule: every_batches")
        self.every = duration_of(every, "savepoint schedule: every")
        if self.every_batches is None and self.every is None:
            raise ConfigError("savepoint schedule: give every_batches=N, every='15m', or "
                              "both")
        self.retention = Retention(count_of(keep, "savepoint schedule: keep"),
                                   duration_of(max_age, "savepoint schedule: max_age"))
        if (isinstance(flush_timeout, bool) or not isinstance(flush_timeout, (int, float))
                or not 0 <= flush_timeout < float("inf")):
            raise ConfigError(f"savepoint schedule: flush_timeout must be a number of "
                              f"seconds, 0 or more, not {flush_timeout!r}")
        self.flush_timeout = float(flush_timeout)
        self._cadence = Cadence(self.every_batches,
                                self.every.total_seconds() if self.every else None)
        self._lock = threading.Condition()
        # Events not yet read, every query's: the newest alone would let another query's
        # event, arriving before this thread woke, hide this query's due batch.
        self._events: deque[str] = deque(maxlen=PENDING)
        self._order: tuple[int, float] | None = None  # (due batch, when): the one to take
        self._running_since: tuple[int, float] | None = None  # the one being taken
        self._stats = ScheduleStats()
        self._attempts: deque[Attempt] = deque(maxlen=HISTORY)
        self._bound: tuple[Any, Journal, Callable[[float], bool]] | None = None
        self._stop = False
        self._threads: list[threading.Thread] = []
        self._unbound_warned = False

    # ------------------------------------------------------------------ the listener's side

    def bind(self, spark: Any, journal: Journal, flush: Callable[[float], bool]) -> None:
        """Called by :func:`offset_journal.attach`: the session the savepoints read the
        state with, the journal, and the listener's ``flush``. ConfigError when the
        location is not writable; starts the schedule's thread."""
        from ._files import probe_writable
        from .periodic import scope_of

        try:
            probe_writable(scope_of(self.under, None))
        except OffsetJournalError as exc:
            raise ConfigError(f"savepoint schedule of {self.query!r}: {exc}") from None
        with self._lock:
            self._bound = (spark, journal, flush)
            self._stop = False
            if not any(t.is_alive() for t in self._threads):
                self._threads = [
                    threading.Thread(target=self._dispatch, daemon=True,
                                     name=f"offset-journal-savepoints-{self.query}"),
                    threading.Thread(target=self._work, daemon=True,
                                     name=f"offset-journal-savepoint-{self.query}")]
                for thread in self._threads:
                    thread.start()

    def on_progress(self, progress_json: str) -> None:
        """A progress event (its JSON): kept for the schedule's thread.
        Never blocks on anything but this lock, never raises."""
        with self._lock:
            if self._bound is None:
                if not self._unbound_warned:
                    self._unbound_warned = True
                    log.warning("offset-journal: the savepoint schedule of %r is not "
                                "attached (give it to attach(..., savepoints=...)): no "
                                "savepoint is taken", self.query)
                return
            self._events.append(progress_json)
            self._lock.notify_all()

    def close(self, timeout: float = 60.0) -> bool:
        """Stop deciding; wait up to ``timeout`` s for a savepoint still running. False
        when one still runs after it."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._stop = True
            self._lock.notify_all()
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    def stats(self) -> ScheduleStats:
        with self._lock:
            return ScheduleStats(self._stats.taken, self._stats.unchanged, self._stats.failed,
                                 self._stats.skipped, self._stats.deleted,
                                 tuple(self._attempts))

    # ------------------------------------------------------------------ the schedule's thread

    def _dispatch(self) -> None:
        while True:
            with self._lock:
                while not self._events and not self._stop:
                    self._lock.wait()
                if self._stop:
                    return
                texts = list(self._events)
                self._events.clear()
            for text in texts:
                try:
                    self._consider(text)
                except Exception:  # noqa: BLE001 - the schedule's thread never dies of one
                    log.exception("offset-journal: the savepoint schedule of %r could not "
                                  "read a progress event (the query is unaffected)", self.query)

    def _consider(self, text: str) -> None:
        """One progress event: a savepoint started when due and none runs; skipped, with
        a WARNING and a count, when one still runs."""
        progress = json.loads(text)
        if progress.get("name") != self.query or not isinstance(progress.get("batchId"), int):
            return
        batch_id = int(progress["batchId"])
        now = time.monotonic()
        with self._lock:
            if not self._cadence.due(batch_id, now):
                return
            busy = self._running_since or self._order
            if busy is not None:
                since_batch, since = busy
                self._stats = _add(self._stats, skipped=1)
                log.warning("offset-journal: savepoint of %r due at batch %d skipped: the "
                            "one due at batch %d still runs (for %.1f s); %d skipped so far",
                            self.query, batch_id, since_batch, now - since,
                            self._stats.skipped)
                return
            self._order = (batch_id, now)
            self._lock.notify_all()

    def _work(self) -> None:
        """The savepoint thread: one savepoint at a time, for the schedule's life."""
        while True:
            with self._lock:
                while self._order is None and not self._stop:
                    self._lock.wait()
                if self._stop:
                    self._order = None
                    return
                order = self._order
                assert order is not None
                self._running_since, self._order = order, None
            try:
                self._take(*order)
            finally:
                with self._lock:
                    self._running_since = None

    def _take(self, due_batch: int, started: float) -> None:
        """One savepoint, on its own thread: the journal flushed first, then
        :func:`~.periodic.take_savepoint`; any failure is a WARNING, never the stream's."""
        from .periodic import said, take_savepoint

        assert self._bound is not None
        spark, journal, flush = self._bound
        _describe_jobs(spark, self.query)
        attempt: Attempt
        try:
            if not flush(self.flush_timeout):
                log.info("offset-journal: savepoint of %r: the listener's events did not all "
                         "reach the journal within %.0f s; the savepoint takes the newest "
                         "batch the journal holds", self.query, self.flush_timeout)
            taken = take_savepoint(lambda: spark, journal, self.query, self.checkpoint,
                                   under=self.under, retention=self.retention)
            attempt = self._taken(due_batch, started, taken)
            for line in said(taken):
                log.info("offset-journal: savepoint schedule of %r: %s", self.query, line)
            for warning in taken.warnings:
                log.warning("offset-journal: savepoint schedule of %r: %s", self.query, warning)
        except Exception as exc:  # noqa: BLE001 - a savepoint never fails the stream
            why = str(exc) if isinstance(exc, OffsetJournalError) else (
                f"{type(exc).__name__}: {first_line(exc)}")
            attempt = Attempt(due_batch, started, time.monotonic(), "failed", error=why)
            log.warning("offset-journal: savepoint of %r due at batch %d failed (the query "
                        "is unaffected): %s", self.query, due_batch, why)
        with self._lock:
            self._attempts.append(attempt)
            if attempt.outcome == "failed":
                self._stats = _add(self._stats, failed=1)
            elif attempt.outcome == "unchanged":
                self._stats = _add(self._stats, unchanged=1, deleted=len(attempt.deleted))
            else:
                self._stats = _add(self._stats, taken=1, deleted=len(attempt.deleted))

    def _taken(self, due_batch: int, started: float, taken: Taken) -> Attempt:
        deleted = tuple(v.savepoint.id for v in taken.pruned.deleted)
        if taken.savepoint is None:
            return Attempt(due_batch, started, time.monotonic(), "unchanged",
                           taken.held_by.id if taken.held_by else None, taken.batch_id,
                           deleted)
        log.info("offset-journal: savepoint %s of %r at batch %d in %s (%.1f s)",
                 taken.savepoint.id, self.query, taken.batch_id, taken.savepoint.location,
                 time.monotonic() - started)
        return Attempt(due_batch, started, time.monotonic(), "taken", taken.savepoint.id,
                       taken.batch_id, deleted)


def _add(stats: ScheduleStats, **more: int) -> ScheduleStats:
    counts = {k: getattr(stats, k) + more.get(k, 0)
              for k in ("taken", "unchanged", "failed", "skipped", "deleted")}
    return ScheduleStats(**counts, attempts=stats.attempts)


def _describe_jobs(spark: Any, query: str) -> None:
    """The savepoint's Spark jobs named in the UI (this thread's local property)."""
    try:
        spark.sparkContext.setJobDescription(f"offset-journal savepoint of {query}")
    except Exception:  # noqa: BLE001 - a session without a SparkContext (Connect)
        pass
