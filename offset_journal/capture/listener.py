"""Spark events in, journal events out.

``OffsetJournalListener`` is a PySpark StreamingQueryListener whose callbacks do the
least they can: copy what they need off the event into a small dict and hand it to a
background writer. They never raise into Spark and never wait on the database.

Under Spark Connect the listener may be pickled and run in a Python process on the
server (PySpark 3.5) or get events streamed to the client (PySpark 4.x); either way,
construction opens no connection and starts no thread: the writer starts on the
first event, wherever that arrives.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError
from ..journal.db import resolve_url
from ..records import ASYNC_EXECUTION, CLUSTER, PROGRESS, REAL_TIME_TRIGGER, STARTED, TERMINATED
from ..redaction import redact
from ..spark_version import require
from ._ownership import directory_refusal
from ._recent import DEFAULT_MAX_BYTES, DEFAULT_SECONDS
from ._spool import Spool, default_spool_dir
from .writer import Writer, WriterConfig, WriterStats

if TYPE_CHECKING:
    from ..journal import Journal

try:  # pyspark is optional for the rest of the package
    from pyspark.sql.streaming import StreamingQueryListener as _Base
except ImportError:  # pragma: no cover - exercised only without pyspark
    _Base = object  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)


class OffsetJournalListener(_Base):
    """Journals every completed micro-batch's offsets into Postgres.

    Args:
        database_url: SQLAlchemy/libpq URL; else OFFSET_JOURNAL_DATABASE_URL.
        spool_dir: where events wait while the database is away; else
            OFFSET_JOURNAL_SPOOL_DIR, else a directory under ~/.local/state. One that
            exists must be this user's and not writable by others (ConfigError).
        queue_size: events held in memory before callbacks spill to the spool.
        spool_max_bytes: cap on the spool's size on disk (None: unbounded).
        terminate_flush_timeout: how long a query's termination waits for its events
            to reach the journal (they are in the spool after that).
        statement_timeout_ms: the writer's statement timeout; a transaction that takes
            longer than it plus the connect timeout plus 5 s has its connection cut.
        exit_flush_timeout: at interpreter exit, how long to wait for events to reach
            the journal before the rest (the batch in flight too) goes to the spool.
        kafka_bootstrap_servers: the Kafka cluster the queries read; each run's cluster
            id is then asked once (admin API, on a thread of its own, never on the
            stream's path) and journaled, so that a plan against another cluster (a
            replica, a rebuilt cluster) refuses instead of misreading the offsets.
        kafka_config: more Kafka client settings for that lookup (security).
        failover_window: seconds what was journaled is kept on disk (in the spool
            directory) to be journaled again if the journal's database fails over to a
            standby that lacked it (asynchronous replication): cover the standby's
            replication lag; 0 keeps nothing (synchronous replication needs nothing).
        failover_window_max_bytes: the most the failover window keeps on disk (256 MiB);
            past it, its oldest events are dropped, said in a warning, and counted in
            ``stats().unprotected``.
        savepoints: savepoints on a schedule, taken from this driver while the query
            runs (:class:`offset_journal.savepoint.SavepointSchedule`, or several):
            each gets every progress event's JSON, off the stream's path. Classic
            sessions, through :func:`attach`.
    """

    def __init__(self, database_url: str | None = None, *, spool_dir: str | None = None,
                 queue_size: int = 10_000, retry_max: float = 30.0,
                 spool_max_bytes: int | None = None, connect_timeout: int = 5,
                 terminate_flush_timeout: float = 5.0, statement_timeout_ms: int = 30_000,
                 exit_flush_timeout: float = 10.0, kafka_bootstrap_servers: str | None = None,
                 kafka_config: Mapping[str, Any] | None = None,
                 failover_window: float = DEFAULT_SECONDS,
                 failover_window_max_bytes: int = DEFAULT_MAX_BYTES,
                 savepoints: SavepointHook | Sequence[SavepointHook] | None = None) -> None:
        if (not isinstance(failover_window_max_bytes, int)
                or isinstance(failover_window_max_bytes, bool) or failover_window_max_bytes < 1):
            raise ConfigError(f"failover_window_max_bytes must be a number of bytes above 0, "
                              f"not {failover_window_max_bytes!r}")
        url = resolve_url(database_url)
        spool_dir = str(spool_dir or default_spool_dir(url))
        refusal = directory_refusal(Path(spool_dir))  # what it holds would be journaled
        if refusal is not None:
            raise ConfigError(refusal)
        self._config = WriterConfig(
            database_url=url,
            spool_dir=spool_dir,
            queue_size=queue_size,
            retry_max=retry_max,
            connect_timeout=connect_timeout,
            spool_max_bytes=spool_max_bytes,
            statement_timeout_ms=statement_timeout_ms,
            failover_window=failover_window,
            failover_window_max_bytes=failover_window_max_bytes,
        )
        self._terminate_flush_timeout = terminate_flush_timeout
        self._exit_flush_timeout = exit_flush_timeout
        self._kafka_servers = kafka_bootstrap_servers or None
        self._kafka_config = dict(kafka_config or {})
        self._init_runtime()
        self._savepoints = _hooks(savepoints)
        self._savepoint_journal: Journal | None = None  # theirs, opened by attach()

    def _init_runtime(self) -> None:
        self._jstreams: Any = None  # the session's StreamingQueryManager (classic; attach())
        self._writer: Writer | None = None
        self._lock = threading.Lock()
        self._names: dict[str, str | None] = {}
        self._warned: set[str] = set()
        self._closed = False
        self._late_spool: Spool | None = None
        self._late = WriterStats()  # events after close(), and writers closed before
        self._late_lost: dict[str, int] = {}
        self._terminated: set[str] = set()
        self._terminated_cond = threading.Condition()

    # Spark Connect pickles the listener: ship configuration only.
    def __getstate__(self) -> dict[str, Any]:
        return {"_config": self._config,
                "_terminate_flush_timeout": self._terminate_flush_timeout,
                "_exit_flush_timeout": self._exit_flush_timeout,
                "_kafka_servers": self._kafka_servers, "_kafka_config": self._kafka_config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()
        self._savepoints = ()  # a schedule runs where attach() bound it: the driver

    # ------------------------------------------------------------------ lifecycle

    @property
    def spool_dir(self) -> str:
        return self._config.spool_dir

    def start(self) -> Writer:
        """Start the background writer now (it also starts on the first event) and
        replay anything an earlier driver left in the spool.

        After :meth:`close`, this resumes journaling; events that arrived in between
        (kept in the spool) are replayed."""
        with self._lock:
            if self._writer is None or not self._writer.alive:
                if self._writer is not None:  # a writer whose thread ended: keep its count
                    self._late = self._late + self._writer.stats()
                if self._late_spool is not None:  # its file must be replayable now
                    self._late_spool.close()
                    self._late_spool = None
                self._closed = False
                self._writer = Writer(self._config)
                self._writer.start()
                atexit.register(self._at_exit)
            return self._writer

    def stats(self) -> WriterStats:
        """Events journaled, spooled, rejected (kept in rejected_events) and lost (with
        reasons) since this listener was made."""
        with self._lock:
            writer, late = self._writer, self._late
        return late + writer.stats() if writer is not None else late

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every event so far is in the journal. False on timeout, when events
        were lost (see :meth:`stats`), and after :meth:`close` when events arrived that
        wait in the spool for the next :meth:`start`."""
        writer = self._writer
        if writer is None:
            return self._late.lost == 0 and not self._late_pending()
        return writer.flush(timeout) and self._late.lost == 0

    def _late_pending(self) -> bool:
        return self._late_spool is not None and self._late_spool.pending()

    def close(self, timeout: float = 10.0) -> bool:
        """Flush, then stop the writer. False when events are not in the journal: they
        stay in the spool (replayed by the next start), or were lost (see :meth:`stats`).
        Events arriving after close() go to the spool, with a warning, until
        :meth:`start` resumes journaling."""
        with self._lock:
            writer, self._writer = self._writer, None
            self._closed = True
        # Each hook waits for its savepoint; their journal goes once none runs.
        hooks_done = all([hook.close(timeout) for hook in self.__dict__.get("_savepoints", ())])
        journal = self.__dict__.get("_savepoint_journal")
        if not hooks_done:
            log.warning("offset-journal: a savepoint still runs after %.0f s; it goes on "
                        "without the listener", timeout)
        elif journal is not None:
            journal.close()
        if writer is None:
            return self._late.lost == 0 and not self._late_pending()
        atexit.unregister(self._at_exit)
        ok = writer.close(timeout)
        with self._lock:
            self._late = self._late + writer.stats()
        return ok and self._late.lost == 0

    def _at_exit(self) -> None:
        try:
            writer = self._writer
            if writer is not None:  # events to disk at least; the database may be away
                if not writer.flush(self._exit_flush_timeout, to_database=False):
                    writer.spill_queue()  # the queue and the batch in flight
            if not self.close(timeout=1.0):
                stats = self.stats()
                if stats.lost:
                    log.error("offset-journal: at exit, %d event(s) were lost: %s",
                              stats.lost, stats.lost_reasons)
                else:
                    log.warning("offset-journal: at exit, events not yet journaled are kept "
                                "in the spool %s; the next start replays them",
                                self._config.spool_dir)
        except Exception:  # pragma: no cover - interpreter is going away
            pass

    def wait_terminated(self, run_id: Any, timeout: float = 30.0) -> bool:
        """Wait until Spark delivered the run's termination and its events are journaled.

        ``query.stop()`` and ``awaitTermination()`` return before Spark's listener bus
        has delivered the last events; call this before reading the journal for a run
        that just ended. Classic sessions only (under Connect the listener is remote).
        """
        deadline = time.monotonic() + timeout
        with self._terminated_cond:
            while str(run_id) not in self._terminated:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._terminated_cond.wait(remaining)
        return self.flush(max(0.0, deadline - time.monotonic()))

    def _submit(self, event: dict[str, Any]) -> None:
        if self._closed:
            self._submit_late(event)
            return
        writer = self._writer
        if writer is None or not writer.alive:
            writer = self.start()
        writer.submit(event)

    def _submit_late(self, event: dict[str, Any]) -> None:
        """An event after close(): to the spool (the next start() replays it), said in
        the log, and counted."""
        with self._lock:
            if self._late_spool is None:
                log.warning("offset-journal: events arrive after close(); they are kept in "
                            "the spool %s, not journaled, until start() is called again",
                            self._config.spool_dir)
                self._late_spool = Spool(self._config.spool_dir,
                                         max_bytes=self._config.spool_max_bytes)
            spool = self._late_spool
        try:
            n = spool.append([event])
            add = WriterStats(spooled=n, lost=1 - n, lost_reasons={
                "spool full after close()": 1 - n} if n < 1 else {})
        except OSError as exc:
            reason = f"after close(), the spool {spool.directory} is unusable: " \
                     f"{exc.strerror or type(exc).__name__}"
            log.error("offset-journal: 1 event LOST (not journaled, not kept): %s", reason)
            add = WriterStats(lost=1, lost_reasons={reason: 1})
        with self._lock:
            self._late = self._late + add

    # Classic sessions: PySpark's own py4j wrapper turns every progress event into a
    # StreamingQueryProgress with a py4j round trip per field and per map entry, hundreds
    # of milliseconds of driver CPU per batch on a busy machine (bench/stream_overhead.py).
    # The journal needs only the progress JSON: one call. (Spark Connect does not use this.)
    @property
    def _jlistener(self) -> Any:
        obj = self.__dict__.get("_jlistenerobj")
        if obj is None:
            from pyspark import SparkContext

            jvm = SparkContext._jvm
            assert jvm is not None, "no active SparkContext"
            obj = jvm.PythonStreamingQueryListenerWrapper(_JavaListener(self))
            self._jlistenerobj = obj
        return obj

    # ------------------------------------------------------------------ callbacks

    def onQueryStarted(self, event: Any) -> None:
        try:
            run_id, query_id, name = str(event.runId), str(event.id), event.name
            self._names[run_id] = name
            if not name and query_id not in self._warned:
                self._warned.add(query_id)
                log.warning("offset-journal: query %s has no name; journaling it under its id. "
                            "Name it with writeStream.queryName(...) so the journal follows it "
                            "across checkpoints.", query_id)
            self._submit({"type": STARTED, "query_id": query_id, "run_id": run_id,
                          "name": name, "timestamp": event.timestamp,
                          "host": socket.gethostname(), "pid": os.getpid(),
                          **self._execution_of(query_id)})
            if self._kafka_servers:
                threading.Thread(target=self._record_cluster, args=(run_id, query_id, name),
                                 name="offset-journal-cluster", daemon=True).start()
        except Exception:
            log.exception("offset-journal: onQueryStarted failed (the query is unaffected)")

    def _record_cluster(self, run_id: str, query_id: str, name: str | None) -> None:
        """Ask the Kafka cluster its id and journal it with the run (a thread of its
        own: a slow or absent cluster never holds Spark's listener bus)."""
        from ..kafka.admin import cluster_id

        assert self._kafka_servers is not None
        try:
            found = cluster_id(self._kafka_servers, config=self._kafka_config)
            if found is None:
                return
        except Exception as exc:  # noqa: BLE001 - the id is optional; the stream is not
            log.warning("offset-journal: cannot tell which Kafka cluster run %s reads (%s): "
                        "plans from it cannot check the cluster", run_id, exc)
            return
        try:
            self._submit({"type": CLUSTER, "query_id": query_id, "run_id": run_id,
                          "name": name, "kafka_cluster_id": found})
        except Exception:
            log.exception("offset-journal: journaling run %s's Kafka cluster failed", run_id)

    def _execution_of(self, query_id: str) -> dict[str, Any]:
        """How Spark executes the query: its StreamExecution class (with
        ``:RealTimeTrigger`` in real-time mode) and, with async progress tracking, the
        checkpoint interval (its progress events do not say).
        Classic sessions attached with attach() only; {} when unknown."""
        streams = self.__dict__.get("_jstreams")
        if streams is None:
            return {}
        try:
            wrapper = streams.get(query_id)  # registered before onQueryStarted runs
            if wrapper is None:
                return {}
            execution = wrapper.streamingQuery()
            name = str(execution.getClass().getSimpleName())
            if name != ASYNC_EXECUTION:
                trigger = str(execution.trigger().getClass().getSimpleName())
                if trigger == REAL_TIME_TRIGGER:
                    return {"execution": f"{name}:{trigger}"}
                return {"execution": name}
            interval = int(execution.asyncProgressTrackingCheckpointingIntervalMs())
            return {"execution": name, "async_interval_ms": interval}
        except Exception as exc:  # a Spark without these names: unknown, not a failure
            log.debug("offset-journal: cannot tell how query %s is executed: %s", query_id,
                      type(exc).__name__)
            return {}

    def onQueryProgress(self, event: Any) -> None:
        try:
            text = event.progress.json
            self._submit({"type": PROGRESS, "json": text})
            for hook in self.__dict__.get("_savepoints", ()):
                hook.on_progress(text)
        except Exception:
            log.exception("offset-journal: onQueryProgress failed (the query is unaffected)")

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        try:
            run_id = str(event.runId)
            error_class = getattr(event, "errorClassOnException", None)
            self._submit({
                "type": TERMINATED, "query_id": str(event.id), "run_id": run_id,
                "name": self._names.pop(run_id, None),
                "timestamp": datetime.now(timezone.utc).isoformat(),
                # Exception texts quote connection strings (a JDBC sink's URL, say):
                # redacted before the event is spooled or journaled.
                "exception": None if event.exception is None else redact(event.exception),
                "error_class": error_class,
            })
            if self._writer is not None:
                # durable (journal or spool) before the bus moves on; no waiting on a
                # database that is away
                self._writer.flush(self._terminate_flush_timeout, to_database=False)
            with self._terminated_cond:
                self._terminated.add(run_id)
                self._terminated_cond.notify_all()
        except Exception:
            log.exception("offset-journal: onQueryTerminated failed (the query is unaffected)")


