"""Journal write per batch against the floor and against the previous release, for 1
to 10,000 Kafka partitions.

Per rep and partition count, each variant once, in an order balanced for carry-over
(a Williams design: over every six reps each variant comes first once and right after
each other variant once). What ran just before matters on this machine: at 1 partition
(2026-11-25, 40 reps of the order used before) the floor took 0.69 ms after another
floor and 0.85 ms after the previous release's write, the journal 1.09 ms when first,
1.20 after a floor and 1.31 after the previous release; that order put the floor after
a floor in half the reps and the journal after the previous release in half.

* journal: ``Journal.write_batch(rec, conn)`` of a BatchRecord from
  ``batch_from_progress``, on the journal as the writer opens it (``writer_journal``),
  in a transaction of its own on the connection held from batch to batch, as the
  writer does, in a child process importing the working tree's ``offset_journal``
  (``--current REV``: that revision's), on a database at its schema's head; timed in the
  child;
* previous: ``record_batch(rec)`` (a pooled connection per batch, as its writer took),
  in a child importing the previous release's code (``--previous REV``, default
  _common.PREVIOUS_RELEASE, exported from git), on its own database at its own schema
  (its migrations): the same payloads, timed the same way;
* floor: with psycopg directly on an open connection to a third database (at the
  current schema, so that neither journal's tables grow by the floors' rows), timed in
  the same child as the journal, interleaved with it, so that a process's wake-up and
  cold caches cost both alike (the floors ran in the parent before), the same
  data written by one plain statement in one transaction: a CTE inserting the batch
  row and its source row with the offset arrays (encoded beforehand by the journal's
  own functions) into scratch copies of ``batches`` and ``batch_sources`` (``LIKE ...
  INCLUDING ALL``: same columns, keys, indexes and CHECKs; no triggers, no foreign
  keys);
* floor, unprepared: the floor on a connection that never prepares statements on the
  server (``prepare_threshold=None``, as the journal's connections must be to work
  behind a transaction pooler); the floor's own connection has psycopg's default (a
  statement run 5 times is prepared), so the difference is the server's planning;
* floor, one round trip: the same statement on a connection in autocommit mode, so
  that it is its own transaction: the statement alone goes to the server, where psycopg
  otherwise sends BEGIN, the statement and COMMIT one by one (three round trips). The
  journal writes a batch in one round trip too (journal/driver.py's ``run_alone``);
* floor + checks: the same statement into the journal's own tables, so that the
  history guard (migration 0004's triggers), the layout foreign key and the arrays'
  checks (0013) are paid: the difference to the floor is what they cost;
* parse: ``batch_from_progress(json)`` alone (it runs in the writer thread too), timed
  in each child;
* CPU: beside each write's wall time, the CPU time it took, in the child's thread and
  in the server process of its connection (``/proc/PID/schedstat``: what the machine's
  other work disturbs less than the wall time); none where the server is not on this
  machine, nor for a previous release that takes a pooled connection per batch;
* window: what the writer does with each batch once it is journaled, timed apart right
  after the journal's write: the progress event kept in its failover window
  (capture/_handover.py's ``Failover.journaled``: a line written to a segment file,
  and the window's check), on a spool directory of its own; not part of the journal
  write nor of its target.

    .venv/bin/python bench/journal_write.py [--reps 30 --sizes 1,100,1000,10000]
    .venv/bin/python bench/journal_write.py --current 79f8003  # the same code twice
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from typing import Any

from _common import (
    QUERY_ID,
    TreeProcess,
    add_tree_options,
    describe_tree,
    header,
    kafka_progress,
    postgres,
    quantile,
    table,
    tree_module,
    trees,
)

SCRATCH = """
CREATE SCHEMA IF NOT EXISTS scratch;
CREATE TABLE IF NOT EXISTS scratch.batches (LIKE offset_journal.batches INCLUDING ALL);
CREATE TABLE IF NOT EXISTS scratch.batch_sources
    (LIKE offset_journal.batch_sources INCLUDING ALL);
