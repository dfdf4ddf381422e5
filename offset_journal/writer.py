"""The background writer: takes events off a bounded queue and journals them.

Listener callbacks only put an event on the queue; this thread does all database I/O.
When the database does not answer, events go to the on-disk spool and the writer
retries with exponential backoff; once the database answers again the spool is
replayed before new events, so the journal fills up in order and nothing is lost.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from .db import make_engine, redact
from .journal import Journal, record_all
from .records import (
    PROGRESS,
    BatchRecord,
    ProgressFormatError,
    RunRecord,
    batch_from_progress,
    run_from_event,
)
from .spool import Spool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterConfig:
    database_url: str
    spool_dir: str
    queue_size: int = 10_000
    max_batch: int = 200
    retry_initial: float = 0.5
    retry_max: float = 30.0
    connect_timeout: int = 5
    statement_timeout_ms: int = 30_000
    spool_max_bytes: int | None = None


def _is_outage(exc: BaseException) -> bool:
    """Errors that say 'the database is not there right now', not 'this row is bad'."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError, OSError,
                            sa.exc.TimeoutError))


class Writer:
    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.queue: queue.Queue[dict[str, Any] | None] = queue.Queue(config.queue_size)
        self.spool = Spool(config.spool_dir, max_bytes=config.spool_max_bytes)
        self._journal: Journal | None = None
        self._pending = 0
        self._cond = threading.Condition()
        self._down_until = 0.0
        self._backoff = config.retry_initial
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offset-journal-writer",
                                        daemon=True)
        self.written = 0
        self.spooled = 0

    # ---------------------------------------------------------------- caller side

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, event: dict[str, Any]) -> None:
        """Hand an event over without waiting; spills to the spool when the queue is full."""
        with self._cond:
            self._pending += 1
        try:
            self.queue.put_nowait(event)
        except queue.Full:
            try:
                self.spooled += self.spool.append([event])
            finally:
                self._done(1)

    def _done(self, n: int) -> None:
        with self._cond:
            self._pending -= n
            self._cond.notify_all()

    def flush(self, timeout: float | None = None, *, to_database: bool = True) -> bool:
        """Wait until every submitted event is in the journal. False when the timeout
        ran out first (what is not in the journal yet is then safe in the spool).

        With ``to_database=False`` it waits only until every event is durable, in the
        journal or in the spool: what a query's termination and interpreter exit need,
        without waiting on a database that is away.
        """
        if not to_database:
            return self._wait_handed_over(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._down_until = 0.0  # try the database now rather than after backoff
            self._cond.notify_all()
        while True:
            with self._cond:
                remaining = None if deadline is None else deadline - time.monotonic()
                if self._pending == 0 and not self.spool.pending():
                    return True
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(0.05 if remaining is None else min(remaining, 0.05))
            if not self.alive:
                return self._pending == 0 and not self.spool.pending()

    def _wait_handed_over(self, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0 or not self.alive, timeout) \
                and self._pending == 0

    def spill_queue(self) -> int:
        """Move what is still queued to the spool (at exit, when waiting is over)."""
        events: list[dict[str, Any]] = []
        while True:
            try:
                ev = self.queue.get_nowait()
            except queue.Empty:
                break
            if ev is not None:
                events.append(ev)
        try:
            n = self.spool.append(events)
            self.spooled += n
            return n
        finally:
            self._done(len(events))

    def close(self, timeout: float = 10.0) -> bool:
        flushed = self.flush(timeout)
        self._stop.set()
        try:
            self.queue.put_nowait(None)
        except queue.Full:
            pass
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=max(1.0, timeout))
        self.spool.close()
        if self._journal is not None:
            self._journal.close()
        return flushed

    # ---------------------------------------------------------------- writer side

    def _get_journal(self) -> Journal:
        if self._journal is None:
            self._journal = writer_journal(self.config)
        return self._journal

    def _records(self, events: list[dict[str, Any]], journal: Journal,
                 conn: sa.Connection) -> list[RunRecord | BatchRecord]:
        out: list[RunRecord | BatchRecord] = []
        for ev in events:
            try:
                if ev.get("type") == PROGRESS:
                    rec = batch_from_progress(ev.get("json") or "")
                    if rec.raw_progress is not None:
                        log.warning(
                            "offset-journal: batch %s of run %s journaled with problems: %s",
                            rec.batch_id, rec.run_id, "; ".join(rec.problems) or "malformed")
                    out.append(rec)
                else:
                    out.append(run_from_event(ev))
            except (ProgressFormatError, KeyError, TypeError, ValueError) as exc:
                log.error("offset-journal: event kept in rejected_events: %s", exc)
                payload = ev.get("json") if isinstance(ev.get("json"), str) else None
                journal.record_rejected(str(exc), payload or _dump(ev), conn)
        return out

    def _write(self, events: list[dict[str, Any]]) -> None:
        """Journal events in one transaction; a bad event is isolated, not fatal.

        Raises on an outage so that the caller spools the events.
        """
        journal = self._get_journal()
        try:
            for attempt in (1, 2):
                try:
                    with journal.engine.begin() as conn:
                        self.written += record_all(
                            journal, self._records(events, journal, conn), conn)
                    return
                except sa.exc.DBAPIError as exc:
                    # A pooled connection gone stale (server restarted, idle timeout)
                    # invalidates the pool: one attempt on a fresh connection decides
                    # whether the database is really away.
                    if attempt == 2 or not exc.connection_invalidated:
                        raise
        except Exception as exc:
            if _is_outage(exc):
                raise
            if len(events) == 1:
                # The database refused this event's data: keep it verbatim, move on.
                with journal.engine.begin() as conn:
                    journal.record_rejected(f"database refused the event: {_first_line(exc)}",
                                            _dump(events[0]), conn)
                return
        for ev in events:  # isolate the bad one
            self._write([ev])

    def _try(self, fn: Any, *args: Any) -> bool:
        try:
            fn(*args)
        except Exception as exc:
            self._mark_down(exc)
            return False
        if self._backoff != self.config.retry_initial:
            log.warning("offset-journal: journal database is back")
        self._backoff = self.config.retry_initial
        self._down_until = 0.0
        return True

    def _mark_down(self, exc: BaseException) -> None:
        log.warning("offset-journal: cannot write to %s (%s); spooling, retry in %.1fs",
                    redact(self.config.database_url), redact(_first_line(exc)), self._backoff)
        self._down_until = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, self.config.retry_max)

    def _replay(self) -> bool:
        if not self.spool.pending():
            return True
        return self._try(self.spool.replay, self._write)

    def _take(self, first: dict[str, Any]) -> list[dict[str, Any]]:
        events = [first]
        while len(events) < self.config.max_batch:
            try:
                ev = self.queue.get_nowait()
            except queue.Empty:
                break
            if ev is None:
                self._stop.set()
                break
            events.append(ev)
        return events

    def _run(self) -> None:
        self._replay()  # what an earlier driver left behind
        while True:
            try:
                first = self.queue.get(timeout=0.2)
            except queue.Empty:
                first = None
            if first is None:
                if self._stop.is_set() and self.queue.empty():
                    break
                if self.spool.pending() and time.monotonic() >= self._down_until:
                    self._replay()
                continue
            events = self._take(first)
            try:
                self._handle(events)
            except Exception:  # never let the thread die
                log.exception("offset-journal: writer error")
            finally:
                self._done(len(events))

    def _handle(self, events: list[dict[str, Any]]) -> None:
        up = time.monotonic() >= self._down_until
        if up and self._replay() and self._try(self._write, events):
            return
        self.spooled += self.spool.append(events)


def writer_journal(config: WriterConfig) -> Journal:
    """The journal as the writer opens it: one connection, fail-fast timeouts, and no
    pre-ping round trip per transaction (a stale connection is retried once instead,
    in :meth:`Writer._write`)."""
    engine = make_engine(config.database_url, connect_timeout=config.connect_timeout,
                         statement_timeout_ms=config.statement_timeout_ms,
                         pool_size=1, max_overflow=1, pool_pre_ping=False)
    return Journal(engine=engine)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _dump(ev: Any) -> str:
    import json

    return json.dumps(ev, default=str)
