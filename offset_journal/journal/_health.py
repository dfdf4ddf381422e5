"""What ``check`` and ``retention`` read and write: a fleet's health in a few statements.

:meth:`Health.check_facts` answers for every query at once: each query's last batch
(two index lookups, as :meth:`~._read.Reads.last_batch` finds it), its lag from that
batch's arrays (each partition's lag at 0 at least, as ``partition_lag``), and one
grouped pass each over the flagged sources (a partial index), spool losses and recorded
forecasts. Its cost grows with the queries asked about, not
with their history.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from ..errors import JournalError
from ..formatting import first_line
from ..rows import ForecastFacts, QueryFacts
from ._read import Reads
from .schema import SCHEMA, rejected_events, retention_forecasts

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

_ALL_NAMES = f"SELECT DISTINCT query_name FROM {SCHEMA}.query_runs"  # noqa: S608 (SCHEMA is a constant)
_GIVEN_NAMES = "SELECT DISTINCT unnest(CAST(:names AS text[]))"

# Constant text over SCHEMA, values bound (S608: nothing user-given is formatted in).
_FACTS = """
WITH names(query_name) AS ({names}),
flagged AS (
    SELECT b.query_name, count(*) AS n,
           (array_agg(b.run_id || ':' || b.batch_id || ': ' || s.problem
                      ORDER BY b.id DESC))[1] AS example
    FROM {s}.batch_sources s JOIN {s}.batches b ON b.id = s.batch_pk
    WHERE s.problem IS NOT NULL AND b.recorded_at >= :since
    GROUP BY b.query_name),
spooled AS (
    SELECT query_name, sum(events) AS events FROM {s}.spool_losses
    WHERE recorded_at >= :since GROUP BY query_name)
SELECT n.query_name, last.id AS batch_pk, last.trigger_at, last.recorded_at,
       lag.total_lag, worst.topic, worst.partition, worst.lag,
       f.n AS flagged, f.example, sp.events AS spooled, kafka.reads_kafka,
       fc.made_at, fc.partitions, fc.loss_earliest, fc.loss_topic, fc.loss_partition,
       fc.lost, fc.beyond_end, fc.unknown, fc.gone
FROM names n
LEFT JOIN LATERAL (
    SELECT b.id, b.trigger_at, b.recorded_at FROM {s}.batches b
    WHERE b.query_name = n.query_name AND b.trigger_at IS NOT NULL
      AND b.run_id = (SELECT x.run_id FROM {s}.batches x
                      WHERE x.query_name = n.query_name AND x.trigger_at IS NOT NULL
                      ORDER BY x.id DESC LIMIT 1)
    ORDER BY b.batch_id DESC LIMIT 1) last ON true
