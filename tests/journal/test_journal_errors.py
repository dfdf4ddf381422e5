"""The journal's errors on a real Postgres: a database away, read-only, without the
schema, or refusing the role comes out of a Journal method as the journal's own error
kind (errors.py), its message one redacted line, never as SQLAlchemy's or psycopg's."""

from __future__ import annotations

import inspect
import socket
import uuid

import psycopg
import pytest
import sqlalchemy as sa

from offset_journal.errors import (
    JournalError,
    JournalPermissionError,
    JournalReadOnly,
    JournalRefused,
    JournalSchemaError,
    JournalUnavailable,
    OffsetJournalError,
)
from offset_journal.journal import Journal
from offset_journal.journal.db import resolve_url
from tests.support import role_url


def _own(exc: BaseException, kind: type[JournalError]) -> str:
    """``exc`` is the journal's ``kind``, one line, with no database error in it."""
    assert type(exc) is kind, repr(exc)
    assert isinstance(exc, (OffsetJournalError, RuntimeError))
    assert not isinstance(exc, (sa.exc.SQLAlchemyError, psycopg.Error))
    text = str(exc)
    assert text and "\n" not in text and "[SQL:" not in text, text
    return text


def _admin(url: str, statement: str) -> None:
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_database_that_is_not_there_is_unavailable_in_one_redacted_line() -> None:
    url = f"postgresql+psycopg://oj:s3cret-pw@127.0.0.1:{_closed_port()}/journal"
    with Journal(url, connect_timeout=2) as journal:
        with pytest.raises(JournalError) as read:
            journal.last_batch("orders")
        with pytest.raises(JournalError) as write:
            journal.record_rejected("a reason", "{}")
    for caught in (read, write):
        text = _own(caught.value, JournalUnavailable)
        assert "s3cret-pw" not in text
        assert "127.0.0.1" in text


def test_a_read_only_database_refuses_a_write_as_read_only(journal_url: str) -> None:
    database = sa.engine.make_url(journal_url).database
    _admin(journal_url, f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
    with Journal(journal_url) as journal:
        assert journal.last_batch("orders") is None  # reads still work
        with pytest.raises(JournalError) as caught:
            journal.record_rejected("a reason", "{}")
    assert "read-only" in _own(caught.value, JournalReadOnly)
    assert caught.value.sqlstate == "25006"


def test_a_database_without_the_schema_says_so(empty_database_url: str) -> None:
    with Journal(empty_database_url) as journal:
        with pytest.raises(JournalError) as read:
            journal.last_batch("orders")
        with pytest.raises(JournalError) as write:
            journal.record_rejected("a reason", "{}")
    assert "db upgrade" in _own(read.value, JournalSchemaError)
    _own(write.value, JournalSchemaError)
    assert write.value.sqlstate == "42P01"


def test_a_role_without_grants_is_refused_permission(journal_url: str) -> None:
    role = f"oj_bare_{uuid.uuid4().hex[:8]}"
    _admin(journal_url, f'CREATE ROLE "{role}" LOGIN')
    try:
        with Journal(role_url(journal_url, role)) as journal, \
                pytest.raises(JournalError) as caught:
            journal.record_rejected("a reason", "{}")
        assert "permission denied" in _own(caught.value, JournalPermissionError)
        assert isinstance(caught.value, JournalRefused)
        assert caught.value.sqlstate == "42501"
    finally:
        _admin(journal_url, f'DROP ROLE "{role}"')


def test_every_public_journal_method_translates_its_errors() -> None:
    """Each public method is wrapped (journal/_errors.py: translating), so none added
    later lets a database error through."""
    public = [name for name, value in inspect.getmembers(Journal, inspect.isfunction)
              if not name.startswith("_")]
    assert "record_batch" in public and "iter_history" in public
    assert [n for n in public if not hasattr(getattr(Journal, n), "__wrapped__")] == []
    assert inspect.isgeneratorfunction(Journal.iter_history)  # still lazy
