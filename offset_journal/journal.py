"""SQL in and out: journal records go in, offset history comes out.

Every statement is built with SQLAlchemy Core (parameterized); Kafka partition rows,
the bulk of a batch, go in with one COPY. Recording the same (run id, batch id) twice
leaves one row, so a spooled event can be replayed any number of times.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert

from .db import make_engine, redact
from .errors import JournalError
from .formatting import first_line
from .journal_checks import (
    continuity_problem,
    dumps,
    duplicate_problem,
    partition_latests,
    stored_offsets,
    successor_problem,
)
from .journal_rows import (
    FLAGGED_PROBLEMS,
    HISTORY_PAGE,
    RECENT_RUNS,
    Batch,
    FlaggedProblem,
    PruneResult,
    RecordedPlan,
    Run,
    RunBounds,
    SourceOffsets,
    SpoolLoss,
)
from .offsets import PartitionOffset, offsets_json
from .records import BatchRecord, RunRecord, SourceRecord
from .schema import (
    SCHEMA,
    batch_sources,
    batches,
    kafka_partitions,
    plan_runs,
    query_runs,
    rejected_events,
    restart_plans,
    spool_losses,
)

log = logging.getLogger(__name__)





# Built once: constructing an INSERT per batch (and its cache key) cost about as much
# Python time as the round trips of a small batch (bench/journal_write.py). One
# statement writes the run row (in case its start event was lost), the batch row and
# its source rows (from one JSONB array, jsonb_to_recordset): one round trip. A batch
# already journaled inserts nothing and returns no id. Foreign keys are checked at the
# end of the statement, when all three are in.
_BATCH_COLUMNS = tuple(c.name for c in batches.columns if c.name not in ("id", "recorded_at"))
_SOURCE_COLUMNS = tuple(c for c in batch_sources.columns if c.name != "batch_pk")
_NEW_BATCH_CTE = (
    pg_insert(batches).values({c: sa.bindparam(c) for c in _BATCH_COLUMNS})
    .on_conflict_do_nothing(constraint="batches_run_batch_key")
    .returning(batches.c.id).cte("new_batch")
)
_SOURCE_ROWS = sa.func.jsonb_to_recordset(sa.bindparam("sources", type_=JSONB)).table_valued(
    *(sa.column(c.name, c.type) for c in _SOURCE_COLUMNS)).render_derived("s", with_types=True)
_NEW_BATCH = (
    sa.select(_NEW_BATCH_CTE.c.id)
    .add_cte(pg_insert(query_runs)
             .values(run_id=sa.bindparam("run_run_id"), query_id=sa.bindparam("run_query_id"),
                     query_name=sa.bindparam("run_query_name"), named=sa.bindparam("run_named"))
             .on_conflict_do_nothing(index_elements=[query_runs.c.run_id]).cte("run_seen"))
    .add_cte(batch_sources.insert().from_select(
        ["batch_pk", *(c.name for c in _SOURCE_COLUMNS)],
        sa.select(_NEW_BATCH_CTE.c.id, *(_SOURCE_ROWS.c[c.name] for c in _SOURCE_COLUMNS))
        .select_from(_NEW_BATCH_CTE.join(_SOURCE_ROWS, sa.true())),
    ).cte("new_sources"))
)


def _source_row(source: SourceRecord) -> dict[str, Any]:
    """A batch_sources row, as one element of the JSONB array ``_NEW_BATCH`` takes (a JSON
    null comes out of jsonb_to_recordset as SQL NULL)."""
    start, end = stored_offsets(source)
    return {
        "source_index": source.index, "description": source.description, "kind": source.kind,
        "start_offset": start, "end_offset": end, "latest_offset": source.latest_offset,
        "num_input_rows": source.num_input_rows, "problem": source.problem,
        "metrics": source.metrics,
    }


_PARTITION_COLUMNS = ("batch_pk", "source_index", "topic", "partition", "start_offset",
                      "end_offset", "latest_offset")
"""The kafka_partitions columns the journal writes, in the order of its row tuples."""
_COPY_PARTITIONS = (f"COPY {SCHEMA}.kafka_partitions (batch_pk, source_index, topic, partition, "
                    "start_offset, end_offset, latest_offset) FROM STDIN")


@dataclass(frozen=True)
class _Ends:
    """A batch's Kafka end offsets: source index -> (topic, partition) -> end."""

    batch_id: int
    ends: dict[int, dict[tuple[str, int], int]]