class SavepointHook(Protocol):
    """What ``savepoints=`` takes (:class:`offset_journal.savepoint.SavepointSchedule`):
    bound by :func:`attach` to the session, a journal and the listener's ``flush``; handed
    each progress event's JSON (it must return at once); closed with the listener."""

    def bind(self, spark: Any, journal: Journal, flush: Callable[[float], bool]) -> None: ...

    def on_progress(self, progress_json: str) -> None: ...

    def close(self, timeout: float = 60.0) -> bool: ...


def _hooks(given: Any) -> tuple[SavepointHook, ...]:
    if given is None:
        return ()
    hooks = tuple(given) if isinstance(given, (list, tuple)) else (given,)
    for hook in hooks:
        if not all(callable(getattr(hook, m, None)) for m in ("bind", "on_progress", "close")):
            raise ConfigError(f"savepoints= takes a SavepointSchedule (or a list of them), "
                              f"not {type(hook).__name__}")
    names = [getattr(hook, "query", None) for hook in hooks]
    twice = sorted({str(n) for n in names if n is not None and names.count(n) > 1})
    if twice:  # each schedule takes one savepoint at a time: two would take two at once
        raise ConfigError(f"savepoints= has more than one schedule of query {twice[0]!r}: "
                          "give each query one (every_batches= and every= together)")
    return hooks