"""

BATCH_COLUMNS = ("run_id", "query_id", "query_name", "batch_id", "trigger_at",
                 "batch_duration_ms", "durations_ms", "num_input_rows", "input_rows_per_second",
                 "processed_rows_per_second", "watermark", "event_time_min", "event_time_max",
                 "event_time_avg", "state_operators", "sink_description", "num_output_rows")


def floor_source(rec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The batch's one Kafka source as the journal stores it (its arrays, encoded by the
    journal's own functions), and its layout row: prepared outside the timed write."""
    from offset_journal.journal._arrays import encode, layout_id
    from offset_journal.journal._checks import partition_latests

    src = rec.sources[0]
    arrays = encode(src.partitions, partition_latests(src))
    assert arrays is not None
    key = layout_id(arrays.layout)
    row = {"source_index": src.index, "description": src.description, "kind": src.kind,
           "num_input_rows": src.num_input_rows, "metrics": src.metrics, "kafka_layout": key,
           "end_offsets": arrays.end_offsets,
           "read_spans" if arrays.spans_narrow else "read_spans_wide": arrays.read_spans,
           "latest_lags" if arrays.lags_narrow else "latest_lags_wide": arrays.latest_lags}
    layout = {"layout_id": key, "topics": list(arrays.layout.topics),
              "partitions": list(arrays.layout.partitions)}
    return row, layout


_CASTS = {"end_offsets": "::bigint[]", "read_spans": "::smallint[]", "latest_lags": "::smallint[]",
          "read_spans_wide": "::integer[]", "latest_lags_wide": "::integer[]",
          "metrics": "::jsonb"}


def floor_write(conn: Any, rec: Any, source: dict[str, Any], schema: str = "scratch") -> None:
    """The floor: the same batch row and source row (with its offset arrays) written by
    one plain statement (a CTE), in one transaction, with psycopg on an open connection."""
    from psycopg.types.json import Jsonb

    values = [getattr(rec, c) for c in BATCH_COLUMNS]
    values[6], values[14] = Jsonb(values[6]), Jsonb(values[14])
    cols = list(source)
    params = [Jsonb(v) if c == "metrics" and v is not None else v
              for c, v in source.items()]
    sql = (f"WITH b AS (INSERT INTO {schema}.batches ({', '.join(BATCH_COLUMNS)}) VALUES "  # noqa: S608
           f"({', '.join(['%s'] * len(BATCH_COLUMNS))}) RETURNING id) "
           f"INSERT INTO {schema}.batch_sources (batch_pk, {', '.join(cols)}) "
           f"SELECT b.id, {', '.join('%s' + _CASTS.get(c, '') for c in cols)} FROM b")
    if conn.autocommit:  # the statement is its own transaction
        conn.execute(sql, values + params)
        return
    with conn.transaction():
        conn.execute(sql, values + params)


# ------------------------------------------------------------------ in a tree's child

_JOURNAL: list[Any] = []


def migrate(url: str) -> str | None:
    """The schema at this tree's head; its revision."""
    db = tree_module("offset_journal.journal.db", "offset_journal.db")
    db.upgrade(url)
    return db.current_revision(url)


def open_journal(url: str) -> str | None:
    """The schema at this tree's head, and the journal as the writer opens it; the
    schema's revision."""
    writer = tree_module("offset_journal.capture.writer", "offset_journal.writer")
    revision = migrate(url)
    journal = writer.writer_journal(writer.WriterConfig(url, spool_dir="unused"))
    conn = journal.engine.connect()
    _JOURNAL[:] = [journal, conn, open_window(journal, conn, url)]
    return revision


def open_window(journal: Any, conn: Any, url: str) -> Any:
    """The writer's failover window (capture/_handover.py), on the server ``conn`` was
    found on, in a temporary spool directory; None in a tree without one."""
    try:
        from offset_journal.capture._handover import Failover
        from offset_journal.capture._recent import RecentWindow
        from offset_journal.journal.server import server_seen
    except ImportError:
        return None
    spool = tempfile.mkdtemp(prefix="oj-bench-window-")
    window = RecentWindow(spool)
    failover = Failover(window, database_url=url, spool_dir=spool, quiet=60.0)
    seen = server_seen(conn)
    assert seen is not None
    failover.arrive(journal, seen, lambda events: None)
    return failover


