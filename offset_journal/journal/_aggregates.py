"""The report's aggregates, in SQL: their size follows the number of time buckets and
of partitions drawn, not the history's length (see :mod:`offset_journal.report._gather`,
which turns these rows into the report's data)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from .schema import SCHEMA

# Each batch in its time bucket (0 .. :n - 1 over [lo, hi]), in both statements below.
_BUCKETED = f"""
  SELECT b.id, b.batch_id, b.trigger_at, b.num_input_rows, b.batch_duration_ms,
         b.event_time_max,
         LEAST(CAST(:n AS integer) - 1,
                    floor(extract(epoch FROM b.trigger_at - CAST(:lo AS timestamptz))
                          / CAST(:width AS double precision)))::integer AS bucket
  FROM {SCHEMA}.batches b
  WHERE b.query_name = :q AND b.trigger_at BETWEEN CAST(:lo AS timestamptz)
                                              AND CAST(:hi AS timestamptz)"""  # noqa: S608 (SCHEMA is a constant; values are bind parameters)

_BOUNDS = sa.text(f"""
SELECT min(trigger_at), max(trigger_at), count(*)
FROM {SCHEMA}.batches
WHERE query_name = :q AND trigger_at >= CAST(:since AS timestamptz)
""")  # noqa: S608 (SCHEMA is a constant; values are bind parameters)

_BATCH_BUCKETS = sa.text(f"""
WITH bb AS ({_BUCKETED})
SELECT bucket, count(*), COALESCE(sum(num_input_rows), 0), avg(batch_duration_ms),
       max(batch_duration_ms),
       max(extract(epoch FROM trigger_at - event_time_max))::double precision,
       max((SELECT max(CAST(s.metrics ->> 'maxOffsetsBehindLatest' AS double precision))
            FROM {SCHEMA}.batch_sources s
            WHERE s.batch_pk = bb.id
              AND s.metrics ->> 'maxOffsetsBehindLatest' ~ '^[0-9]{{1,18}}([.][0-9]{{1,18}})?$'))
FROM bb GROUP BY bucket ORDER BY bucket
""")  # noqa: S608 (SCHEMA is a constant; values are bind parameters)

_LAG = sa.text(f"""
WITH bb AS ({_BUCKETED}),
pick AS (SELECT DISTINCT ON (bucket) bucket, id FROM bb
         ORDER BY bucket, trigger_at DESC, batch_id DESC),
cell AS MATERIALIZED (
  SELECT pick.bucket, k.topic, k.partition,
         max(CASE WHEN NOT k.out_of_range
                  THEN CASE WHEN k.latest_offset < k.end_offset THEN 0
                            ELSE k.latest_offset - k.end_offset END END) AS lag,
         max(k.end_offset) AS end_offset, max(k.latest_offset) AS latest_offset
  FROM {SCHEMA}.kafka_partitions k JOIN pick ON pick.id = k.batch_pk
  GROUP BY pick.bucket, k.topic, k.partition),
per_part AS (SELECT topic, partition, max(lag) AS max_lag FROM cell GROUP BY topic, partition),
top AS (SELECT topic, partition, max_lag FROM per_part
        ORDER BY max_lag DESC NULLS LAST, topic, partition LIMIT :top)
SELECT 'top' AS part, c.bucket, c.topic, c.partition, c.lag, c.lag, c.end_offset,
       c.latest_offset, t.max_lag
FROM cell c JOIN top t USING (topic, partition)
UNION ALL
SELECT 'others', c.bucket, NULL, NULL, min(c.lag), max(c.lag), NULL, NULL, NULL
FROM cell c LEFT JOIN top t USING (topic, partition)
WHERE t.topic IS NULL GROUP BY c.bucket
UNION ALL
SELECT 'count', NULL, NULL, NULL, NULL, NULL, NULL, NULL, count(*) FROM per_part
""")  # noqa: S608 (SCHEMA is a constant; values are bind parameters)

_RUNS = sa.text(f"""
SELECT r.run_id, r.query_id, COALESCE(r.started_at, min(b.trigger_at)) AS start,
       COALESCE(r.terminated_at, max(b.trigger_at)) AS end, r.terminated_at IS NOT NULL,
       r.exception IS NOT NULL, r.host, count(b.id), min(b.batch_id), max(b.batch_id)
FROM {SCHEMA}.query_runs r
LEFT JOIN {SCHEMA}.batches b ON b.run_id = r.run_id
WHERE r.query_name = :q
GROUP BY r.run_id
HAVING COALESCE(r.terminated_at, max(b.trigger_at), r.started_at, 'infinity')
       >= CAST(:since AS timestamptz)
ORDER BY 3 DESC NULLS LAST, r.run_id
LIMIT :limit
""")  # noqa: S608 (SCHEMA is a constant; values are bind parameters)

_RUN_COUNT = sa.text(
    f"SELECT count(*) FROM {SCHEMA}.query_runs WHERE query_name = :q")  # noqa: S608

_CURRENT = sa.text(f"""
WITH last AS (SELECT id, trigger_at - event_time_max AS fresh
              FROM {SCHEMA}.batches WHERE query_name = :q
              ORDER BY trigger_at DESC NULLS LAST, batch_id DESC LIMIT 1)
SELECT (SELECT sum(CASE WHEN NOT k.out_of_range
                        THEN CASE WHEN k.latest_offset < k.end_offset THEN 0
                                  ELSE k.latest_offset - k.end_offset END END)
        FROM {SCHEMA}.kafka_partitions k
        WHERE k.batch_pk = last.id),
       extract(epoch FROM last.fresh)::double precision
FROM last
""")  # noqa: S608 (SCHEMA is a constant; values are bind parameters)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class ReportRows:
    """What one report reads, as the database returns it (None when nothing to report):
    the bounds, the bucket width, and the rows of each aggregate."""

    first: datetime
    last: datetime
    total: int
    width: float
    batch_rows: list[Any]
    lag_rows: list[Any]
    run_rows: list[Any]
    total_runs: int
    current_lag: Any
    freshness: Any


def report_rows(conn: sa.Connection, query_name: str, since: datetime | None, *,
                buckets: int, top: int, max_runs: int) -> ReportRows | None:
    """Read the report's aggregates of ``query_name`` in one connection."""
    lo, hi, total = conn.execute(_BOUNDS, {"q": query_name, "since": since or _EPOCH}).one()
    if not total:
        return None
    span = (hi - lo).total_seconds()
    width = max(span / buckets, 1e-3)
    params = {"q": query_name, "lo": lo, "hi": hi, "n": buckets, "width": width}
    batch_rows = conn.execute(_BATCH_BUCKETS, params).all()
    lag_rows = conn.execute(_LAG, {**params, "top": top}).all()
    run_rows = conn.execute(
        _RUNS, {"q": query_name, "since": since or _EPOCH, "limit": max_runs}).all()
    total_runs = conn.execute(_RUN_COUNT, {"q": query_name}).scalar_one()
    current_lag, freshness = conn.execute(_CURRENT, {"q": query_name}).one()
    return ReportRows(lo, hi, total, width, list(batch_rows), list(lag_rows), list(run_rows),
                      total_runs, current_lag, freshness)
