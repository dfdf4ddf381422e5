"""Find a savepoint (by its id in the journal, or its directory) and check it, without
Spark: the manifest against its own SHA-256 and the journal's record of it, the query it
belongs to, and every Parquet file against the checksum its manifest lists.

A plan from a savepoint (``--savepoint ID|DIR``) and
:func:`~offset_journal.savepoint.initial_state` both come through here: a savepoint
altered since it was made, or another query's, is refused in one line. Its own checksum
only proves a manifest consistent, not made by ``savepoint create`` (anyone may re-sign
one): with a journal, a directory whose manifest the journal did not record is refused
unless the caller accepts it (``--unrecorded-savepoint``, for one made with
``--no-record``). A record vouches only for a manifest of its own query, run, query id
and batch: a row carrying the SHA-256 of another batch's manifest vouches for nothing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import SavepointError
from ..formatting import format_time
from ._files import check_parts, read_manifest, same_location
from .core import row_mismatch
from .model import Savepoint

if TYPE_CHECKING:
    from ..journal import Journal
    from ..rows import RecordedSavepoint


def load_savepoint(ref: int | str | Savepoint, journal: Journal | None = None, *,
                   query_name: str | None = None, verify: bool = True,
                   unrecorded: bool = False, expect_sha256: str | None = None) -> Savepoint:
    """The savepoint ``ref`` names (an id in ``journal``'s ``savepoints``, a directory,
    or one already loaded; digits are an id unless such a directory exists), checked:
    its manifest unaltered and, with a journal, recorded there (a directory it did not
    record only with ``unrecorded``, with a warning); its manifest's SHA-256
    ``expect_sha256`` when given (the one a plan was made from); of ``query_name`` when
    given; with ``verify``, every file against its checksum. SavepointError (one line)
    otherwise."""
    if isinstance(ref, Savepoint):
        found = ref
    elif isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()
                                  and not os.path.isdir(ref)):
        found = _by_id(int(ref), journal)
    else:
        found = _by_location(str(ref), journal, unrecorded)
    if expect_sha256 is not None and found.digest != expect_sha256:
        raise SavepointError(f"the manifest of {found.label()} is not the one the plan was "
                             f"made from (SHA-256 {found.digest[:12]}..., the plan's "
                             f"{expect_sha256[:12]}...): the savepoint was replaced since")
    manifest = found.manifest
    if query_name is not None and manifest.query_name != query_name:
        raise SavepointError(f"{found.label()} holds the state of query "
                             f"{manifest.query_name!r}, not of {query_name!r}")
    if verify:
        check_parts(found.location, manifest.parts)
    return found



def load_planned_savepoint(savepoint: int | str | Savepoint, journal: Journal | None,
                           expect_sha256: str | None, *, verify: bool = False) -> Savepoint:
    """:func:`load_savepoint` for a reader a plan sent (``initial_state``, the restore).
    The digest a plan checked (``expect_sha256``) pins the manifest, so an unrecorded one
    the plan accepted is not refused again here. The journal is the caller's to open."""
    unrecorded = expect_sha256 is not None
    return load_savepoint(savepoint, journal, verify=verify, unrecorded=unrecorded,
                          expect_sha256=expect_sha256)

def _by_id(savepoint_id: int, journal: Journal | None) -> Savepoint:
    if journal is None:
        raise SavepointError(f"savepoint {savepoint_id} is an id in the journal: give the "
                             "journal, or the savepoint's directory")
    rows = journal.savepoints(id=savepoint_id)
    if not rows:
        raise SavepointError(f"no savepoint {savepoint_id} in the journal")
    row = rows[0]
    if row.deleted_at is not None:
        raise SavepointError(_deleted(row))
    manifest, digest = read_manifest(row.location)
    if digest != row.manifest_sha256:
        raise SavepointError(f"the savepoint manifest at {row.location} is not the one the "
                             f"journal recorded as savepoint {savepoint_id}: the savepoint "
                             "was altered or replaced")
    mismatch = row_mismatch(row, manifest)
    if mismatch is not None:
        raise SavepointError(f"savepoint {savepoint_id} does not vouch for the savepoint at "
                             f"{row.location}: {mismatch}")
    return Savepoint(manifest, row.location, row.id, sha256=digest)


def _by_location(location: str, journal: Journal | None, unrecorded: bool) -> Savepoint:
    manifest, digest = read_manifest(location)
    if journal is None:
        return Savepoint(manifest, location, None, sha256=digest)
    rows = journal.savepoints(manifest_sha256=digest)
    vouching = [r for r in rows if row_mismatch(r, manifest) is None]
    mine = [r for r in vouching if same_location(r.location, location)] or vouching
    present = [r for r in mine if r.deleted_at is None]
    if present:
        return Savepoint(manifest, location, present[-1].id, sha256=digest)
    if mine:  # its files outlived the deletion (removing them failed): it is still gone
        raise SavepointError(_deleted(mine[-1]))
    others = "".join(
        f"; savepoint {r.id} carries its SHA-256 but names batch {r.batch_id} of run "
        f"{r.run_id} of query {r.query_name!r}, and vouches only for a manifest of that "
        "batch" for r in rows[:1])
    if not unrecorded:
        raise SavepointError(
            f"the savepoint manifest at {location} is not recorded in this journal "
            "(savepoints): its own checksum does not say who wrote it; use a savepoint "
            "`savepoint create` recorded, or accept this one with --unrecorded-savepoint "
            f"(one made with --no-record){others}")
    return Savepoint(manifest, location, None, (
        f"the savepoint at {location} is not recorded in this journal: only its own "
        "checksums vouch for it (--unrecorded-savepoint, recorded with the plan as its "
        "decision)",), sha256=digest)


def _deleted(row: RecordedSavepoint) -> str:
    when = format_time(row.deleted_at) or "?"
    return (f"savepoint {row.id} of query {row.query_name!r} (batch {row.batch_id}) was "
            f"deleted by retention at {when} ({row.deleted_reason}): its files at "
            f"{row.location} are gone; take a newer one (`savepoint list {row.query_name}`)")