def write(size: int, rep: int, run_id: str) -> tuple[float, float, float | None,
                                                     float | None]:
    """Seconds to parse batch ``rep`` of ``size`` partitions, to journal it as the
    tree's writer does: on the connection it holds from one batch to the next
    (``Journal.write_batch``); a tree without that (the previous release, whose writer
    took a pooled connection per batch), ``record_batch`` on a connection of its own;
    then to keep its event in the failover window (None: the tree has none); and the
    CPU seconds of the journal's write (None: not measured, see ``cpu_seconds``)."""
    from offset_journal.records import PROGRESS, batch_from_progress

    journal, conn, failover = _JOURNAL
    payload = kafka_progress(rep, size, run_id=run_id, query_id=QUERY_ID)
    t0 = time.perf_counter()
    rec = batch_from_progress(payload)
    parse = time.perf_counter() - t0
    used = None
    if hasattr(journal, "write_batch"):
        pid = conn.connection.driver_connection.info.backend_pid
        cpu = cpu_seconds(pid)
        t1 = time.perf_counter()
        assert journal.write_batch(rec, conn)
        wall = time.perf_counter() - t1
        used = cpu_seconds(pid, cpu)
    else:
        t1 = time.perf_counter()
        assert journal.record_batch(rec)
        wall = time.perf_counter() - t1
    if failover is None:
        return parse, wall, None, used
    t2 = time.perf_counter()
    failover.journaled([{"type": PROGRESS, "json": payload}], lambda events: None)
    return parse, wall, time.perf_counter() - t2, used


