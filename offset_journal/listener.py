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
from datetime import datetime, timezone
from typing import Any

from .db import redact, resolve_url
from .records import PROGRESS, STARTED, TERMINATED
from .spool import Spool, default_spool_dir
from .writer import Writer, WriterConfig

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
            OFFSET_JOURNAL_SPOOL_DIR, else a directory under ~/.local/state.
        queue_size: events held in memory before callbacks spill to the spool.
        spool_max_bytes: cap on the spool's size on disk (None: unbounded).
        terminate_flush_timeout: how long a query's termination waits for its events
            to reach the journal (they are in the spool after that).
    """

    def __init__(self, database_url: str | None = None, *, spool_dir: str | None = None,
                 queue_size: int = 10_000, retry_max: float = 30.0,
                 spool_max_bytes: int | None = None, connect_timeout: int = 5,
                 terminate_flush_timeout: float = 5.0) -> None:
        url = resolve_url(database_url)
        self._config = WriterConfig(
            database_url=url,
            spool_dir=str(spool_dir or default_spool_dir(url)),
            queue_size=queue_size,
            retry_max=retry_max,
            connect_timeout=connect_timeout,
            spool_max_bytes=spool_max_bytes,
        )
        self._terminate_flush_timeout = terminate_flush_timeout
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._writer: Writer | None = None
        self._lock = threading.Lock()
        self._names: dict[str, str | None] = {}
        self._warned: set[str] = set()
        self._closed = False
        self._late_spool: Spool | None = None
        self._terminated: set[str] = set()
        self._terminated_cond = threading.Condition()

    # Spark Connect pickles the listener: ship configuration only.
    def __getstate__(self) -> dict[str, Any]:
        return {"_config": self._config,
                "_terminate_flush_timeout": self._terminate_flush_timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    # ------------------------------------------------------------------ lifecycle

    @property
    def spool_dir(self) -> str:
        return self._config.spool_dir

    def start(self) -> Writer:
        """Start the background writer now (it also starts on the first event) and
        replay anything an earlier driver left in the spool."""
        with self._lock:
            if self._writer is None or not self._writer.alive:
                self._writer = Writer(self._config)
                self._writer.start()
                atexit.register(self._at_exit)
            return self._writer

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every event so far is in the journal; False on timeout."""
        writer = self._writer
        return True if writer is None else writer.flush(timeout)

    def close(self, timeout: float = 10.0) -> bool:
        """Flush, then stop the writer. Events not journaled by then stay in the spool."""
        with self._lock:
            writer, self._writer = self._writer, None
            self._closed = True
        if writer is None:
            return True
        try:
            atexit.unregister(self._at_exit)
        except Exception:  # pragma: no cover
            pass
        return writer.close(timeout)

    def _at_exit(self) -> None:
        try:
            writer = self._writer
            if writer is not None:  # events to disk at least; the database may be away
                if not writer.flush(10.0, to_database=False):
                    writer.spill_queue()
            self.close(timeout=1.0)
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
            # Late events after close() go straight to disk; the next start replays them.
            if self._late_spool is None:
                self._late_spool = Spool(self._config.spool_dir,
                                         max_bytes=self._config.spool_max_bytes)
            self._late_spool.append([event])
            return
        writer = self._writer
        if writer is None or not writer.alive:
            writer = self.start()
        writer.submit(event)

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
                          "host": socket.gethostname(), "pid": os.getpid()})
        except Exception:
            log.exception("offset-journal: onQueryStarted failed (the query is unaffected)")

    def onQueryProgress(self, event: Any) -> None:
        try:
            self._submit({"type": PROGRESS, "json": event.progress.json})
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
    """
    listener = OffsetJournalListener(database_url, **options)
    spark.streams.addListener(listener)
    if not _is_connect(spark):
        listener.start()
    return listener
