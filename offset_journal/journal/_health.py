"""What ``check`` and ``retention`` read and write: a fleet's health in a few statements.

:meth:`Health.check_facts` answers for every query at once: each query's last batch
(two index lookups, as :meth:`~._read.Reads.last_batch` finds it), its lag from that
batch's arrays (each partition's lag at 0 at least, as ``partition_lag``), and one
grouped pass each over the flagged sources (a partial index), spool losses, recorded
forecasts and recorded losses (migration 0019, :mod:`._losses`). Its cost grows with the
queries asked about, not with their history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from ..errors import JournalPermissionError
from ..formatting import first_line
from ..health_rows import ForecastFacts, NewestSavepoint, QueryFacts
from ._losses import facts_losses, loss_rows, record_losses
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
    WHERE recorded_at >= :since GROUP BY query_name),
missing AS (
    -- Batch ids inside a query id's ids that the journal lacks (Spark ran them: it
    -- started a later one on the same checkpoint), among the query's last
    -- :recent batches journaled since then (by the (query_name, id) index: the
    -- check stays bounded however long the history), each id once (a batch run again
    -- on a resume, or imported from the checkpoint, is one id).
    SELECT n.query_name, sum(g.batch_id - g.prev - 1) AS n,
           (array_agg(g.query_id || ':' || (g.prev + 1) || '..' || (g.batch_id - 1)
                      ORDER BY g.query_id, g.batch_id))[1] AS example
    FROM names n
    CROSS JOIN LATERAL (
        SELECT d.query_id, d.batch_id,
               lag(d.batch_id) OVER (PARTITION BY d.query_id ORDER BY d.batch_id) AS prev
        FROM (SELECT DISTINCT r.query_id, r.batch_id
              FROM (SELECT b.query_id, b.batch_id FROM {s}.batches b
                    WHERE b.query_name = n.query_name AND b.recorded_at >= :since
                    ORDER BY b.id DESC LIMIT :recent) r) d) g
    WHERE g.batch_id > g.prev + 1
    GROUP BY n.query_name)
SELECT n.query_name, last.id AS batch_pk, last.trigger_at, last.recorded_at,
       lag.total_lag, worst.topic, worst.partition, worst.lag,
       f.n AS flagged, f.example, sp.events AS spooled, kafka.reads_kafka,
       mi.n AS missing, mi.example AS missing_example,
       fc.made_at, fc.partitions, fc.loss_earliest, fc.loss_topic, fc.loss_partition,
       fc.lost, fc.beyond_end, fc.unknown, fc.gone, fc.lost_partitions, fc.loss_read_on,
       rl.losses, {stateful} AS stateful, {savepoint_columns}
FROM names n
LEFT JOIN LATERAL (
    SELECT b.id, b.trigger_at, b.recorded_at, b.state_operators FROM {s}.batches b
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
    -- The recorded forecast. A row whose partition the last batch has read past
    -- (read_on) still speaks while the query is behind what the recording saw unread:
    -- at risk, its time stays as an early bound; not forecast, still unknown. Not once
    -- the query has read all of it, or caught up in a batch (read_all); a lost row's
    -- loss is then said by the recorded losses below.
    SELECT max(r.recorded_at) AS made_at, count(*) FILTER (WHERE r.kept) AS partitions,
           min(r.loss_earliest) FILTER (WHERE r.kept AND r.status = 'at-risk')
               AS loss_earliest,
           (array_agg(r.topic ORDER BY r.loss_earliest, r.topic, r.partition)
               FILTER (WHERE r.kept AND r.status = 'at-risk'))[1] AS loss_topic,
           (array_agg(r.partition ORDER BY r.loss_earliest, r.topic, r.partition)
               FILTER (WHERE r.kept AND r.status = 'at-risk'))[1] AS loss_partition,
           (array_agg(r.read_on ORDER BY r.loss_earliest, r.topic, r.partition)
               FILTER (WHERE r.kept AND r.status = 'at-risk'))[1] AS loss_read_on,
           coalesce(sum(r.lost) FILTER (WHERE r.kept), 0) AS lost,
           jsonb_agg(jsonb_build_array(r.source_index, r.topic, r.partition, r.next_offset)
                     ORDER BY r.topic, r.partition)
               FILTER (WHERE r.kept AND r.status = 'lost') AS lost_partitions,
           count(*) FILTER (WHERE r.kept AND r.status = 'beyond-end') AS beyond_end,
           count(*) FILTER (WHERE r.kept AND r.status = 'unknown') AS unknown,
           count(*) FILTER (WHERE r.kept AND r.status = 'gone') AS gone
    FROM (SELECT rf.*, p.read_on,
                 NOT p.read_on OR (rf.status IN ('at-risk', 'unknown') AND NOT p.read_all)
                     AS kept
          FROM {s}.retention_forecasts rf
          LEFT JOIN {s}.kafka_partitions k
            ON k.batch_pk = last.id AND k.source_index = rf.source_index
           AND k.topic = rf.topic AND k.partition = rf.partition
          CROSS JOIN LATERAL (
              SELECT coalesce(k.end_offset > rf.next_offset, false) AS read_on,
                     coalesce(k.end_offset >= rf.log_end OR k.end_offset >= k.latest_offset,
                              false) AS read_all) p
          WHERE rf.query_name = n.query_name) r) fc ON true
LEFT JOIN LATERAL (
    -- Recorded losses: the part no acknowledgement covers, unless a restart plan after
    -- the batch the query had reached accepted data loss in that partition
    -- (RecordedLoss.accepted_by, the same rule).
    SELECT jsonb_agg(jsonb_build_array(l.id, l.source_index, l.topic, l.partition,
                                       l.first_offset, l.end_offset, a.acked,
                                       l.first_recorded_at, l.last_recorded_at)
                     ORDER BY l.first_recorded_at, l.topic, l.partition, l.first_offset)
               AS losses
    FROM {s}.retention_losses l
    LEFT JOIN LATERAL (SELECT max(x.end_offset) AS acked FROM {s}.loss_acknowledgements x
                       WHERE x.loss_id = l.id) a ON true
    WHERE l.query_name = n.query_name AND l.end_offset > coalesce(a.acked, l.first_offset)
      AND NOT EXISTS (
          SELECT FROM {s}.restart_plans p
          WHERE p.query_name = l.query_name AND p.anchor_run_id = l.anchor_run_id
            AND p.anchor_batch_id = l.anchor_batch_id
            AND p.request @> '{{"allow_data_loss": true}}'
            AND EXISTS (
                SELECT FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p.kafka_offsets)
                                                      = 'array' THEN p.kafka_offsets
                                                      ELSE '[]' END) o
                WHERE jsonb_typeof(o) = 'array' AND jsonb_typeof(o -> 2) = 'number'
                  AND o ->> 1 = l.topic AND o ->> 2 = l.partition::text))) rl ON true
{savepoint_laterals}
LEFT JOIN flagged f ON f.query_name = n.query_name
LEFT JOIN spooled sp ON sp.query_name = n.query_name
LEFT JOIN missing mi ON mi.query_name = n.query_name
ORDER BY n.query_name
"""

