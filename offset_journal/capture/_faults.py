"""What an error while writing means for the events being written (the writer's
classification, by the journal's own error kinds and their SQLSTATE), and the writer's
signals that are never the events' fault.

Only connection failures are outages (the events wait in the spool, retried); a missing
grant or schema is a misconfiguration (kept, retried, logged as an error); anything
else the database refuses is about the event itself (``rejected_events``).
"""

from __future__ import annotations

import enum

from ..errors import (
    JournalError,
    JournalPermissionError,
    JournalReadOnly,
    JournalSchemaError,
    JournalUnavailable,
)
from ..journal import as_journal_error
from ..journal.server import server_changed


class Fault(enum.Enum):
    """What a database error means for the events being written."""

    OUTAGE = "outage"  # the database is not there (now): keep the events, retry
    MISCONFIGURED = "misconfigured"  # a grant, role or schema is missing: keep, retry, shout
    REFUSED = "refused"  # the database refuses this event's data: rejected_events


# A role without a grant or login, a schema not migrated (the journal's kinds say
# which), or a transaction pooler between the writer and Postgres that the connection
# does not suit: the events are fine; a person must fix the database. Kept and retried,
# logged as errors. offset-journal sends no startup options and prepares nothing on the
# server, so the pooler's refusals come from settings added to the URL.
_GRANT_HINT = ("the journal role lacks a grant (run `offset-journal db grant --writer ROLE`, "
               "see docs/security.md)")
_LOGIN_HINT = "the database refuses the journal role's login (check the URL's role/password)"
_SCHEMA_HINT = ("the journal schema is missing or older than this release "
                "(run `offset-journal db upgrade`)")
_POOLER_HINT = ("a transaction pooler (PgBouncer) does not keep server-side prepared "
                "statements: do not set prepare_threshold on the journal's connections")
_POOLER_STATES = frozenset({"26000", "42P05"})
_POOLER_STARTUP = "unsupported startup parameter"
LAYOUT_KEY = "batch_sources_kafka_layout_fkey"
_POOLER_STARTUP_HINT = ("the pooler (PgBouncer) refuses a startup parameter: remove "
                        "'options' from the database URL, or list it in PgBouncer's "
                        "ignore_startup_parameters")


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE the database gave for an error, if any."""
    state = getattr(as_journal_error(exc), "sqlstate", None)
    return state if isinstance(state, str) and state else None


def classify_error(exc: BaseException) -> Fault:
    """Decide what an error while writing means: the database away (unavailable, the
    connection lost, a standby) is an outage, a missing grant or schema is a
    misconfiguration, and anything else the database refuses is about the event."""
    exc = as_journal_error(exc)  # one the journal did not translate yet: the same kinds
    if _POOLER_STARTUP in str(exc):
        return Fault.MISCONFIGURED
    if isinstance(exc, (Switched, Standby, JournalUnavailable, JournalReadOnly, OSError)):
        return Fault.OUTAGE
    if server_changed(exc):  # another server than the one written to
        return Fault.OUTAGE
    state = getattr(exc, "sqlstate", None)
    if state == "23503" and LAYOUT_KEY in str(exc):
        # A Kafka layout the journal remembered as stored is not there (its commit
        # failed after the fact, or the schema was re-created): the Journal has
        # forgotten it and sends it again on the retry; nothing about the event.
        return Fault.OUTAGE
    if isinstance(exc, (JournalSchemaError, JournalPermissionError)) or state in _POOLER_STATES:
        return Fault.MISCONFIGURED
    return Fault.REFUSED


def from_database(exc: BaseException) -> bool:
    """Whether an error came from the database, rather than from a fault in
    offset-journal's own code (which says nothing about the event either)."""
    return isinstance(as_journal_error(exc), JournalError)


def fault_hint(exc: BaseException) -> str:
    """What a person should do about a MISCONFIGURED error."""
    if _POOLER_STARTUP in str(exc):
        return _POOLER_STARTUP_HINT
    exc = as_journal_error(exc)
    state = getattr(exc, "sqlstate", None) or ""
    if state in _POOLER_STATES:
        return _POOLER_HINT
    if isinstance(exc, JournalSchemaError):
        return _SCHEMA_HINT
    if state.startswith("28"):
        return _LOGIN_HINT
    return _GRANT_HINT if isinstance(exc, JournalPermissionError) else \
        "the database refuses the journal role"


class Switched(Exception):  # noqa: N818 - a signal, not an error
    """The writer found itself on another server before writing: the events wait, the
    window's go first."""


class Standby(Exception):  # noqa: N818 - a signal, not an error
    """The writer's new connection is on a standby, before writing anything: an outage
    (the events wait in the spool), never the events' fault."""
