"""The queries the planner, the audit, the report, ``rejected`` and checkpoint import
need, as named methods: each is one read (or one transaction) whose SQL lives here."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ..offsets import PartitionOffset
from ..records import ASYNC_EXECUTION, is_real_time
from ..rows import (
    AsyncTail,
    AuditBatch,
    AuditSource,
    Batch,
    BatchRef,
    RealTimeTail,
    RereadRun,
    order_key,
)
from ._aggregates import ReportRows, report_rows
from ._batch_rows import up_to, with_sources, without_out_of_range
from ._read import Reads
from .schema import SCHEMA, batch_sources, batches, kafka_partitions, query_runs, rejected_events

log = logging.getLogger("offset_journal.journal")


class Queries(Reads):
    """Reads and transactions for the planner, the audit, the report and the tools."""

    def database_now(self) -> datetime | None:
        """The journal database's clock (None when it cannot be read)."""
        try:
            with self.engine.connect() as conn:
                now = conn.execute(sa.select(sa.func.now())).scalar_one()
        except sa.exc.SQLAlchemyError:
            return None
        return now if isinstance(now, datetime) else None

    def state_chain(self, anchor: Batch, window: timedelta | None) -> list[Batch]:
        """The part of ``anchor``'s checkpoint a state-aware plan needs, in journal order,
        selected in SQL so that the history's length does not matter: the batch with the
        watermark the plan uses (emitted_cutoff), the batch rewind_index would pick and every
        batch after it up to ``anchor``, and the batch before that one. compute_plan draws
        the same conclusions from it as from the whole checkpoint: each of its rules looks
        for the last batch with a watermark, the first batch that may hold a record of an
        open window, and the batches from there on."""
        b = batches.c
        chain: dict[int, Batch] = {anchor.pk: anchor}
        cut = self.checkpoint_batches(anchor, b.watermark.is_not(None), newest_first=True,
                                         limit=1)
        if not cut or cut[0].watermark is None:
            return [anchor]
        chain[cut[0].pk] = cut[0]
        threshold = cut[0].watermark - window if window is not None else cut[0].watermark
        k = self.first_may_be_open(anchor, threshold)
        if k is not None:
            if k.trigger_at is not None:  # then so has every batch of the chain
                col = sa.tuple_(b.trigger_at, b.batch_id, b.id)
                key = sa.tuple_(sa.literal(k.trigger_at), sa.literal(k.batch_id),
                                sa.literal(k.pk))
            else:
                col = sa.tuple_(b.batch_id, b.id)
                key = sa.tuple_(sa.literal(k.batch_id), sa.literal(k.pk))
            for batch in (*self.checkpoint_batches(anchor, col < key, newest_first=True,
                                                      limit=1),
                          *self.checkpoint_batches(anchor, col >= key)):
                chain[batch.pk] = batch
        return sorted(chain.values(), key=order_key)

    def first_may_be_open(self, anchor: Batch, threshold: datetime) -> Batch | None:
        """The first batch of ``anchor``'s checkpoint, up to it in journal order, that may
        hold a record at or after ``threshold`` (rewind_index's rule: its event time max
        is at or after it, or it read records and journaled no event time).

        The batches that match are gathered first, through batches_event_time_idx
        (migration 0016), and ordered after: the cost follows how many batches reach the
        threshold (those a restart after the last batch reads again), not the history's
        length. Asked in journal order with LIMIT 1, Postgres walks the history from its
        start to the first match, near the end (999,339 rows at 10^6 batches): the
        MATERIALIZED fence keeps it from that plan. The 0 is written out, not bound, as
        the index's predicate writes it, for Postgres to prove the index covers it."""
        b = batches.c
        may_be_open = sa.or_(b.event_time_max >= threshold,
                             sa.and_(b.event_time_max.is_(None),
                                     b.num_input_rows.is_distinct_from(sa.literal_column("0"))))
        matches = (sa.select(b.id, b.trigger_at, b.batch_id)
                   .where(up_to(anchor), may_be_open)
                   .cte("may_be_open").prefix_with("MATERIALIZED"))
        m = matches.c
        first = (sa.select(m.id).order_by(m.trigger_at.asc().nulls_first(), m.batch_id, m.id)
                 .limit(1).scalar_subquery())
        found: list[Batch] = self._run_read(lambda c: with_sources(
            c, c.execute(sa.select(batches).where(b.id == first)).mappings().all()))
        return found[0] if found else None

    def reread_runs(self, query_name: str, start: Mapping[str, Mapping[int, int]],
                    source: int | None = None) -> list[RereadRun]:
        """Per run, the journaled batches that read past ``start`` (topic -> partition ->
        offset) in some partition: one SQL aggregate, whatever the history's length."""
        rows = [(t, p, o) for t in sorted(start) for p, o in sorted(start[t].items())]
        if not rows:
            return []
        b, k = batches.c, kafka_partitions.c
        chosen = sa.values(sa.column("topic", sa.Text), sa.column("partition", sa.Integer),
                           sa.column("start", sa.BigInteger), name="chosen").data(rows)
        first = sa.func.min(b.trigger_at)
        stmt = (
            sa.select(b.run_id, b.query_id, sa.func.min(b.batch_id), sa.func.max(b.batch_id),
                      sa.func.count(sa.distinct(b.id)), first, sa.func.max(b.trigger_at))
            .select_from(batches.join(kafka_partitions, k.batch_pk == b.id)
                         .join(chosen, sa.and_(chosen.c.topic == k.topic,
                                               chosen.c.partition == k.partition)))
            .where(b.query_name == query_name, k.end_offset > chosen.c.start)
            .group_by(b.run_id, b.query_id)
            .order_by(first, sa.func.min(b.batch_id))
        )
        if source is not None:
            stmt = stmt.where(k.source_index == source)
        with self.engine.connect() as conn:
            return [RereadRun(r[0], r[1], int(r[2]), int(r[3]), int(r[4]), r[5], r[6])
                    for r in conn.execute(stmt)]

    def run_cluster_id(self, run_id: str) -> str | None:
        """The id of the Kafka cluster a run read (query_runs.kafka_cluster_id); None
        when not journaled, or on a journal not upgraded to 0012 (unknown)."""
        try:
            with self.engine.connect() as conn:
                found = conn.execute(sa.select(query_runs.c.kafka_cluster_id)
                                     .where(query_runs.c.run_id == run_id)).scalar()
        except sa.exc.ProgrammingError:  # no kafka_cluster_id column yet
            return None
        return found if isinstance(found, str) else None

    def async_tail(self, anchor: Batch) -> AsyncTail | None:
        """The anchor's run's last batches when the listener saw Spark run it with async
        progress tracking (query_runs.execution); None otherwise, or on a journal not
        upgraded to 0008 (unknown)."""
        r, b = query_runs.c, batches.c
        try:
            with self.engine.connect() as conn:
                row = conn.execute(sa.select(r.execution, r.async_interval_ms)
                                   .where(r.run_id == anchor.run_id)).first()
                if row is None or row[0] != ASYNC_EXECUTION:
                    return None
                interval = 1000 if row[1] is None else int(row[1])  # None: Spark's default
                last = conn.execute(
                    sa.select(b.trigger_at, b.batch_duration_ms).where(b.run_id == anchor.run_id)
                    .order_by(b.trigger_at.desc().nulls_last(), b.batch_id.desc()).limit(1)).first()
                if last is None or last[0] is None:
                    return None
                try:
                    since = last[0] - timedelta(milliseconds=interval + int(last[1] or 0))
                except (OverflowError, ValueError):
                    # Spark's interval and a batch's duration, as no listener writes
                    # them (the writer role can): the tail is unknown, as on an old
                    # journal, rather than every plan of the query failing.
                    log.warning("run %s of query %s: its async progress interval (%s ms) "
                                "or batch duration (%s ms) is out of range; its async "
                                "tail is ignored", anchor.run_id, anchor.query_name,
                                interval, last[1])
                    return None
                rows = conn.execute(
                    sa.select(b.run_id, b.batch_id, b.query_id, b.trigger_at)
                    .where(b.run_id == anchor.run_id, b.trigger_at >= since)
                    .order_by(b.batch_id)).all()
        except sa.exc.ProgrammingError:  # no execution column yet
            return None
        return AsyncTail(anchor.run_id, interval,
                         tuple(BatchRef(x[0], int(x[1]), x[2], x[3]) for x in rows))

    def real_time_tail(self, anchor: Batch) -> RealTimeTail | None:
        """The anchor's run when the listener saw Spark run it in real-time mode
        (query_runs.execution): its last journaled batch and when a batch after it
        stopped at the latest (the run's termination; killed: that batch's end plus one
        more batch). None otherwise, or on a journal without the execution column."""
        r, b = query_runs.c, batches.c
        try:
            with self.engine.connect() as conn:
                row = conn.execute(sa.select(r.execution, r.terminated_at)
                                   .where(r.run_id == anchor.run_id)).first()
                if row is None or not is_real_time(row[0]):
                    return None
                last = conn.execute(
                    sa.select(b.run_id, b.batch_id, b.query_id, b.trigger_at,
                              b.batch_duration_ms)
                    .where(b.run_id == anchor.run_id)
                    .order_by(b.batch_id.desc()).limit(1)).first()
        except sa.exc.ProgrammingError:  # no execution column yet
            return None
        if last is None:
            return None
        ref = BatchRef(last[0], int(last[1]), last[2], last[3])
        if row[1] is not None:
            return RealTimeTail(anchor.run_id, ref, row[1], True)
        stopped_by = (last[3] + timedelta(milliseconds=2 * int(last[4] or 0))
                      if last[3] is not None else None)
        return RealTimeTail(anchor.run_id, ref, stopped_by, False)

    def audit_page(self, query_name: str, after: int, page: int) -> list[AuditBatch]:
        """The query's next ``page`` batches after ``batches.id`` ``after``, in that
        order, with their Kafka sources (the audit's walk)."""
        b = batches.c

        def read(conn: sa.Connection) -> list[AuditBatch]:
            found: list[AuditBatch] = []
            last = after
            while len(found) < page:  # batches left out (out_of_range) are read past
                want = page - len(found)
                head = conn.execute(
                    sa.select(b.id, b.run_id, b.query_id, b.batch_id, b.trigger_at,
                              b.recorded_at, b.query_name)
                    .where(b.query_name == query_name, b.id > last)
                    .order_by(b.id).limit(want)).mappings().all()
                found += _audit_page(conn, head)
                if len(head) < want:
                    break
                last = head[-1]["id"]
            return found

        result: list[AuditBatch] = self._run_read(read)
        return result

    def report_rows(self, query_name: str, since: datetime | None, *, buckets: int,
                    top: int, max_runs: int) -> ReportRows | None:
        """The HTML report's aggregates (:mod:`._aggregates`); None when the query has
        no batch since ``since``."""
        with self.engine.connect() as conn:
            return report_rows(conn, query_name, since, buckets=buckets, top=top,
                               max_runs=max_runs)

    def rejected_rows(self, ids: Sequence[int] | None = None) -> list[sa.RowMapping]:
        """``rejected_events`` rows, oldest first (those with ``ids`` when given)."""
        t = rejected_events.c
        stmt = sa.select(rejected_events).order_by(t.id)
        if ids is not None:
            stmt = stmt.where(t.id.in_(list(ids)))
        with self.engine.connect() as conn:
            return list(conn.execute(stmt).mappings().all())


    def partition_history_with_plans(self, query_name: str,
                                     partition: int) -> list[tuple[Any, ...]]:
        """One partition's offsets per batch, in journal order (the demo's table): the
        query id, batch, trigger time, rows, partition, start and end offsets. A new
        checkpoint's first batch has no start from Spark: the plan it started from says
        where it began."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.text(_PARTITION_HISTORY), {"q": query_name, "p": partition})
            return [tuple(r) for r in rows]


_PARTITION_HISTORY = f"""
SELECT r.query_id, b.batch_id, to_char(b.trigger_at, 'HH24:MI:SS.MS') AS trigger_at,
       b.num_input_rows AS rows, k.partition,
       -- A new checkpoint's first batch has no start from Spark: the plan it started from
       -- (plan_runs, restart_plans) says where it began.
       coalesce(k.start_offset::text, (
           SELECT o ->> 3 || ' (plan ' || pr.plan_id || ')'
           FROM {SCHEMA}.plan_runs pr
           JOIN {SCHEMA}.restart_plans p ON p.id = pr.plan_id,
                jsonb_array_elements(p.kafka_offsets) AS o
           WHERE pr.run_id = b.run_id AND (o ->> 0)::int = k.source_index
             AND o ->> 1 = k.topic AND (o ->> 2)::int = k.partition)) AS start_offset,
       k.end_offset
