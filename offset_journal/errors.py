"""Every error offset-journal raises, in one family.

Catch :class:`OffsetJournalError` to catch them all (the command line and the jobs do,
once); each error also keeps the builtin parent it always had, so ``except ValueError``
and ``except RuntimeError`` keep catching what they caught. Messages are one line, fit
to show as is, and never hold a credential.

The tree::

    OffsetJournalError
    ├── ConfigError (ValueError)           configuration missing or wrong (journal/db.py)
    │   ├── JarsError                      the JVM parts cannot be found or fetched (local/jars.py)
    │   ├── BrokerStartError               a local broker did not come up (local/kafka.py)
    │   └── MirrorStartError               a local MirrorMaker 2 did not start (local/mirror.py)
    ├── InvalidValueError (ValueError)     a value given is not usable (a duration, a time,
    │                                      a name, a threshold, a batch, a role) (values.py)
    ├── UnknownSourceError (KeyError)      a batch has no source of that index (rows.py)
    ├── OffsetFormatError (ValueError)     an offset payload is not its source's shape
    ├── ProgressFormatError (ValueError)   a progress payload cannot be journaled (records.py)
    ├── CheckpointError (ValueError)       not a readable checkpoint (checkpoint/)
    ├── JournalError (RuntimeError)        the journal cannot answer (journal/)
    │   ├── JournalUnavailable             unreachable, connection lost, shutting down,
    │   │   │                              overloaded, timed out: the same call may work later
    │   │   └── JournalConnectionLost      an open connection broke: the next call connects anew
    │   ├── JournalReadOnly                the database takes no writes here (a standby,
    │   │                                  default_transaction_read_only)
    │   ├── JournalSchemaError             the journal schema is missing or older than this release
    │   └── JournalRefused                 the database refuses the statement itself
    │       ├── JournalPermissionError     a grant (or the login) is missing
    │       └── JournalConstraintError     a constraint refuses the row (a duplicate, a key)
    ├── RestartError (RuntimeError)        no plan can be made (restart/)
    ├── SavepointError (RuntimeError)      no savepoint can be made or used (savepoint/)
    │   └── RestoreError                   a savepoint's state not restored (state/)
    ├── GrantError (RuntimeError)          grants refused: nothing granted (journal/roles.py)
    └── KafkaAdminError (RuntimeError)     a Kafka request failed (kafka/admin.py)
        └── KafkaUnavailable               the cluster did not answer

Each is importable from here and from the module that raises it.

The journal's methods raise only these (never SQLAlchemy's or the driver's errors): a
database error is translated once, at the journal's edge, into the ``JournalError`` that
says what it means, its message one redacted line, its ``sqlstate`` kept when the
database gave one (the driver's error stays as ``__cause__``, for a traceback).
"""

from __future__ import annotations


class OffsetJournalError(Exception):
    """The base of every error offset-journal raises; the message is one line."""


class ConfigError(OffsetJournalError, ValueError):
    """Configuration is missing or wrong (no URL, a malformed URL)."""


class JarsError(ConfigError):
    """The JVM parts could not be found or fetched; the message says what to do."""


class BrokerStartError(ConfigError):
    """The broker did not come up; the message ends with the broker's own last lines."""


class MirrorStartError(ConfigError):
    """MirrorMaker 2 did not come up; the message ends with its own last lines."""


class InvalidValueError(OffsetJournalError, ValueError):
    """A value given to offset-journal (a duration, a time, a query or role name, a
    threshold, a batch reference, an MM2 alias) is not usable; one line saying why."""


class UnknownSourceError(OffsetJournalError, KeyError):
    """A batch has no source of the index asked for."""

    def __str__(self) -> str:  # a KeyError's would quote the message
        return str(self.args[0]) if self.args else ""


class OffsetFormatError(OffsetJournalError, ValueError):
    """An offset payload is not what its source says it is."""


class ProgressFormatError(OffsetJournalError, ValueError):
    """A progress payload lacks what is needed to journal it (ids, batch id)."""


class CheckpointError(OffsetJournalError, ValueError):
    """A path is not a readable checkpoint, or a finished batch's log cannot be read."""


class JournalError(OffsetJournalError, RuntimeError):
    """The journal cannot answer: database unreachable, schema missing, a statement
    refused. ``sqlstate`` is the database's SQLSTATE when it gave one."""

    sqlstate: str | None = None


class JournalUnavailable(JournalError):
    """The database cannot answer now (unreachable, the connection lost, shutting down,
    overloaded, a statement or lock timed out): nothing about the data; retry later."""


class JournalConnectionLost(JournalUnavailable):
    """A connection that was open broke (the server restarted, an idle cut): the next
    call connects anew, so one retry tells whether the database is away."""


class JournalReadOnly(JournalError):
    """The database takes no writes here: a standby (in recovery) or a server set to
    ``default_transaction_read_only``. Reads still work; writes need the primary."""


class JournalSchemaError(JournalError):
    """The journal schema is missing or older than this release: run
    ``offset-journal db upgrade``."""


class JournalRefused(JournalError):
    """The database refuses the statement itself (its data, a privilege, a constraint):
    the same call fails again until someone changes the data or the database."""


class JournalPermissionError(JournalRefused):
    """The journal's role lacks a grant, or its login is refused."""


class JournalConstraintError(JournalRefused):
    """A constraint refuses the row: a duplicate, a key that is not there."""


class RestartError(OffsetJournalError, RuntimeError):
    """No plan can be made (unknown query, checkpoint not new, bad arguments); one line."""


class SavepointError(OffsetJournalError, RuntimeError):
    """No savepoint can be made or used (checkpoint missing or another query's, target
    not empty, files altered, an unknown operator); one line, nothing recorded."""


class RestoreError(SavepointError):
    """A savepoint's state cannot be written into a new checkpoint, or a checkpoint's
    state repartitioned: the new query's operators or state layout do not match, the
    checkpoint is not new, a Spark version the restore is not proven on. One line,
    naming the operator and the difference; the new checkpoint is left as it was."""


class GrantError(OffsetJournalError, RuntimeError):
    """The role running the grants may not give (all of) them: nothing was granted."""


class KafkaAdminError(OffsetJournalError, RuntimeError):
    """A Kafka request failed; the message is one line, fit for a CLI error."""


class KafkaUnavailable(KafkaAdminError):
    """The cluster did not answer (unreachable, wrong address, timed out)."""


__all__ = [
    "BrokerStartError",
    "CheckpointError",
    "ConfigError",
    "GrantError",
    "InvalidValueError",
    "JarsError",
    "JournalConnectionLost",
    "JournalConstraintError",
    "JournalError",
    "JournalPermissionError",
    "JournalReadOnly",
    "JournalRefused",
    "JournalSchemaError",
    "JournalUnavailable",
    "KafkaAdminError",
    "KafkaUnavailable",
    "MirrorStartError",
    "OffsetFormatError",
    "OffsetJournalError",
    "ProgressFormatError",
    "RestartError",
    "RestoreError",
    "SavepointError",
    "UnknownSourceError",
]
