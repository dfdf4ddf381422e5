"""Database URLs, engines and schema upgrades.

URLs come from an argument first, then OFFSET_JOURNAL_DATABASE_URL. Plain
``postgresql://`` URLs are given the psycopg 3 driver. Anything that prints a URL
prints :func:`redact` of it, so passwords never reach logs or error messages.
"""

from __future__ import annotations

import json
import logging
import os
import re
import urllib.parse
import weakref
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg import pq

from ..errors import ConfigError
from ..formatting import escape_line
from ..redaction import redact
from ._errors import translating_call
from .server import (
    GUARD_PARAMETER,
    SERVER_GUARD,
    SERVER_IDENTITY,
    behind_pooler,
    guard_for,
    note_connection,
)

log = logging.getLogger(__name__)

ENV_URL = "OFFSET_JOURNAL_DATABASE_URL"


def resolve_url(url: str | None = None) -> str:
    """The database URL to use: the argument, else OFFSET_JOURNAL_DATABASE_URL.

    Only PostgreSQL: ``postgresql://``, ``postgres://`` and ``postgresql+psycopg://``."""
    url = url or os.environ.get(ENV_URL)
    if not url:
        raise ConfigError(f"no database URL: pass one or set {ENV_URL}")
    if any(ord(c) < 32 or ord(c) == 127 for c in url):
        # A line break would split the host list where no comma is (or hide the hosts
        # after it): libpq would be handed fewer hosts, or other ones, than were meant.
        raise ConfigError(f"malformed database URL: a line break or other control "
                          f"character in {escape_line(redact(url))} (a password "
                          f"holding one is written percent-encoded, %0A)")
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    url = _hosts_in_query(url)
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise ConfigError(f"malformed database URL: {redact(url)}") from None
    if parsed.drivername != "postgresql+psycopg":
        # The journal is Postgres (its schema, COPY, triggers): anything else would fail
        # later, or, for sqlite, create a file first.
        raise ConfigError(f"not a PostgreSQL URL: {redact(url)} (use postgresql://...)")
    _refuse_blank_hosts(url)
    if url.partition("://")[2].partition("?")[0].count("@") > 1:
        # The driver would take the password's tail for the host name, and show it in
        # its error messages.
        raise ConfigError(f"malformed database URL: an '@' in the password must be written "
                          f"%40: {redact(url)}")
    return url


def _refuse_blank_hosts(url: str) -> None:
    """An empty host (``host=``, ``host=h1,,h2``) is refused: SQLAlchemy drops it where
    libpq reads it as the local socket, so the hosts tried would not be those written.
    A host spelt with a percent-encoded control character is refused too."""
    options = urllib.parse.parse_qsl(url.partition("?")[2], keep_blank_values=True)
    for host in (h for key, value in options if key == "host" for h in value.split(",")):
        if not host:
            raise ConfigError(f"malformed database URL: an empty host in "
                              f"{escape_line(redact(url))} (leave out host= for the "
                              f"local socket)")
        if any(ord(c) < 32 or ord(c) == 127 for c in host):
            raise ConfigError(f"malformed database URL: a line break or other control "
                              f"character in a host of {escape_line(redact(url))}")


def _hosts_in_query(url: str) -> str:
    """A multi-host URL in libpq's form (``postgresql://h1:5432,h2:5432/db?...``: the
    hosts libpq tries in turn, ``target_session_attrs`` picking the one that takes
    writes) in the form SQLAlchemy reads: the hosts as ``host`` query options
    (``?host=h1:5432&host=h2:5432``; IPv6 addresses, written in brackets, as the lists
    ``?host=::1,h2&port=5432,5432``). A host without a port gets libpq's default. Any
    other URL is returned as it is."""
    scheme, sep, rest = url.partition("://")
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    userinfo, at, hostlist = authority.rpartition("@")
    if not sep or "," not in hostlist:
        return url
    hosts, ports = [], []
    for one in hostlist.split(","):
        if one.startswith("["):  # [IPv6]:port
            host, closed, port = one[1:].partition("]")
            if not closed or (port and not port.startswith(":")):
                host = ""  # an unclosed bracket, or something after it but a port
            port = port.removeprefix(":")
        else:
            host, _, port = one.partition(":")
        if not host or (port and not (port.isdigit() and 0 < int(port) < 65536)):
            raise ConfigError(f"malformed database URL: host {one!r} of {redact(url)}")
        hosts.append(host)
        ports.append(port)
    path, qmark, query = tail.partition("?")
    if re.search(r"(?:^|&)(?:host|hostaddr|port)=", query):
        raise ConfigError(f"malformed database URL: hosts both before the path and as "
                          f"query options: {redact(url)}")
    if any(":" in host for host in hosts):  # IPv6: host and port lists apart
        given = [f"host={','.join(hosts)}", f"port={','.join(ports)}" if any(ports) else ""]
    else:  # as the query-string spelling of the same URL: the same spool directory
        given = [f"host={host}:{port}" if port else f"host={host}"
                 for host, port in zip(hosts, ports, strict=True)]
    options = "&".join(filter(None, (query, *given)))
    return f"{scheme}://{userinfo}{at}{path or '/'}?{options}"