# A stateful query: its last batch has a stateful operator (progress' stateOperators).
_STATEFUL = ("coalesce(CASE WHEN jsonb_typeof(last.state_operators) = 'array' "
             "THEN jsonb_array_length(last.state_operators) > 0 END, false)")
# Its newest savepoint whose files are not deleted (migration 0022), and what a recovery
# from it reads again today: the batches journaled after its batch (in the journal's
# order, every run since) and the records they read. The batches after it are read
# through batches_query_order_idx: the cost follows the batches since the savepoint.
_SAVEPOINT_COLUMNS = ("newest.id AS sp_id, newest.created_at AS sp_created_at, "
                      "newest.batch_id AS sp_batch_id, newest.location AS sp_location, "
                      "again.batches AS sp_batches, again.records AS sp_records")
_SAVEPOINT_LATERALS = """
LEFT JOIN LATERAL (
    SELECT s.id, s.created_at, s.batch_id, s.location,
           (SELECT x.id FROM {s}.batches x
            WHERE x.run_id = s.run_id AND x.batch_id = s.batch_id) AS batch_pk
    FROM {s}.savepoints s
    WHERE s.query_name = n.query_name
      AND NOT EXISTS (SELECT FROM {s}.savepoint_deletions d WHERE d.savepoint_id = s.id)
    ORDER BY s.id DESC LIMIT 1) newest ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS batches, coalesce(sum(b.num_input_rows), 0) AS records
    FROM {s}.batches b
    WHERE b.query_name = n.query_name AND b.id > newest.batch_pk) again
    ON newest.id IS NOT NULL
"""

_RECOVERY = """
WITH names(query_name) AS ({names})
SELECT n.query_name, {stateful} AS stateful, {savepoint_columns}
FROM names n
LEFT JOIN LATERAL (
    SELECT b.state_operators FROM {s}.batches b WHERE b.query_name = n.query_name
    ORDER BY b.id DESC LIMIT 1) last ON true
{savepoint_laterals}
ORDER BY n.query_name
"""


def _sql(template: str, names: str) -> str:
    return template.format(s=SCHEMA, names=names, stateful=_STATEFUL,
                           savepoint_columns=_SAVEPOINT_COLUMNS,
                           savepoint_laterals=_SAVEPOINT_LATERALS.format(s=SCHEMA))


def _savepoint(r: sa.RowMapping) -> NewestSavepoint | None:
    if r["sp_id"] is None:
        return None
    return NewestSavepoint(int(r["sp_id"]), r["sp_created_at"], int(r["sp_batch_id"]),
                          str(r["sp_location"]), int(r["sp_batches"] or 0),
                          int(r["sp_records"] or 0))


FORECAST_LOCK = 0x6F6A_7265_7465_6E74  # "ojretent": the advisory lock of record_forecasts