class _Progress:
    """``event.progress`` handed to onQueryProgress in a classic session: ``.json`` comes
    straight from the JVM object; any other attribute builds PySpark's full
    StreamingQueryProgress on first use (for subclasses that read more)."""

    def __init__(self, jprogress: Any) -> None:
        self._jprogress = jprogress
        self._full: Any = None

    @property
    def json(self) -> str:
        return str(self._jprogress.json())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_jprogress", "_full"):
            raise AttributeError(name)
        if self._full is None:
            from pyspark.sql.streaming.listener import StreamingQueryProgress

            self._full = StreamingQueryProgress.fromJObject(self._jprogress)
        return getattr(self._full, name)


class _ProgressEvent:
    """A QueryProgressEvent whose progress is read lazily (inside the callback's try)."""

    def __init__(self, jevent: Any) -> None:
        self._jevent = jevent
        self._progress: _Progress | None = None

    @property
    def progress(self) -> _Progress:
        if self._progress is None:
            self._progress = _Progress(self._jevent.progress())
        return self._progress


class _JavaListener:
    """The Python side of Spark's PythonStreamingQueryListener, in place of PySpark's
    JStreamingQueryListener: the same calls, without converting progress events."""

    def __init__(self, listener: OffsetJournalListener) -> None:
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        from pyspark.sql.streaming.listener import QueryStartedEvent

        self._listener.onQueryStarted(QueryStartedEvent.fromJObject(jevent))

    def onQueryProgress(self, jevent: Any) -> None:
        self._listener.onQueryProgress(_ProgressEvent(jevent))

    def onQueryIdle(self, jevent: Any) -> None:
        if type(self._listener).onQueryIdle is not OffsetJournalListener.onQueryIdle:
            from pyspark.sql.streaming.listener import QueryIdleEvent

            self._listener.onQueryIdle(QueryIdleEvent.fromJObject(jevent))

    def onQueryTerminated(self, jevent: Any) -> None:
        from pyspark.sql.streaming.listener import QueryTerminatedEvent

        self._listener.onQueryTerminated(QueryTerminatedEvent.fromJObject(jevent))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def attach(spark: Any, database_url: str | None = None, **options: Any) -> OffsetJournalListener:
    """Attach a journal listener to ``spark`` in one line and return it.

    In a classic session the writer starts at once, replaying any spool an earlier
    driver left. Under Spark Connect it starts on the first event; where the listener
    runs on the server (PySpark 3.5) the returned object is only the client's copy.
    ConfigError (one line) on a Spark older than the listener needs (3.5), before
    anything is attached. ``savepoints=`` (classic sessions, Spark with the State Data
    Source): each schedule is bound here to ``spark``, a journal of its own and the
    listener's ``flush``, after its location was found writable (ConfigError, and
    nothing attached, otherwise).
    """
    listener = OffsetJournalListener(database_url, **options)  # checks its settings first
    require("journal", str(spark.version))
    if listener._savepoints:
        if _is_connect(spark):
            raise ConfigError("savepoints= needs a classic SparkSession (the savepoints read "
                              "the state on the driver); under Spark Connect, run "
                              "`offset-journal savepoint create --under ... --keep ...` from "
                              "cron instead")
        require("savepoint-create", str(spark.version))
        from ..journal import Journal

        journal = listener._savepoint_journal = Journal(listener._config.database_url)
        try:
            for hook in listener._savepoints:
                hook.bind(spark, journal, listener.flush)
        except BaseException:  # nothing attached: no schedule left running, no journal open
            for hook in listener._savepoints:
                hook.close(0)
            journal.close()
            raise
    if not _is_connect(spark):
        # to ask each query how Spark executes it (async progress tracking)
        listener._jstreams = spark._jsparkSession.streams()
    spark.streams.addListener(listener)
    if not _is_connect(spark):
        listener.start()
    return listener