def database_identity(database_url: str) -> str:
    """The database a URL names, without its password (or any other secret): driver,
    user, host, port, database, and the host/port given as query options."""
    try:
        url = sa.engine.make_url(database_url)
    except Exception:  # not a URL SQLAlchemy reads: hash its redacted form
        return redact(database_url)
    query = {k: url.query[k] for k in ("host", "hostaddr", "port", "dbname", "service")
             if k in url.query}
    return json.dumps([url.drivername.partition("+")[0], url.username, url.host, url.port,
                       url.database, sorted(query.items())], default=str)


def host_count(url: str) -> int:
    """How many hosts ``url`` names (libpq tries them in turn)."""
    try:
        hosts = sa.engine.make_url(resolve_url(url)).query.get("host")
    except ConfigError:
        return 1
    if isinstance(hosts, tuple):
        return len(hosts)
    return len(hosts.split(",")) if hosts else 1


def writable_url(url: str) -> str:
    """``url`` for a connection that must write (the listener's writer): a multi-host
    URL that does not say which host to pick gets ``target_session_attrs=read-write``,
    so that libpq passes over standbys to the primary rather than taking the first
    host that answers."""
    resolved = resolve_url(url)
    parsed = sa.engine.make_url(resolved)
    if host_count(resolved) < 2 or "target_session_attrs" in parsed.query:
        return resolved
    return parsed.update_query_dict({"target_session_attrs": "read-write"}) \
        .render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """``url`` (a SQLAlchemy or libpq URL, or a name the journal resolves) as libpq and
    psycopg take it: ``postgresql://``, whatever driver SQLAlchemy was told to use."""
    return sa.engine.make_url(resolve_url(url)).set(drivername="postgresql") \
        .render_as_string(hide_password=False)


def make_engine(url: str | None = None, *, connect_timeout: int = 5,
                statement_timeout_ms: int | None = None, identify_server: bool = False,
                **kwargs: object) -> sa.Engine:
    """An engine that fails fast when the database is absent or hangs.

    A bounded connect time for a database that is down; TCP keepalives (and, for the
    listener's writer, a statement timeout) for one that stops answering mid-statement,
    so that a network partition turns into an error (and a spooled event) in seconds
    rather than after the kernel's TCP timeout. (A peer that acknowledges and never
    answers, like a stuck pooler, is only caught by a client-side deadline: the
    listener's writer cuts such a connection, see writer.Writer._deadline.)

    Everything here also holds behind a transaction pooler (PgBouncer's
    ``pool_mode = transaction``), where consecutive transactions of one client run on
    different server connections: no startup ``options`` (PgBouncer refuses them), the
    statement timeout set by ``SET LOCAL`` at the start of each transaction, and no
    server-side prepared statements (``prepare_threshold=None``: a pooler does not keep
    them, and psycopg would otherwise prepare any statement run five times).

    Every transaction looks names up in :data:`SEARCH_PATH` only, and every connection
    speaks UTF-8 (``client_encoding``, a startup parameter poolers pass on): the write
    path sends JSON as UTF-8 bytes, which a connection in the database's own encoding
    (LATIN1, say) or in ``PGCLIENTENCODING`` would store garbled; in UTF-8 the server
    converts each value to its encoding, or refuses one it cannot hold.

    ``identify_server``: every new connection reads which server it is on and whether
    a pooler is in between, and behind a pooler every transaction is guarded against
    another server than the one expected (the listener's writer: a failover, see
    server.py and capture/writer.py). A connection found to be straight to Postgres
    keeps the settings for its session and may prepare what asks to be
    (:func:`session_settled`).
    """
    resolved = resolve_url(url)
    connect_args: dict[str, object] = {}
    if resolved.startswith("postgresql"):
        connect_args.update(connect_timeout=connect_timeout, application_name="offset-journal",
                            keepalives=1, keepalives_idle=10, keepalives_interval=5,
                            keepalives_count=3, client_encoding="UTF8",
                            # data sent and not acknowledged for 30 s: the peer is gone
                            tcp_user_timeout=30_000)
    kwargs.setdefault("pool_pre_ping", True)
    engine = sa.create_engine(resolved, connect_args=connect_args, **kwargs)
    if engine.dialect.driver == "psycopg":
        _initialize_in_safe_path(engine.dialect)
        sa.event.listen(engine, "connect", _read_infinite_times)
        sa.event.listen(engine, "connect", _no_prepared_statements)
    settings = transaction_statements(statement_timeout_ms)
    _TRANSACTION_SETTINGS[engine] = settings
    if identify_server and engine.dialect.driver == "psycopg":
        sa.event.listen(engine, "connect", _identify_server(
            "; ".join(f"SET {one}" for one in _settings(statement_timeout_ms)).encode()))
    sa.event.listen(engine, "begin", _settings_hook(engine))
    return engine


