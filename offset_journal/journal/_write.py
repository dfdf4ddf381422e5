"""The write path: runs, batches (one call each, _batch_args.py; partitions the arrays
cannot hold by COPY), rejected events, spool losses and restart plans; a batch's
continuity checked against its journaled neighbours as it is written."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from ..errors import JournalError, SavepointError
from ..records import BatchRecord, RunRecord
from ._arrays import Arrays
from ._base import JournalBase
from ._batch_args import (
    JOURNAL_BATCH,
    JOURNAL_BATCH_GUARDED,
    JSON_ARGUMENTS,
    BatchWrite,
    continued_sources,
    flag_problems,
)
from ._batch_rows import with_sources
from ._checks import (
    PartitionEnds,
    continuity_problem,
    dumps,
    duplicate_problem,
    partition_latests,
    successor_problem,
)
from ._driver import execute, jsonb, run_alone
from ._savepoint_lock import deletion_kept, plan_deleted_savepoint
from ._write_state import NO_ENDS, REMEMBERED_RUNS, Ends
from .schema import (
    SCHEMA,
    batches,
    kafka_partition_rows,
    kafka_partitions,
    plan_runs,
    query_runs,
    rejected_events,
    restart_plans,
    savepoint_deletions,
    savepoints,
    spool_losses,
)
from .server import GUARD_PARAMETER, guard_for

log = logging.getLogger("offset_journal.journal")


_PARTITION_COLUMNS = ("batch_pk", "source_index", "topic", "partition", "start_offset",
                      "end_offset", "latest_offset")
"""The kafka_partition_rows columns the journal writes, in the order of its row tuples."""
_COPY_PARTITIONS = (f"COPY {SCHEMA}.kafka_partition_rows (batch_pk, source_index, topic, "
                    "partition, start_offset, end_offset, latest_offset) FROM STDIN")


class Writes(JournalBase):
    """Everything that writes to the journal."""

    def record_run(self, run: RunRecord, conn: sa.Connection | None = None) -> None:
        """Insert or complete a run row (started and terminated events arrive apart)."""
        if conn is None:
            with self._engine.begin() as c:
                self.record_run(run, c)
            return
        values = {
            "run_id": run.run_id, "query_id": run.query_id, "query_name": run.query_name,
            "named": run.named, "started_at": run.started_at, "terminated_at": run.terminated_at,
            "exception": run.exception, "error_class": run.error_class, "host": run.host,
            "pid": run.pid,
        }
        # Only when known, so that a journal not upgraded to 0008 still takes other runs.
        if run.execution is not None:
            values["execution"] = run.execution
        if run.async_interval_ms is not None:
            values["async_interval_ms"] = run.async_interval_ms
        if run.kafka_cluster_id is not None:
            values["kafka_cluster_id"] = run.kafka_cluster_id
        stmt = pg_insert(query_runs).values(values)
        ex = stmt.excluded
        t = query_runs.c
        stmt = stmt.on_conflict_do_update(
            index_elements=[t.run_id],
            set_={
                "started_at": sa.func.coalesce(t.started_at, ex.started_at),
                "terminated_at": sa.func.coalesce(ex.terminated_at, t.terminated_at),
                "exception": sa.func.coalesce(ex.exception, t.exception),
                "error_class": sa.func.coalesce(ex.error_class, t.error_class),
                "host": sa.func.coalesce(t.host, ex.host),
                "pid": sa.func.coalesce(t.pid, ex.pid),
                **({"execution": sa.func.coalesce(t.execution, ex.execution)}
                   if run.execution is not None else {}),
                **({"async_interval_ms": sa.func.coalesce(t.async_interval_ms,
                                                          ex.async_interval_ms)}
                   if run.async_interval_ms is not None else {}),
                **({"kafka_cluster_id": sa.func.coalesce(t.kafka_cluster_id,
                                                         ex.kafka_cluster_id)}
                   if run.kafka_cluster_id is not None else {}),
                # A run first seen through a batch (start event lost) may have been
                # recorded under its id; a later event with the real name wins.
                "query_name": sa.case((ex.named, ex.query_name), else_=t.query_name),
                "named": t.named | ex.named,
            },
        )
        conn.execute(stmt)

    def record_batch(self, rec: BatchRecord, conn: sa.Connection | None = None) -> bool:
        """Journal one completed batch in the caller's transaction on ``conn``, or in one
        of its own (no ``conn``: :meth:`write_batch`); False when it was already
        journaled."""
        if conn is None:
            with self._engine.connect() as c:
                return self.write_batch(rec, c)
        return self._record_in(conn, rec, BatchWrite.of(rec, self._layout_key,
                                                        self._layout_stored))

    def write_batch(self, rec: BatchRecord, conn: sa.Connection) -> bool:
        """Journal one completed batch in a transaction of its own on ``conn`` (in none
        yet), as the listener's writer does with each batch: in one round trip when
        nothing must be read first (its continuity is checked against the run's
        previous batch this Journal remembers) and nothing goes in by COPY; False when
        it was already journaled."""
        batch = BatchWrite.of(rec, self._layout_key, self._layout_stored)
        if batch.rows_needed or self._continuity_needs_lookup(rec):
            with conn.begin():
                return self._record_in(conn, rec, batch)
        batch.flagged = self._flag_continuity(conn, rec, batch.sources)  # from memory
        pk, has_next = self._insert_batch(conn, batch.arguments(check_next=True), alone=True)
        self._layouts_stored_now(batch.layouts)  # committed, whatever else was written
        if pk is None:  # journaled already, or its successor is: the whole story
            with conn.begin():
                if has_next:
                    return self.record_batch(rec, conn)
                check_duplicate(self, conn, rec)
                return False
        self._journaled(rec, batch)
        return True

    def _record_in(self, conn: sa.Connection, rec: BatchRecord, batch: BatchWrite) -> bool:
        """The batch in ``conn``'s transaction, its layouts remembered once that commits
        and its continuity checked (reading the journal when memory cannot tell)."""
        self._layouts_sent(conn, batch.layouts)
        batch.flagged = self._flag_continuity(conn, rec, batch.sources)
        return self._write_in(conn, rec, batch)

    def _write_in(self, conn: sa.Connection, rec: BatchRecord, batch: BatchWrite) -> bool:
        """The batch in ``conn``'s transaction: the function's call, the successor's
        check when it came first, the partition rows the arrays cannot hold."""
        pk, has_next = self._insert_batch(conn, batch.arguments(check_next=True))
        if has_next:  # its successor came first: check that pair too, then write it
            batch.flagged += self._flag_successor(conn, rec, batch.sources)
            pk, _ = self._insert_batch(conn, batch.arguments(check_next=False))
        if pk is None:
            check_duplicate(self, conn, rec)
            return False
        rows = [
            (pk, s.index, p.topic, p.partition, p.start, p.end, latest)
            for s, (_, arrays) in zip(rec.sources, batch.encoded, strict=True)
            if arrays is None
            for p, latest in zip(s.partitions, partition_latests(s), strict=True)
        ]
        if rows:
            self._copy_partitions(conn, rows)
        self._journaled(rec, batch)
        return True

    def _journaled(self, rec: BatchRecord, batch: BatchWrite) -> None:
        for index, problem in batch.flagged:  # said once: a replay of it is a no-op
            log.warning("offset-journal: batch %s of run %s (query %s), source %s: %s",
                        rec.batch_id, rec.run_id, rec.query_name, index, problem)
        self._remember_ends(rec, batch.encoded)

    def _insert_batch(self, conn: sa.Connection, arguments: dict[str, Any], *,
                      alone: bool = False) -> tuple[int | None, bool]:
        """``JOURNAL_BATCH`` in ``conn``'s transaction, or as one of its own
        (``alone``): (the new batch's id or None, whether its successor is in)."""
        arguments = {k: jsonb(v) if k in JSON_ARGUMENTS and v is not None else v
                     for k, v in arguments.items()}
        # the writer's behind a pooler: never on another server than it expects
        expected = guard_for(conn.engine, conn.connection.driver_connection)
        try:
            if expected is None:
                row = (run_alone if alone else execute)(conn, JOURNAL_BATCH, arguments)
            elif alone:
                row = run_alone(conn, JOURNAL_BATCH_GUARDED, {
                    **arguments, GUARD_PARAMETER: expected.started_at})
            else:  # guarded when its transaction began
                row = execute(conn, JOURNAL_BATCH, arguments)
        except sa.exc.IntegrityError as exc:
            if "kafka_layout" in str(exc.orig):  # a layout remembered but not there
                self._forget_layouts()
            raise
        assert row is not None  # the function returns one row
        return row[0], bool(row[1])

    # The end offsets of the last batch this Journal wrote, per run (at most
    # REMEMBERED_RUNS runs): the next batch of the run is checked against them without
    # reading anything. Only the journal itself says which batch comes right before
    # another (a second writer, a listener attached twice, or a spool replayed by another
    # driver may have journaled batches in between), so memory serves only for the
    # immediate predecessor (batch id - 1); anything else is one lookup in
    # batches_run_batch_key and the primary key of kafka_partitions.
    def _previous_ends(self, conn: sa.Connection, rec: BatchRecord) -> Ends | None:
        known = self._remembered_previous(rec)
        if known is not None:
            return known
        return self._neighbour(conn, rec, rec.batch_id - 1, kafka_partitions.c.end_offset)

    def _remembered_previous(self, rec: BatchRecord) -> Ends | None:
        with self._ends_lock:
            known = self._ends.get(rec.run_id)
        return known if known is not None and known.batch_id == rec.batch_id - 1 else None

    def _continuity_needs_lookup(self, rec: BatchRecord) -> bool:
        """Whether :meth:`_flag_continuity` would read the journal for ``rec``."""
        return bool(continued_sources(rec)) and self._remembered_previous(rec) is None

    @staticmethod
    def _neighbour(conn: sa.Connection, rec: BatchRecord, batch_id: int,
                   column: sa.ColumnElement[Any]) -> Ends | None:
        """One offset column of the run's batch ``batch_id``, if journaled."""
        b, k = batches.c, kafka_partitions.c
        found = conn.execute(
            sa.select(k.source_index, k.topic, k.partition, column)
            .select_from(batches.join(kafka_partitions, k.batch_pk == b.id))
            .where(b.run_id == rec.run_id, b.batch_id == batch_id,
                   column.is_not(None))).all()
        if not found:
            return None
        by_source: dict[int, list[tuple[str, int, int]]] = {}
        for index, topic, partition, offset in found:
            by_source.setdefault(index, []).append((topic, partition, offset))
        return Ends(batch_id, {
            index: PartitionEnds(tuple(r[0] for r in rows), tuple(r[1] for r in rows),
                                 [r[2] for r in rows])
            for index, rows in by_source.items()})

    def _remember_ends(self, rec: BatchRecord,
                       encoded: list[tuple[dict[str, Any], Arrays | None]]) -> None:
        ends = {s.index: PartitionEnds(arrays.layout.topics, arrays.layout.partitions,
                                       list(arrays.end_offsets))
                if arrays is not None else PartitionEnds.of(s.partitions, "end")
                for s, (_, arrays) in zip(rec.sources, encoded, strict=True)
                if s.kind == "kafka" and s.partitions}
        with self._ends_lock:
            self._ends.pop(rec.run_id, None)
            if len(self._ends) >= REMEMBERED_RUNS:
                self._ends.pop(next(iter(self._ends)))
            self._ends[rec.run_id] = Ends(rec.batch_id, ends)

    def _flag_continuity(self, conn: sa.Connection, rec: BatchRecord,
                         rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
        """Set the problem of each source row (of ``rows``) whose Kafka start offsets do
        not continue from the run's previous batch (a gap, or backwards); returns the
        (source index, problem) pairs set."""
        kafka = continued_sources(rec)
        if not kafka:
            return []
        prev = self._previous_ends(conn, rec)
        if prev is None:
            return []
        return flag_problems(rows, [(s.index, continuity_problem(s, prev.batch_id,
                                                         prev.ends.get(s.index, NO_ENDS)))
                            for s in kafka])

    def _flag_successor(self, conn: sa.Connection, rec: BatchRecord,
                        rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
        """The same for a batch journaled after the run's next one (replayed late from a
        spool): the pair (this, next) is checked now, as it was not when the next came."""
        kafka = [s for s in rec.sources if s.kind == "kafka" and s.partitions]
        following = self._neighbour(conn, rec, rec.batch_id + 1, kafka_partitions.c.start_offset)
        if not kafka or following is None:
            return []
        return flag_problems(rows, [(s.index, successor_problem(s, following.batch_id,
                                                        following.ends.get(s.index, NO_ENDS)))
                            for s in kafka])

    @staticmethod
    def _copy_partitions(conn: sa.Connection, rows: list[tuple[Any, ...]]) -> None:
        driver = conn.connection.driver_connection
        if driver is not None and hasattr(driver, "cursor") and conn.dialect.driver == "psycopg":
            with driver.cursor() as cur, cur.copy(_COPY_PARTITIONS) as copy:
                for row in rows:
                    copy.write_row(row)
            return
        conn.execute(kafka_partition_rows.insert(),
                     [dict(zip(_PARTITION_COLUMNS, r, strict=True)) for r in rows])

    def record_rejected(self, reason: str, payload: str, conn: sa.Connection | None = None) -> None:
        """Keep an event that cannot be journaled, verbatim, for a person to look at."""
        if conn is None:
            with self._engine.begin() as c:
                self.record_rejected(reason, payload, c)
            return
        conn.execute(rejected_events.insert().values(reason=reason, payload=payload))

    def record_spool_losses(self, entries: Sequence[dict[str, Any]],
                            conn: sa.Connection) -> None:
        """Journal what a full spool dropped (entries of spool.summarize_losses); an entry
        already journaled (same loss id) is kept once."""
        for e in entries:
            parts = []
            for key, (start, end) in sorted(e.get("partitions", {}).items()):
                index, topic, partition = key.split("\t")
                parts.append([int(index), topic, int(partition), start, end])
            conn.execute(pg_insert(spool_losses).values(
                loss_id=e["loss_id"], query_name=e["query_name"], events=e["events"],
                run_ids=e.get("run_ids") or [], batch_id_min=e.get("batch_id_min"),
                batch_id_max=e.get("batch_id_max"),
                first_trigger_at=e.get("first_trigger_at"),
                last_trigger_at=e.get("last_trigger_at"), partitions=parts,
                host=e.get("host"),
            ).on_conflict_do_nothing(constraint="spool_losses_loss_id_key"))


    def record_plan(self, row: dict[str, Any]) -> int:
        """Record a restart plan handed out (a ``restart_plans`` row, as
        :func:`offset_journal.restart.record.plan_row` makes it); returns its id.
        Raises a JournalError when the journal refuses it (no privilege, no table),
        SavepointError when the savepoint it starts from was deleted meanwhile (checked
        under the lock retention deletes with: never a plan whose files are gone)."""
        with self._engine.begin() as conn:
            gone = plan_deleted_savepoint(conn, row)
            if gone is not None:
                raise SavepointError(gone)
            return int(conn.execute(restart_plans.insert().values(row)
                                    .returning(restart_plans.c.id)).scalar_one())

    def record_savepoint(self, row: dict[str, Any]) -> int:
        """Record a savepoint made (a ``savepoints`` row: query_name, run_id, query_id,
        batch_id, checkpoint, location, manifest_sha256, manifest, host, os_user);
        returns its id. Raises a JournalError when the journal refuses it."""
        with self._engine.begin() as conn:
            return int(conn.execute(savepoints.insert().values(row)
                                    .returning(savepoints.c.id)).scalar_one())

    def record_savepoint_deletion(self, savepoint_id: int, reason: str, *,
                                  host: str | None = None,
                                  os_user: str | None = None) -> str | None:
        """Record that retention deletes a savepoint's files (``savepoint_deletions``,
        migration 0022), before they go; None when recorded. Not recorded, and why it
        stays returned, when under the query's lock a recorded plan names it or it is
        the query's newest (what was decided may be stale by then), for every role.
        Raises a JournalError when the journal refuses it (its guard, a privilege,
        a deletion already recorded)."""
        row = {"savepoint_id": savepoint_id, "reason": reason, "host": host,
               "os_user": os_user}
        with self._engine.begin() as conn:
            kept = deletion_kept(conn, savepoint_id)
            if kept is None:
                conn.execute(savepoint_deletions.insert().values(row))
            return kept

    def link_plan(self, plan_id: int, run_id: str) -> bool:
        """Say that run ``run_id`` started from recorded plan ``plan_id`` (a job calls
        it right after ``start()``: ``query.runId``). A run has one plan: a second link
        is ignored (False)."""
        stmt = (pg_insert(plan_runs).values(plan_id=plan_id, run_id=run_id)
                .on_conflict_do_nothing(index_elements=[plan_runs.c.run_id])
                .returning(plan_runs.c.run_id))
        try:
            with self._engine.begin() as conn:
                return conn.execute(stmt).scalar_one_or_none() is not None
        except sa.exc.IntegrityError:
            raise JournalError(f"no recorded restart plan {plan_id}") from None

    def replay_rejected(self, event_id: int, record: RunRecord | BatchRecord) -> None:
        """Journal ``record`` and remove rejected event ``event_id``, in one transaction:
        the database's error, when it refuses again, leaves both as they were."""
        with self.engine.begin() as conn:
            record_all(self, [record], conn)
            conn.execute(sa.delete(rejected_events).where(rejected_events.c.id == event_id))

    def record_import(self, run: RunRecord, records: Sequence[BatchRecord],
                      ) -> tuple[int, tuple[str, str] | None]:
        """Journal an imported checkpoint's run and batches in one transaction, unless
        the checkpoint (its run id, or its query id through the listener) is journaled
        under another query name: then nothing is written, and that (run id, name) is
        returned. Otherwise (batches new, None). The run rows are locked for the check."""
        r = query_runs.c
        with self.engine.begin() as conn:
            found = conn.execute(
                sa.select(r.run_id, r.query_name)
                .where(sa.or_(r.run_id == run.run_id, r.query_id == run.query_id),
                       r.query_name != run.query_name)
                .order_by(r.run_id != run.run_id, r.run_id).limit(1).with_for_update()
            ).first()
            if found is not None:
                return 0, (found[0], found[1])
            return record_all(self, [run, *records], conn), None


def check_duplicate(journal: Writes, conn: sa.Connection, rec: BatchRecord) -> None:
    """A (run id, batch id) already journaled: nothing to do when it is the same batch
    again (a spool replay), else the first copy stays and this one goes to
    rejected_events, with a WARNING: Spark never reports one batch twice differently."""
    b = batches.c
    head = conn.execute(sa.select(batches).where(b.run_id == rec.run_id,
                                                 b.batch_id == rec.batch_id)).mappings().all()
    found = with_sources(conn, head)
    if not head:
        return
    reason: str | None
    if not found:  # journaled with offsets that cannot be computed: not this batch
        reason = (f"batch {rec.batch_id} of run {rec.run_id} (query {rec.query_name}) is "
                  "journaled with offsets out of range, a row no listener wrote; this copy "
                  "is kept here")
    else:
        have: dict[int, Any] = {}
        for src in found[0].sources:
            if src.partitions:
                have[src.source_index] = sorted((p.topic, p.partition, p.start, p.end)
                                                for p in src.partitions)
            else:
                have[src.source_index] = (src.start_offset, src.end_offset)
        reason = duplicate_problem(have, rec)
    if reason is None:
        return
    log.warning("offset-journal: %s", reason)
    journal.record_rejected(reason, rec.raw_progress or dumps(dataclasses.asdict(rec)), conn)


#: A journal not upgraded to 0012 (no column), or a writer not granted it since.
_CLUSTER_UNWRITABLE = frozenset({"42703", "42501"})


def record_cluster(journal: Writes, run: RunRecord, conn: sa.Connection) -> None:
    """A run's Kafka cluster id, under a savepoint: a journal that cannot take it (not
    upgraded to 0012, or the writer not granted the column since) loses only the id,
    with a warning, never the events around it (they would otherwise wait in the spool
    for an upgrade)."""
    try:
        with conn.begin_nested():
            journal.record_run(run, conn)
    except JournalError as exc:  # record_run's, translated
        state = exc.sqlstate
        if state not in _CLUSTER_UNWRITABLE:
            raise
        log.warning("offset-journal: run %s's Kafka cluster id is not journaled (%s): run "
                    "`offset-journal db upgrade` and `db grant` for the writer",
                    run.run_id, "no column" if state == "42703" else "no grant")
        journal.record_run(dataclasses.replace(run, kafka_cluster_id=None), conn)


def record_all(journal: Writes, records: Iterable[RunRecord | BatchRecord],
               conn: sa.Connection) -> int:
    """Record runs and batches in one transaction; returns how many batches were new."""
    return sum(record_each(journal, records, conn))


def record_each(journal: Writes, records: Iterable[RunRecord | BatchRecord],
                conn: sa.Connection) -> list[bool]:
    """Record runs and batches in one transaction; for each, whether it was a batch
    new to the journal."""
    new = []
    for rec in records:
        if isinstance(rec, RunRecord) and rec.kafka_cluster_id is not None:
            record_cluster(journal, rec, conn)
        elif isinstance(rec, RunRecord):
            journal.record_run(rec, conn)
        else:
            new.append(journal.record_batch(rec, conn))
            continue
        new.append(False)
    return new


