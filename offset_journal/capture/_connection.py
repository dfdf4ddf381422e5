"""The writer thread's one connection to the journal's database: held from one
transaction to the next (a checkout and a return to the pool per batch cost about a
tenth of a small batch's write), each transaction on it watched by a deadline
(_watchdog.py), and dropped on purpose so that the next one connects anew (a multi-host
URL's hosts tried again for the one that takes writes).

Only the writer's thread uses it, and closes it (a connection is never closed from
another thread while a transaction runs on it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..journal import Connection, Journal
from ..journal.db import make_engine, writable_url
from ..journal.server import ServerIdentity, server_seen
from ._config import WriterConfig
from ._watchdog import Watchdog


class HeldConnection:
    """The writer's connection, and the deadline on its transactions."""

    def __init__(self, transaction_timeout: float) -> None:
        self.conn: Connection | None = None
        self._timeout = transaction_timeout
        self._watchdog = Watchdog()

    def get(self, journal: Journal) -> tuple[Connection, ServerIdentity | None]:
        """The connection, and the server it is on when it is a new one (None: the same
        connection as before, on the server read then). After an invalidation
        SQLAlchemy connects it again on use: done here, before a deadline is armed on
        its socket, so that a failure is an outage like any other, not a transaction
        left unwatched."""
        if self.conn is None or self.conn.closed:
            self.conn = journal.engine.connect()
        elif self.conn.invalidated:
            if self.conn.in_transaction():
                self.conn.rollback()
            self.conn.connection  # noqa: B018
        return self.conn, server_seen(self.conn)

    @contextlib.contextmanager
    def deadline(self, conn: Connection) -> Iterator[None]:
        """Cut the connection when a transaction outlives the transaction timeout: a
        database (or pooler, or network) that keeps the connection open and never
        answers would otherwise hold the writer for good. The cut makes the driver
        raise a connection error, which is an outage like any other."""
        with self._watchdog.watch(socket_of(conn), self._timeout):
            yield

    def drop(self) -> None:
        """Cut the connection, so that the next transaction connects anew."""
        conn = self.conn
        if conn is not None and not conn.closed and not conn.invalidated:
            with contextlib.suppress(Exception):
                conn.invalidate()

    def release(self) -> None:
        """Close the connection (its thread's own: never from another thread)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        """Close the connection and stop the deadline's thread."""
        self.release()
        self._watchdog.close()


def socket_of(conn: Connection) -> int | None:
    """The file descriptor of a psycopg connection's socket, else None."""
    try:
        driver = conn.connection.driver_connection
        fd = driver.pgconn.socket if driver is not None else None
    except Exception:
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def writer_journal(config: WriterConfig) -> Journal:
    """The journal as the writer opens it: one connection, fail-fast timeouts, and no
    pre-ping round trip per transaction (a stale connection is retried once instead,
    by the writer's transaction). Each new connection reads which server it is on, with
    a failover window or without: continuity checks must never trust what the Journal
    remembers across a change of server (one query per connection)."""
    engine = make_engine(writable_url(config.database_url),
                         connect_timeout=config.connect_timeout,
                         statement_timeout_ms=config.statement_timeout_ms,
                         identify_server=True,
                         pool_size=1, max_overflow=1, pool_pre_ping=False)
    return Journal(engine=engine)