SEARCH_PATH = "pg_catalog, pg_temp"
"""The only schemas an unqualified name is looked up in, in every transaction the
project opens. Not ``public``: before PostgreSQL 15 any role may create objects there,
and a function or operator planted there with a closer argument type than the built-in
(``public.cardinality(bigint[])`` beside ``pg_catalog.cardinality(anyarray)``) would run
with the rights of whoever calls it, the journal's owner included (CVE-2018-1058). The
journal's own objects are always named with their schema."""

_TRANSACTION_SETTINGS: weakref.WeakKeyDictionary[sa.Engine, tuple[str, ...]] = (
    weakref.WeakKeyDictionary())


def _settings(statement_timeout_ms: int | None) -> list[str]:
    """``name = value`` of each setting: the search path, and the statement timeout when
    there is one."""
    settings = [f"search_path = {SEARCH_PATH}"]
    if statement_timeout_ms:
        settings.append(f"statement_timeout = {int(statement_timeout_ms)}")
    return settings


def transaction_statements(statement_timeout_ms: int | None = None) -> tuple[str, ...]:
    """The ``SET LOCAL`` statements that open each transaction: the search path, and the
    statement timeout when there is one. Per transaction, not per session: behind a
    transaction pooler the next transaction may run on another server connection (and
    a session setting would leak to the pooler's other clients)."""
    return tuple(f"SET LOCAL {one}" for one in _settings(statement_timeout_ms))


def transaction_settings(engine: sa.Engine) -> tuple[str, ...]:
    """What ``engine`` sets at the start of each transaction (:func:`transaction_statements`;
    none for an engine the project did not make), for a caller that opens a transaction
    without SQLAlchemy's begin (journal/_driver.py)."""
    return _TRANSACTION_SETTINGS.get(engine, ())


def _initialize_in_safe_path(dialect: Any) -> None:
    """Run SQLAlchemy's first-connect queries (``current_schema()``, the hstore type
    lookup...) in a transaction on :data:`SEARCH_PATH`: they run before any ``begin``
    hook, and would otherwise resolve names on the session's own search path. Wraps this
    engine's dialect (one per engine), so that it runs after the connection's isolation
    level is set (an ``isolation_level=`` engine sets it as it connects)."""
    original = dialect.initialize
    opening = f"BEGIN; SET LOCAL search_path = {SEARCH_PATH}".encode()

    def initialize(connection: Any) -> None:
        driver = connection.connection.driver_connection
        pgconn = driver.pgconn if isinstance(driver, psycopg.Connection) else None
        opened = False
        if pgconn is not None and pgconn.transaction_status == pq.TransactionStatus.IDLE:
            # Sent on the wire whatever psycopg's autocommit says: psycopg reads the
            # transaction status from the connection, so it adds no BEGIN of its own.
            with driver.lock:
                opened = pgconn.exec_(opening).status == pq.ExecStatus.COMMAND_OK
        try:
            original(connection)
        finally:
            if opened and pgconn is not None and (
                    pgconn.transaction_status != pq.TransactionStatus.IDLE):
                with driver.lock:
                    pgconn.exec_(b"ROLLBACK")

    dialect.initialize = initialize


