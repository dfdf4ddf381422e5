"""The audit's I/O edge: read a query's journaled Kafka offsets in the journal's order
(a page of batches at a time) and its recorded plans, then audit them
(:func:`~offset_journal.audit.core.audit_batches`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ..errors import JournalError
from ..journal import Journal
from ..journal_rows import RecordedPlan
from ..offsets import PartitionOffset
from ..overlap import concurrent_runs, span_of
from ..schema import batch_sources, batches, kafka_partitions
from .core import audit_batches
from .model import AuditBatch, AuditReport, AuditSource

PAGE = 1000
"""Batches read per statement."""


def audit_query(journal: Journal, query_name: str, since: datetime | None = None,
                ) -> AuditReport:
    """Audit ``query_name`` in ``journal``: every batch walked in the journal's order
    (streamed, a page at a time), against the plans recorded for it. JournalError when
    the query has no journaled batch."""
    plans = _plans(journal, query_name)
    spans = [span_of(b) for b in journal.run_bounds(query_name, limit=None)]
    pairs = [(a.run_id, b.run_id) for a, b in concurrent_runs(spans)]
    report = audit_batches(query_name, iter_audit_batches(journal, query_name), plans,
                           since=since, concurrent=pairs)
    if report.batches == 0:
        raise JournalError(f"no journaled batches for query {query_name!r}")
    return report


def _plans(journal: Journal, query_name: str) -> list[RecordedPlan]:
    try:
        return journal.recorded_plans(query_name)
    except JournalError:  # a journal not upgraded to 0008_decisions has no plans
        return []


def iter_audit_batches(journal: Journal, query_name: str, page: int = PAGE,
                       ) -> Iterator[AuditBatch]:
    """Every batch of the query with its Kafka sources, in ``batches.id`` order."""
    b = batches.c
    after = 0
    while True:
        stmt = (sa.select(b.id, b.run_id, b.query_id, b.batch_id, b.trigger_at,
                          b.recorded_at)
                .where(b.query_name == query_name, b.id > after)
                .order_by(b.id).limit(page))
        found: list[AuditBatch] = journal._read(lambda c, s=stmt: _page(c, s))
        yield from found
        if len(found) < page:
            return
        after = found[-1].pk


def _page(conn: sa.Connection, stmt: Any) -> list[AuditBatch]:
    head = conn.execute(stmt).all()
    if not head:
        return []
    s, k = batch_sources.c, kafka_partitions.c
    pks = sa.bindparam("pks", [row[0] for row in head], type_=sa.ARRAY(sa.BigInteger))
    sources = conn.execute(
        sa.select(s.batch_pk, s.source_index, s.num_input_rows)
        .where(s.batch_pk == sa.any_(pks), s.kind == "kafka")
        .order_by(s.batch_pk, s.source_index)).all()
    parts: dict[tuple[int, int], list[PartitionOffset]] = {}
    for pk, index, topic, partition, start, end in conn.execute(
            sa.select(k.batch_pk, k.source_index, k.topic, k.partition, k.start_offset,
                      k.end_offset)
            .where(k.batch_pk == sa.any_(pks))
            .order_by(k.batch_pk, k.source_index, k.topic, k.partition)):
        parts.setdefault((pk, index), []).append(PartitionOffset(topic, partition, start, end))
    by_batch: dict[int, list[AuditSource]] = {}
    for pk, index, rows in sources:
        by_batch.setdefault(pk, []).append(
            AuditSource(index, rows, tuple(parts.get((pk, index), ()))))
    return [AuditBatch(pk, run_id, query_id, batch_id, trigger_at, recorded_at,
                       tuple(by_batch.get(pk, ())))
            for pk, run_id, query_id, batch_id, trigger_at, recorded_at in head]
