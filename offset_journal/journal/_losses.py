"""Recorded losses (migration 0019): what ``retention --record`` found deleted before a
query read it, kept past the next recording, and the decisions acknowledging it.

A loss is keyed by (query, source, topic, partition, first offset lost): a later
recording that finds the query still there and more deleted grows its end offset; a
query that reads on leaves it as it was. Acknowledgements only add rows: who, when,
why, up to which offset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from ..health_rows import LossAcknowledgement, RecordedLoss
from ._read import Reads
from .schema import loss_acknowledgements, retention_losses


def loss_rows(rows: Sequence[Mapping[str, Any]], anchors: Mapping[str, tuple[str, int]],
              ) -> list[dict[str, Any]]:
    """The ``retention_losses`` rows of the lost partitions among forecast ``rows``
    (``retention_forecasts`` columns); ``anchors``: each query's last batch then."""
    out = []
    for r in rows:
        if r["status"] != "lost" or not r["lost"]:
            continue
        run_id, batch_id = anchors.get(r["query_name"], (None, None))
        out.append({"query_name": r["query_name"], "source_index": r["source_index"],
                    "topic": r["topic"], "partition": r["partition"],
                    "first_offset": r["next_offset"], "end_offset": r["next_offset"] + r["lost"],
                    "anchor_run_id": run_id, "anchor_batch_id": batch_id})
    return out


def record_losses(conn: sa.Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Add losses, or grow the end of those already recorded (in the caller's
    transaction).

    Neither column goes back (migration 0021 refuses it for every role but the owner):
    a recording whose transaction began before another's committed keeps the later
    time."""
    if not rows:
        return
    t = retention_losses.c
    stmt = pg_insert(retention_losses).values(list(rows))
    conn.execute(stmt.on_conflict_do_update(
        constraint="retention_losses_key",
        set_={"end_offset": sa.func.greatest(t.end_offset, stmt.excluded.end_offset),
              "last_recorded_at": sa.func.greatest(t.last_recorded_at, sa.func.now())}))


def loss_of(m: Mapping[str, Any], acknowledged: tuple[LossAcknowledgement, ...] = (),
            acknowledged_end: int | None = None) -> RecordedLoss:
    """A ``retention_losses`` row (its columns by name) as a :class:`RecordedLoss`."""
    if acknowledged:
        acknowledged_end = max(a.end_offset for a in acknowledged)
    return RecordedLoss(
        id=m["id"], query_name=m["query_name"], source_index=m["source_index"],
        topic=m["topic"], partition=m["partition"], first_offset=m["first_offset"],
        end_offset=m["end_offset"], first_recorded_at=m["first_recorded_at"],
        last_recorded_at=m["last_recorded_at"], anchor_run_id=m["anchor_run_id"],
        anchor_batch_id=m["anchor_batch_id"], acknowledged_end=acknowledged_end,
        acknowledgements=acknowledged)


def facts_losses(query_name: str, found: Any) -> tuple[RecordedLoss, ...]:
    """``check_facts``' losses column (a JSON array of [id, source, topic, partition,
    first, end, acknowledged end, first recorded, last recorded]) as RecordedLoss."""
    out = []
    for (id_, source, topic, part, first, end, acked, first_at, last_at) in found or ():
        out.append(loss_of({
            "id": id_, "query_name": query_name, "source_index": source, "topic": topic,
            "partition": part, "first_offset": first, "end_offset": end,
            "first_recorded_at": datetime.fromisoformat(first_at),
            "last_recorded_at": datetime.fromisoformat(last_at), "anchor_run_id": None,
            "anchor_batch_id": None}, acknowledged_end=acked))
    return tuple(out)


class Losses(Reads):
    """Recorded losses read, and acknowledged."""

    def recorded_losses(self, query_name: str | None = None) -> list[RecordedLoss]:
        """The losses recorded (of one query, or all), oldest first, each with its
        acknowledgements."""
        t, a = retention_losses.c, loss_acknowledgements.c
        stmt = sa.select(retention_losses).order_by(t.query_name, t.first_recorded_at, t.id)
        acks = (sa.select(loss_acknowledgements)
                .select_from(loss_acknowledgements.join(retention_losses, a.loss_id == t.id))
                .order_by(a.id))
        if query_name is not None:
            stmt = stmt.where(t.query_name == query_name)
            acks = acks.where(t.query_name == query_name)

        def read(conn: sa.Connection) -> tuple[Any, Any]:
            return conn.execute(stmt).mappings().all(), conn.execute(acks).mappings().all()

        rows, decided = self._run_read(read)
        by_loss: dict[int, list[LossAcknowledgement]] = {}
        for d in decided:
            by_loss.setdefault(d["loss_id"], []).append(LossAcknowledgement(
                id=d["id"], end_offset=d["end_offset"], reason=d["reason"],
                created_at=d["created_at"], host=d["host"], os_user=d["os_user"]))
        return [loss_of(m, tuple(by_loss.get(m["id"], ()))) for m in rows]

    def record_acknowledgements(self, rows: Sequence[dict[str, Any]],
                                ) -> list[LossAcknowledgement]:
        """Record decisions on losses (``loss_acknowledgements`` rows: loss_id,
        end_offset, reason, host, os_user), in one transaction; returns them as
        recorded. Raises JournalPermissionError when the journal refuses (no privilege)."""
        if not rows:
            return []
        c = loss_acknowledgements.c
        with self.engine.begin() as conn:
            found = conn.execute(loss_acknowledgements.insert().values(list(rows)).returning(
                c.id, c.end_offset, c.reason, c.created_at, c.host, c.os_user)).all()
        return [LossAcknowledgement(*r) for r in found]