_REMEMBERED_RUNS = 64


class Journal:
    """The offset journal in one Postgres database.

    ``Journal(url)`` opens no connection until first used. Reading methods answer for a
    *query name*, which stays the same across checkpoints while query ids do not.
    """

    def __init__(self, database_url: str | None = None, *, engine: sa.Engine | None = None,
                 connect_timeout: int = 5) -> None:
        self._engine = engine or make_engine(database_url, connect_timeout=connect_timeout)
        self._ends: dict[str, _Ends] = {}
        self._ends_lock = threading.Lock()

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connect(self) -> sa.Connection:
        try:
            return self._engine.connect()
        except sa.exc.OperationalError as exc:
            raise JournalError(
                f"cannot reach the journal database {redact(self._engine.url)}: "
                f"{redact(first_line(exc))}"
            ) from None

    # ------------------------------------------------------------------ writing

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
                # A run first seen through a batch (start event lost) may have been
                # recorded under its id; a later event with the real name wins.
                "query_name": sa.case((ex.named, ex.query_name), else_=t.query_name),
                "named": t.named | ex.named,
            },
        )
        conn.execute(stmt)

    def record_batch(self, rec: BatchRecord, conn: sa.Connection | None = None) -> bool:
        """Journal one completed batch; False when it was already journaled."""
        if conn is None:
            with self._engine.begin() as c:
                return self.record_batch(rec, c)
        values = {
            "run_run_id": rec.run_id, "run_query_id": rec.query_id,
            "run_query_name": rec.query_name, "run_named": rec.named,
            "run_id": rec.run_id, "query_id": rec.query_id, "query_name": rec.query_name,
            "batch_id": rec.batch_id, "trigger_at": rec.trigger_at,
            "batch_duration_ms": rec.batch_duration_ms, "durations_ms": rec.durations_ms,
            "num_input_rows": rec.num_input_rows,
            "input_rows_per_second": rec.input_rows_per_second,
            "processed_rows_per_second": rec.processed_rows_per_second,
            "watermark": rec.watermark, "event_time_min": rec.event_time_min,
            "event_time_max": rec.event_time_max, "event_time_avg": rec.event_time_avg,
            "state_operators": rec.state_operators, "sink_description": rec.sink_description,
            "num_output_rows": rec.num_output_rows, "raw_progress": rec.raw_progress,
        }
        sources = [_source_row(s) for s in rec.sources]
        flagged = self._flag_continuity(conn, rec, sources)
        values["sources"] = sources
        pk = conn.execute(_NEW_BATCH, values).scalar_one_or_none()
        if pk is None:
            _check_duplicate(self, conn, rec)
            return False
        for index, problem in flagged:  # said once: a replay of this batch is a no-op
            log.warning("offset-journal: batch %s of run %s (query %s), source %s: %s",
                        rec.batch_id, rec.run_id, rec.query_name, index, problem)
        rows = [
            (pk, s.index, p.topic, p.partition, p.start, p.end, latest)
            for s in rec.sources
            for p, latest in zip(s.partitions, partition_latests(s), strict=True)
        ]
        if rows:
            self._copy_partitions(conn, rows)
        self._remember_ends(rec)
        return True

    # The end offsets of the last batch this Journal wrote, per run (at most
    # _REMEMBERED_RUNS runs): the next batch of the run is checked against them without
    # reading anything. Only the journal itself says which batch comes right before
    # another (a second writer, a listener attached twice, or a spool replayed by another
    # driver may have journaled batches in between), so memory serves only for the
    # immediate predecessor (batch id - 1); anything else is one lookup in
    # batches_run_batch_key and the primary key of kafka_partitions.
    def _previous_ends(self, conn: sa.Connection, rec: BatchRecord) -> _Ends | None:
        with self._ends_lock:
            known = self._ends.get(rec.run_id)
        if known is not None and known.batch_id == rec.batch_id - 1:
            return known
        return self._neighbour(conn, rec, rec.batch_id - 1, kafka_partitions.c.end_offset)

    @staticmethod
    def _neighbour(conn: sa.Connection, rec: BatchRecord, batch_id: int,
                   column: sa.ColumnElement[Any]) -> _Ends | None:
        """One offset column of the run's batch ``batch_id``, if journaled."""
        b, k = batches.c, kafka_partitions.c
        found = conn.execute(
            sa.select(k.source_index, k.topic, k.partition, column)
            .select_from(batches.join(kafka_partitions, k.batch_pk == b.id))
            .where(b.run_id == rec.run_id, b.batch_id == batch_id,
                   column.is_not(None))).all()
        if not found:
            return None
        offsets: dict[int, dict[tuple[str, int], int]] = {}
        for index, topic, partition, offset in found:
            offsets.setdefault(index, {})[(topic, partition)] = offset
        return _Ends(batch_id, offsets)

    def _remember_ends(self, rec: BatchRecord) -> None:
        ends = {s.index: {(p.topic, p.partition): p.end for p in s.partitions
                          if p.end is not None}
                for s in rec.sources if s.kind == "kafka" and s.partitions}
        with self._ends_lock:
            self._ends.pop(rec.run_id, None)
            if len(self._ends) >= _REMEMBERED_RUNS:
                self._ends.pop(next(iter(self._ends)))
            self._ends[rec.run_id] = _Ends(rec.batch_id, ends)

    def _flag_continuity(self, conn: sa.Connection, rec: BatchRecord,
                         rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
        """Set the problem of each source row (of ``rows``) whose Kafka start offsets do
        not continue from the run's previous batch (a gap, or backwards); returns the
        (source index, problem) pairs set."""
        kafka = [s for s in rec.sources if s.kind == "kafka" and s.partitions]
        if not kafka:
            return []
        prev = None
        if any(p.start is not None for s in kafka for p in s.partitions):
            prev = self._previous_ends(conn, rec)
        # A batch journaled after the run's next one (replayed late from a spool): the
        # pair (this, next) is checked now, as it was not when the next one came.
        following = self._neighbour(conn, rec, rec.batch_id + 1, kafka_partitions.c.start_offset)
        by_index = {row["source_index"]: row for row in rows}
        flagged = []
        for source in kafka:
            problems = []
            if prev is not None:
                problems.append(continuity_problem(source, prev.batch_id,
                                                   prev.ends.get(source.index, {})))
            if following is not None:
                problems.append(successor_problem(source, following.batch_id,
                                                  following.ends.get(source.index, {})))
            for problem in (x for x in problems if x):
                row = by_index[source.index]
                row["problem"] = "; ".join(x for x in (row["problem"], problem) if x)
                flagged.append((source.index, problem))
        return flagged

    @staticmethod
    def _copy_partitions(conn: sa.Connection, rows: list[tuple[Any, ...]]) -> None:
        driver = conn.connection.driver_connection
        if driver is not None and hasattr(driver, "cursor") and conn.dialect.driver == "psycopg":
            with driver.cursor() as cur, cur.copy(_COPY_PARTITIONS) as copy:
                for row in rows:
                    copy.write_row(row)
            return
        conn.execute(kafka_partitions.insert(),
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

    def spool_losses(self, query_name: str) -> list[SpoolLoss]:
        """What full listener spools dropped for a query, oldest record first."""
        t = spool_losses.c
        stmt = sa.select(spool_losses).where(t.query_name == query_name).order_by(t.id)
        rows = self._read(lambda c: c.execute(stmt).mappings().all())
        return [SpoolLoss(
            query_name=r["query_name"], events=r["events"], run_ids=tuple(r["run_ids"]),
            batch_id_min=r["batch_id_min"], batch_id_max=r["batch_id_max"],
            first_trigger_at=r["first_trigger_at"], last_trigger_at=r["last_trigger_at"],
            partitions=tuple(tuple(p) for p in r["partitions"]),
            host=r["host"], recorded_at=r["recorded_at"]) for r in rows]

    # ------------------------------------------------------------------ reading

    @staticmethod
    def _batch_rows(conn: sa.Connection, where: Any, *, order_desc: bool = True,
                    limit: int | None = None) -> list[sa.RowMapping]:
        """The ``batches`` rows matching ``where`` in journal order (newest first by
        trigger time, untimed last; or the reverse), without sources or partitions."""
        b = batches.c
        if limit is None:
            order = (
                [b.trigger_at.desc().nulls_last(), b.batch_id.desc(), b.id.desc()]
                if order_desc
                else [b.trigger_at.asc().nulls_first(), b.batch_id.asc(), b.id.asc()]
            )
            return list(conn.execute(sa.select(batches).where(where).order_by(*order))
                        .mappings().all())
        # Journal order puts batches without a trigger time last (first ascending);
        # batches_query_latest_idx has them first (trigger_at DESC NULLS FIRST). One
        # ORDER BY would sort the query's whole history for a LIMIT; two index scans
        # (timed, then untimed; the other way round ascending) read only ``limit`` rows.
        timed = sa.select(batches).where(where, b.trigger_at.is_not(None)).order_by(
            *([b.trigger_at.desc(), b.batch_id.desc(), b.id.desc()] if order_desc
              else [b.trigger_at.asc(), b.batch_id.asc(), b.id.asc()]))
        untimed = sa.select(batches).where(where, b.trigger_at.is_(None)).order_by(
            *([b.batch_id.desc(), b.id.desc()] if order_desc
              else [b.batch_id.asc(), b.id.asc()]))
        head: list[sa.RowMapping] = []
        for stmt in (timed, untimed) if order_desc else (untimed, timed):
            if len(head) >= limit:
                break
            head += conn.execute(stmt.limit(limit - len(head))).mappings().all()
        return head

    def _batches_where(self, conn: sa.Connection, where: Any, *, order_desc: bool = True,
                       limit: int | None = None) -> list[Batch]:
        head = self._batch_rows(conn, where, order_desc=order_desc, limit=limit)
        return self._with_sources(conn, head)

    @staticmethod
    def _with_sources(conn: sa.Connection, head: Sequence[sa.RowMapping]) -> list[Batch]:
        """``head`` (batches rows) as Batch objects with their sources and partitions.

        The ids go as one array parameter, not one bind parameter each: Postgres takes
        at most 65,535 of those, and a long history has more batches.
        """
        if not head:
            return []
        ids = [r["id"] for r in head]

        def of_head(col: Any) -> Any:
            return col == sa.any_(sa.bindparam("pks", ids, type_=sa.ARRAY(sa.BigInteger)))
        src_rows = conn.execute(
            sa.select(batch_sources).where(of_head(batch_sources.c.batch_pk))
            .order_by(batch_sources.c.batch_pk, batch_sources.c.source_index)
        ).mappings().all()
        k = kafka_partitions.c
        part_rows = conn.execute(
            sa.select(k.batch_pk, k.source_index, k.topic, k.partition, k.start_offset,
                      k.end_offset)
            .where(of_head(k.batch_pk))
            .order_by(k.batch_pk, k.source_index, k.topic, k.partition)
        ).all()
        parts: dict[tuple[int, int], list[PartitionOffset]] = {}
        for pr in part_rows:
            parts.setdefault((pr[0], pr[1]), []).append(
                PartitionOffset(pr[2], pr[3], pr[4], pr[5])
            )
        sources: dict[int, list[SourceOffsets]] = {}
        for sr in src_rows:
            rows = tuple(parts.get((sr["batch_pk"], sr["source_index"]), ()))
            start, end = sr["start_offset"], sr["end_offset"]
            if sr["kind"] == "kafka" and rows:  # stored once, in the partition rows
                if start is None:
                    start = offsets_json(rows, use="start")
                if end is None:
                    end = offsets_json(rows, use="end")
            sources.setdefault(sr["batch_pk"], []).append(
                SourceOffsets(
                    source_index=sr["source_index"], description=sr["description"],
                    kind=sr["kind"], start_offset=start, end_offset=end,
                    num_input_rows=sr["num_input_rows"], partitions=rows,
                    problem=sr["problem"],
                )
            )
        return [
            Batch(
                query_name=r["query_name"], query_id=r["query_id"], run_id=r["run_id"],
                batch_id=r["batch_id"], trigger_at=r["trigger_at"],
                batch_duration_ms=r["batch_duration_ms"], num_input_rows=r["num_input_rows"],
                watermark=r["watermark"], event_time_min=r["event_time_min"],
                event_time_max=r["event_time_max"],
                sources=tuple(sources.get(r["id"], ())), pk=r["id"],
                sink_description=r["sink_description"],
            )
            for r in head
        ]

    def _read(self, fn: Any) -> Any:
        with self._connect() as conn:
            try:
                return fn(conn)
            except sa.exc.ProgrammingError as exc:
                if "does not exist" in str(exc.orig):
                    raise JournalError(
                        "the journal schema is missing: run `offset-journal db upgrade`"
                    ) from None
                raise

    def last_batch(self, query_name: str) -> Batch | None:
        """The last journaled (so completed and committed) batch of a query name, across
        all its runs and checkpoints, in the journal's own order.

        Trigger times come from the drivers' clocks, which can be off: the run is the
        one whose batch the database journaled last (batches.id, its sequence), and the
        batch is that run's highest batch id. Two index lookups, whatever the history's
        length. :func:`offset_journal.restart.plan_restart` checks this choice against
        the offsets and the other orders (:meth:`last_batch_candidates`).
        """
        found = self._read(lambda c: self._with_sources(c, self._last_rows(c, query_name)))
        return found[0] if found else None

    @staticmethod
    def _last_rows(conn: sa.Connection, query_name: str) -> list[sa.RowMapping]:
        # A batch without a trigger time (its progress was malformed) is never "last",
        # as in journal order (_batch_rows), unless the query has no other.
        b = batches.c
        for timed in (b.trigger_at.is_not(None), sa.true()):
            last_run = (sa.select(b.run_id).where(b.query_name == query_name, timed)
                        .order_by(b.id.desc()).limit(1).scalar_subquery())
            stmt = (sa.select(batches)
                    .where(b.run_id == last_run, b.query_name == query_name, timed)
                    .order_by(b.batch_id.desc()).limit(1))
            rows = list(conn.execute(stmt).mappings().all())
            if rows:
                return rows
        return []

    def last_batch_candidates(self, query_name: str) -> list[Batch]:
        """The batches each order of the journal calls a query's last, distinct: the
        journal's own (:meth:`last_batch`) first, then the last by trigger time (the
        drivers' clocks), then the highest batch id of the run whose row the database
        recorded last. When they differ, the offsets decide (restart.check_last_batch).
        """
        r, b = query_runs.c, batches.c

        def read(conn: sa.Connection) -> list[Batch]:
            heads = self._last_rows(conn, query_name)
            heads += self._batch_rows(conn, b.query_name == query_name, limit=1)
            latest_run = (sa.select(r.run_id).where(r.query_name == query_name)
                          .order_by(r.recorded_at.desc(), r.run_id.desc()).limit(1)
                          .scalar_subquery())
            heads += conn.execute(
                sa.select(batches).where(b.run_id == latest_run, b.query_name == query_name,
                                         b.trigger_at.is_not(None))
                .order_by(b.batch_id.desc()).limit(1)).mappings().all()
            unique = list({h["id"]: h for h in heads}.values())
            return self._with_sources(conn, unique)

        found: list[Batch] = self._read(read)
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
        return [FlaggedProblem(*row) for row in self._read(lambda c: c.execute(stmt).all())]

    def last_offsets(self, query_name: str) -> list[SourceOffsets]:
        """Per source, the offsets of the last durable batch: its end offsets are where a
        new checkpoint starts."""
        last = self.last_batch(query_name)
        return list(last.sources) if last else []

    def batch(self, query_name: str, run_id: str, batch_id: int) -> Batch | None:
        b = batches.c
        where = sa.and_(b.query_name == query_name, b.run_id == run_id, b.batch_id == batch_id)
        found = self._read(lambda c: self._batches_where(c, where, limit=1))
        return found[0] if found else None

    def batch_as_of(self, query_name: str, when: datetime) -> Batch | None:
        """The last batch that had triggered at or before ``when``."""
        b = batches.c
        where = sa.and_(b.query_name == query_name, b.trigger_at <= when)
        found = self._read(lambda c: self._batches_where(c, where, limit=1))
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
        found = self._read(
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

                def read(conn: sa.Connection, stmt: Any = stmt) -> list[Batch]:
                    return self._with_sources(conn, conn.execute(stmt).mappings().all())

                found: list[Batch] = self._read(read)
                yield from found
                if len(found) < page:
                    break
                last = found[-1]
                cursor = ((last.trigger_at, last.batch_id, last.pk) if part is timed
                          else (last.batch_id, last.pk))

    def checkpoint_batches(self, anchor: Batch, where: Any = None, *,
                           newest_first: bool = False, limit: int | None = None,
                           ) -> list[Batch]:
        """Batches of ``anchor``'s checkpoint (its query id, under its query name) up to
        and including ``anchor`` in journal order, that also match ``where``; the
        selection is made in SQL (state-aware plans search a long history this way)."""
        b = batches.c
        conds = [b.query_name == anchor.query_name, b.query_id == anchor.query_id]
        if anchor.trigger_at is not None:
            conds += [b.trigger_at <= anchor.trigger_at,
                      sa.tuple_(b.trigger_at, b.batch_id, b.id)
                      <= sa.tuple_(sa.literal(anchor.trigger_at), sa.literal(anchor.batch_id),
                                   sa.literal(anchor.pk))]
        else:
            conds += [b.trigger_at.is_(None),
                      sa.tuple_(b.batch_id, b.id)
                      <= sa.tuple_(sa.literal(anchor.batch_id), sa.literal(anchor.pk))]
        if where is not None:
            conds.append(where)
        found: list[Batch] = self._read(lambda c: self._batches_where(
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
        rows = self._read(lambda c: c.execute(stmt).mappings().all())
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
        rows = self._read(lambda c: c.execute(stmt).all())
        return [RunBounds(*row) for row in reversed(rows)]

    def concurrent_runs(self, query_name: str) -> list[tuple[Run, Run]]:
        """Pairs of runs of ``query_name`` that journaled batches at the same time.

        Two live drivers under one name (two checkpoints) interleave their offsets, and
        "the last batch" may then belong to either. The rule is
        :func:`offset_journal.overlap.concurrent_runs`, over every run's span
        (:meth:`run_bounds`), as restart plans apply it; pairs come in order of the
        earlier run's start.
        """
        from .overlap import concurrent_runs, span_of

        spans = [span_of(b) for b in self.run_bounds(query_name, limit=None)]
        pairs = concurrent_runs(spans)
        if not pairs:
            return []
        runs = {run.run_id: run for run in self.runs(query_name)}
        return [(runs[a.run_id], runs[b.run_id]) for a, b in pairs]

    # ------------------------------------------------------------------ plans

    def record_plan(self, row: dict[str, Any]) -> int:
        """Record a restart plan handed out (a ``restart_plans`` row, as
        :func:`offset_journal.restart.record.plan_row` makes it); returns its id.
        Raises SQLAlchemy's error when the journal refuses it (no privilege, no table)."""
        with self._engine.begin() as conn:
            return int(conn.execute(restart_plans.insert().values(row)
                                    .returning(restart_plans.c.id)).scalar_one())

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

    def recorded_plans(self, query_name: str) -> list[RecordedPlan]:
        """The restart plans recorded for a query, oldest first, each with the run a
        job linked to it (None: not linked)."""
        p, r = restart_plans.c, plan_runs.c
        stmt = sa.select(restart_plans).where(p.query_name == query_name).order_by(p.id)
        links = (sa.select(r.plan_id, r.run_id, r.recorded_at)
                 .select_from(plan_runs.join(restart_plans, r.plan_id == p.id))
                 .where(p.query_name == query_name).order_by(r.recorded_at, r.run_id))

        def read(conn: sa.Connection) -> tuple[Any, Any]:
            return conn.execute(stmt).mappings().all(), conn.execute(links).all()

        rows, linked = self._read(read)
        runs: dict[int, dict[str, datetime]] = {}
        for plan_id, run_id, linked_at in linked:
            runs.setdefault(plan_id, {})[run_id] = linked_at
        plans = []
        for m in rows:
            try:
                plans.append(_recorded_plan(m, runs.get(m["id"], {})))
            except (TypeError, ValueError) as exc:
                # A row no plan command wrote (a writer's credentials can insert one):
                # it explains nothing, and must not stop the audit or the report.
                log.warning("restart plan %s of query %s is unreadable and skipped: %s",
                            m["id"], query_name, exc)
        return plans

    def audit(self, query_name: str, *, since: datetime | None = None) -> Any:
        """The continuity audit of a query (:func:`offset_journal.audit.audit_query`):
        an :class:`~offset_journal.audit.AuditReport`."""
        from .audit import audit_query

        return audit_query(self, query_name, since=since)

    # ------------------------------------------------------------------ retention

    def prune(self, before: datetime, *, query_name: str | None = None,
              dry_run: bool = False, chunk: int = 1000) -> PruneResult:
        """Delete batches triggered before ``before`` (each query's newest is kept); see
        :func:`offset_journal.retention.prune`."""
        from .retention import prune

        return prune(self, before, query_name=query_name, dry_run=dry_run, chunk=chunk)

    def query_names(self) -> list[str]:
        stmt = sa.select(query_runs.c.query_name).distinct().order_by(query_runs.c.query_name)
        return list(self._read(lambda c: c.execute(stmt).scalars().all()))

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
        return [tuple(r) for r in self._read(lambda c: c.execute(stmt).all())]


def _recorded_plan(m: Any, links: dict[str, datetime]) -> RecordedPlan:
    """A ``restart_plans`` row as a :class:`RecordedPlan`; TypeError or ValueError when
    its JSON is not what the plan commands write."""
    return RecordedPlan(
        id=m["id"], query_name=m["query_name"], created_at=m["created_at"],
        position=m["position"], mode=m["mode"], command=m["command"], ok=m["ok"],
        kafka_offsets=tuple((int(i), str(t), int(n), int(o))
                            for i, t, n, o in m["kafka_offsets"]),
        options=dict(m["options"]), checkpoint=m["checkpoint"], host=m["host"],
        os_user=m["os_user"], anchor_run_id=m["anchor_run_id"],
        anchor_batch_id=m["anchor_batch_id"], run_ids=tuple(links),
        request=dict(m["request"] or {}), linked_at=links)


def _check_duplicate(journal: Journal, conn: sa.Connection, rec: BatchRecord) -> None:
    """A (run id, batch id) already journaled: nothing to do when it is the same batch
    again (a spool replay), else the first copy stays and this one goes to
    rejected_events, with a WARNING: Spark never reports one batch twice differently."""
    b = batches.c
    head = conn.execute(sa.select(batches).where(b.run_id == rec.run_id,
                                                 b.batch_id == rec.batch_id)).mappings().all()
    found = journal._with_sources(conn, head)
    if not found:
        return
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


def record_all(journal: Journal, records: Iterable[RunRecord | BatchRecord],
               conn: sa.Connection) -> int:
    """Record runs and batches in one transaction; returns how many batches were new."""
    new = 0
    for rec in records:
        if isinstance(rec, RunRecord):
            journal.record_run(rec, conn)
        elif journal.record_batch(rec, conn):
            new += 1
    return new


__all__: Sequence[str] = ["Journal", "JournalError", "Run", "RunBounds", "Batch",
                          "SourceOffsets", "PruneResult", "FlaggedProblem", "SpoolLoss",
                          "RecordedPlan"]
