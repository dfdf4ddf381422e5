"""The write path's statements, sent to psycopg directly.

SQLAlchemy's execute costs a small batch's write a tenth of its time in the client, and
its transactions a round trip of their own for BEGIN: at one batch a second per job the
write is a few round trips in which the database does little. So the write path's one
call per batch goes to the driver, in the caller's transaction (:func:`execute`) or as a
transaction of its own in one round trip (:func:`run_alone`). Either raises a database
error as SQLAlchemy raises it (an IntegrityError is one; a broken connection is
invalidated and says so), so that callers tell errors apart as anywhere else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg import pq
from psycopg.types.json import Jsonb

from .db import plain_and_idle, session_settled, transaction_settings

Row = tuple[Any, ...]

_orjson: Any = None
try:
    import orjson

    _orjson = orjson
except ImportError:  # pragma: no cover - a dependency; the standard library does the same
    pass


def _dumps(value: Any) -> str | bytes:
    """JSON text: orjson's (a 10,000-partition batch's source row is 200 kB of it), the
    standard library's for what orjson refuses."""
    if _orjson is not None:
        try:
            return bytes(_orjson.dumps(value))
        except TypeError:
            pass
    return json.dumps(value)


def jsonb(value: Any) -> Jsonb:
    """A jsonb argument."""
    return Jsonb(value, dumps=_dumps)


def execute(conn: sa.Connection, statement: str, params: Mapping[str, Any]) -> Row | None:
    """``statement`` in ``conn``'s transaction (begun here through SQLAlchemy, with the
    engine's settings, when none is); its first row. Prepared on a connection that may
    (db.session_settled), as :func:`run_alone` does."""
    if not conn.in_transaction():
        conn.begin()  # else psycopg would open one SQLAlchemy neither sees nor commits
    fairy = conn.connection
    driver = fairy.driver_connection
    if not isinstance(driver, psycopg.Connection):
        row = conn.exec_driver_sql(statement, dict(params)).first()
        return None if row is None else tuple(row)
    try:
        with driver.cursor() as cur:
            # prepared where the connection may (db.session_settled), else never
            cur.execute(statement, params, prepare=session_settled(driver) or None)
            return cur.fetchone()
    except psycopg.Error as exc:
        raise _as_sqlalchemy(conn, fairy, statement, params, exc) from exc


def run_alone(conn: sa.Connection, statement: str, params: Mapping[str, Any]) -> Row | None:
    """``statement`` as a transaction of its own, in one round trip; its first row.

    ``conn`` is not in a transaction. On a connection whose session holds the engine's
    settings (db.session_settled: straight to Postgres), the statement alone, prepared:
    its first run on a connection prepares it (a round trip more), and from then on it
    goes without its text and is neither parsed nor planned again. Anywhere else (behind
    a pooler, which keeps no session for a client), the engine's per-transaction
    settings (the search path, the statement timeout) and the statement go as one query
    of the simple protocol, its parameters bound in the client (psycopg's ClientCursor
    quotes them). Either way Postgres runs it as one implicit transaction: committed
    when all of it succeeds, rolled back when anything fails, the connection idle after
    it. Where that cannot be done (another driver, a connection with transaction
    options), the statement runs in a transaction SQLAlchemy opens and commits.
    """
    fairy = conn.connection
    driver = fairy.driver_connection
    if not isinstance(driver, psycopg.Connection) or not plain_and_idle(driver):
        with conn.begin():
            return execute(conn, statement, params)
    try:
        driver.autocommit = True  # no BEGIN of psycopg's: the query is the transaction
        if session_settled(driver):
            with driver.cursor() as cur:
                cur.execute(statement, params, prepare=True)
                return cur.fetchone()
        settings = transaction_settings(conn.engine)
        with psycopg.ClientCursor(driver) as cur:
            cur.execute("; ".join((*settings, statement)), params)
            for _ in settings:
                cur.nextset()
            return cur.fetchone()
    except psycopg.Error as exc:
        raise _as_sqlalchemy(conn, fairy, statement, params, exc) from exc
    finally:
        if driver.pgconn.transaction_status == pq.TransactionStatus.IDLE:
            driver.autocommit = False
        elif not conn.invalidated:  # never back to the pool in autocommit
            conn.invalidate()


def _as_sqlalchemy(conn: sa.Connection, fairy: Any, statement: str,
                   params: Mapping[str, Any], exc: psycopg.Error) -> BaseException:
    """``exc`` as SQLAlchemy raises it; a connection it broke is invalidated, and the
    error says so. Decided on the connection the statement ran on (``fairy``, taken
    before it: ``conn.connection`` would connect anew once invalidated)."""
    driver = fairy.driver_connection
    error: Any = exc  # psycopg's, which SQLAlchemy's types name as any DB-API's
    gone = bool(getattr(driver, "broken", False) or getattr(driver, "closed", False)
                or conn.dialect.is_disconnect(error, fairy, None))
    if gone:
        conn.invalidate(exc)
    return sa.exc.DBAPIError.instance(statement, params, exc, psycopg.Error,
                                      connection_invalidated=gone, dialect=conn.dialect)