def cpu_seconds(pid: int, since: float | None = None) -> float | None:
    """The CPU seconds this thread and server process ``pid`` have run (``since``: less
    that); None where the server's are not readable (not on this machine)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            server = int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None
    total = time.thread_time() + server
    return total if since is None else total - since


def close_journal() -> None:
    journal, conn, failover = _JOURNAL
    conn.close()
    journal.close()
    if failover is not None:
        failover.window.close()
        shutil.rmtree(failover.window.directory, ignore_errors=True)
    _JOURNAL.clear()


_FLOOR: dict[str, Any] = {}


def open_floor(url: str, sizes: list[int]) -> None:
    """The floors' database at this tree's schema, with the scratch tables and a run row
    per size for the floor + checks; its two connections (default, never prepared)."""
    import psycopg
    import sqlalchemy as sa

    migrate(url)
    dsn = sa.engine.make_url(url).set(drivername="postgresql").render_as_string(False)
    conn = psycopg.connect(dsn)
    with conn.transaction():
        conn.execute(SCRATCH)
        conn.execute("INSERT INTO offset_journal.query_runs (run_id, query_id, query_name, "
                     "named) SELECT 'floor-' || n, 'q', 'floor', true "
                     "FROM unnest(%s::int[]) n", (sizes,))
    _FLOOR.update(floor=conn, floor_unprepared=psycopg.connect(dsn, prepare_threshold=None),
                  floor_one_trip=psycopg.connect(dsn, autocommit=True))


def floor(which: str, size: int, rep: int, run_id: str) -> tuple[float, float | None]:
    """Seconds for one floor write (``floor``, ``floor_fk``, ``floor_unprepared``,
    ``floor_one_trip``) of batch ``rep`` of ``size`` partitions, and its CPU seconds
    (as ``write``'s); its record and source row are made untimed."""
    from offset_journal.records import batch_from_progress

    rec = batch_from_progress(kafka_progress(rep, size, run_id=run_id, query_id=QUERY_ID))
    source, layout = floor_source(rec)
    conn, schema = _FLOOR["floor"], "scratch"
    if rep == 0 and which == "floor_fk":  # the journal's own tables need the layout
        with conn.transaction():
            conn.execute("INSERT INTO offset_journal.kafka_layouts (layout_id, topics, "
                         "partitions) VALUES (%(layout_id)s, %(topics)s, "
                         "%(partitions)s::integer[]) ON CONFLICT DO NOTHING", layout)
    if which == "floor_unprepared":
        conn, rec = _FLOOR["floor_unprepared"], replace(rec, batch_id=rec.batch_id + 1_000_000)
    elif which == "floor_one_trip":
        conn, rec = _FLOOR["floor_one_trip"], replace(rec, batch_id=rec.batch_id + 2_000_000)
    elif which == "floor_fk":
        rec, schema = replace(rec, run_id=f"floor-{size}"), "offset_journal"
    cpu = cpu_seconds(conn.info.backend_pid)
    t0 = time.perf_counter()
    floor_write(conn, rec, source, schema)
    wall = time.perf_counter() - t0
    return wall, cpu_seconds(conn.info.backend_pid, cpu)


def close_floor() -> None:
    for conn in _FLOOR.values():
        conn.close()
    _FLOOR.clear()


# ------------------------------------------------------------------ the run

VARIANTS = ("journal", "previous", "floor", "floor_fk", "floor_unprepared", "floor_one_trip")


def balanced_order(variants: tuple[str, ...], rep: int) -> list[str]:
    """Rep ``rep``'s order: row ``rep`` of a Williams design over ``variants`` (an even
    number of them): every variant first once, and right after every other one once, in
    each run of len(variants) reps."""
    n = len(variants)
    first = [0]
    for j in range(1, n):
        first.append((j + 1) // 2 if j % 2 else n - j // 2)
    return [variants[(i + rep) % n] for i in first]


def main(args: argparse.Namespace) -> None:
    previous, current = trees(args)  # exits with one line if --previous is not in git
    header("Journal write per batch vs. the floor and the previous release", args)
    print(f"* previous: {args.previous} = {describe_tree(previous)}")
    print(f"* current: {describe_tree(current)}")
    with postgres(args.admin_url) as server, \
            TreeProcess(previous, "journal_write", "previous") as old, \
            TreeProcess(current, "journal_write", "current") as new:
        # three databases, so that each journal writes into tables only it grows: the
        # floors' into the third, at the current schema
        revisions = {
            "current": new.call("open_journal", url=server.create_database("oj_bench")),
            "previous": old.call("open_journal", url=server.create_database("oj_previous"))}
        new.call("open_floor", url=server.create_database("oj_floor"), sizes=args.sizes)
        print(f"* schemas: previous at {revisions['previous']}, current (and the floors') at "
              f"{revisions['current']}")
        sys.stdout.flush()
        results = []
        for size in args.sizes:
            run_id = f"bench-run-{size}"
            t: dict[str, list[float]] = {k: [] for k in (
                "parse", "previous_parse", "window", *VARIANTS,
                *(f"cpu_{v}" for v in VARIANTS))}
            for rep in range(args.warmup + args.reps):
                # the two journals alternate which goes first, the two floors too, and
                # every other two reps the floors go first: j p f fk, p j fk f, f fk j p,
                # fk f p j
                order = balanced_order(VARIANTS, rep)
                timings = {}
                for which in order:
                    if which == "journal":
                        (timings["parse"], timings["journal"], timings["window"],
                         timings["cpu_journal"]) = new.call(
                            "write", size=size, rep=rep, run_id=run_id)
                    elif which == "previous":
                        (timings["previous_parse"], timings["previous"], _,
                         timings["cpu_previous"]) = old.call(
                            "write", size=size, rep=rep, run_id=run_id)
                    else:
                        timings[which], timings[f"cpu_{which}"] = new.call(
                            "floor", which=which, size=size, rep=rep, run_id=run_id)
                if rep >= args.warmup:
                    for k, v in timings.items():
                        if v is not None:
                            t[k].append(v)
            results.append((size, t))
            print(f"{size} partitions: journal {quantile(t['journal'], .5) * 1e3:.2f} ms, "
                  f"previous {quantile(t['previous'], .5) * 1e3:.2f} ms, floor "
                  f"{quantile(t['floor'], .5) * 1e3:.2f} ms", file=sys.stderr, flush=True)
        new.call("close_floor")
        new.call("close_journal")
        old.call("close_journal")
    report(args, results)


def report(args: argparse.Namespace, results: list[tuple[int, dict[str, list[float]]]]) -> None:
    def cell(xs: list[float]) -> str:
        return (f"{quantile(xs, .5) * 1e3:.2f} ({quantile(xs, .25) * 1e3:.2f}-"
                f"{quantile(xs, .75) * 1e3:.2f})")

    def ratio(num: list[float], den: list[float]) -> str:
        rs = [a / b for a, b in zip(num, den, strict=True)]  # per rep: adjacent in time
        return f"{quantile(rs, .5):.2f} ({quantile(rs, .25):.2f}-{quantile(rs, .75):.2f})"

    def cpu_cell(t: dict[str, list[float]], num: str, den: str | None = None) -> str:
        a, b = t[f"cpu_{num}"], t[f"cpu_{den}"] if den else t[num]
        if len(a) != len(t[num]) or len(b) != len(a):  # not measured (in every rep)
            return "-"
        return ratio(a, b) if den else cell(a)

    time_rows, ratio_rows, previous_rows, cpu_rows = [], [], [], []
    for size, t in results:
        journal_floor = quantile([a / b for a, b in zip(t["journal"], t["floor"], strict=True)],
                                 .5)
        speedup = quantile([a / b for a, b in zip(t["previous"], t["journal"], strict=True)],
                           .5)
        # the targets: a 1-partition batch within 1.5x the floor, a 10,000-partition batch
        # at least 4x faster than the previous release; others within 2x the floor
        ok = (journal_floor <= 1.5 if size == 1 else
              speedup >= 4.0 if size >= 10_000 else journal_floor <= 2.0)
        window = t["window"]
        time_rows.append([
            f"{size:,}", cell(t["parse"]), cell(t["journal"]), cell(t["floor"]),
            cell(t["floor_one_trip"]), cell(t["floor_unprepared"]), cell(t["floor_fk"]),
            cell([p + j for p, j in zip(t["parse"], t["journal"], strict=True)]),
            cell(window) if window else "-",
        ])
        ratio_rows.append([
            f"{size:,}", ratio(t["journal"], t["floor"]), ratio(t["journal"], t["floor_one_trip"]),
            ratio(t["journal"], t["floor_unprepared"]), ratio(t["journal"], t["floor_fk"]),
            ratio(t["floor_fk"], t["floor"]), "yes" if ok else "**no**",
            ratio([j + w for j, w in zip(t["journal"], window, strict=True)], t["floor"])
            if window else "-",
        ])
        previous_rows.append([
            f"{size:,}", cell(t["previous"]), cell(t["journal"]),
            ratio(t["journal"], t["previous"]), ratio(t["previous"], t["journal"]),
            ratio(t["previous"], t["floor"]), cell(t["previous_parse"]), cell(t["parse"]),
        ])
        cpu_rows.append([
            f"{size:,}", cpu_cell(t, "journal"), cpu_cell(t, "previous"), cpu_cell(t, "floor"),
            cpu_cell(t, "floor_fk"), cpu_cell(t, "journal", "floor"),
            cpu_cell(t, "previous", "floor"), cpu_cell(t, "journal", "previous"),
        ])
    print(f"\n{args.reps} reps per size (after {args.warmup} warm-up), medians with p25-p75; "
          "ratios are medians of the per-rep ratios.\n")
    print("Current (journal) and the floors, ms:\n")
    print(table(["partitions", "parse", "journal write", "floor", "floor, one round trip",
                 "floor unprepared", "floor + checks", "parse + journal write",
                 "failover window"], time_rows))
    print("\nCurrent (journal) against the floors:\n")
    print(table(["partitions", "journal / floor", "journal / floor, one round trip",
                 "journal / floor unprepared", "journal / floor + checks",
                 "checks: floor + checks / floor", "target met",
                 "(journal write + window) / floor"], ratio_rows))
    print("\nCurrent against the previous release (same payloads, each on its own schema):\n")
    print(table(["partitions", "previous write ms", "current write ms", "current / previous",
                 "speed-up (previous / current)", "previous / floor", "previous parse ms",
                 "current parse ms"],
                previous_rows))
    print("\nCPU per write, the child's thread and the server process together, ms (its "
          "ratios per rep):\n")
    print(table(["partitions", "journal", "previous", "floor", "floor + checks",
                 "journal / floor", "previous / floor", "journal / previous"], cpu_rows))
    print("\nTargets: 1 partition <= 1.5x the floor; 10,000 partitions >= 4x "
          "faster than the previous release; other sizes <= 2x the floor. The failover "
          "window is kept after the write, outside its target.")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 100, 1000, 10_000])
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    add_tree_options(p)
    p.add_argument("--admin-url", help="a Postgres to create the databases in (else pgserver)")
    main(p.parse_args())
