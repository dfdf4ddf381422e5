"""Retention: delete old batches, keeping what a new checkpoint starts from."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..rows import PruneResult
from ._base import JournalBase
from ._batch_rows import batch_rows, last_rows
from .schema import batch_sources, batches, kafka_partition_rows, savepoints

log = logging.getLogger("offset_journal.journal")


def prune(journal: JournalBase, before: datetime, *, query_name: str | None = None,
          dry_run: bool = False, chunk: int = 5000) -> PruneResult:
    """Delete batches triggered before ``before``, with their source and partition
    rows, in transactions of ``chunk`` batches (sized so that a commit's flush
    is small beside the deletes).

    Each query name's newest batch is kept whatever its age: it holds the offsets a
    new checkpoint starts from; so is a batch a recorded savepoint names (a plan from
    the savepoint starts at its end offsets and checks them). Batches without a trigger
    time and run rows are kept.
    Only a whole prefix of each run goes, in the journal's order (the audit's): a batch
    is kept when any batch of its run journaled before it is kept, so a driver whose
    clock was slow never has batches cut from the middle of its run (the audit would
    read the hole as a gap). Point-in-time and state-aware restarts need the history
    they rewind into: pick ``before`` older than the longest rewind you may want.
    """
    b = batches.c

    def newest(conn: sa.Connection) -> list[tuple[str, int, datetime | None]]:
        names = ([query_name] if query_name is not None else
                 conn.execute(sa.select(b.query_name).distinct()).scalars().all())
        out = []
        for name in names:  # only the batch rows: its offsets are not needed here
            # The newest by trigger time and the last in the journal's own order
            # (the planner's; see last_batch): one row when the clocks are right.
            last = batch_rows(conn, b.query_name == name, limit=1)
            last += last_rows(conn, name)
            for row in {r["id"]: r for r in last}.values():
                out.append((name, row["id"], row["trigger_at"]))
        return out

    kept = journal._run_read(newest)
    keep = [pk for _, pk, _ in kept]
    kept_newest = sum(1 for _, _, at in kept if at is not None and at < before)
    doomed = _prefixes(before, query_name, keep)
    if dry_run:
        def count(conn: sa.Connection) -> PruneResult:
            ids = sa.select(doomed.c.id).scalar_subquery()
            n = conn.execute(sa.select(sa.func.count()).select_from(doomed)).scalar_one()
            return PruneResult(n, _partition_values(conn, ids), kept_newest)
        result: PruneResult = journal._run_read(count)
        return result
    everything: list[int] = journal._run_read(
        lambda conn: list(conn.execute(sa.select(doomed.c.id).order_by(doomed.c.id)).scalars()))
    deleted = rows = 0
    for start in range(0, len(everything), chunk):
        ids = everything[start:start + chunk]
        with journal.connect() as conn, conn.begin():
            rows += _delete_sources(conn, ids)
            deleted += conn.execute(sa.delete(batches).where(b.id.in_(ids))).rowcount
        log.info("offset-journal: pruned %d batches so far", deleted)
    return PruneResult(deleted, rows, kept_newest)


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


def _prefixes(before: datetime, query_name: str | None, keep: Sequence[int]) -> Any:
    """The batches to delete: per run, those journaled before its first batch that
    stays (triggered at or after ``before``, without a trigger time, kept as its
    query's newest, or named by a recorded savepoint), found in one pass over the
    batches in journal order."""
    b, sp = batches.c, savepoints.c
    saved = sa.exists().where(sp.query_name == b.query_name, sp.run_id == b.run_id,
                              sp.query_id == b.query_id, sp.batch_id == b.batch_id)
    stays = sa.or_(b.trigger_at >= before, b.trigger_at.is_(None), saved,
                   *([b.id.in_(keep)] if keep else []))
    stays_before = sa.func.count().filter(stays).over(partition_by=b.run_id, order_by=b.id)
    flags = sa.select(b.id, stays_before.label("stays_before"))
    if query_name is not None:
        flags = flags.where(b.query_name == query_name)
    ranked = flags.subquery("ranked")
    return sa.select(ranked.c.id).where(ranked.c.stays_before == 0).subquery("doomed")
