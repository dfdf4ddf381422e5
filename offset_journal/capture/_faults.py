"""What an error while writing means for the events being written (the writer's
classification, by SQLSTATE), and the writer's signals that are never the events' fault.

Only connection failures are outages (the events wait in the spool, retried); a missing
grant or schema is a misconfiguration (kept, retried, logged as an error); anything
else the database refuses is about the event itself (``rejected_events``).
"""

from __future__ import annotations

import enum

import psycopg
import sqlalchemy as sa

from ..journal.server import server_changed


class Fault(enum.Enum):
    """What a database error means for the events being written."""

    OUTAGE = "outage"  # the database is not there (now): keep the events, retry
    MISCONFIGURED = "misconfigured"  # a grant, role or schema is missing: keep, retry, shout
    REFUSED = "refused"  # the database refuses this event's data: rejected_events


# SQLSTATEs (https://www.postgresql.org/docs/current/errcodes-appendix.html) that say
# nothing about the events: the server is going away, overloaded, a standby, or a
# statement was cancelled by statement_timeout.
_OUTAGE_STATES = frozenset({
    "57P01", "57P02", "57P03", "57P05", "57014", "53000", "53100", "53200", "53300",
    "53400", "40001", "40P01", "55P03", "55006", "25006", "3D000", "58000", "58030",
})
_OUTAGE_CLASSES = ("08",)
# A role without a grant, a password refused, a schema not migrated: the events are
# fine; a person must fix the database. Kept and retried, logged as errors.
_MISCONFIGURED_STATES = {
    "42501": "the journal role lacks a grant (run `offset-journal db grant --writer ROLE`, "
             "see docs/security.md)",
    "42P01": "the journal schema is missing or older than this release "
             "(run `offset-journal db upgrade`)",
    "42703": "the journal schema is older than this release (run `offset-journal db upgrade`)",
    "3F000": "the journal schema is missing (run `offset-journal db upgrade`)",
    "42883": "the journal schema is older than this release (run `offset-journal db upgrade`)",
}
_MISCONFIGURED_CLASSES = ("28",)  # invalid authorization
# A transaction pooler between the writer and Postgres that the connection does not
# suit: nothing about the events either. offset-journal sends no startup options and
# prepares nothing on the server, so these come from settings added to the URL.
_POOLER_HINT = ("a transaction pooler (PgBouncer) does not keep server-side prepared "
                "statements: do not set prepare_threshold on the journal's connections")
_MISCONFIGURED_STATES.update({"26000": _POOLER_HINT, "42P05": _POOLER_HINT})
_POOLER_STARTUP = "unsupported startup parameter"
LAYOUT_KEY = "batch_sources_kafka_layout_fkey"
_POOLER_STARTUP_HINT = ("the pooler (PgBouncer) refuses a startup parameter: remove "
                        "'options' from the database URL, or list it in PgBouncer's "
                        "ignore_startup_parameters")


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error (wrapped by SQLAlchemy or raw psycopg), if any."""
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    state = getattr(orig, "sqlstate", None)
    return state if isinstance(state, str) and state else None


def classify_error(exc: BaseException) -> Fault:
    """Decide what an error while writing means: only connection failures are outages,
    a missing grant or schema is a misconfiguration, and anything else the database (or
    its driver) refuses is about the event itself."""
    if _POOLER_STARTUP in str(exc):
        return Fault.MISCONFIGURED
    if isinstance(exc, (Switched, Standby)):
        return Fault.OUTAGE
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return Fault.OUTAGE
    if server_changed(exc):  # another server than the one written to
        return Fault.OUTAGE
    state = sqlstate(exc)
    if state is not None:
        if state in _OUTAGE_STATES or state.startswith(_OUTAGE_CLASSES):
            return Fault.OUTAGE
        if state == "23503" and LAYOUT_KEY in str(exc):
            # A Kafka layout the journal remembered as stored is not there (its commit
            # failed after the fact, or the schema was re-created): the Journal has
            # forgotten it and sends it again on the retry; nothing about the event.
            return Fault.OUTAGE
        if state in _MISCONFIGURED_STATES or state.startswith(_MISCONFIGURED_CLASSES):
            return Fault.MISCONFIGURED
        return Fault.REFUSED
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    # No SQLSTATE: connecting failed, the connection broke, or a timeout.
    if isinstance(orig, (psycopg.OperationalError, psycopg.InterfaceError, OSError,
                         sa.exc.TimeoutError, sa.exc.OperationalError, sa.exc.InterfaceError)):
        return Fault.OUTAGE
    if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        return Fault.OUTAGE
    return Fault.REFUSED


def from_database(exc: BaseException) -> bool:
    """Whether an error came from the database or its driver, rather than from a
    fault in offset-journal's own code (which says nothing about the event either)."""
    return isinstance(exc, (sa.exc.SQLAlchemyError, psycopg.Error)) or sqlstate(exc) is not None


def fault_hint(exc: BaseException) -> str:
    """What a person should do about a MISCONFIGURED error."""
    if _POOLER_STARTUP in str(exc):
        return _POOLER_STARTUP_HINT
    state = sqlstate(exc) or ""
    if state.startswith("28"):
        return "the database refuses the journal role's login (check the URL's role/password)"
    return _MISCONFIGURED_STATES.get(state, "the database refuses the journal role")


class Switched(Exception):  # noqa: N818 - a signal, not an error
    """The writer found itself on another server before writing: the events wait, the
    window's go first."""


class Standby(Exception):  # noqa: N818 - a signal, not an error
    """The writer's new connection is on a standby, before writing anything: an outage
    (the events wait in the spool), never the events' fault."""
