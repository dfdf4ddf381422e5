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
    ├── OffsetFormatError (ValueError)     an offset payload is not its source's shape
    ├── ProgressFormatError (ValueError)   a progress payload cannot be journaled (records.py)
    ├── CheckpointError (ValueError)       not a readable checkpoint (checkpoint/)
    ├── JournalError (RuntimeError)        the journal cannot answer (journal/)
    ├── RestartError (RuntimeError)        no plan can be made (restart/)
    ├── SavepointError (RuntimeError)      no savepoint can be made or used (savepoint/)
    │   └── RestoreError                   a savepoint's state not restored (state/)
    ├── GrantError (RuntimeError)          grants refused: nothing granted (journal/roles.py)
    └── KafkaAdminError (RuntimeError)     a Kafka request failed (kafka/admin.py)
        └── KafkaUnavailable               the cluster did not answer

Each is importable from here and from the module that raises it.
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


class OffsetFormatError(OffsetJournalError, ValueError):
    """An offset payload is not what its source says it is."""


class ProgressFormatError(OffsetJournalError, ValueError):
    """A progress payload lacks what is needed to journal it (ids, batch id)."""


class CheckpointError(OffsetJournalError, ValueError):
    """A path is not a readable checkpoint, or a finished batch's log cannot be read."""


class JournalError(OffsetJournalError, RuntimeError):
    """The journal cannot answer: database unreachable, schema missing."""


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
    "JarsError",
    "JournalError",
    "KafkaAdminError",
    "KafkaUnavailable",
    "MirrorStartError",
    "OffsetFormatError",
    "OffsetJournalError",
    "ProgressFormatError",
    "RestartError",
    "RestoreError",
    "SavepointError",
]
