"""Journal write per batch against the floor, for 1 to 10,000 Kafka partitions.

Per rep and partition count, alternating which goes first:

* journal: ``Journal.record_batch(rec)`` of a BatchRecord from ``batch_from_progress``,
  on the journal as the writer opens it (``writer_journal``), in its own transaction as
  the writer does: pool checkout, one statement for the run, batch and source rows,
  partition rows by COPY, commit;
* floor: with psycopg directly on an open connection, in one transaction, the same batch
  row INSERT ... RETURNING id into a scratch copy of ``batches`` and one COPY of the same
  partition rows (prepared tuples) into a scratch copy of ``kafka_partitions`` (``LIKE
  ... INCLUDING ALL``: same columns, primary key and index; no triggers);
* floor + checks: the same, but into the journal's own tables (a minimal batch_sources
  row first), so that the partition rows' integrity check (migration 0002's statement
  trigger) is paid: the difference to the floor is what that check costs, the rest of
  the journal's extra time is the run row and the source row's three JSONB offsets;
* parse: ``batch_from_progress(json)`` alone (it runs in the writer thread too).

    .venv/bin/python bench/journal_write.py [--reps 30 --sizes 1,100,1000,10000]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from _common import QUERY_ID, header, journal_database, kafka_progress, postgres, quantile, table

SCRATCH = """
CREATE SCHEMA IF NOT EXISTS scratch;
CREATE TABLE IF NOT EXISTS scratch.batches (LIKE offset_journal.batches INCLUDING ALL);
CREATE TABLE IF NOT EXISTS scratch.kafka_partitions
    (LIKE offset_journal.kafka_partitions INCLUDING ALL);
"""

BATCH_COLUMNS = ("run_id", "query_id", "query_name", "batch_id", "trigger_at",
                 "batch_duration_ms", "durations_ms", "num_input_rows", "input_rows_per_second",
                 "processed_rows_per_second", "watermark", "event_time_min", "event_time_max",
                 "event_time_avg", "state_operators", "sink_description", "num_output_rows")


def floor_write(conn, rec, rows, schema: str = "scratch") -> None:  # type: ignore[no-untyped-def]
    from psycopg.types.json import Jsonb

    values = [getattr(rec, c) for c in BATCH_COLUMNS]
    values[6], values[14] = Jsonb(values[6]), Jsonb(values[14])
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(f"INSERT INTO {schema}.batches ({', '.join(BATCH_COLUMNS)}) VALUES "  # noqa: S608
                    f"({', '.join(['%s'] * len(BATCH_COLUMNS))}) RETURNING id", values)
        pk = cur.fetchone()[0]
        if schema != "scratch":  # the partition rows' check needs their source row
            cur.execute(f"INSERT INTO {schema}.batch_sources (batch_pk, source_index, kind) "  # noqa: S608
                        "SELECT %s, i, 'kafka' FROM unnest(%s::int[]) i",
                        (pk, sorted({r[0] for r in rows})))
        with cur.copy(f"COPY {schema}.kafka_partitions (batch_pk, source_index, topic, "
                      "partition, start_offset, end_offset) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((pk, *row))


def main(args: argparse.Namespace) -> None:
    import psycopg
    import sqlalchemy as sa

    from offset_journal.records import batch_from_progress
    from offset_journal.writer import WriterConfig, writer_journal

    header("Journal write per batch vs. the floor", args)
    with postgres(args.admin_url) as server:
        url = journal_database(server)
        journal = writer_journal(WriterConfig(url, spool_dir="unused"))
        with journal.engine.begin() as c:
            c.exec_driver_sql(SCRATCH)
        dsn = sa.engine.make_url(url).set(drivername="postgresql").render_as_string(False)
        floor_conn = psycopg.connect(dsn)
        with floor_conn.transaction():
            floor_conn.execute("INSERT INTO offset_journal.query_runs (run_id, query_id, "
                               "query_name, named) SELECT 'floor-' || n, 'q', 'floor', true "
                               "FROM unnest(%s::int[]) n", (args.sizes,))
        results = []
        for size in args.sizes:
            run_id = f"bench-run-{size}"
            parse_t, journal_t, floor_t, fk_t, ratios = [], [], [], [], []
            variants = ["journal", "floor", "floor_fk"]
            for rep in range(args.warmup + args.reps):
                payload = kafka_progress(rep, size, run_id=run_id, query_id=QUERY_ID)
                t0 = time.perf_counter()
                rec = batch_from_progress(payload)
                parse = time.perf_counter() - t0
                rows = [(s.index, p.topic, p.partition, p.start, p.end)
                        for s in rec.sources for p in s.partitions]
                timings = {}
                for which in variants[rep % 3:] + variants[:rep % 3]:  # rotate the order
                    t0 = time.perf_counter()
                    if which == "journal":
                        assert journal.record_batch(rec)
                    elif which == "floor":
                        floor_write(floor_conn, rec, rows)
                    else:
                        floor_write(floor_conn, replace(rec, run_id=f"floor-{size}"), rows,
                                    "offset_journal")
                    timings[which] = time.perf_counter() - t0
                if rep >= args.warmup:
                    parse_t.append(parse)
                    journal_t.append(timings["journal"])
                    floor_t.append(timings["floor"])
                    fk_t.append(timings["floor_fk"])
                    ratios.append(timings["journal"] / timings["floor"])
            results.append((size, parse_t, journal_t, floor_t, fk_t, ratios))
            print(f"{size} partitions: journal {quantile(journal_t, .5) * 1e3:.2f} ms, floor "
                  f"{quantile(floor_t, .5) * 1e3:.2f} ms", file=sys.stderr, flush=True)
        floor_conn.close()
        journal.close()

    def cell(xs: list[float]) -> str:
        return (f"{quantile(xs, .5) * 1e3:.2f} ({quantile(xs, .25) * 1e3:.2f}-"
                f"{quantile(xs, .75) * 1e3:.2f})")

    rows_out = []
    for size, parse_t, journal_t, floor_t, fk_t, ratios in results:
        ok = quantile(ratios, .5) <= 2.0 and (size < 10_000 or quantile(journal_t, .5) < 0.1)
        rows_out.append([
            f"{size:,}", cell(parse_t), cell(journal_t), cell(floor_t), cell(fk_t),
            f"{quantile(ratios, .5):.2f} ({quantile(ratios, .25):.2f}-{quantile(ratios, .75):.2f})",
            cell([p + j for p, j in zip(parse_t, journal_t, strict=True)]),
            "yes" if ok else "**no**",
        ])
    print(f"\n{args.reps} reps per size (after {args.warmup} warm-up), medians with p25-p75.\n")
    print(table(["partitions", "parse ms", "journal write ms", "floor ms", "floor + checks ms",
                 "journal / floor", "parse + write ms", "target met"], rows_out))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 100, 1000, 10_000])
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    main(p.parse_args())
