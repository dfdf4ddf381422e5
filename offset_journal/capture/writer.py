"""The background writer: takes events off a bounded queue and journals them.

Listener callbacks only put an event on the queue; this thread does all database I/O.
When the database does not answer, events go to the on-disk spool and the writer
retries with exponential backoff; once the database answers again the spool is
replayed before new events, so the journal fills up in order and nothing is lost.

What it journaled stays in its failover window (_recent.py) until it is safe beyond the
primary. Each new connection (_connection.py) reads which server it is on before
anything is written there, and behind a pooler each transaction is guarded to that
server (journal/server.py); on another server (a standby promoted after the primary was
lost, which with asynchronous replication may lack the last transactions), the events
journaled on the servers before go back through the spool first, journaled again where
missing (_handover.py). A standby, which refuses writes, is an outage: the connection is
dropped so that a multi-host URL's next connection finds the primary. What an error
means for the events is decided in _faults.py.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..errors import JournalConnectionLost, JournalError, JournalReadOnly
from ..formatting import first_line
from ..journal import Connection, Journal, record_each, translated
from ..journal.db import host_count
from ..journal.server import server_changed
from ..records import (
    PROGRESS,
    BatchRecord,
    ProgressFormatError,
    RunRecord,
    batch_from_progress,
    run_from_event,
)
from ..redaction import redact
from ._config import WriterConfig, WriterStats
from ._connection import HeldConnection, writer_journal
from ._faults import (
    LAYOUT_KEY,
    Fault,
    Switched,
    classify_error,
    fault_hint,
    from_database,
    sqlstate,
)
from ._faults import Standby as _Standby
from ._handover import REJOURNAL, Failover, rejournaled
from ._recent import RecentWindow
from ._spool import Spool

log = logging.getLogger(__name__)


FAILOVER_RETRY_MAX = 1.0
"""The longest wait between two tries through a multi-host URL while no host takes
writes: a standby promoted in the meantime is found within it."""


class Writer:
    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.queue: queue.Queue[dict[str, Any] | None] = queue.Queue(config.queue_size)
        self.spool = Spool(config.spool_dir, max_bytes=config.spool_max_bytes)
        self.window = RecentWindow(config.spool_dir, config.failover_window,
                                   config.failover_window_max_bytes)
        self._failover = Failover(self.window, database_url=config.database_url,
                                  spool_dir=config.spool_dir, quiet=config.retry_max)
        self._probes_asked = 0  # by flush(): is the server still the one written to?
        self._probes_done = 0
        self._journal: Journal | None = None
        self._held = HeldConnection(config.transaction_timeout)  # the writer thread's
        self._pending = 0
        self._cond = threading.Condition()
        self._down_until = 0.0
        self._quiet_until = 0.0  # repeated outage warnings are held until then
        self._hosts = host_count(config.database_url)
        self._backoff = config.retry_initial
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offset-journal-writer",
                                        daemon=True)
        self._inflight: list[dict[str, Any]] | None = None
        self._inflight_spilled = False
        self._lost: Counter[str] = Counter()
        self._spool_dropped_seen = 0
        self._losses_retry_at = 0.0
        self.written = 0
        self.spooled = 0
        self.rejected = 0
        self.rejournaled = 0

    # ---------------------------------------------------------------- caller side

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def lost(self) -> int:
        with self._cond:
            return sum(self._lost.values())

    def stats(self) -> WriterStats:
        with self._cond:
            return WriterStats(journaled=self.written, spooled=self.spooled,
                               rejected=self.rejected, lost=sum(self._lost.values()),
                               lost_reasons=dict(self._lost), rejournaled=self.rejournaled,
                               unprotected=self.window.unprotected + self._failover.unprotected,
                               foreign=self.spool.strangers.count + self.window.strangers.count)

    def submit(self, event: dict[str, Any]) -> None:
        """Hand an event over without waiting; spills to the spool when the queue is full."""
        with self._cond:
            self._pending += 1
        try:
            self.queue.put_nowait(event)
        except queue.Full:
            try:
                self._keep([event])
            finally:
                self._done(1)

    def _done(self, n: int) -> None:
        with self._cond:
            self._pending -= n
            self._cond.notify_all()

    def _lose(self, n: int, reason: str) -> None:
        """Count events that are neither journaled nor kept, and say so."""
        if n <= 0:
            return
        with self._cond:
            self._lost[reason] += n
            total = sum(self._lost.values())
        log.error("offset-journal: %d event(s) LOST (not journaled, not kept): %s "
                  "[%d lost so far]", n, reason, total)

    def _keep(self, events: list[dict[str, Any]], *, again: bool = False) -> None:
        """Put events in the spool, or count them as lost when it cannot take them.
        ``again``: events taken back from the failover window (journaled before: ahead
        of everything spooled, not counted as spooled; an unusable spool raises, so
        that the window keeps them)."""
        if not events:
            return
        try:
            n = self.spool.append_first(events) if again else self.spool.append(events)
        except OSError as exc:
            if again:
                raise
            self._lose(len(events), f"the database is not taking them and the spool "
                                    f"{self.spool.directory} is unusable: "
                                    f"{exc.strerror or type(exc).__name__}")
            return
        with self._cond:
            if not again:
                self.spooled += n
            dropped = self.spool.dropped - self._spool_dropped_seen
            self._spool_dropped_seen += dropped
        self._lose(dropped, f"the spool {self.spool.directory} is full (spool_max_bytes="
                            f"{self.spool.max_bytes}); what was dropped is recorded in "
                            f"{self.spool.losses_path.name} and reported by `plan`")

    def flush(self, timeout: float | None = None, *, to_database: bool = True) -> bool:
        """Wait until every submitted event is in the journal. False when the timeout
        ran out first (what is not in the journal yet is then safe in the spool), and
        False once any event was lost or went to ``rejected_events`` (not in the
        journal either; see :meth:`stats`). While the failover window holds events,
        the writer first asks the database which server it is: on another one, what
        it lacks is journaled again before this returns True.

        With ``to_database=False`` it waits only until every event is durable, in the
        journal or in the spool: what a query's termination and interpreter exit need,
        without waiting on a database that is away.
        """
        if not to_database:
            return self._wait_handed_over(timeout) and not self.lost
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._down_until = 0.0  # try the database now rather than after backoff
            ticket = 0
            if self.window.holding() and self.alive:
                self._probes_asked += 1
                ticket = self._probes_asked
            self._cond.notify_all()
        if ticket:
            with contextlib.suppress(queue.Full):
                self.queue.put_nowait(_WAKE)  # an idle writer asks at once
        while True:
            with self._cond:
                remaining = None if deadline is None else deadline - time.monotonic()
                if (self._pending == 0 and not self.spool.pending()
                        and self._probes_done >= ticket):
                    return not self._lost and not self.rejected
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(0.05 if remaining is None else min(remaining, 0.05))
            if not self.alive:
                return (self._pending == 0 and not self.spool.pending() and not self.lost
                        and not self.rejected and self._probes_done >= ticket)

    def _wait_handed_over(self, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0 or not self.alive, timeout) \
                and self._pending == 0

    def spill_queue(self) -> int:
        """Move what is still queued, and the batch the writer thread is busy with, to
        the spool (at exit, when waiting is over). The busy batch may still commit
        later: replaying it is harmless, the journal keeps a (run, batch) once."""
        events: list[dict[str, Any]] = []
        while True:
            try:
                ev = self.queue.get_nowait()
            except queue.Empty:
                break
            if ev is not None and ev is not _WAKE:
                events.append(ev)
        with self._cond:
            inflight = self._inflight if not self._inflight_spilled else None
            self._inflight_spilled = True
        taken = len(events) + len(inflight or [])
        if inflight:
            log.warning("offset-journal: the journal database has not answered for %d "
                        "event(s) in flight; keeping them in the spool %s",
                        len(inflight), self.spool.directory)
        try:
            before = self.spooled
            self._keep((inflight or []) + events)
            return self.spooled - before
        finally:
            self._done(taken)

    def close(self, timeout: float = 10.0) -> bool:
        """Flush, then stop the writer. False when events are not in the journal (they
        are in the spool, or were lost: see :meth:`stats`)."""
        flushed = self.flush(timeout)
        self._stop.set()
        try:
            self.queue.put_nowait(None)
        except queue.Full:
            pass
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=max(1.0, timeout))
        with self._cond:
            left = self._pending
        if left:  # the thread is stuck (or never ran): what it holds goes to disk
            self.spill_queue()
        self.spool.close()
        if not self.alive:  # else the stuck thread still holds its connection
            self._held.close()
            self.window.close()
        if self._journal is not None:
            self._journal.close()
        return flushed and not self.lost

    # ---------------------------------------------------------------- writer side

    def _get_journal(self) -> Journal:
        if self._journal is None:
            self._journal = writer_journal(self.config)
        return self._journal

    def _parse(self, events: list[dict[str, Any]]) -> _Parsed:
        """The events as records (with the events they came from), and (reason, payload)
        of those that cannot be one."""
        records: list[RunRecord | BatchRecord] = []
        good: list[dict[str, Any]] = []
        bad: list[tuple[str, str]] = []
        for ev in events:
            try:
                if ev.get("type") == PROGRESS:
                    rec = batch_from_progress(ev.get("json") or "")
                    if rec.raw_progress is not None:
                        log.warning(
                            "offset-journal: batch %s of run %s journaled with problems: %s",
                            rec.batch_id, rec.run_id, "; ".join(rec.problems) or "malformed")
                    records.append(rec)
                else:
                    records.append(run_from_event(ev))
                good.append(ev)
            except (ProgressFormatError, KeyError, TypeError, ValueError) as exc:
                payload = ev.get("json") if isinstance(ev.get("json"), str) else None
                bad.append((str(exc), payload or _dump(ev)))
        return _Parsed(records, good, bad)

    def _connection(self, journal: Journal) -> Connection:
        """The writer thread's connection (_connection.py). A new one reads which server
        it is on: a standby is an outage (dropped: the next finds the primary); on
        another server, what the window holds goes first (Switched). Its database
        errors are the journal's own (translated)."""
        with translated():
            conn, seen = self._held.get(journal)
        if seen is not None:
            if seen.in_recovery:
                self._held.drop()
            self._failover.connected(journal, seen, self._rejournal)
        return conn

    def _transaction(self, journal: Journal, events: list[dict[str, Any]]) -> None:
        parsed = self._parse(events)
        retried: set[str] = set()
        while True:
            try:
                conn = self._connection(journal)
                with translated(), self._held.deadline(conn):
                    new = _journal_events(journal, conn, parsed.records, parsed.bad)
            except JournalError as exc:
                # A pooled connection gone stale (server restarted, idle timeout)
                # invalidates the pool, and a Kafka layout remembered as stored may be
                # missing (another server, after a failover: the Journal forgot its
                # layouts): one attempt more for each decides whether the database is
                # away.
                why = ("stale" if isinstance(exc, JournalConnectionLost)
                       else "layout" if LAYOUT_KEY in str(exc) else None)
                if why is None or why in retried:
                    raise
                retried.add(why)
                continue
            for reason, _ in parsed.bad:
                log.error("offset-journal: event kept in rejected_events: %s", reason)
            again = sum(n for n, ev in zip(new, parsed.good, strict=True) if ev.get(REJOURNAL))
            with self._cond:
                self.written += sum(new) - again
                self.rejournaled += again
                self.rejected += len(parsed.bad)
            self._failover.journaled(parsed.good, self._rejournal)
            return

    # ------------------------------------------------------------ the server written to

    def _rejournal(self, events: list[dict[str, Any]]) -> None:
        """Window events of a server before: to the spool, ahead of all it holds."""
        self._keep(rejournaled(events), again=True)

    def _probe(self) -> None:
        """Make sure the server is the one written to (a transaction of nothing, guarded
        behind a pooler; a connection made anew reads which it is), for flush(), and for
        the window to let go of what is safe when no batch comes."""
        with self._cond:
            asked = self._probes_asked
        journal = self._get_journal()
        conn = self._connection(journal)
        with translated(), self._held.deadline(conn), conn.begin():
            pass
        if self._failover.server is not None:
            self._failover.check(self._rejournal)
            if self._failover.holds_other():
                return  # not handed over yet: flush() waits, the next probe tries again
        with self._cond:
            self._probes_done = max(self._probes_done, asked)
            self._cond.notify_all()

    def _write(self, events: list[dict[str, Any]]) -> None:
        """Journal events in one transaction; an event the database refuses is kept in
        rejected_events and the others are journaled.

        Raises on an outage or a misconfiguration, so that the caller keeps the events.
        """
        journal = self._get_journal()
        try:
            self._transaction(journal, events)
            return
        except Exception as exc:
            if classify_error(exc) is not Fault.REFUSED:
                raise
            if len(events) == 1:
                self._reject(journal, events[0], exc)
                return
        for ev in events:  # isolate the bad one
            self._write([ev])

    def _reject(self, journal: Journal, event: dict[str, Any], exc: BaseException) -> None:
        if from_database(exc):
            reason = f"database refused the event: {redact(first_line(exc))}"
            state = sqlstate(exc)
            if state:
                reason += f" (SQLSTATE {state})"
        else:
            # A fault of offset-journal's own on this one event: kept where `rejected
            # replay` finds it once a fixed release is installed, and shown in full.
            reason = (f"offset-journal failed on the event ({type(exc).__name__}: "
                      f"{redact(first_line(exc))}); please report it")
            log.error("offset-journal: writing an event failed in offset-journal itself",
                      exc_info=exc)
        try:
            conn = self._connection(journal)
            with translated(), self._held.deadline(conn), conn.begin():
                journal.record_rejected(reason, _dump(event), conn)
        except Exception as again:
            # Counted as lost only when the database itself refuses the rejected row;
            # anything else keeps the event in the spool, to be tried again.
            if classify_error(again) is not Fault.REFUSED or not from_database(again):
                raise
            self._lose(1, f"{reason}; and its rejected_events row was refused too: "
                          f"{redact(first_line(again))}")
            return
        with self._cond:
            self.rejected += 1
        log.error("offset-journal: event kept in rejected_events: %s", reason)

    def _try(self, fn: Any, *args: Any) -> bool:
        try:
            fn(*args)
        except Exception as exc:
            self._mark_down(exc)
            return False
        if self._backoff != self.config.retry_initial:
            log.warning("offset-journal: journal database is back")
        self._backoff = self.config.retry_initial
        self._down_until = self._quiet_until = 0.0
        return True

    def _mark_down(self, exc: BaseException) -> None:
        url = redact(self.config.database_url)
        if isinstance(exc, Switched) or server_changed(exc):
            # Not an outage: nothing was written there. What the window holds goes
            # first, the events after it; refused behind a pooler, a connection made
            # anew reads which server it is.
            if server_changed(exc):
                log.info("offset-journal: a transaction was refused before it wrote "
                         "anything: %s is not the server written to before (a pooler "
                         "connected to another); connecting anew to see which it is", url)
                self._held.drop()
            self._down_until = 0.0
            return
        standby = isinstance(exc, (_Standby, JournalReadOnly))
        if standby:  # find the primary (or this one promoted) on the next try
            self._held.drop()
        fault = classify_error(exc)
        now = time.monotonic()
        if fault is Fault.MISCONFIGURED:
            log.error("offset-journal: cannot write to %s: %s (%s). The events are not "
                      "bad: they wait (in the spool) and are retried in %.1fs.", url,
                      fault_hint(exc), redact(first_line(exc)), self._backoff)
        elif now >= self._quiet_until:
            log.warning("offset-journal: cannot write to %s (%s); retry in %.1fs", url,
                        redact(first_line(exc)), self._backoff)
        self._down_until = now + self._backoff
        ceiling = self.config.retry_max
        if fault is Fault.OUTAGE and (self._hosts > 1 or standby):
            # A primary and its standbys, or a standby: one of them is promoted any time
            # now, and trying again costs little; said once per retry_max meanwhile.
            ceiling = min(ceiling, FAILOVER_RETRY_MAX)
            if self._backoff >= ceiling and now >= self._quiet_until:
                self._quiet_until = now + self.config.retry_max
        self._backoff = min(self._backoff * 2, ceiling)

    def _replay(self) -> bool:
        self._record_spool_losses()
        for _ in range(3):  # again for what a change of server moved there meanwhile
            if not self.spool.pending():
                return True
            if not self._try(self.spool.replay, self._write):
                return False
        return True

    def _record_spool_losses(self) -> None:
        """Move the spool's record of what a full spool dropped into the journal."""
        if time.monotonic() < self._losses_retry_at or not self.spool.has_losses():
            return
        journal = self._get_journal()
        try:
            self.spool.take_losses(lambda entries: _record_losses(self, journal, entries))
        except Exception as exc:  # the events go on; the record stays on disk
            self._losses_retry_at = time.monotonic() + self.config.retry_max
            log.warning("offset-journal: could not record the spool's losses in the "
                        "journal yet (%s); kept in %s, retry in %.0fs",
                        redact(first_line(exc)), self.spool.losses_path,
                        self.config.retry_max)

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
            if ev is not _WAKE:
                events.append(ev)
        return events

    def _run(self) -> None:
        try:
            self._loop()
        finally:  # the thread's own: closed by it, never from another thread
            self._held.close()
            self.window.close()

    def _loop(self) -> None:
        self._replay()  # what an earlier driver left behind
        while True:
            try:
                first = self.queue.get(timeout=0.2)
            except queue.Empty:
                first = None
            if first is None or first is _WAKE:
                if self._stop.is_set() and self.queue.empty():
                    break
                try:
                    self._idle()
                except Exception as exc:  # never let the thread die
                    log.error("offset-journal: writer error: %s", redact(first_line(exc)),
                              exc_info=log.isEnabledFor(logging.DEBUG))
                continue
            events = self._take(first)
            with self._cond:
                self._inflight, self._inflight_spilled = events, False
            try:
                self._handle(events)
            except Exception as exc:  # never let the thread die
                log.error("offset-journal: writer error: %s", redact(first_line(exc)),
                          exc_info=log.isEnabledFor(logging.DEBUG))
            finally:
                with self._cond:
                    spilled, self._inflight = self._inflight_spilled, None
                if not spilled:
                    self._done(len(events))

    def _idle(self) -> None:
        """No event waiting: replay the spool, then ask the database which server it is
        when flush() wants to know or the window holds events long enough to let go."""
        if time.monotonic() < self._down_until:
            return
        if (self.spool.pending() or self.spool.has_losses()) and not self._replay():
            return
        with self._cond:
            asked = self._probes_asked > self._probes_done
        due = self.window.due()
        if asked or (due is not None and due <= time.time()):
            self._try(self._probe)

    def _handle(self, events: list[dict[str, Any]]) -> None:
        up = time.monotonic() >= self._down_until
        if up and self._replay() and self._try(self._write, events):
            return
        self._keep(events)


