"""Capacity planning: bytes on disk per batch and partition, and what prune costs, for
the previous release's storage and the working tree's, side by side in one run.

Two databases on one server get the same data: ``--jobs`` queries x ``--batches``
batches of ``--partitions`` Kafka partitions. Each is created and loaded by its own
code, in a child process importing that tree's ``offset_journal``: its migrations
(``db.upgrade``), then its writer's path (``batch_from_progress`` + ``record_all``,
transactions of 100 batches, as the writer commits a backlog). Then ``VACUUM ANALYZE``
and ``pg_total_relation_size`` (heap, indexes, TOAST, free-space and visibility maps)
of every table in the journal's schema. Then ``Journal.prune`` deletes the older
``--prune-share`` of each query's history in each database, timed, given per million
partition values (batches pruned x partitions). Also printed: a worked table of the
disk a fleet of 10 / 100 / 1,000 jobs needs per day and per 30 days (``--every`` s
between batches).

The data (``--data``): ``realistic`` (default; see _common.REALISTIC, seeded by
``--seed``: both databases get the same offsets) or ``uniform`` (_common.kafka_progress:
small offsets, the same advance on every partition, latestOffset == endOffset, which
flatters any compression).

    .venv/bin/python bench/capacity.py [--jobs 3 --batches 1000 --partitions 100]
    .venv/bin/python bench/capacity.py --previous 79f8003 --current 79f8003  # same code twice
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from _common import (
    REALISTIC,
    TreeProcess,
    add_tree_options,
    describe_tree,
    header,
    kafka_progress,
    postgres,
    realistic_progress,
    table,
    tree_module,
    trees,
)

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
GIB = 1024 ** 3
SIDES = ("previous", "current")


def stamp(batch: int) -> str:
    return (EPOCH + timedelta(seconds=10 * batch)).isoformat(timespec="milliseconds")[:-6] + "Z"


def payloads(job: int, batches: int, partitions: int, data: str, seed: int) -> Iterator[str]:
    """Job ``job``'s progress JSONs, batch 0 first. Run and query ids are UUIDs, as
    Spark's are (their length is part of every batch row and key)."""
    name = f"job-{job}"
    run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"offset-journal/run/{job}"))
    query_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"offset-journal/query/{job}"))
    if data == "realistic":
        return realistic_progress(partitions, batches, seed=seed, name=name, run_id=run_id,
                                  query_id=query_id, timestamp=stamp)
    return (kafka_progress(b, partitions, name=name, run_id=run_id, timestamp=stamp(b))
            for b in range(batches))


# ------------------------------------------------------------------ in the tree's child


def load(url: str, jobs: int, batches: int, partitions: int, data: str,
         seed: int) -> dict[str, Any]:
    """Create the schema at this tree's head, load the data through its writer's path;
    the tables' sizes before and after, the load's seconds, the schema revision."""
    from offset_journal.journal import record_all
    from offset_journal.records import batch_from_progress

    writer = tree_module("offset_journal.capture.writer", "offset_journal.writer")
    db = tree_module("offset_journal.journal.db", "offset_journal.db")
    db.upgrade(url)
    empty = sizes(url)
    journal = writer.writer_journal(writer.WriterConfig(url, spool_dir="unused"))
    t0 = time.perf_counter()
    for job in range(jobs):
        texts = payloads(job, batches, partitions, data, seed)
        for lo in range(0, batches, 100):
            recs = [batch_from_progress(next(texts)) for _ in range(min(100, batches - lo))]
            with journal.engine.begin() as conn:
                record_all(journal, recs, conn)
        print(f"job {job} loaded", file=sys.stderr, flush=True)
    took = time.perf_counter() - t0
    journal.close()
    return {"empty": empty, "full": sizes(url), "load_s": took,
            "revision": db.current_revision(url)}


