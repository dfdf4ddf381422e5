"""SQL in and out: journal records go in, offset history comes out.

Every statement is built with SQLAlchemy Core (parameterized); Kafka partition rows,
the bulk of a batch, go in with one COPY. Recording the same (run id, batch id) twice
leaves one row, so a spooled event can be replayed any number of times.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert

from .db import make_engine, redact
from .offsets import PartitionOffset, offsets_json
from .records import BatchRecord, RunRecord, SourceRecord
from .schema import SCHEMA, batch_sources, batches, kafka_partitions, query_runs, rejected_events

log = logging.getLogger(__name__)


class JournalError(RuntimeError):
    """The journal cannot answer: database unreachable, schema missing."""


@dataclass(frozen=True)
class Run:
    query_name: str
    query_id: str
    run_id: str
    named: bool
    started_at: datetime | None
    terminated_at: datetime | None
    exception: str | None
    host: str | None
    pid: int | None
    batches: int
    first_batch_id: int | None
    last_batch_id: int | None
    last_trigger_at: datetime | None


@dataclass(frozen=True)
class RunBounds:
    """When a run started and ended, as far as the journal knows, without counting its
    batches: ``first_trigger_at`` (its lowest batch id's trigger time) only when it has no
    start time, ``last_trigger_at`` (its highest batch id's) only when no termination."""

    run_id: str
    query_id: str
    started_at: datetime | None
    terminated_at: datetime | None
    first_trigger_at: datetime | None
    last_trigger_at: datetime | None


@dataclass(frozen=True)
class PruneResult:
    """What :meth:`Journal.prune` removed (or, on a dry run, would remove)."""

    batches: int
    partition_rows: int
    kept_newest: int  # query names whose newest batch was older than the cut-off, kept


RECENT_RUNS = 1000
"""How many of a query's most recent runs :meth:`Journal.run_bounds` returns by default."""


@dataclass(frozen=True)
class SourceOffsets:
    """One source's offsets in one journaled batch."""

    source_index: int
    description: str | None
    kind: str
    start_offset: Any
    end_offset: Any
    num_input_rows: int | None
    partitions: tuple[PartitionOffset, ...] = ()


@dataclass(frozen=True)
class Batch:
    query_name: str
    query_id: str
    run_id: str
    batch_id: int
    trigger_at: datetime | None
    batch_duration_ms: int | None
    num_input_rows: int | None
    watermark: datetime | None
    event_time_min: datetime | None
    event_time_max: datetime | None
    sources: tuple[SourceOffsets, ...] = field(default_factory=tuple)
    pk: int = 0

    def source(self, index: int) -> SourceOffsets:
        for s in self.sources:
            if s.source_index == index:
                return s
        raise KeyError(f"batch {self.batch_id} of run {self.run_id} has no source {index}")


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
    start, end = _stored_offsets(source)
    return {
        "source_index": source.index, "description": source.description, "kind": source.kind,
        "start_offset": start, "end_offset": end, "latest_offset": source.latest_offset,
        "num_input_rows": source.num_input_rows, "problem": source.problem,
        "metrics": source.metrics,
    }


def _stored_offsets(source: SourceRecord) -> tuple[Any, Any]:
    """The start and end offsets JSON a batch_sources row keeps.

    A Kafka source's offsets are its partition rows; keeping them a second time as
    JSONB cost about a fifth of a 10,000-partition batch's write (bench/journal_write.py).
    So a side the rows rebuild exactly is stored as NULL, and read back from the rows
    (:meth:`Journal._batches_where`, the ``source_offsets`` view). Anything the rows
    would not give back verbatim (a malformed or unusual payload) is kept as it came.
    """
    start, end = source.start_offset, source.end_offset
    if source.kind != "kafka" or not source.partitions or source.problem:
        return start, end
    if start is not None and start == offsets_json(source.partitions, use="start"):
        start = None
    if end is not None and end == offsets_json(source.partitions, use="end"):
        end = None
    return start, end


class Journal:
    """The offset journal in one Postgres database.

    ``Journal(url)`` opens no connection until first used. Reading methods answer for a
    *query name*, which stays the same across checkpoints while query ids do not.
    """

    def __init__(self, database_url: str | None = None, *, engine: sa.Engine | None = None,
                 connect_timeout: int = 5) -> None:
        self._engine = engine or make_engine(database_url, connect_timeout=connect_timeout)

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
                f"{redact(str(exc.orig).strip().splitlines()[0] if exc.orig else exc)}"
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
            "sources": [_source_row(s) for s in rec.sources],
        }
        pk = conn.execute(_NEW_BATCH, values).scalar_one_or_none()
        if pk is None:
            return False
        rows = [
            (pk, s.index, p.topic, p.partition, p.start, p.end)
            for s in rec.sources
            for p in s.partitions
        ]
        if rows:
            self._copy_partitions(conn, rows)
        return True

    @staticmethod
    def _copy_partitions(conn: sa.Connection, rows: list[tuple[Any, ...]]) -> None:
        driver = conn.connection.driver_connection
        if driver is not None and hasattr(driver, "cursor") and conn.dialect.driver == "psycopg":
            with driver.cursor() as cur, cur.copy(
                f"COPY {SCHEMA}.kafka_partitions "
                "(batch_pk, source_index, topic, partition, start_offset, end_offset) FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row(row)
            return
        cols = ("batch_pk", "source_index", "topic", "partition", "start_offset", "end_offset")
        conn.execute(kafka_partitions.insert(), [dict(zip(cols, r, strict=True)) for r in rows])

    def record_rejected(self, reason: str, payload: str, conn: sa.Connection | None = None) -> None:
        """Keep an event that cannot be journaled, verbatim, for a person to look at."""
        if conn is None:
            with self._engine.begin() as c:
                self.record_rejected(reason, payload, c)
            return
        conn.execute(rejected_events.insert().values(reason=reason, payload=payload))

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
        if not head:
            return []
        pks = [r["id"] for r in head]
        src_rows = conn.execute(
            sa.select(batch_sources).where(batch_sources.c.batch_pk.in_(pks))
            .order_by(batch_sources.c.batch_pk, batch_sources.c.source_index)
        ).mappings().all()
        k = kafka_partitions.c
        part_rows = conn.execute(
            sa.select(k.batch_pk, k.source_index, k.topic, k.partition, k.start_offset,
                      k.end_offset)
            .where(k.batch_pk.in_(pks))
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
        all its runs and checkpoints."""
        found = self._read(
            lambda c: self._batches_where(c, batches.c.query_name == query_name, limit=1)
        )
        return found[0] if found else None

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

    def batches_since(self, query_name: str, after: Batch) -> list[Batch]:
        """Batches journaled after ``after`` in journal order (trigger time, batch id)."""
        b = batches.c
        key = sa.tuple_(b.trigger_at, b.batch_id, b.id)
        where = sa.and_(b.query_name == query_name,
                        key > sa.tuple_(sa.literal(after.trigger_at), sa.literal(after.batch_id),
                                        sa.literal(after.pk)))
        found = self._read(lambda c: self._batches_where(c, where, order_desc=False))
        return list(found)

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
                   limit: int = RECENT_RUNS) -> list[RunBounds]:
        """The most recent ``limit`` runs of a query started at or before ``started_until``
        (runs with no start time always qualify), oldest first.

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
        "the last batch" may then belong to either. A run spans its start event (else
        its first batch) to its termination (else its last batch: a crashed run must
        not look as if it ran forever); spans that only touch do not count. Pairs come
        in order of the earlier run's start. The same rule as restart.concurrent_runs.
        """
        r, b = query_runs.c, batches.c
        agg = (
            sa.select(b.run_id, sa.func.min(b.trigger_at).label("first_at"),
                      sa.func.max(b.trigger_at).label("last_at"))
            .where(b.query_name == query_name).group_by(b.run_id).subquery()
        )
        start = sa.func.coalesce(r.started_at, agg.c.first_at)
        end = sa.func.greatest(sa.func.coalesce(r.terminated_at, agg.c.last_at), start)
        spans = (
            sa.select(r.run_id, start.label("start"), end.label("end"))
            .select_from(query_runs.outerjoin(agg, agg.c.run_id == r.run_id))
            .where(r.query_name == query_name)
            .cte("spans")
        )
        x, y = spans.alias("x"), spans.alias("y")
        stmt = (
            sa.select(x.c.run_id, y.c.run_id)
            .where(x.c.start.is_not(None), y.c.start.is_not(None),
                   sa.tuple_(x.c.start, x.c.run_id) < sa.tuple_(y.c.start, y.c.run_id),
                   y.c.start < x.c.end, x.c.start < y.c.end)
            .order_by(x.c.start, x.c.run_id, y.c.start, y.c.run_id)
        )
        pairs = self._read(lambda c: c.execute(stmt).all())
        if not pairs:
            return []
        runs = {run.run_id: run for run in self.runs(query_name)}
        return [(runs[a], runs[b]) for a, b in pairs]

    # ------------------------------------------------------------------ retention

    def prune(self, before: datetime, *, query_name: str | None = None,
              dry_run: bool = False, chunk: int = 1000) -> PruneResult:
        """Delete batches triggered before ``before``, with their source and partition
        rows, in transactions of ``chunk`` batches.

        Each query name's newest batch is kept whatever its age: it holds the offsets a
        new checkpoint starts from. Batches without a trigger time and run rows are kept.
        Point-in-time and state-aware restarts need the history they rewind into: pick
        ``before`` older than the longest rewind you may want.
        """
        b, k = batches.c, kafka_partitions.c

        def newest(conn: sa.Connection) -> list[tuple[str, int, datetime | None]]:
            names = ([query_name] if query_name is not None else
                     conn.execute(sa.select(b.query_name).distinct()).scalars().all())
            out = []
            for name in names:  # only the batch rows: its offsets are not needed here
                last = self._batch_rows(conn, b.query_name == name, limit=1)
                if last:
                    out.append((name, last[0]["id"], last[0]["trigger_at"]))
            return out

        kept = self._read(newest)
        keep = [pk for _, pk, _ in kept]
        kept_newest = sum(1 for _, _, at in kept if at is not None and at < before)
        where = _prune_where(before, query_name, keep)
        if dry_run:
            def count(conn: sa.Connection) -> PruneResult:
                doomed = sa.select(b.id).where(where).scalar_subquery()
                n = conn.execute(sa.select(sa.func.count()).where(where)
                                 .select_from(batches)).scalar_one()
                rows = conn.execute(sa.select(sa.func.count()).select_from(kafka_partitions)
                                    .where(k.batch_pk.in_(doomed))).scalar_one()
                return PruneResult(n, rows, kept_newest)
            result: PruneResult = self._read(count)
            return result
        deleted = rows = 0
        while True:
            with self._connect() as conn, conn.begin():
                ids = conn.execute(sa.select(b.id).where(where).order_by(b.id).limit(chunk)
                                   .with_for_update(skip_locked=True)).scalars().all()
                if not ids:
                    break
                rows += conn.execute(sa.select(sa.func.count()).select_from(kafka_partitions)
                                     .where(k.batch_pk.in_(ids))).scalar_one()
                # batch_sources go by their foreign key's cascade, partition rows with
                # them (migration 0002's trigger).
                conn.execute(sa.delete(batches).where(b.id.in_(ids)))
            deleted += len(ids)
            log.info("offset-journal: pruned %d batches so far", deleted)
        return PruneResult(deleted, rows, kept_newest)

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


def _prune_where(before: datetime, query_name: str | None, keep: Sequence[int]) -> Any:
    b = batches.c
    where = [b.trigger_at < before]
    if query_name is not None:
        where.append(b.query_name == query_name)
    if keep:
        where.append(b.id.not_in(keep))
    return sa.and_(*where)


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


def dumps(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


__all__: Sequence[str] = ["Journal", "JournalError", "Run", "RunBounds", "Batch",
                          "SourceOffsets", "PruneResult"]
