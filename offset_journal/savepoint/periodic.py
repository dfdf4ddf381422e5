"""Savepoints on a schedule, with retention: ONE implementation for both forms, the
driver's (:class:`~.schedule.SavepointSchedule`, through ``attach(..., savepoints=...)``)
and cron's (``offset-journal savepoint create --under DIR --keep N --max-age D``).

:func:`take_savepoint` takes a savepoint of a running (or stopped) query: the state at
the newest batch both its checkpoint committed and the journal holds, in a new directory
under the schedule's location, recorded in the journal; unless the newest savepoint
there already holds that batch (a stopped query is not saved again every time cron
runs). Then :func:`prune_savepoints` applies the retention (:mod:`.policy`): each
savepoint to go is checked to be the one recorded (its manifest's SHA-256), its deletion
recorded in ``savepoint_deletions`` (whose guard refuses the newest and any a recorded
plan names, for every role but the owner), and only then its files are removed.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..errors import JournalConstraintError, JournalError, OffsetJournalError, SavepointError
from ..formatting import first_line, format_time
from ..origin import host_name, os_user
from ..values import url_scheme
from ._files import probe_writable, read_manifest, remove_savepoint, require_empty
from .core import recorded_problem, row_mismatch
from .model import Savepoint
from .policy import Retention, Verdict, decide, within

if TYPE_CHECKING:
    from ..journal import Journal
    from ..rows import RecordedSavepoint


@dataclass(frozen=True)
class Pruned:
    """What retention did: the savepoints deleted and kept (with why), and what went
    wrong (a savepoint left in place, with why: a person should look)."""

    deleted: tuple[Verdict, ...] = ()
    kept: tuple[Verdict, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Taken:
    """One scheduled savepoint: the new one (None: ``held_by``, the newest under the
    location, already holds the batch), the batch, notes (which of the checkpoint and
    the journal was ahead), what retention did, and warnings (the savepoint not
    recorded, or retention's problems)."""

    savepoint: Savepoint | None
    held_by: RecordedSavepoint | None
    batch_id: int
    scope: str
    notes: tuple[str, ...] = ()
    pruned: Pruned = Pruned()
    warnings: tuple[str, ...] = ()


def scope_of(under: str | None, to: str | None) -> str:
    """The directory a schedule's savepoints are in (``under``, or the parent of
    ``to``), absolute when local: retention looks there only."""
    if under is not None:
        return _absolute(under)
    if to is None:
        raise SavepointError("give the savepoint a directory (--to) or a location to make "
                             "one under (--under)")
    if url_scheme(to) is None:
        return os.path.dirname(_absolute(to))
    return posixpath.dirname(to.rstrip("/"))


def _absolute(path: str) -> str:
    text = str(path)
    if not text.strip():
        raise SavepointError("the savepoint's location is empty: give a directory or URL")
    return os.path.abspath(text) if url_scheme(text) is None else text.rstrip("/")


def _join(base: str, name: str) -> str:
    return os.path.join(base, name) if url_scheme(base) is None else f"{base}/{name}"


def directory_name(query_name: str, batch_id: int, now: datetime) -> str:
    """A scheduled savepoint's directory: the query, its batch and the time (UTC, to
    the millisecond), so that a listing reads in order and two never collide."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", query_name).strip("._") or "query"
    stamp = now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}Z"
    return f"{safe[:80]}-batch{batch_id}-{stamp}"


def take_savepoint(spark: Callable[[], Any], journal: Journal, query_name: str,
                   checkpoint: str, *, under: str | None = None, to: str | None = None,
                   retention: Retention | None = None) -> Taken:
    """A savepoint of ``query_name`` (its checkpoint ``checkpoint``, running or
    stopped) in a new directory under ``under`` (or at ``to``), recorded, then
    ``retention`` applied to the query's savepoints there. ``spark`` gives the session
    the state is read with, asked only once the checks passed (a command starts its
    JVM then). SavepointError or CheckpointError (one line) when no savepoint could be
    taken; nothing is left behind then."""
    from .spark import export_savepoint, prepare_savepoint

    scope = scope_of(under, to)
    target = _absolute(to) if to is not None else _join(scope, f".pending-{os.getpid()}")
    prepared = prepare_savepoint(journal, query_name, checkpoint, target)
    batch = prepared.batch
    held = _held(journal, query_name, scope, batch)
    if held is not None:
        pruned = _pruned(journal, query_name, scope, retention)
        return Taken(None, held, batch.batch_id, scope, prepared.notes, pruned, pruned.problems)
    if to is None:
        name = directory_name(query_name, batch.batch_id, datetime.now(timezone.utc))
        prepared = replace(prepared, target=_join(scope, name))
        require_empty(prepared.target)
    probe_writable(scope if to is None else prepared.target)
    made = export_savepoint(spark(), journal, prepared)
    if made.id is None:
        skipped = ("old savepoints were not pruned: the new one is not recorded in the "
                   "journal") if retention is not None and retention.bounded else None
        return Taken(made, None, batch.batch_id, scope, prepared.notes,
                     warnings=made.warnings + ((skipped,) if skipped else ()))
    pruned = _pruned(journal, query_name, scope, retention)
    return Taken(made, None, batch.batch_id, scope, prepared.notes, pruned,
                 made.warnings + pruned.problems)


def _held(journal: Journal, query_name: str, scope: str, batch: Any) -> RecordedSavepoint | None:
    """The savepoint under ``scope`` that already holds ``batch``, its files there."""
    from ..checkpoint.store import open_store

    for row in reversed(journal.savepoints(query_name, deleted=False)):
        if (within(row.location, scope)
                and (row.run_id, row.query_id, row.batch_id)
                == (batch.run_id, batch.query_id, batch.batch_id)
                and recorded_problem(row) is None):
            store, root = open_store(row.location, None)
            if store.kind(root) == "dir":
                return row
    return None


def _pruned(journal: Journal, query_name: str, scope: str,
            retention: Retention | None) -> Pruned:
    if retention is None or not retention.bounded:
        return Pruned()
    return prune_savepoints(journal, query_name, scope, retention)


def prune_savepoints(journal: Journal, query_name: str, scope: str,
                     retention: Retention) -> Pruned:
    """Apply ``retention`` to the query's savepoints under ``scope`` (:func:`.policy.decide`):
    each one to go checked, its deletion recorded, then its files removed, oldest
    first. A savepoint that cannot go (its directory holds another manifest, the journal
    refused the deletion, its files would not go) stays or is said, in ``problems``."""
    now = journal.database_now() or datetime.now(timezone.utc)
    verdicts = decide(journal.savepoints(query_name, deleted=False),
                      journal.recorded_plans(query_name), retention, scope, now)
    deleted: list[Verdict] = []
    kept = [v for v in verdicts if not v.delete]
    problems: list[str] = []
    for verdict in reversed([v for v in verdicts if v.delete]):
        outcome = _delete(journal, verdict)
        if outcome is None:
            deleted.append(verdict)
        elif isinstance(outcome, Verdict):
            kept.append(outcome)
        else:
            problems.append(outcome)
    return Pruned(tuple(deleted), tuple(kept), tuple(problems))


def _delete(journal: Journal, verdict: Verdict) -> str | Verdict | None:
    """Delete one savepoint: checked, recorded, removed. None when deleted; a Verdict to
    keep it when, by the time its deletion was recorded, a plan named it or it was the
    newest (the journal checks under a lock a planner takes too); else why not, for a
    person. Only a directory holding the manifest the journal recorded is removed: a
    row's location is whatever the role that recorded it wrote."""
    row = verdict.savepoint
    label = f"savepoint {row.id} (batch {row.batch_id}) at {row.location}"
    try:
        manifest, digest = read_manifest(row.location)
    except SavepointError as exc:
        if not str(exc).startswith(f"no savepoint at {row.location}"):
            return f"{label} was not deleted: {exc}"
        found = False  # no manifest there: nothing of it is removed
    except OffsetJournalError as exc:
        return f"{label} was not deleted: {exc}"
    else:
        if digest != row.manifest_sha256 or row_mismatch(row, manifest) is not None:
            return (f"{label} was not deleted: the directory holds another manifest than "
                    "the one the journal recorded")
        found = True
    try:
        stays = journal.record_savepoint_deletion(row.id, verdict.why, host=host_name(),
                                                  os_user=os_user())
    except JournalConstraintError:
        return None  # another schedule recorded it first, and removes its files
    except JournalError as exc:
        reason = str(exc)
        return f"{label} was not deleted: the journal refused to record it ({reason})"
    if stays is not None:
        return Verdict(row, False, stays)
    try:
        if found:
            remove_savepoint(row.location)
        elif _exists(row.location):
            return (f"{label} is recorded as deleted; what is left at its location holds "
                    "no manifest and was not removed: look at it, and remove it by hand")
    except (OSError, OffsetJournalError) as exc:
        return (f"{label} is recorded as deleted, but its files could not be removed "
                f"({first_line(exc)}): remove them by hand")
    return None


def _exists(location: str) -> bool:
    from ..checkpoint.store import open_store

    store, root = open_store(location, None)
    return store.kind(root) is not None


def said(taken: Taken) -> list[str]:
    """What a scheduled savepoint did, one line each (the command prints them, the
    driver logs them)."""
    lines = []
    if taken.savepoint is None and taken.held_by is not None:
        h = taken.held_by
        lines.append(f"savepoint {h.id} already holds batch {h.batch_id} of run {h.run_id} "
                     f"(made {format_time(h.created_at)}): nothing new to save")
    for v in taken.pruned.deleted:
        r = v.savepoint
        lines.append(f"deleted savepoint {r.id} (batch {r.batch_id}, made "
                     f"{format_time(r.created_at)}) at {r.location}: {v.why}")
    for v in taken.pruned.kept:
        r = v.savepoint
        lines.append(f"kept savepoint {r.id} (batch {r.batch_id}): {v.why}")
    return lines