def sizes(url: str) -> dict[str, int]:
    """``pg_total_relation_size`` of every table of the journal's schema, after VACUUM
    ANALYZE."""
    import psycopg
    import sqlalchemy as sa

    dsn = sa.engine.make_url(url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        return dict(conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'offset_journal' AND c.relkind IN ('r', 'p', 'm')").fetchall())


def prune(url: str, before: str) -> dict[str, Any]:
    """``Journal.prune(before)``, timed."""
    from offset_journal.journal import Journal

    with Journal(url) as journal:
        t0 = time.perf_counter()
        result = journal.prune(datetime.fromisoformat(before))
        took = time.perf_counter() - t0
    return {"batches": result.batches, "seconds": took}


# ------------------------------------------------------------------ the report


def size_table(runs: dict[str, dict[str, Any]], n_batches: int, partitions: int) -> str:
    grown = {side: {t: runs[side]["full"][t] - runs[side]["empty"].get(t, 0)
                    for t in runs[side]["full"]} for side in SIDES}
    names = sorted({t for side in SIDES for t, g in grown[side].items() if g})
    values = n_batches * partitions

    def cells(side: str, t: str | None) -> list[str]:
        g = sum(grown[side].values()) if t is None else grown[side].get(t)
        if g is None:
            return ["-", "-", "-"]
        return [f"{g:,}", f"{g / n_batches:,.0f}", f"{g / values:,.1f}"]

    def ratio(t: str | None) -> str:
        old, new = ([sum(grown[s].values()) for s in SIDES] if t is None else
                    [grown[s].get(t) for s in SIDES])
        return f"{new / old:.2f}" if old and new is not None else "-"

    rows = [[t, *cells("previous", t), *cells("current", t), ratio(t)] for t in names]
    rows.append(["**total**", *cells("previous", None), *cells("current", None), ratio(None)])
    return table(["table", "previous bytes", "per batch", "per partition value",
                  "current bytes", "per batch", "per partition value", "current / previous"],
                 rows)


def worked_table(per_batch: dict[str, float], partitions: int, every_s: float) -> str:
    per_day = 86_400 / every_s
    rows = []
    for jobs in (10, 100, 1000):
        batches = jobs * per_day
        rows.append([f"{jobs:,}", f"{batches:,.0f}", f"{batches * partitions:,.0f}",
                     *(f"{batches * per_batch[s] / GIB:,.2f}" for s in SIDES),
                     *(f"{batches * per_batch[s] * 30 / GIB:,.1f}" for s in SIDES)])
    return table(["jobs", "batches/day", "partition values/day", "GiB/day previous",
                  "GiB/day current", "GiB per 30 days previous", "GiB per 30 days current"],
                 rows)


def main(args: argparse.Namespace) -> None:
    previous, current = trees(args)  # exits with one line if --previous is not in git
    header("Capacity planning: disk per batch, prune time, previous release vs current",
           args)
    print(f"* previous: {args.previous} = {describe_tree(previous)}")
    print(f"* current: {describe_tree(current)}")
    data = (f"{REALISTIC}; seed {args.seed}" if args.data == "realistic" else
            "uniform offsets (kafka_progress: batch_id * 1000, latest == end)")
    print(f"* data: {data}\n")
    runs: dict[str, dict[str, Any]] = {}
    prunes: dict[str, dict[str, Any]] = {}
    n_batches = args.jobs * args.batches
    cut = EPOCH + timedelta(seconds=10 * int(args.batches * args.prune_share))
    with postgres(args.admin_url) as server, \
            TreeProcess(previous, "capacity", "previous") as old, \
            TreeProcess(current, "capacity", "current") as new:
        procs = {"previous": old, "current": new}
        urls = {side: server.create_database(f"oj_capacity_{side}") for side in SIDES}
        for side in SIDES:
            print(f"loading {side}", file=sys.stderr, flush=True)
            runs[side] = procs[side].call("load", url=urls[side], jobs=args.jobs,
                                          batches=args.batches, partitions=args.partitions,
                                          data=args.data, seed=args.seed)
        load_avg = os.getloadavg()[0]
        for side in SIDES:
            prunes[side] = procs[side].call("prune", url=urls[side], before=cut.isoformat())
        load_avg = max(load_avg, os.getloadavg()[0])

    print(f"Loaded {n_batches:,} batches ({args.jobs} jobs x {args.batches:,}, "
          f"{args.partitions} partitions each, {n_batches * args.partitions:,} partition "
          "values) into each database through its own record_all: previous (schema "
          f"{runs['previous']['revision']}) in {runs['previous']['load_s']:.1f} s, current "
          f"(schema {runs['current']['revision']}) in {runs['current']['load_s']:.1f} s. "
          "Sizes after VACUUM ANALYZE, growth over the empty schema (tables that did not "
          "grow left out; '-': no such table):\n")
    print(size_table(runs, n_batches, args.partitions))
    per_batch = {s: sum(runs[s]["full"].values()) - sum(runs[s]["empty"].values())
                 for s in SIDES}
    per_batch = {s: v / n_batches for s, v in per_batch.items()}
    print("\nPer batch per partition (all tables and indexes): "
          + ", ".join(f"{s} {per_batch[s] / args.partitions:,.1f} bytes" for s in SIDES)
          + ".\n")
    print(f"Worked: {args.partitions} partitions per job, one batch every {args.every:g} s:\n")
    print(worked_table(per_batch, args.partitions, args.every))
    print(f"\nPrune before {cut.isoformat()} (transactions of 5,000 batches; load average up "
          f"to {load_avg:.1f}):\n")
    rows = []
    for s in SIDES:
        values = prunes[s]["batches"] * args.partitions
        per_million = prunes[s]["seconds"] / (values / 1e6) if values else float("nan")
        rows.append([s, f"{prunes[s]['batches']:,}", f"{values:,}",
                     f"{prunes[s]['seconds']:.2f}", f"{per_million:.2f}"])
    print(table(["tree", "batches deleted", "partition values", "seconds",
                 "s per million partition values"], rows))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--batches", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--every", type=float, default=10.0, help="seconds between batches")
    p.add_argument("--prune-share", type=float, default=0.8)
    p.add_argument("--data", choices=("realistic", "uniform"), default="realistic")
    p.add_argument("--seed", type=int, default=22, help="the realistic data's seed")
    add_tree_options(p)
    p.add_argument("--admin-url", help="a Postgres to create the databases in (else pgserver)")
    main(p.parse_args())
