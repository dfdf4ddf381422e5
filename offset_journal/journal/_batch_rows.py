"""Journal rows read back as plain data: batches in journal order with their sources
and partitions (the building blocks of every read)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ..offsets import PartitionOffset, offsets_json
from ..rows import Batch, SourceOffsets
from .schema import batch_sources, batches, kafka_partitions

log = logging.getLogger("offset_journal.journal")


def batch_rows(conn: sa.Connection, where: Any, *, order_desc: bool = True,
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



def up_to(anchor: Batch) -> Any:
    """The batches of ``anchor``'s checkpoint (its query id, under its query name) up to
    and including ``anchor`` in journal order."""
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
    return sa.and_(*conds)


def with_sources(conn: sa.Connection, head: Sequence[sa.RowMapping]) -> list[Batch]:
    """``head`` (batches rows) as Batch objects with their sources and partitions; a
    batch whose offsets cannot be computed is left out, with a warning.

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
                  k.end_offset, k.out_of_range)
        .where(of_head(k.batch_pk))
        .order_by(k.batch_pk, k.source_index, k.topic, k.partition)
    ).all()
    parts, out_of_range = _partitions_by_source(part_rows)
    if out_of_range:
        head = without_out_of_range(head, out_of_range)
    sources = _sources_by_batch(src_rows, parts)
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


def _partitions_by_source(part_rows: Sequence[Any],
                          ) -> tuple[dict[tuple[int, int], list[PartitionOffset]], dict[int, str]]:
    """The partition rows by (batch, source), and per batch the first partition whose
    offsets were out of range (its batch is left out)."""
    parts: dict[tuple[int, int], list[PartitionOffset]] = {}
    out_of_range: dict[int, str] = {}
    for pr in part_rows:
        if pr[6]:
            out_of_range.setdefault(pr[0], f"{pr[2]}-{pr[3]}")
        parts.setdefault((pr[0], pr[1]), []).append(
            PartitionOffset(pr[2], pr[3], pr[4], pr[5])
        )
    return parts, out_of_range


def _sources_by_batch(src_rows: Sequence[sa.RowMapping],
                      parts: dict[tuple[int, int], list[PartitionOffset]],
                      ) -> dict[int, list[SourceOffsets]]:
    """Each batch's sources, a Kafka source's offsets rebuilt from its partition rows
    (stored once, there)."""
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
    return sources



def without_out_of_range(head: Sequence[sa.RowMapping], out_of_range: dict[int, str],
              ) -> list[sa.RowMapping]:
    """``head`` without the batches whose offsets cannot be computed, each said in a
    warning: a row no listener wrote (the database refuses them since migration 0015),
    which must not stop every read of its query."""
    for r in head:
        if r["id"] in out_of_range:
            log.warning("batch %s of run %s (query %s) is skipped: its offsets of %s do "
                        "not fit a bigint (a row no listener wrote)", r["batch_id"],
                        r["run_id"], r["query_name"], out_of_range[r["id"]])
    return [r for r in head if r["id"] not in out_of_range]


def readable_batches(conn: sa.Connection, where: Any, *, order_desc: bool = True,
                     limit: int | None = None) -> list[Batch]:
    """:func:`batch_rows` as Batch objects, those whose offsets cannot be computed left
    out; a limited read reads on past them, so that ``limit`` batches come back where
    the journal has them."""
    if limit is None:
        return with_sources(conn, batch_rows(conn, where, order_desc=order_desc))
    want = limit
    while True:
        head = batch_rows(conn, where, order_desc=order_desc, limit=want)
        found = with_sources(conn, head)
        if len(found) >= limit or len(head) < want:
            return found[:limit]
        want *= 8


def last_rows(conn: sa.Connection, query_name: str) -> list[sa.RowMapping]:
    # A batch without a trigger time (its progress was malformed) is never "last",
    # as in journal order (batch_rows), unless the query has no other.
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
