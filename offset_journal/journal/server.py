"""Which server a connection of the listener's writer is on, and a guard against
writing anywhere else (a failover of the journal's database, see writer.py).

Every new connection of an engine made with ``identify_server`` (db.make_engine) reads
its server's identity (:data:`SERVER_IDENTITY`) before anything else, and whether it
talks to Postgres itself or to a transaction pooler: a pooler (PgBouncer) sends its own
backend key, so the pid it gave differs from ``pg_backend_pid()``. A connection to
Postgres itself stays on that server until it breaks: what it read holds. Behind a
pooler, any transaction may run on a server connection opened since, to another server:
there each transaction is guarded (:func:`guarded`) once the writer expects a server
(:func:`expect_server`), in the same round trip, and refused (:func:`server_changed`)
before it writes anything anywhere else.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

_STARTED = ("CAST(pg_catalog.date_part('epoch', pg_catalog.pg_postmaster_start_time()) "
            "* 1000000 AS int8)")
"""When the server's postmaster started, in microseconds since the epoch: the same text
whatever the session's TimeZone or DateStyle (``ALTER ROLE ... SET timezone`` must not
look like another server)."""
_IDENTITY = (f"{_STARTED}::text || '/' || CASE WHEN "
             "pg_catalog.pg_is_in_recovery() THEN 'recovery' ELSE pg_catalog.left("
             "pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 8) END")
SERVER_IDENTITY = f"SELECT {_IDENTITY}, pg_catalog.pg_backend_pid()"
"""Which server a connection is on, as one text: when its postmaster started
(:data:`_STARTED`), and its timeline (from the name of the WAL file it writes), or
``recovery`` on a standby; and the server process's pid. A standby promoted to
primary writes on a new timeline from the moment it is promoted
(``pg_control_checkpoint()`` says the old one until its next checkpoint); another
server (another system identifier) or a restarted one has another start time. Every
function here is PUBLIC's to execute by default and reads shared memory
(``pg_control_system()``, which gives the system identifier, reads a file)."""
_GUARD = "offset-journal: not the server written to before"


@dataclass(frozen=True)
class ServerIdentity:
    """A server, as :data:`SERVER_IDENTITY` reads it (``key``)."""

    key: str

    @property
    def in_recovery(self) -> bool:
        return self.key.endswith("/recovery")

    @property
    def started_at(self) -> str:
        """When its postmaster started (microseconds since the epoch, as text)."""
        return self.key.rpartition("/")[0]

    def describe(self) -> str:
        started, _, timeline = self.key.rpartition("/")
        if started.isdigit():
            started = datetime.fromtimestamp(int(started) / 1e6, timezone.utc) \
                .isoformat(sep=" ", timespec="seconds")
        if self.in_recovery:
            return f"a standby (in recovery) started {started}"
        tli = int(timeline, 16) if timeline.isalnum() else timeline
        return f"the server started {started}, on timeline {tli}"


GUARD_PARAMETER = "expected_started_at"
"""The bind parameter of :func:`guarded` and :data:`SERVER_GUARD`: the expected server's
``ServerIdentity.started_at``."""
_SAME_SERVER = f"{_STARTED} = CAST(%({GUARD_PARAMETER})s AS int8)"
_REFUSED = f"pg_catalog.current_setting('{_GUARD}') IS NULL"


def guarded(value: str) -> str:
    """``value`` (SQL of a boolean) when the transaction runs on the server process that
    started at :data:`GUARD_PARAMETER`, else an error (:func:`server_changed`):
    evaluated before the statement it is in does anything, it keeps a transaction from
    writing anywhere but on the server the writer expects. The start time alone tells:
    a standby promoted, a restarted server and another one each have their own (a
    timeline changes only on a standby, never written to). The error is asking for a
    setting no server has, named for what happened: ``current_setting`` is not
    immutable, so neither folded beforehand nor run unless reached, and it costs less to
    parse than any cast (this goes with every write behind a pooler)."""
    return f"CASE WHEN {_SAME_SERVER} THEN {value} ELSE {_REFUSED} END"


SERVER_GUARD = f"SELECT CASE WHEN {_SAME_SERVER} THEN true ELSE {_REFUSED} END"
""":func:`guarded` as a statement of its own, at the start of a transaction whose
statements do not carry it (all but the one-round-trip write)."""


def server_changed(exc: BaseException) -> bool:
    """Whether ``exc`` is a transaction refused for running on another server than the
    one its engine expects (:func:`expect_server`)."""
    return _GUARD in str(exc)


_EXPECTED: weakref.WeakKeyDictionary[sa.Engine, ServerIdentity] = weakref.WeakKeyDictionary()
_SEEN: weakref.WeakKeyDictionary[Any, ServerIdentity] = weakref.WeakKeyDictionary()
_POOLED: weakref.WeakSet[Any] = weakref.WeakSet()


def expect_server(engine: sa.Engine, server: ServerIdentity) -> None:
    """From now on, ``engine``'s transactions behind a pooler refuse to run on any
    server but ``server``."""
    _EXPECTED[engine] = server


def note_connection(driver: Any, row: Any) -> None:
    """What :data:`SERVER_IDENTITY` returned on ``driver``, a new connection whose own
    backend pid is ``driver.info.backend_pid``."""
    key, pid = row
    _SEEN[driver] = ServerIdentity(str(key))
    if pid != getattr(getattr(driver, "info", None), "backend_pid", pid):
        _POOLED.add(driver)


def server_seen(conn: sa.Connection) -> ServerIdentity | None:
    """The server ``conn`` was found on when it connected, once (None until it connects
    anew); None on a connection cut since (it is not connected anew here)."""
    if conn.closed or conn.invalidated:
        return None
    return _SEEN.pop(conn.connection.driver_connection, None)


def guard_for(engine: sa.Engine, driver: Any) -> ServerIdentity | None:
    """The server a transaction on ``driver`` must be guarded to: the one ``engine``
    expects, when the connection goes through a pooler (None: no guard needed)."""
    return _EXPECTED.get(engine) if driver in _POOLED else None


def behind_pooler(driver: Any) -> bool:
    """Whether ``driver``, a connection :func:`note_connection` was given, goes through a
    transaction pooler."""
    return driver in _POOLED


def pooled(conn: sa.Connection) -> bool:
    """Whether ``conn`` goes through a transaction pooler (as its connect found)."""
    return not conn.invalidated and behind_pooler(conn.connection.driver_connection)
