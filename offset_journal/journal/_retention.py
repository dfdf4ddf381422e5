"""Retention: delete old batches, keeping what a new checkpoint starts from."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..rows import PruneResult, SavepointKeep
from ._base import JournalBase
from ._batch_rows import batch_rows, last_rows
from .schema import (
    batch_sources,
    batches,
    kafka_partition_rows,
    savepoint_deletions,
    savepoints,
)

log = logging.getLogger("offset_journal.journal")

SAVEPOINT_FORMAT = "offset-journal-savepoint"
_ROW_FIELDS = ("query_name", "run_id", "query_id", "batch_id", "checkpoint")


def prune(journal: JournalBase, before: datetime, *, query_name: str | None = None,
          dry_run: bool = False, chunk: int = 5000,
          savepoints: Collection[int] | None = None) -> PruneResult:
    """Delete batches triggered before ``before``, with their source and partition
    rows, in transactions of ``chunk`` batches (sized so that a commit's flush
    is small beside the deletes).

    Each query name's newest batch is kept whatever its age: it holds the offsets a
    new checkpoint starts from; so is a batch a recorded savepoint names (a plan from
    the savepoint starts at its end offsets and checks them), and the result says which
    batches each savepoint kept. ``savepoints``: the ids of the recorded savepoints that
    keep their batch (the caller read their manifests:
    :func:`offset_journal.savepoint.core.pinning`); None: those whose recorded manifest
    is a savepoint manifest of the row's own batch (any role with INSERT on the table
    may write a row, and one that is no savepoint must not hold back a whole run).
    Batches without a trigger time and run rows are kept.
    Only a whole prefix of each run goes, in the journal's order (the audit's): a batch
    is kept when any batch of its run journaled before it is kept, so a driver whose
    clock was slow never has batches cut from the middle of its run (the audit would
    read the hole as a gap). Point-in-time and state-aware restarts need the history
    they rewind into: pick ``before`` older than the longest rewind you may want.
    """
    kept = journal._run_read(lambda conn: _newest(conn, query_name))
    keep = [pk for _, pk, _ in kept]
    kept_newest = sum(1 for _, _, at in kept if at is not None and at < before)
    ranked = _ranked(before, query_name, keep, savepoints)
    doomed = sa.select(ranked.c.id).where(ranked.c.stays_before == 0).subquery("doomed")
    if dry_run:
        def count(conn: sa.Connection) -> PruneResult:
            ids = sa.select(doomed.c.id).scalar_subquery()
            n = conn.execute(sa.select(sa.func.count()).select_from(doomed)).scalar_one()
            return PruneResult(n, _partition_values(conn, ids), kept_newest,
                               _kept_for_savepoints(conn, ranked))
        result: PruneResult = journal._run_read(count)
        return result

    def doomed_ids(conn: sa.Connection) -> tuple[list[int], tuple[SavepointKeep, ...]]:
        ids = list(conn.execute(sa.select(doomed.c.id).order_by(doomed.c.id)).scalars())
        return ids, _kept_for_savepoints(conn, ranked)

    everything, for_savepoints = journal._run_read(doomed_ids)
    deleted, rows = _delete_in_chunks(journal, everything, chunk)
    return PruneResult(deleted, rows, kept_newest, for_savepoints)


def _newest(conn: sa.Connection, query_name: str | None,
            ) -> list[tuple[str, int, datetime | None]]:
    """Each query's newest batch (name, id, trigger time), which prune keeps: the newest
    by trigger time and the last in the journal's own order (the planner's; see
    last_batch), one row when the clocks are right."""
    b = batches.c
    names = ([query_name] if query_name is not None else
             conn.execute(sa.select(b.query_name).distinct()).scalars().all())
    out = []
    for name in names:  # only the batch rows: its offsets are not needed here
        last = batch_rows(conn, b.query_name == name, limit=1)
        last += last_rows(conn, name)
        for row in {r["id"]: r for r in last}.values():
            out.append((name, row["id"], row["trigger_at"]))
    return out


def _delete_in_chunks(journal: JournalBase, ids: list[int], chunk: int) -> tuple[int, int]:
    """Delete the batches ``ids`` (with their sources and partitions), ``chunk`` per
    transaction; returns (batches, source and partition rows) deleted."""
    deleted = rows = 0
    for start in range(0, len(ids), chunk):
        part = ids[start:start + chunk]
        with journal.connect() as conn, conn.begin():
            rows += _delete_sources(conn, part)
            deleted += conn.execute(sa.delete(batches).where(batches.c.id.in_(part))).rowcount
        log.info("offset-journal: pruned %d batches so far", deleted)
    return deleted, rows


def _partition_values(conn: sa.Connection, ids: Any) -> int:
    """How many partition offsets the batches ``ids`` hold: the arrays' lengths and the
    rows of kafka_partition_rows (counted without unnesting the view)."""
    s, r = batch_sources.c, kafka_partition_rows.c
    arrays = sa.select(sa.func.coalesce(sa.func.sum(sa.func.cardinality(s.end_offsets)), 0)
                       ).where(s.batch_pk.in_(ids)).scalar_subquery()
    rows = sa.select(sa.func.count()).select_from(kafka_partition_rows).where(
        r.batch_pk.in_(ids)).scalar_subquery()
    return int(conn.execute(sa.select(arrays + rows)).scalar_one())


def _delete_sources(conn: sa.Connection, ids: list[int]) -> int:
    """Delete the source rows of batches ``ids`` (their offsets arrays with them) in one
    statement, before the batches (whose foreign key would cascade one row at a time),
    and their kafka_partition_rows (migration 0002's trigger); the partition values
    they held."""
    s, r = batch_sources.c, kafka_partition_rows.c
    rows = conn.execute(sa.select(sa.func.count()).select_from(kafka_partition_rows)
                        .where(r.batch_pk.in_(ids))).scalar_one()
    gone = sa.delete(batch_sources).where(s.batch_pk.in_(ids)).returning(
        sa.func.cardinality(s.end_offsets).label("n")).cte("gone")
    arrays = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(gone.c.n), 0))).scalar_one()
    return int(rows) + int(arrays)


def _pins(ids: Collection[int] | None) -> Any:
    """Which ``savepoints`` rows keep their batch: ``ids``, or (None) those whose
    recorded manifest is a savepoint manifest naming the row's own batch; never one
    whose files retention deleted (no plan can start from it)."""
    sp, d = savepoints.c, savepoint_deletions.c
    present = ~sa.exists().where(d.savepoint_id == sp.id)
    if ids is not None:
        return sa.and_(sp.id.in_(list(ids)), present) if ids else sa.false()
    m = sp.manifest
    return sa.and_(m["format"] == sa.func.to_jsonb(SAVEPOINT_FORMAT), present,
                   *[m[c] == sa.func.to_jsonb(getattr(sp, c)) for c in _ROW_FIELDS])


def _ranked(before: datetime, query_name: str | None, keep: Sequence[int],
            pinned: Collection[int] | None) -> Any:
    """Every batch (of ``query_name``) in journal order with, per run, how many batches
    up to it stay (triggered at or after ``before``, without a trigger time, kept as its
    query's newest, or named by a savepoint that keeps its batch: ``stays_before``) and
    how many would stay without the savepoints (``plain_before``), and the savepoint
    naming it (``pin``). A batch goes when nothing up to it in its run stays: whole
    prefixes only, found in one pass over the batches in journal order."""
    b, sp = batches.c, savepoints.c
    pins = (sa.select(sp.query_name, sp.run_id, sp.query_id, sp.batch_id,
                      sa.func.min(sp.id).label("pin"))
            .where(_pins(pinned)).group_by(sp.query_name, sp.run_id, sp.query_id, sp.batch_id)
            .subquery("pins"))
    named = sa.and_(pins.c.query_name == b.query_name, pins.c.run_id == b.run_id,
                    pins.c.query_id == b.query_id, pins.c.batch_id == b.batch_id)
    plain = sa.or_(b.trigger_at >= before, b.trigger_at.is_(None),
                   *([b.id.in_(keep)] if keep else []))
    stays = sa.or_(plain, pins.c.pin.is_not(None))
    def up_to_here(flag: Any) -> Any:
        return sa.func.count().filter(flag).over(partition_by=b.run_id, order_by=b.id)

    flags = (sa.select(b.id, b.query_name, b.run_id, b.batch_id, pins.c.pin,
                       up_to_here(stays).label("stays_before"),
                       up_to_here(plain).label("plain_before"))
             .select_from(batches.outerjoin(pins, named)))
    if query_name is not None:
        flags = flags.where(b.query_name == query_name)
    return flags.cte("ranked")


def _kept_for_savepoints(conn: sa.Connection, ranked: Any) -> tuple[SavepointKeep, ...]:
    """Per run, the batches that stay only for a savepoint: from the first savepoint's
    batch (the first such batch in journal order is one a savepoint names) to the
    first batch that stays anyway."""
    r = ranked.c
    per_run = (sa.select(r.run_id, sa.func.count().label("n"), sa.func.min(r.id).label("first"))
               .where(r.stays_before > 0, r.plain_before == 0).group_by(r.run_id)
               .subquery("per_run"))
    first = ranked.alias("first_kept")
    rows = conn.execute(
        sa.select(first.c.pin, first.c.query_name, first.c.run_id, first.c.batch_id,
                  per_run.c.n)
        .join_from(per_run, first, first.c.id == per_run.c.first)
        .order_by(first.c.query_name, first.c.id)).all()
    return tuple(SavepointKeep(int(pin), name, run, int(batch_id), int(n))
                 for pin, name, run, batch_id, n in rows)