FROM {SCHEMA}.batches b
JOIN {SCHEMA}.query_runs r USING (run_id)
JOIN {SCHEMA}.kafka_partitions k ON k.batch_pk = b.id
WHERE b.query_name = :q AND k.partition = :p
ORDER BY b.id
"""  # noqa: S608 (SCHEMA is a constant)


def _audit_page(conn: sa.Connection, head: Sequence[sa.RowMapping]) -> list[AuditBatch]:
    """The batches rows ``head`` with their Kafka sources, but those whose offsets
    cannot be computed (:func:`._batch_rows.without_out_of_range`)."""
    if not head:
        return []
    s, k = batch_sources.c, kafka_partitions.c
    pks = sa.bindparam("pks", [row["id"] for row in head], type_=sa.ARRAY(sa.BigInteger))
    sources = conn.execute(
        sa.select(s.batch_pk, s.source_index, s.num_input_rows)
        .where(s.batch_pk == sa.any_(pks), s.kind == "kafka")
        .order_by(s.batch_pk, s.source_index)).all()
    parts: dict[tuple[int, int], list[PartitionOffset]] = {}
    out_of_range: dict[int, str] = {}
    for pk, index, topic, partition, start, end, odd in conn.execute(
            sa.select(k.batch_pk, k.source_index, k.topic, k.partition, k.start_offset,
                      k.end_offset, k.out_of_range)
            .where(k.batch_pk == sa.any_(pks))
            .order_by(k.batch_pk, k.source_index, k.topic, k.partition)):
        if odd:
            out_of_range.setdefault(pk, f"{topic}-{partition}")
        parts.setdefault((pk, index), []).append(PartitionOffset(topic, partition, start, end))
    head = without_out_of_range(head, out_of_range)
    by_batch: dict[int, list[AuditSource]] = {}
    for pk, index, rows in sources:
        by_batch.setdefault(pk, []).append(
            AuditSource(index, rows, tuple(parts.get((pk, index), ()))))
    return [AuditBatch(r["id"], r["run_id"], r["query_id"], r["batch_id"], r["trigger_at"],
                       r["recorded_at"], tuple(by_batch.get(r["id"], ())))
            for r in head]
