"""Capacity planning: bytes on disk per batch and partition, and what prune costs.

Loads ``--jobs`` queries x ``--batches`` batches of ``--partitions`` Kafka partitions
through the writer's own path (``batch_from_progress`` + ``record_all``, transactions
of 100 batches, as the writer commits a backlog), then ``VACUUM ANALYZE``, and reads
``pg_total_relation_size`` (heap, indexes, TOAST, free-space and visibility maps) of
every journal table. Then ``Journal.prune`` deletes the older ``--prune-share`` of each
query's history, timed, and the result is given per million partition rows.

    .venv/bin/python bench/capacity.py [--jobs 3 --batches 1000 --partitions 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timedelta, timezone

from _common import header, journal_database, kafka_progress, postgres, table

TABLES = ("query_runs", "batches", "batch_sources", "kafka_partitions")
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
GIB = 1024 ** 3


def stamp(batch: int) -> str:
    return (EPOCH + timedelta(seconds=10 * batch)).isoformat(timespec="milliseconds")[:-6] + "Z"


def load(url: str, args: argparse.Namespace) -> float:
    from offset_journal.journal import record_all
    from offset_journal.records import batch_from_progress
    from offset_journal.writer import WriterConfig, writer_journal

    journal = writer_journal(WriterConfig(url, spool_dir="unused"))
    t0 = time.perf_counter()
    for job in range(args.jobs):
        for lo in range(0, args.batches, 100):
            recs = [batch_from_progress(kafka_progress(
                b, args.partitions, name=f"job-{job}", run_id=f"run-{job}", timestamp=stamp(b)))
                for b in range(lo, min(lo + 100, args.batches))]
            with journal.engine.begin() as conn:
                record_all(journal, recs, conn)
        print(f"job {job} loaded", file=sys.stderr, flush=True)
    journal.close()
    return time.perf_counter() - t0


def sizes(url: str) -> dict[str, int]:
    import psycopg
    import sqlalchemy as sa

    dsn = sa.engine.make_url(url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        return {t: conn.execute("SELECT pg_total_relation_size(%s)",
                                (f"offset_journal.{t}",)).fetchone()[0]  # type: ignore[index]
                for t in TABLES}


def worked_table(per_batch: float, partitions: int, every_s: float) -> str:
    per_day = 86_400 / every_s
    rows = []
    for jobs in (10, 100, 1000):
        batches = jobs * per_day
        rows.append([f"{jobs:,}", f"{batches:,.0f}", f"{batches * partitions:,.0f}",
                     f"{batches * per_batch / GIB:,.2f}", f"{batches * per_batch * 30 / GIB:,.1f}"])
    return table(["jobs", "batches/day", "partition rows/day", "GiB/day", "GiB per 30 days"],
                 rows)


def main(args: argparse.Namespace) -> None:
    from offset_journal.journal import Journal

    header("Capacity planning: disk per batch, prune time", args)
    with postgres(args.admin_url) as server:
        url = journal_database(server, "oj_capacity")
        empty = sizes(url)
        took = load(url, args)
        full = sizes(url)
        n_batches = args.jobs * args.batches
        n_rows = n_batches * args.partitions
        grown = {t: full[t] - empty[t] for t in TABLES}
        per_batch = sum(grown.values()) / n_batches
        cut = EPOCH + timedelta(seconds=10 * int(args.batches * args.prune_share))
        load_avg = os.getloadavg()[0]
        with Journal(url) as journal:
            t0 = time.perf_counter()
            result = journal.prune(cut)
            prune_s = time.perf_counter() - t0
        load_avg = max(load_avg, os.getloadavg()[0])
    print(f"Loaded {n_batches:,} batches ({args.jobs} jobs x {args.batches:,}, "
          f"{args.partitions} partitions each, {n_rows:,} partition rows) through "
          f"record_all in {took:.0f} s. Sizes after VACUUM ANALYZE, growth over the "
          "empty schema:\n")
    print(table(["table", "bytes", "bytes per batch", "bytes per partition row"],
                [[t, f"{grown[t]:,}", f"{grown[t] / n_batches:,.0f}",
                  f"{grown[t] / n_rows:,.1f}"] for t in TABLES]
                + [["total", f"{sum(grown.values()):,}", f"{per_batch:,.0f}",
                    f"{sum(grown.values()) / n_rows:,.1f}"]]))
    print(f"\nPer batch per partition: {per_batch / args.partitions:,.1f} bytes "
          "(all tables and indexes).\n")
    print(f"Worked: {args.partitions} partitions per job, one batch every "
          f"{args.every:g} s:\n")
    print(worked_table(per_batch, args.partitions, args.every))
    per_million = prune_s / (result.partition_rows / 1e6) if result.partition_rows else 0
    print(f"\nPrune: {result.batches:,} batches, {result.partition_rows:,} partition rows "
          f"deleted in {prune_s:.2f} s = {per_million:.1f} s per million partition rows "
          f"(transactions of 1,000 batches; load average up to {load_avg:.1f}).")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--batches", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--every", type=float, default=10.0, help="seconds between batches")
    p.add_argument("--prune-share", type=float, default=0.8)
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    main(p.parse_args())