@dataclass(frozen=True)
class _Parsed:
    """Events read for a transaction: the records, the events they came from (in the
    same order), and (reason, payload) of the events that cannot be one."""

    records: list[RunRecord | BatchRecord]
    good: list[dict[str, Any]]
    bad: list[tuple[str, str]]


_WAKE: dict[str, Any] = {}
"""Put on the queue (never journaled) to wake an idle writer: flush() asks a probe."""


def _record_losses(writer: Writer, journal: Journal, entries: list[dict[str, Any]]) -> None:
    conn = writer._connection(journal)
    with translated(), writer._held.deadline(conn), conn.begin():
        journal.record_spool_losses(entries, conn)


def _journal_events(journal: Journal, conn: Connection,
                    records: list[RunRecord | BatchRecord],
                    bad: list[tuple[str, str]]) -> list[bool]:
    """One transaction on ``conn``: the records, and the events that cannot be one in
    rejected_events; for each record, whether it was a batch new to the journal. The
    listener's common case, one batch alone, is one round trip (Journal.write_batch)."""
    if not bad and len(records) == 1 and isinstance(records[0], BatchRecord):
        return [journal.write_batch(records[0], conn)]
    with conn.begin():
        for reason, payload in bad:
            journal.record_rejected(reason, payload, conn)
        return record_each(journal, records, conn)


def _dump(ev: Any) -> str:
    import json

    return json.dumps(ev, default=str)