def _identify_server(session: bytes) -> Callable[[Any, Any], None]:
    """A ``connect`` hook that reads which server a new connection is on (server.py), in
    a transaction of its own on the search path. Unread, the writer cannot tell a change
    of server on this connection (no failover window, no guard): said as a warning.
    A connection straight to Postgres then takes the engine's settings for its session
    (``session``: ``SET ...; SET ...``), see :func:`_settle`."""

    def identify(dbapi_connection: Any, _record: Any) -> None:
        if not isinstance(dbapi_connection, psycopg.Connection):
            return
        if not _begin_with(dbapi_connection,
                           f"BEGIN; SET LOCAL search_path = {SEARCH_PATH}".encode()):
            log.warning("offset-journal: could not open a transaction to read which server "
                        "a new connection to the journal database is on: a failover is not "
                        "seen on this connection (no failover window, no guard)")
            return
        try:
            with dbapi_connection.cursor() as cur:
                row = cur.execute(SERVER_IDENTITY).fetchone()
        finally:
            dbapi_connection.rollback()
        note_connection(dbapi_connection, row)
        if not behind_pooler(dbapi_connection):
            _settle(dbapi_connection, session)

    return identify


_SETTLED: weakref.WeakSet[Any] = weakref.WeakSet()

_ONLY_WHEN_ASKED = 2 ** 62
"""psycopg's ``prepare_threshold`` on a settled connection: it prepares a statement after
that many runs, so never on its own; only a statement run with ``prepare=True``."""


def _settle(driver: psycopg.Connection[Any], session: bytes) -> None:
    """Give ``driver``, a connection straight to Postgres (no pooler: it stays on one
    server process until it breaks), the engine's settings for its whole session, and
    let it prepare a statement that asks to be. Each transaction still sets them
    (``SET LOCAL``, the same values). What this buys is the write path's one round trip
    as a prepared statement: sent without its text, not parsed nor planned again
    (journal/_driver.py). Left as it was when the settings cannot be set."""
    with driver.lock:
        done = driver.pgconn.exec_(session).status == pq.ExecStatus.COMMAND_OK
    if done:
        driver.prepare_threshold = _ONLY_WHEN_ASKED
        _SETTLED.add(driver)


def session_settled(driver: Any) -> bool:
    """Whether ``driver``'s session holds its engine's settings and it may prepare (a
    connection of an ``identify_server`` engine found straight to Postgres): a
    statement needs no ``SET LOCAL`` before it there, and may be prepared."""
    return driver in _SETTLED


def _no_prepared_statements(dbapi_connection: Any, _record: Any) -> None:
    """Never prepare on the server: a transaction pooler hands the next transaction to
    another server connection, where the prepared statement does not exist. (A
    connection the writer finds straight to Postgres may prepare after all: _settle.)"""
    dbapi_connection.prepare_threshold = None


def _settings_hook(engine: sa.Engine) -> Callable[[sa.Connection], None]:
    """A ``begin`` hook that opens every transaction with ``engine``'s settings (the
    search path, the statement timeout, the server's identity or guard:
    :func:`transaction_settings`), so that they hold on whichever server connection a
    pooler picks. A connection in autocommit has no transaction to scope them to: it
    gets the search path for its session."""
    engine_ref = weakref.ref(engine)

    def begin(conn: sa.Connection) -> None:
        driver = conn.connection.driver_connection
        made = engine_ref()
        settings = transaction_settings(made) if made is not None else ()
        expected = guard_for(made, driver) if made is not None else None
        if isinstance(driver, psycopg.Connection) and driver.autocommit:
            conn.exec_driver_sql(f"SET search_path = {SEARCH_PATH}")
            return
        if not (isinstance(driver, psycopg.Connection)
                and _begin_with(driver, f"BEGIN; {'; '.join(settings)}".encode())):
            # Through SQLAlchemy, so that an error reads as any other: a stale
            # connection raises its invalidating error, which the writer retries.
            for one in settings:
                conn.exec_driver_sql(one)
        if expected is not None:  # behind a pooler: the writer's server, or nothing
            conn.exec_driver_sql(SERVER_GUARD, {GUARD_PARAMETER: expected.started_at})

    return begin


def plain_and_idle(driver: psycopg.Connection[Any]) -> bool:
    """Whether a transaction may be opened on ``driver`` by sending BEGIN ourselves: not
    in autocommit, no transaction options psycopg would add to its own BEGIN, and not in
    a transaction."""
    return (not driver.autocommit and driver.isolation_level is None
            and driver.read_only is None and driver.deferrable is None
            and driver.pgconn.transaction_status == pq.TransactionStatus.IDLE)