LEFT JOIN LATERAL (
    -- Lag per partition at 0 at least, then summed: in real-time mode latestOffset is
    -- taken when the batch starts and the batch reads on past it (partition_lag's rule).
    SELECT sum(greatest(k.latest_offset - k.end_offset, 0)) AS total_lag
    FROM {s}.kafka_partitions k
    WHERE k.batch_pk = last.id AND NOT k.out_of_range) lag ON true
LEFT JOIN LATERAL (
    SELECT k.topic, k.partition, greatest(k.latest_offset - k.end_offset, 0) AS lag
    FROM {s}.kafka_partitions k
    WHERE k.batch_pk = last.id AND NOT k.out_of_range AND k.latest_offset IS NOT NULL
    ORDER BY 3 DESC, 1, 2 LIMIT 1) worst ON true
LEFT JOIN LATERAL (
    SELECT EXISTS (SELECT FROM {s}.kafka_partitions k WHERE k.batch_pk = last.id)
        AS reads_kafka) kafka ON true
LEFT JOIN LATERAL (
    -- The recorded forecast, without the partitions the last batch has read past (the
    -- job read on since: the loss they said comes later, and a loss is not one).
    SELECT max(r.recorded_at) AS made_at, count(*) FILTER (WHERE r.kept) AS partitions,
           min(r.loss_earliest) FILTER (WHERE r.kept AND r.status = 'at-risk')
               AS loss_earliest,
           (array_agg(r.topic ORDER BY r.loss_earliest, r.topic, r.partition)
               FILTER (WHERE r.kept AND r.status = 'at-risk'))[1] AS loss_topic,
           (array_agg(r.partition ORDER BY r.loss_earliest, r.topic, r.partition)
               FILTER (WHERE r.kept AND r.status = 'at-risk'))[1] AS loss_partition,
           coalesce(sum(r.lost) FILTER (WHERE r.kept), 0) AS lost,
           count(*) FILTER (WHERE r.kept AND r.status = 'beyond-end') AS beyond_end,
           count(*) FILTER (WHERE r.kept AND r.status = 'unknown') AS unknown,
           count(*) FILTER (WHERE r.kept AND r.status = 'gone') AS gone
    FROM (SELECT rf.*, k.end_offset IS NULL OR k.end_offset <= rf.next_offset AS kept
          FROM {s}.retention_forecasts rf
          LEFT JOIN {s}.kafka_partitions k
            ON k.batch_pk = last.id AND k.source_index = rf.source_index
           AND k.topic = rf.topic AND k.partition = rf.partition
          WHERE rf.query_name = n.query_name) r) fc ON true
LEFT JOIN flagged f ON f.query_name = n.query_name
LEFT JOIN spooled sp ON sp.query_name = n.query_name
ORDER BY n.query_name
"""

FORECAST_LOCK = 0x6F6A_7265_7465_6E74  # "ojretent": the advisory lock of record_forecasts


def _forecast(r: sa.RowMapping) -> ForecastFacts | None:
    if r["made_at"] is None:
        return None
    return ForecastFacts(
        r["made_at"], int(r["partitions"]), loss_at=r["loss_earliest"],
        loss_partition=(r["loss_topic"], r["loss_partition"])
        if r["loss_topic"] is not None else None, lost=int(r["lost"]),
        beyond_end=int(r["beyond_end"]), unknown=int(r["unknown"]), gone=int(r["gone"]))


REJECTED_READ = 10_000
"""The most recent rejected events read to name their queries (all are counted)."""


class Health(Reads):
    """The health check's and the retention forecast's reads and writes."""

    def check_facts(self, names: Sequence[str] | None, since: datetime | None,
                    ) -> list[QueryFacts]:
        """Per query (``names``, or every query the journal knows), what ``check`` holds
        it to; a name with no batch comes back with ``exists=False``."""
        sql = _FACTS.format(s=SCHEMA, names=_ALL_NAMES if names is None else _GIVEN_NAMES)
        params: dict[str, Any] = {"since": since or _EPOCH}
        if names is not None:
            params["names"] = list(names)
        try:
            rows = self._run_read(lambda c: c.execute(sa.text(sql), params).mappings().all())
        except sa.exc.ProgrammingError as exc:
            if getattr(exc.orig, "sqlstate", None) != "42501":
                raise
            raise JournalError(
                f"this role may not read the journal's tables ({first_line(exc)}): a role "
                "granted before migration 0017 lacks retention_forecasts; grant it again "
                "(`offset-journal db grant`, docs/security.md)") from None
        return [QueryFacts(
            query_name=r["query_name"], last_trigger_at=r["trigger_at"],
            last_recorded_at=r["recorded_at"],
            total_lag=int(r["total_lag"]) if r["total_lag"] is not None else None,
            worst=(r["topic"], r["partition"], int(r["lag"])) if r["topic"] is not None
            else None,
            flagged=int(r["flagged"] or 0), flagged_example=r["example"],
            spool_lost_events=int(r["spooled"] or 0),
            forecast=_forecast(r), reads_kafka=bool(r["reads_kafka"]),
            exists=r["batch_pk"] is not None) for r in rows]

    def rejected_since(self, since: datetime | None) -> tuple[int, list[str]]:
        """How many events were rejected since ``since``, and the payloads of the
        :data:`REJECTED_READ` most recent (to name their queries)."""
        t = rejected_events.c
        when = t.received_at >= (since or _EPOCH)

        def read(conn: sa.Connection) -> tuple[int, list[str]]:
            total = conn.execute(sa.select(sa.func.count()).where(when)).scalar_one()
            payloads = conn.execute(sa.select(t.payload).where(when).order_by(t.id.desc())
                                    .limit(REJECTED_READ)).scalars().all()
            return int(total), list(payloads)

        found: tuple[int, list[str]] = self._run_read(read)
        return found

    def record_forecasts(self, names: Iterable[str], rows: Sequence[dict[str, Any]]) -> None:
        """Replace the recorded forecasts of ``names`` by ``rows`` (retention_forecasts
        columns), in one transaction."""
        t = retention_forecasts
        with self.engine.begin() as conn:
            # Two overlapping runs would both delete the old rows, then the second's
            # insert would meet the first's rows: one at a time instead.
            conn.execute(sa.text("SELECT pg_catalog.pg_advisory_xact_lock(:key)"),
                         {"key": FORECAST_LOCK})
            conn.execute(t.delete().where(t.c.query_name == sa.any_(
                sa.bindparam("names", sorted(set(names)), type_=sa.ARRAY(sa.Text)))))
            if rows:
                conn.execute(t.insert(), list(rows))

    def recorded_forecasts(self, query_name: str) -> list[sa.RowMapping]:
        """A query's recorded forecasts (the report shows them), soonest loss first."""
        c = retention_forecasts.c
        stmt = (sa.select(retention_forecasts, (c.loss_earliest - sa.func.now())
                          .label("left"))
                .where(c.query_name == query_name)
                .order_by(c.status != "lost", c.loss_earliest.nulls_last(), c.topic,
                          c.partition))
        rows: list[sa.RowMapping] = self._run_read(
            lambda conn: list(conn.execute(stmt).mappings().all()))
        return rows
