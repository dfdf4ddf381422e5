"""SQLAlchemy's and the driver's errors translated, once, at the journal's edge, into
the :class:`~offset_journal.errors.JournalError` that says what they mean.

Callers above the journal (the CLI, the jobs, the listener's writer) catch only these:
which case it is (away, read-only, schema old, refused) is decided here, by SQLSTATE,
and the message is one redacted line, written here once.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import sqlalchemy as sa

from ..errors import (
    JournalConnectionLost,
    JournalConstraintError,
    JournalError,
    JournalPermissionError,
    JournalReadOnly,
    JournalRefused,
    JournalSchemaError,
    JournalUnavailable,
)
from ..formatting import first_line
from ..redaction import redact

# SQLSTATEs (https://www.postgresql.org/docs/current/errcodes-appendix.html) that say
# nothing about the statement: the server is going away, overloaded, or a statement or
# lock timed out, a transaction to retry; the same call may work later.
_UNAVAILABLE_STATES = frozenset({
    "57P01", "57P02", "57P03", "57P05", "57014", "53000", "53100", "53200", "53300",
    "53400", "40001", "40P01", "55P03", "55006", "3D000", "58000", "58030",
})
_UNAVAILABLE_CLASSES = ("08",)
READ_ONLY = "25006"
"""SQLSTATE read_only_sql_transaction: a standby (or default_transaction_read_only)."""
_SCHEMA_STATES = frozenset({"42P01", "42703", "3F000", "42883"})
_PERMISSION_STATES = frozenset({"42501"})
_PERMISSION_CLASSES = ("28",)  # invalid authorization: a login refused
_CONSTRAINT_CLASSES = ("23",)
# No SQLSTATE: connecting failed, the connection broke, or a pool/driver timeout.
_AWAY = (psycopg.OperationalError, psycopg.InterfaceError, OSError, sa.exc.TimeoutError,
         sa.exc.OperationalError, sa.exc.InterfaceError)

E = TypeVar("E", bound=JournalError)


_DATABASE_ERRORS = (sa.exc.SQLAlchemyError, psycopg.Error)
"""SQLAlchemy's and the driver's errors: what the journal translates."""


def database_error(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLAlchemy's or the driver's: what the journal translates."""
    return isinstance(exc, _DATABASE_ERRORS)


def _sqlstate(exc: BaseException) -> str | None:
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    state = getattr(orig, "sqlstate", None)
    return state if isinstance(state, str) and state else None


def _kind(exc: BaseException, state: str | None) -> type[JournalError]:
    """Which JournalError ``exc`` is, by its SQLSTATE, else by what failed."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return JournalConnectionLost
    if state is None:
        orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
        return JournalUnavailable if isinstance(orig, _AWAY) or isinstance(exc, _AWAY) \
            else JournalError
    if state in _UNAVAILABLE_STATES or state.startswith(_UNAVAILABLE_CLASSES):
        return JournalUnavailable
    if state == READ_ONLY:
        return JournalReadOnly
    if state in _SCHEMA_STATES:
        return JournalSchemaError
    if state in _PERMISSION_STATES or state.startswith(_PERMISSION_CLASSES):
        return JournalPermissionError
    if state.startswith(_CONSTRAINT_CLASSES):
        return JournalConstraintError
    return JournalRefused


def reason(exc: BaseException) -> str:
    """A database error as one redacted line: the driver's own message, not
    SQLAlchemy's wrapping (which repeats the statement and its parameters)."""
    return redact(first_line(getattr(exc, "orig", None) or exc))


def translate(exc: BaseException, kind: type[E] | None = None,
              message: str | None = None) -> JournalError:
    """``exc`` (SQLAlchemy's or the driver's) as the JournalError that says what it
    means; ``kind`` and ``message`` override what is read from it."""
    if isinstance(exc, JournalError):
        return exc
    state = _sqlstate(exc)
    error = (kind or _kind(exc, state))(message or reason(exc))
    error.sqlstate = state
    return error


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Run a block whose database errors leave it as JournalErrors: for a caller that
    holds a connection of its own (the listener's writer)."""
    try:
        yield
    except _DATABASE_ERRORS as exc:
        raise translate(exc) from exc


F = TypeVar("F", bound=Callable[..., Any])


def translating_call(fn: F) -> F:
    """``fn`` with its database errors translated (a generator's too)."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Any:
            with translated():
                return (yield from fn(*args, **kwargs))
        return gen  # type: ignore[return-value]

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:  # not ``with translated()``: a context manager per call on the hot path
            return fn(*args, **kwargs)
        except _DATABASE_ERRORS as exc:
            raise translate(exc) from exc
    return call  # type: ignore[return-value]


C = TypeVar("C", bound=type)


def translating(cls: C) -> C:
    """Wrap every public method of ``cls`` (and of its bases) so that no SQLAlchemy or
    driver error leaves it: each becomes the JournalError that says what it means."""
    names = {name for klass in cls.__mro__[:-1] for name, value in vars(klass).items()
             if not name.startswith("_") and inspect.isfunction(value)}
    for name in names:
        setattr(cls, name, translating_call(getattr(cls, name)))
    return cls


def as_journal_error(exc: BaseException) -> BaseException:
    """``exc`` translated when it is SQLAlchemy's or the driver's, else itself: for a
    caller that classifies errors which may not have crossed the journal's edge."""
    return translate(exc) if database_error(exc) else exc
