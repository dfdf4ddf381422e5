"""The read path: a query's batches, history, runs, plans and problems."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..rows import (
    FLAGGED_PROBLEMS,
    HISTORY_PAGE,
    RECENT_RUNS,
    Batch,
    FlaggedProblem,
    RecordedPlan,
    RecordedSavepoint,
    Run,
    RunBounds,
    ServerState,
    SourceOffsets,
    SpoolLoss,
)
from ._base import JournalBase
from ._batch_rows import batch_rows, last_rows, readable_batches, up_to, with_sources
from ._plan_rows import recorded_plan
from .schema import (
    batch_sources,
    batches,
    kafka_partitions,
    plan_runs,
    query_runs,
    restart_plans,
    savepoint_deletions,
    savepoints,
    spool_losses,
)

log = logging.getLogger("offset_journal.journal")


class Reads(JournalBase):
    """Everything that reads the journal for people and plans."""

    def spool_losses(self, query_name: str) -> list[SpoolLoss]:
        """What full listener spools dropped for a query, oldest record first."""
        t = spool_losses.c
        stmt = sa.select(spool_losses).where(t.query_name == query_name).order_by(t.id)
        rows = self._run_read(lambda c: c.execute(stmt).mappings().all())
        return [SpoolLoss(
            query_name=r["query_name"], events=r["events"], run_ids=tuple(r["run_ids"]),
            batch_id_min=r["batch_id_min"], batch_id_max=r["batch_id_max"],
            first_trigger_at=r["first_trigger_at"], last_trigger_at=r["last_trigger_at"],
            partitions=tuple(tuple(p) for p in r["partitions"]),
            host=r["host"], recorded_at=r["recorded_at"]) for r in rows]


    def _batches_where(self, conn: sa.Connection, where: Any, *, order_desc: bool = True,
                       limit: int | None = None) -> list[Batch]:
        return readable_batches(conn, where, order_desc=order_desc, limit=limit)


    def last_batch(self, query_name: str) -> Batch | None:
        """The last journaled (so completed and committed) batch of a query name, across
        all its runs and checkpoints, in the journal's own order.

        Trigger times come from the drivers' clocks, which can be off: the run is the
        one whose batch the database journaled last (batches.id, its sequence), and the
        batch is that run's highest batch id. Two index lookups, whatever the history's
        length. :func:`offset_journal.restart.plan_restart` checks this choice against
        the offsets and the other orders (:meth:`last_batch_candidates`).
        """
        found = self._run_read(lambda c: _last_readable(c, query_name, last_rows(c, query_name)))
        return found[0] if found else None


    def last_batch_candidates(self, query_name: str) -> list[Batch]:
        """The batches each order of the journal calls a query's last, distinct: the
        journal's own (:meth:`last_batch`) first, then the last by trigger time (the
        drivers' clocks), then the highest batch id of the run whose row the database
        recorded last. When they differ, the offsets decide (restart.check_last_batch).
        """
        r, b = query_runs.c, batches.c

        def read(conn: sa.Connection) -> list[Batch]:
            heads = last_rows(conn, query_name)
            heads += batch_rows(conn, b.query_name == query_name, limit=1)
            latest_run = (sa.select(r.run_id).where(r.query_name == query_name)
                          .order_by(r.recorded_at.desc(), r.run_id.desc()).limit(1)
                          .scalar_subquery())
            heads += conn.execute(
                sa.select(batches).where(b.run_id == latest_run, b.query_name == query_name,
                                         b.trigger_at.is_not(None))
                .order_by(b.batch_id.desc()).limit(1)).mappings().all()
            unique = list({h["id"]: h for h in heads}.values())
            return _last_readable(conn, query_name, unique)

        found: list[Batch] = self._run_read(read)
        return found

    def flagged_problems(self, query_name: str, *, limit: int = FLAGGED_PROBLEMS,
                         ) -> list[FlaggedProblem]:
        """The problems flagged on a query's batches when they were journaled, most
        recently journaled first (``limit`` of them, one more when there are more: the
        caller can say so). Read through the partial index batch_sources_problem_idx,
        so the cost follows the number of flagged sources, not the history's length."""
        b, s = batches.c, batch_sources.c
        stmt = (
            sa.select(b.run_id, b.batch_id, b.query_id, b.trigger_at, s.source_index,
                      s.problem, b.id)
            .select_from(batch_sources.join(batches, b.id == s.batch_pk))
            .where(s.problem.is_not(None), b.query_name == query_name)
            .order_by(b.id.desc(), s.source_index).limit(limit + 1)
        )
        return [FlaggedProblem(*row) for row in self._run_read(lambda c: c.execute(stmt).all())]

    def last_offsets(self, query_name: str) -> list[SourceOffsets]:
        """Per source, the offsets of the last durable batch: its end offsets are where a
        new checkpoint starts."""
        last = self.last_batch(query_name)
        return list(last.sources) if last else []

    def batch(self, query_name: str, run_id: str, batch_id: int) -> Batch | None:
        b = batches.c
        where = sa.and_(b.query_name == query_name, b.run_id == run_id, b.batch_id == batch_id)
        found = self._run_read(lambda c: self._batches_where(c, where, limit=1))
        return found[0] if found else None

    def batch_as_of(self, query_name: str, when: datetime) -> Batch | None:
        """The last batch that had triggered at or before ``when``."""
        b = batches.c
        where = sa.and_(b.query_name == query_name, b.trigger_at <= when)
        found = self._run_read(lambda c: self._batches_where(c, where, limit=1))
        return found[0] if found else None

    def history(self, query_name: str, *, limit: int | None = None,
                since: datetime | None = None, until: datetime | None = None,
                run_id: str | None = None) -> list[Batch]:
        """Batches of a query name, oldest first (the newest ``limit`` when limited)."""
        b = batches.c
        conds = [b.query_name == query_name]
        if since is not None:
            conds.append(b.trigger_at >= since)
        if until is not None:
            conds.append(b.trigger_at <= until)
        if run_id is not None:
            conds.append(b.run_id == run_id)
        found = self._run_read(
            lambda c: self._batches_where(c, sa.and_(*conds), order_desc=True, limit=limit)
        )
        return list(reversed(found))

    def iter_history(self, query_name: str, *, page: int = HISTORY_PAGE) -> Iterator[Batch]:
        """Every batch of a query name, oldest first (as :meth:`history`), streamed.

        Reads ``page`` batches at a time by keyset (the untimed ones first, then by
        trigger time, batch id and id), each page with its sources and partitions, so
        memory stays that of one page however long the history is.
        """
        b = batches.c
        timed = b.trigger_at.is_not(None)
        cursor: tuple[Any, ...] | None = None
        for part in (b.trigger_at.is_(None), timed):
            cursor = None
            while True:
                conds = [b.query_name == query_name, part]
                if cursor is not None and part is timed:
                    conds += [b.trigger_at >= cursor[0],
                              sa.tuple_(b.trigger_at, b.batch_id, b.id) > sa.tuple_(*cursor)]
                elif cursor is not None:
                    conds.append(sa.tuple_(b.batch_id, b.id) > sa.tuple_(*cursor))
                order = ([b.trigger_at, b.batch_id, b.id] if part is timed
                         else [b.batch_id, b.id])
                stmt = sa.select(batches).where(*conds).order_by(*order).limit(page)

                def read(conn: sa.Connection, stmt: Any = stmt,
                         ) -> tuple[Sequence[sa.RowMapping], list[Batch]]:
                    rows = conn.execute(stmt).mappings().all()
                    return rows, with_sources(conn, rows)

                rows, found = self._run_read(read)
                yield from found
                if len(rows) < page:  # the rows read: with_sources may leave some out
                    break
                last = rows[-1]
                cursor = ((last["trigger_at"], last["batch_id"], last["id"]) if part is timed
                          else (last["batch_id"], last["id"]))

    def checkpoint_batches(self, anchor: Batch, where: Any = None, *,
                           newest_first: bool = False, limit: int | None = None,
                           ) -> list[Batch]:
        """Batches of ``anchor``'s checkpoint (its query id, under its query name) up to
        and including ``anchor`` in journal order, that also match ``where``; the
        selection is made in SQL (state-aware plans search a long history this way)."""
        conds = [up_to(anchor)] if where is None else [up_to(anchor), where]
        found: list[Batch] = self._run_read(lambda c: self._batches_where(
            c, sa.and_(*conds), order_desc=newest_first, limit=limit))
        return found

    def runs(self, query_name: str | None = None) -> list[Run]:
        """Runs (one start of a query each), oldest first, with their batch counts."""
        r, b = query_runs.c, batches.c
        agg = (
            sa.select(b.run_id, sa.func.count().label("n"),
                      sa.func.min(b.batch_id).label("first"),
                      sa.func.max(b.batch_id).label("last"),
                      sa.func.max(b.trigger_at).label("last_at"))
            .group_by(b.run_id).subquery()
        )
        stmt = (
            sa.select(query_runs, agg.c.n, agg.c.first, agg.c.last, agg.c.last_at)
            .select_from(query_runs.outerjoin(agg, agg.c.run_id == r.run_id))
            .order_by(r.query_name, sa.func.coalesce(r.started_at, agg.c.last_at), r.recorded_at)
        )
        if query_name is not None:
            stmt = stmt.where(r.query_name == query_name)
        rows = self._run_read(lambda c: c.execute(stmt).mappings().all())
        return [
            Run(
                query_name=m["query_name"], query_id=m["query_id"], run_id=m["run_id"],
                named=m["named"], started_at=m["started_at"], terminated_at=m["terminated_at"],
                exception=m["exception"], host=m["host"], pid=m["pid"], batches=m["n"] or 0,
                first_batch_id=m["first"], last_batch_id=m["last"], last_trigger_at=m["last_at"],
            )
            for m in rows
        ]

    def run_bounds(self, query_name: str, *, started_until: datetime | None = None,
                   limit: int | None = RECENT_RUNS) -> list[RunBounds]:
        """The most recent ``limit`` runs (None: all) of a query started at or before
        ``started_until`` (runs with no start time always qualify), oldest first.

        Unlike :meth:`runs` this reads no run's whole history: a run's first or last
        batch is one lookup in the (run_id, batch_id) index, so the cost follows the
        number of runs returned, not the number of batches journaled.
        """
        r, b = query_runs.c, batches.c

        def edge(order: Any) -> Any:
            return (sa.select(b.trigger_at).where(b.run_id == r.run_id).order_by(order)
                    .limit(1).scalar_subquery())

        stmt = (
            sa.select(r.run_id, r.query_id, r.started_at, r.terminated_at,
                      sa.case((r.started_at.is_(None), edge(b.batch_id.asc()))).label("first"),
                      sa.case((r.terminated_at.is_(None), edge(b.batch_id.desc()))).label("last"))
            .where(r.query_name == query_name)
            # started_at DESC puts runs with no start time first: query_runs_name_idx backwards.
            .order_by(r.started_at.desc(), r.recorded_at.desc())
            .limit(limit)
        )
        if started_until is not None:
            stmt = stmt.where(sa.or_(r.started_at.is_(None), r.started_at <= started_until))
        rows = self._run_read(lambda c: c.execute(stmt).all())
        return [RunBounds(*row) for row in reversed(rows)]

    def concurrent_runs(self, query_name: str) -> list[tuple[Run, Run]]:
        """Pairs of runs of ``query_name`` that journaled batches at the same time.

        Two live drivers under one name (two checkpoints) interleave their offsets, and
        "the last batch" may then belong to either. The rule is
        :func:`offset_journal.overlap.concurrent_runs`, over every run's span
        (:meth:`run_bounds`), as restart plans apply it; pairs come in order of the
        earlier run's start.
        """
        from ..overlap import concurrent_runs, span_of

        spans = [span_of(b) for b in self.run_bounds(query_name, limit=None)]
        pairs = concurrent_runs(spans)
        if not pairs:
            return []
        runs = {run.run_id: run for run in self.runs(query_name)}
        return [(runs[a.run_id], runs[b.run_id]) for a, b in pairs]


    def recorded_plans(self, query_name: str) -> list[RecordedPlan]:
        """The restart plans recorded for a query, oldest first, each with the runs a
        job linked to it; fields no plan command writes are left out of each and named
        in its ``ignored`` (:mod:`._plan_rows`)."""
        p, r = restart_plans.c, plan_runs.c
        stmt = sa.select(restart_plans).where(p.query_name == query_name).order_by(p.id)
        links = (sa.select(r.plan_id, r.run_id, r.recorded_at)
                 .select_from(plan_runs.join(restart_plans, r.plan_id == p.id))
                 .where(p.query_name == query_name).order_by(r.recorded_at, r.run_id))

        def read(conn: sa.Connection) -> tuple[Any, Any]:
            return conn.execute(stmt).mappings().all(), conn.execute(links).all()

        rows, linked = self._run_read(read)
        runs: dict[int, dict[str, datetime]] = {}
        for plan_id, run_id, linked_at in linked:
            runs.setdefault(plan_id, {})[run_id] = linked_at
        # A row no plan command wrote (a writer's credentials can insert one) is read
        # without its malformed fields, which the plan names (RecordedPlan.ignored).
        return [recorded_plan(m, runs.get(m["id"], {})) for m in rows]

    def savepoints(self, query_name: str | None = None, *, id: int | None = None,
                   manifest_sha256: str | None = None,
                   deleted: bool | None = None) -> list[RecordedSavepoint]:
        """Recorded savepoints, oldest first: of a query, by id, or by the SHA-256 of
        their manifest (any combination); those whose files retention deleted with when
        and why (``deleted_at``, ``deleted_reason``). ``deleted``: only those (True), or
        only the others (False: a schedule's, whose deleted ones only grow in number)."""
        t, d = savepoints.c, savepoint_deletions.c
        stmt = (sa.select(savepoints, d.deleted_at, d.reason.label("deleted_reason"))
                .select_from(savepoints.outerjoin(savepoint_deletions,
                                                  d.savepoint_id == t.id))
                .order_by(t.id))
        if query_name is not None:
            stmt = stmt.where(t.query_name == query_name)
        if id is not None:
            stmt = stmt.where(t.id == id)
        if manifest_sha256 is not None:
            stmt = stmt.where(t.manifest_sha256 == manifest_sha256)
        if deleted is not None:
            stmt = stmt.where(d.savepoint_id.is_not(None) if deleted
                              else d.savepoint_id.is_(None))
        rows = self._run_read(lambda c: c.execute(stmt).mappings().all())
        return [RecordedSavepoint(**dict(r)) for r in rows]

    def journaled_batch_ids(self, query_name: str, query_id: str) -> dict[int, str]:
        """The batch ids the journal holds of one checkpoint (query id) of a query, with
        the run that journaled each (the newest run, should two have)."""
        b = batches.c
        stmt = (sa.select(b.batch_id, b.run_id).where(b.query_name == query_name,
                                                      b.query_id == query_id)
                .order_by(b.id))
        rows = self._run_read(lambda c: c.execute(stmt).all())
        return {int(batch_id): str(run_id) for batch_id, run_id in rows}

    def query_names_of(self, query_id: str) -> list[str]:
        """The query names the journal holds runs of a query id (a checkpoint) under."""
        r = query_runs.c
        stmt = (sa.select(r.query_name).where(r.query_id == query_id).distinct()
                .order_by(r.query_name))
        return list(self._run_read(lambda c: c.execute(stmt).scalars().all()))

    def server_state(self) -> ServerState:
        """Which server the journal is read on, and on a standby how far behind it may
        be (every function here is PUBLIC's to execute)."""
        def read(conn: sa.Connection) -> ServerState:
            row = conn.execute(sa.text(
                "SELECT pg_catalog.pg_is_in_recovery(), "
                "pg_catalog.pg_last_xact_replay_timestamp(), "
                "pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() - "
                "pg_catalog.pg_last_xact_replay_timestamp()), "
                "pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_last_wal_receive_lsn(), "
                "pg_catalog.pg_last_wal_replay_lsn())")).one()
            info = getattr(conn.connection.driver_connection, "info", None)
            host = getattr(info, "host", None)
            port = getattr(info, "port", None)
            return ServerState(str(host) if host else None, str(port) if port else None,
                               bool(row[0]), row[1], None if row[2] is None else float(row[2]),
                               None if row[3] is None else int(row[3]))
        return self._run_read(read)

    def query_names(self) -> list[str]:
        stmt = sa.select(query_runs.c.query_name).distinct().order_by(query_runs.c.query_name)
        return list(self._run_read(lambda c: c.execute(stmt).scalars().all()))

    def partition_history(self, query_name: str, topic: str, partition: int,
                          ) -> list[tuple[str, int, int | None, int | None]]:
        """(run id, batch id, start, end) of one topic-partition across a query's batches."""
        b, k = batches.c, kafka_partitions.c
        stmt = (
            sa.select(b.run_id, b.batch_id, k.start_offset, k.end_offset)
            .select_from(kafka_partitions.join(batches, b.id == k.batch_pk))
            .where(b.query_name == query_name, k.topic == topic, k.partition == partition)
            .order_by(b.trigger_at, b.batch_id)
        )
        return [tuple(r) for r in self._run_read(lambda c: c.execute(stmt).all())]


def _last_readable(conn: sa.Connection, query_name: str, heads: list[sa.RowMapping],
                   ) -> list[Batch]:
    """``heads`` (a query's last batches by some order, the journal's own first) with
    their offsets; where none of them can be computed (rows no listener wrote), the
    batch before the first of them in its run that can, else the newest that can in
    journal order: a restart then reads again rather than skips."""
    found = with_sources(conn, heads)
    if found or not heads:
        return found
    b = batches.c
    head = heads[0]
    before = (sa.select(batches)
              .where(b.query_name == query_name, b.run_id == head["run_id"],
                     b.batch_id < head["batch_id"])
              .order_by(b.batch_id.desc()))
    want = 8
    while True:
        rows = conn.execute(before.limit(want)).mappings().all()
        found = with_sources(conn, rows)
        if found:
            return found[:1]
        if len(rows) < want:
            return readable_batches(conn, b.query_name == query_name, limit=1)
        want *= 8