def _begin_with(driver: psycopg.Connection[Any], command: bytes) -> bool:
    """Open the transaction with ``command`` (``BEGIN; SET LOCAL ...``) in one round trip
    of the simple query protocol; False, the connection left idle, when that cannot be
    done or failed. psycopg would send its BEGIN alone first (a small batch's write is
    three round trips: this saves a fourth); it sends none on a connection already in a
    transaction, and commits or rolls back by the transaction status, as here."""
    if not plain_and_idle(driver):
        return False
    pgconn = driver.pgconn
    with driver.lock:
        result = pgconn.exec_(command)
        if result.status == pq.ExecStatus.COMMAND_OK:
            return True
        if pgconn.transaction_status == pq.TransactionStatus.INERROR:
            pgconn.exec_(b"ROLLBACK")
    return False


UNREADABLE_TIME = datetime.min.replace(tzinfo=timezone.utc)
"""What a journaled time of -infinity reads as (+infinity: :data:`datetime.max`). No role
can write one since migration 0011, but a row from before it must not make every
command of its query fail: it reads as the earliest (latest) time there is, which the
plan and the history show for what it is."""


def _read_infinite_times(dbapi_connection: Any, _record: Any) -> None:
    """Load ±infinity timestamps as the extreme datetimes instead of raising."""
    from psycopg.types.datetime import TimestamptzLoader

    class Loader(TimestamptzLoader):
        def load(self, data: Any) -> datetime:
            raw = bytes(data)
            if raw == b"-infinity":
                return UNREADABLE_TIME
            if raw == b"infinity":
                return datetime.max.replace(tzinfo=timezone.utc)
            return super().load(data)

    dbapi_connection.adapters.register_loader("timestamptz", Loader)


def migrations_dir() -> Path:
    """The Alembic scripts: packaged in a wheel, or the repository's migrations/."""
    package = Path(__file__).resolve().parent.parent  # offset_journal/
    for candidate in (package / "_migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise ConfigError("the journal's migrations are not installed")


def _alembic_config(url: str | None, **kwargs: Any) -> Any:
    from alembic.config import Config

    cfg = Config(**kwargs)
    cfg.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        # ConfigParser interpolation would choke on '%' in passwords.
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def alembic_config(url: str | None = None) -> Any:
    """Alembic's configuration for the journal's migrations, on this database."""
    return _alembic_config(resolve_url(url))


@translating_call
def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Bring the journal schema to ``revision`` (Alembic's upgrade)."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def upgrade_sql(revision: str = "head", start: str | None = None) -> str:
    """The upgrade to ``revision`` as a SQL script, for a DBA to review and apply (psql).

    Alembic's offline mode: no database is read or needed. From an empty database by
    default, else from revision ``start`` (what ``current_revision`` says of the
    database the script is for). The script creates the journal's schema first, so it
    runs on an empty database, and records the revision in the version table as
    ``upgrade`` does. A revision that does not exist raises ConfigError.
    """
    import io

    from alembic import command
    from alembic.util import CommandError

    out = io.StringIO()
    try:
        command.upgrade(_alembic_config(None, output_buffer=out),
                        f"{start}:{revision}" if start else revision, sql=True)
    except CommandError as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    return out.getvalue()


@translating_call
def current_revision(url: str | None = None) -> str | None:
    """The schema revision the database is at, None for an empty database."""
    from alembic.runtime.migration import MigrationContext

    from .schema import SCHEMA

    engine = make_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table_schema": SCHEMA})
            return ctx.get_current_revision()
    finally:
        engine.dispose()


_FOREIGN_BINDINGS = """
SELECT DISTINCT pg_describe_object(d.classid, d.objid, d.objsubid),
       pg_describe_object(d.refclassid, d.refobjid, 0)
FROM pg_depend d
CROSS JOIN LATERAL pg_identify_object(d.classid, d.objid, d.objsubid) AS o
CROSS JOIN LATERAL pg_identify_object(d.refclassid, d.refobjid, 0) AS r
WHERE d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass, 'pg_type'::regclass)
  AND (o.schema = :schema OR o.identity LIKE '% on ' || :schema || '.%')
  AND r.schema NOT IN ('pg_catalog', :schema)
ORDER BY 1, 2
"""


@translating_call
def foreign_bindings(url: str | None = None) -> list[tuple[str, str]]:
    """The journal's views, constraints, defaults and triggers bound to a function,
    operator or type outside ``pg_catalog`` and the journal's schema: (object, what it
    uses). A view or CHECK keeps what its names resolved to when it was created, so a
    journal migrated on a search path holding ``public`` by a release before the search
    path was fixed may call a function another role planted there."""
    from .schema import SCHEMA

    engine = make_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(_FOREIGN_BINDINGS), {"schema": SCHEMA}).all()
    finally:
        engine.dispose()
    return [(str(a), str(b)) for a, b in rows]

