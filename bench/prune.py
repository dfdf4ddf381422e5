"""Prune at fleet size: ``Journal.prune`` over a journal of ``--jobs`` x ``--batches``
batches of ``--partitions`` Kafka partitions, in the current schema (offsets as arrays,
migration 0013).

The history is built with set-based SQL (as the writer stores it: one batch row and
one source row with its offsets arrays per batch, one shared layout), then ``VACUUM
ANALYZE``; then ``Journal.prune`` deletes the older ``--prune-share`` (default 0.8) of
every job's history (all runs, the newest batch of each query kept), timed as a whole:
the per-query lookups, the prefix query and the deletes in transactions of 5,000 batches.
The figure is seconds per million partition values deleted.

    .venv/bin/python bench/prune.py [--jobs 100 --batches 1000 --partitions 100]
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import datetime, timedelta, timezone

from _common import header, journal_database, postgres, table

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)

# Plain SQL, parameters bound: jobs, batches, partitions.
HISTORY = """
INSERT INTO offset_journal.kafka_layouts (layout_id, topics, partitions)
SELECT offset_journal.kafka_layout_id(t, p), t, p
FROM (SELECT array_agg('topic-000'::text ORDER BY n) AS t, array_agg(n ORDER BY n) AS p
      FROM generate_series(0, %(partitions)s - 1) n) l;

INSERT INTO offset_journal.query_runs (run_id, query_id, query_name, named, started_at)
SELECT md5('run' || j)::uuid::text, md5('query' || j)::uuid::text, 'job-' || j, true,
       %(epoch)s
FROM generate_series(1, %(jobs)s) j;

INSERT INTO offset_journal.batches (run_id, query_id, query_name, batch_id, trigger_at,
                                    batch_duration_ms, durations_ms, num_input_rows)
SELECT md5('run' || j)::uuid::text, md5('query' || j)::uuid::text, 'job-' || j, b,
       %(epoch)s + b * interval '10 seconds', 812,
       '{"addBatch": 650, "commitOffsets": 40, "getBatch": 1, "latestOffset": 12,
         "queryPlanning": 30, "triggerExecution": 812, "walCommit": 45}'::jsonb,
       1000 * %(partitions)s
FROM generate_series(1, %(jobs)s) j, generate_series(0, %(batches)s - 1) b;

INSERT INTO offset_journal.batch_sources (batch_pk, source_index, description, kind,
    num_input_rows, kafka_layout, end_offsets, read_spans, latest_lags)
SELECT b.id, 0, 'KafkaV2[Subscribe[topic-000]]', 'kafka', 1000 * %(partitions)s,
       (SELECT layout_id FROM offset_journal.kafka_layouts LIMIT 1),
       array(SELECT 100000000::bigint + (hashtext(b.query_name || p)::bigint & 1023) * 10000000
                    + b.batch_id * 1000 + p
             FROM generate_series(0, %(partitions)s - 1) p)::bigint[],
       array_fill(1000::smallint, ARRAY[%(partitions)s]),
       array_fill(37::smallint, ARRAY[%(partitions)s])
FROM offset_journal.batches b;
"""


def build(url: str, args: argparse.Namespace) -> float:
    import psycopg
    import sqlalchemy as sa

    dsn = sa.engine.make_url(url).set(drivername="postgresql").render_as_string(False)
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        params = {"jobs": args.jobs, "batches": args.batches, "partitions": args.partitions,
                  "epoch": EPOCH}
        for statement in HISTORY.split(";\n\n"):
            conn.execute(statement, params)  # type: ignore[call-overload]
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - t0


def main(args: argparse.Namespace) -> None:
    from offset_journal.journal import Journal

    header("Prune at fleet size (offsets as arrays)", args)
    with postgres(args.admin_url) as server:
        url = journal_database(server, "oj_prune")
        took = build(url, args)
        cut = EPOCH + timedelta(seconds=10 * int(args.batches * args.prune_share))
        load = os.getloadavg()[0]
        with Journal(url) as journal:
            t0 = time.perf_counter()
            result = journal.prune(cut)
            prune_s = time.perf_counter() - t0
        load = max(load, os.getloadavg()[0])
    values = result.partition_rows
    print(f"Built {args.jobs * args.batches:,} batches ({args.jobs} jobs x {args.batches:,}, "
          f"{args.partitions} partitions: {args.jobs * args.batches * args.partitions:,} "
          f"partition values) in {took:.0f} s. Pruned before {cut.isoformat()}:\n")
    print(table(["batches deleted", "partition values", "seconds",
                 "s per million partition values", "load average up to"],
                [[f"{result.batches:,}", f"{values:,}", f"{prune_s:.1f}",
                  f"{prune_s / (values / 1e6):.2f}" if values else "-", f"{load:.1f}"]]))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=100)
    p.add_argument("--batches", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--prune-share", type=float, default=0.8)
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    main(p.parse_args())