def _forecast(r: sa.RowMapping) -> ForecastFacts | None:
    if r["made_at"] is None:
        return None
    return ForecastFacts(
        r["made_at"], int(r["partitions"]), loss_at=r["loss_earliest"],
        loss_partition=(r["loss_topic"], r["loss_partition"])
        if r["loss_topic"] is not None else None, lost=int(r["lost"]),
        beyond_end=int(r["beyond_end"]), unknown=int(r["unknown"]), gone=int(r["gone"]),
        lost_partitions=tuple((int(i), str(t), int(p), int(o))
                              for i, t, p, o in r["lost_partitions"] or ()),
        read_on=bool(r["loss_read_on"]))


def _granted_before(exc: sa.exc.ProgrammingError) -> str:
    """What to do when a role lacks a table a later migration added: grant again."""
    text = str(exc.orig)
    table, migration = next(((t, m) for t, m in (
        ("retention_losses", "0019"), ("loss_acknowledgements", "0019"),
        ("savepoint_deletions", "0022"), ("savepoints", "0018"),
        ("retention_forecasts", "0017")) if t in text),
        ("retention_forecasts", "0017"))
    return (f"a role granted before migration {migration} lacks {table}; grant it again "
            "(`offset-journal db grant`, docs/security.md)")


MISSING_WINDOW = 1_000
"""The batches per query ``check`` looks for missing batch ids in: its newest since
``--since`` (the audit reads every one)."""

REJECTED_READ = 10_000
"""The most recent rejected events read to name their queries (all are counted)."""


class Health(Reads):
    """The health check's and the retention forecast's reads and writes."""

    def check_facts(self, names: Sequence[str] | None, since: datetime | None,
                    ) -> list[QueryFacts]:
        """Per query (``names``, or every query the journal knows), what ``check`` holds
        it to; a name with no batch comes back with ``exists=False``."""
        sql = _sql(_FACTS, _ALL_NAMES if names is None else _GIVEN_NAMES)
        params: dict[str, Any] = {"since": since or _EPOCH, "recent": MISSING_WINDOW}
        if names is not None:
            params["names"] = list(names)
        try:
            rows = self._run_read(lambda c: c.execute(sa.text(sql), params).mappings().all())
        except sa.exc.ProgrammingError as exc:
            if getattr(exc.orig, "sqlstate", None) != "42501":
                raise
            raise JournalPermissionError(f"this role may not read the journal's tables "
                               f"({first_line(exc)}): {_granted_before(exc)}") from None
        return [QueryFacts(
            query_name=r["query_name"], last_trigger_at=r["trigger_at"],
            last_recorded_at=r["recorded_at"],
            total_lag=int(r["total_lag"]) if r["total_lag"] is not None else None,
            worst=(r["topic"], r["partition"], int(r["lag"])) if r["topic"] is not None
            else None,
            flagged=int(r["flagged"] or 0), flagged_example=r["example"],
            spool_lost_events=int(r["spooled"] or 0),
            missing_batches=int(r["missing"] or 0), missing_example=r["missing_example"],
            forecast=_forecast(r), reads_kafka=bool(r["reads_kafka"]),
            exists=r["batch_pk"] is not None,
            losses=facts_losses(r["query_name"], r["losses"]),
            stateful=bool(r["stateful"]), savepoint=_savepoint(r)) for r in rows]

    def recovery_facts(self, query_name: str) -> tuple[bool, NewestSavepoint | None]:
        """Whether a query is stateful (its last batch), and its newest savepoint not
        deleted with what a recovery from it reads again today (``check`` reads the
        same in :meth:`check_facts`)."""
        sql = _sql(_RECOVERY, _GIVEN_NAMES)
        rows = self._run_read(
            lambda c: c.execute(sa.text(sql), {"names": [query_name]}).mappings().all())
        return (bool(rows[0]["stateful"]), _savepoint(rows[0])) if rows else (False, None)

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

    def record_forecasts(self, names: Iterable[str], rows: Sequence[dict[str, Any]],
                         anchors: Mapping[str, tuple[str, int]] | None = None) -> None:
        """Replace the recorded forecasts of ``names`` by ``rows`` (retention_forecasts
        columns), and keep their lost partitions as recorded losses (``anchors``: each
        query's last batch, (run id, batch id), the forecast started after), in one
        transaction."""
        losses = loss_rows(rows, anchors or {})
        try:
            with self.engine.begin() as conn:
                self._replace_forecasts(conn, names, rows)
                record_losses(conn, losses)
        except sa.exc.ProgrammingError as exc:
            if getattr(exc.orig, "sqlstate", None) != "42501" or "retention_losses" not in str(
                    exc.orig):
                raise
            raise JournalPermissionError(f"this role may not record losses ({first_line(exc)}): "
                               f"{_granted_before(exc)}") from None

    def _replace_forecasts(self, conn: sa.Connection, names: Iterable[str],
                           rows: Sequence[dict[str, Any]]) -> None:
        t = retention_forecasts
        # Two overlapping runs would both delete the old rows, then the second's insert
        # would meet the first's rows: one at a time instead.
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
