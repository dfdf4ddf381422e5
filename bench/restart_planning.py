"""Restart planning against 10^3, 10^5 and 10^6 journaled batches (10 partitions each).

One database per history length, bulk-loaded in SQL as the journal stores batches
since migration 0013 (each source's Kafka offsets as arrays over a layout; generate_series,
triggers and foreign keys skipped with session_replication_role = replica, the data
being consistent by construction), then VACUUM ANALYZE; the last batch as loaded is
compared with what the journal's own writer stores for it (the bench stops if they
differ). One query name, batches
one second apart, a new run every ``--batches-per-run`` batches on the same checkpoint,
each with start and termination times (``--run-events no``: neither, as when the
listener's query events were lost).

Timed, interleaving the databases round by round:

* plan: ``plan_restart`` on an open Journal (default plan after the last batch, and an
  ``as_of`` plan anchored mid-history); no Kafka bootstrap;
* command: ``offset-journal starting-offsets bench_q`` as a subprocess, whole command;
* state-aware: ``plan_restart(..., mode="state-aware", window=1 minute)`` (watermark 10
  minutes behind the trigger time: it rewinds 660 batches, however long the history);
* history: ``Journal.iter_history`` over the whole history, streamed in pages, with
  the process's peak memory growth (``--history-reps`` times per size, not in rounds).

Then every statement plan_restart issued (captured with SQLAlchemy's
``before_cursor_execute``) is run under EXPLAIN (ANALYZE, BUFFERS) on each database.

    .venv/bin/python bench/restart_planning.py [--sizes 1000,100000,1000000]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

from _common import (
    ROOT,
    check_stored_as_journaled,
    header,
    journal_database,
    postgres,
    progress_json,
    quantile,
    table,
)

NAME = "bench_q"
QID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
BASE = datetime(2025, 1, 1, tzinfo=timezone.utc)
PARTITIONS = 10

# Each statement types its parameters once in "p": base (first trigger time), bpr
# (batches per run), total, lo and hi (the batch numbers this chunk loads), qid, name;
# s is one second. Batch g reads 100 records from each of the 10 partitions of topic
# "events": offsets g * 100 to (g + 1) * 100, latestOffset at its end.
LAYOUT = """INSERT INTO offset_journal.kafka_layouts (layout_id, topics, partitions)
    VALUES (%(layout)s, %(topics)s, %(partition_numbers)s)"""
LOAD = [
    # runs: run r holds batches [r * bpr, (r + 1) * bpr)
    """WITH p AS (SELECT %(base)s::timestamptz AS base, %(bpr)s::bigint AS bpr,
                  %(total)s::bigint AS total, %(lo)s::bigint AS lo, %(hi)s::bigint AS hi,
                  %(qid)s::text AS qid, %(name)s::text AS name, interval '1 second' AS s)
       INSERT INTO offset_journal.query_runs
         (run_id, query_id, query_name, named, started_at, terminated_at, host, pid)
       SELECT 'run-' || lpad(r::text, 6, '0'), p.qid, p.name, true,
              CASE WHEN %(events)s THEN p.base + (r * p.bpr) * p.s - p.s / 2 END,
              CASE WHEN %(events)s THEN
                  p.base + (least((r + 1) * p.bpr, p.total) - 1) * p.s + p.s / 4 END,
              'bench-host', 1000 + r
       FROM p, generate_series(p.lo / p.bpr, p.hi / p.bpr) r
       ON CONFLICT (run_id) DO NOTHING""",
    """WITH p AS (SELECT %(base)s::timestamptz AS base, %(bpr)s::bigint AS bpr,
                  %(lo)s::bigint AS lo, %(hi)s::bigint AS hi,
                  %(qid)s::text AS qid, %(name)s::text AS name, interval '1 second' AS s)
       INSERT INTO offset_journal.batches
         (id, run_id, query_id, query_name, batch_id, trigger_at, batch_duration_ms,
          durations_ms, num_input_rows, input_rows_per_second, processed_rows_per_second,
          watermark, event_time_min, event_time_max, event_time_avg, state_operators,
          sink_description, num_output_rows)
       SELECT g + 1, 'run-' || lpad((g / p.bpr)::text, 6, '0'), p.qid, p.name, g,
              p.base + g * p.s, 800, '{"triggerExecution": 800}'::jsonb,
              1000, 1000.0, 1250.0, p.base + (g - 600) * p.s, p.base + (g - 2) * p.s,
              p.base + g * p.s, p.base + (g - 1) * p.s, '[]'::jsonb, 'DeltaSink[t]', 1000
       FROM p, generate_series(p.lo, p.hi) g""",
    # As the journal stores a Kafka source since migration 0013: the offsets as arrays
    # over the layout (ends; end - start; latest - end), no offsets JSON (the arrays
    # rebuild it). check_stored_as_journaled compares a batch with the writer's own.
    """WITH p AS (SELECT %(lo)s::bigint AS lo, %(hi)s::bigint AS hi,
                  %(partitions)s::int AS n, %(layout)s::bytea AS layout)
       INSERT INTO offset_journal.batch_sources
         (batch_pk, source_index, description, kind, num_input_rows, kafka_layout,
          end_offsets, read_spans, latest_lags)
       SELECT g + 1, 0, 'KafkaV2[Subscribe[events]]', 'kafka', 1000, p.layout,
              array_fill((g + 1) * 100, ARRAY[p.n]), array_fill(100::smallint, ARRAY[p.n]),
              array_fill(0::smallint, ARRAY[p.n])
       FROM p, generate_series(p.lo, p.hi) g""",
]


def progress(g: int) -> str:
    """Batch ``g``'s progress JSON as Spark would report it (under a run of its own)."""
    offsets = [{"events": {str(p): (g + b) * 100 for p in range(PARTITIONS)}} for b in (0, 1)]
    return progress_json(g, offsets[0], offsets[1], offsets[1], rows=1000, lags=None,
                         name=NAME, run_id="probe-run", query_id=QID,
                         timestamp=f"{BASE + timedelta(seconds=g):%Y-%m-%dT%H:%M:%S.000Z}")


def load(url: str, total: int, bpr: int, chunk: int, events: bool = True) -> float:
    """Journal ``total`` batches; returns the seconds it took (VACUUM ANALYZE included)."""
    import psycopg

    from offset_journal.journal._arrays import Layout, layout_id

    layout = Layout(("events",) * PARTITIONS, tuple(range(PARTITIONS)))
    t0 = time.perf_counter()
    with psycopg.connect(_dsn(url)) as conn:
        key = layout_id(layout)  # the journal's own key (the table's CHECK agrees)
        conn.execute(LAYOUT, {"layout": key, "topics": list(layout.topics),
                              "partition_numbers": list(layout.partitions)})
        for lo in range(0, total, chunk):
            hi = min(lo + chunk, total) - 1
            params = {"qid": QID, "name": NAME, "base": BASE, "bpr": bpr, "total": total,
                      "lo": lo, "hi": hi, "events": events, "partitions": PARTITIONS,
                      "layout": key}
            with conn.transaction():
                # Foreign keys and triggers skipped: consistent by construction, and
                # checked below against the journal's own write.
                conn.execute("SET LOCAL session_replication_role = replica")
                for sql in LOAD:
                    conn.execute(sql, params)
            print(f"  loaded {hi + 1:,} / {total:,} batches ({time.perf_counter() - t0:.0f}s)",
                  file=sys.stderr, flush=True)
        conn.execute("SELECT setval(pg_get_serial_sequence('offset_journal.batches', 'id'), "
                     "%s)", (total,))
        conn.commit()
        conn.autocommit = True
        for t in ("query_runs", "batches", "batch_sources", "kafka_layouts"):
            conn.execute(f"VACUUM ANALYZE offset_journal.{t}")
    check_stored_as_journaled(url, total, progress(total - 1))
    return time.perf_counter() - t0


def _dsn(url: str) -> str:
    import sqlalchemy as sa

    return sa.engine.make_url(url).set(drivername="postgresql").render_as_string(False)


def db_size(url: str) -> int:
    import psycopg

    with psycopg.connect(_dsn(url)) as conn:
        return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]


def capture(journal, fn) -> list[tuple[str, object]]:  # type: ignore[no-untyped-def]
    """Statements (with parameters) ``fn`` runs on ``journal``'s engine."""
    import sqlalchemy as sa

    seen: list[tuple[str, object]] = []

    def before(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        seen.append((statement, parameters))

    sa.event.listen(journal.engine, "before_cursor_execute", before)
    try:
        fn()
    finally:
        sa.event.remove(journal.engine, "before_cursor_execute", before)
    return [s for s in seen if not s[0].strip().lower().startswith(("select 1", "select pg_"))]


def explain(journal, statement: str, params: object) -> str:  # type: ignore[no-untyped-def]
    with journal.engine.connect() as conn:
        rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement,
                                    params).all()  # type: ignore[arg-type]
    return "\n".join(r[0] for r in rows)


_NODES = re.compile(r"^(?:\s*->\s+)?(Index Only Scan Backward|Index Only Scan|"
                    r"Index Scan Backward|Index Scan|Bitmap Index Scan|Bitmap Heap Scan|"
                    r"Parallel Seq Scan|Seq Scan|HashAggregate|GroupAggregate|"
                    r"Incremental Sort|Sort)(?: using (\w+))?(?: on (\w+))?"
                    r".*?(\(never executed\))?$", re.M)


def summarize(plan: str) -> str:
    """The plan's scan, sort and aggregate nodes, in order."""
    nodes = []
    for m in _NODES.finditer(plan):
        kind, index, rel, never = m.groups()
        nodes.append(f"{kind} {index or rel or ''}".strip() + (" (never executed)" if never
                                                               else ""))
    return "; ".join(dict.fromkeys(nodes))


def stream_history(journal, n: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Seconds to stream the whole history, and the peak RSS growth meanwhile (MiB)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    count = sum(1 for _ in journal.iter_history(NAME))
    seconds = time.perf_counter() - t0
    assert count == n, count
    return seconds, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024


def exec_ms(plan: str) -> float:
    m = re.search(r"Execution Time: ([\d.]+) ms", plan)
    return float(m.group(1)) if m else float("nan")


def label(statement: str) -> str:
    s = " ".join(statement.split()).replace("offset_journal.", "")
    found = list(re.finditer(r"FROM (\w+) WHERE ", s))  # the last one is the outer query's
    if not found:
        return s[:100]
    return f"{found[-1].group(1)} WHERE {s[found[-1].end():][:110]}".replace("|", "/")


def main(args: argparse.Namespace) -> None:
    from offset_journal.journal import Journal
    from offset_journal.restart import plan_restart

    header("Restart planning vs. history length", args)
    # What the offset-journal console script runs, on this checkout's package.
    cli = [sys.executable, "-c", "import sys; from offset_journal.cli import main; "
           "sys.argv[0] = 'offset-journal'; sys.exit(main())"]

    def env(url: str) -> dict[str, str]:
        return {**os.environ, "OFFSET_JOURNAL_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}

    with postgres(args.admin_url) as server:
        urls, loads = {}, {}
        for n in args.sizes:
            urls[n] = journal_database(server, f"oj_bench_plan_{n}")
            loads[n] = load(urls[n], n, args.batches_per_run, args.chunk,
                            args.run_events == "yes")
            print(f"{n:,} batches: loaded in {loads[n]:.1f}s, database "
                  f"{db_size(urls[n]) / 2**30:.2f} GiB", file=sys.stderr, flush=True)
        journals = {n: Journal(urls[n]) for n in args.sizes}
        as_of = {n: BASE + timedelta(seconds=n // 2 + 0.5) for n in args.sizes}
        plans: dict[tuple[int, str], list[float]] = {}
        window = timedelta(minutes=1)
        cmds: dict[int, list[float]] = {n: [] for n in args.sizes}
        for n in args.sizes:  # warm-up
            plan_restart(None, NAME, journal=journals[n])
        for r in range(args.rounds):
            order = args.sizes[r % len(args.sizes):] + args.sizes[:r % len(args.sizes)]
            for n in order:
                for kind in ("last", "as_of"):
                    t0 = time.perf_counter()
                    plan = plan_restart(None, NAME, journal=journals[n],
                                        as_of=as_of[n] if kind == "as_of" else None)
                    plans.setdefault((n, kind), []).append(time.perf_counter() - t0)
                    assert plan.anchor.batch_id == (n - 1 if kind == "last" else n // 2)
                    assert not [w for w in plan.warnings if "same time" in w], plan.warnings
                t0 = time.perf_counter()
                plan = plan_restart(None, NAME, journal=journals[n], mode="state-aware",
                                    window=window)
                plans.setdefault((n, "state"), []).append(time.perf_counter() - t0)
                assert plan.start_batch is not None and plan.start_batch.batch_id == max(n - 661, 0)
                if r < args.cli_reps:
                    t0 = time.perf_counter()
                    proc = subprocess.run([*cli, "starting-offsets", NAME], capture_output=True,
                                          text=True, cwd=ROOT, env=env(urls[n]))
                    cmds[n].append(time.perf_counter() - t0)
                    if proc.returncode != 0 or '"events"' not in proc.stdout:
                        raise RuntimeError(f"starting-offsets failed: {proc.stderr[-500:]}")
        history: dict[int, list[tuple[float, float]]] = {n: [] for n in args.sizes}
        for n in args.sizes:
            for _ in range(args.history_reps):
                history[n].append(stream_history(journals[n], n))
        explains = {}
        for n in args.sizes:
            stmts = capture(journals[n], lambda n=n: plan_restart(None, NAME,
                                                                 journal=journals[n]))
            stmts += capture(journals[n], lambda n=n: plan_restart(
                None, NAME, journal=journals[n], mode="state-aware", window=window))
            explains[n] = [(s, explain(journals[n], s, p)) for s, p in stmts]
        for j in journals.values():
            j.close()
        sizes_gib = {n: db_size(urls[n]) / 2**30 for n in args.sizes}

    def cell(xs: list[float]) -> str:
        return (f"{quantile(xs, .5) * 1e3:.1f} ({quantile(xs, .25) * 1e3:.1f}-"
                f"{quantile(xs, .75) * 1e3:.1f})")

    small, big = args.sizes[0], args.sizes[-1]
    rows = []
    for n in args.sizes:
        rows.append([f"{n:,}", f"{n * 10:,}", f"{-(-n // args.batches_per_run):,}",
                     f"{loads[n]:.0f}", f"{sizes_gib[n]:.2f}", cell(plans[(n, "last")]),
                     cell(plans[(n, "as_of")]), cell(cmds[n])])
    print(f"\n{args.rounds} rounds (plans) and {args.cli_reps} (command), databases "
          "interleaved; ms, median (p25-p75).\n")
    print(table(["batches", "partition rows", "runs", "load s", "database GiB",
                 "plan (last batch) ms", "plan (as_of mid-history) ms",
                 "starting-offsets command ms"], rows))
    print()
    print(table(["batches", "state-aware plan ms", "history streamed s", "batches/s",
                 "peak RSS growth MiB"],
                [[f"{n:,}", cell(plans[(n, "state")]),
                  f"{quantile([h[0] for h in history[n]], .5):.1f}" if history[n] else "-",
                  f"{n / quantile([h[0] for h in history[n]], .5):,.0f}" if history[n] else "-",
                  f"{max(h[1] for h in history[n]):.0f}" if history[n] else "-"]
                 for n in args.sizes]))
    verdict = []
    for kind in ("last", "as_of", "state"):
        m_small, m_big = quantile(plans[(small, kind)], .5), quantile(plans[(big, kind)], .5)
        # A state-aware plan reads the batches it rewinds over (661 here) whatever the
        # history's length: its target is flatness alone.
        fast = m_big < 0.020 or kind == "state"
        verdict.append([kind, f"{m_big / m_small:.2f}", f"{m_big * 1e3:.1f}",
                        "yes" if m_big <= 2 * m_small and fast else "**no**"])
    print()
    print(table(["plan", f"{big:,} / {small:,} batches", f"ms at {big:,}",
                 "flat (<= 2x) and < 20 ms (state-aware: flat)"], verdict))
    print("\nStatements plan_restart issues (default plan, then state-aware), EXPLAIN "
          "(ANALYZE, BUFFERS) execution time in ms:\n")
    out = []
    for i, (stmt, plan) in enumerate(explains[big]):
        times = [f"{exec_ms(explains[n][i][1]):.2f}" if i < len(explains[n]) else "-"
                 for n in args.sizes]
        out.append([i + 1, f"`{label(stmt)}`", summarize(plan), *times])
    print(table(["#", "statement", f"plan nodes at {big:,}",
                 *[f"{n:,}" for n in args.sizes]], out))
    print(f"\n<details><summary>EXPLAIN (ANALYZE, BUFFERS) at {big:,} batches</summary>\n")
    for i, (stmt, plan) in enumerate(explains[big]):
        print(f"```\n-- {i + 1}: {' '.join(stmt.split())[:600]}\n{plan}\n```")
    print("\n</details>")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1_000, 100_000, 1_000_000])
    p.add_argument("--batches-per-run", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--cli-reps", type=int, default=5)
    p.add_argument("--run-events", choices=["yes", "no"], default="yes",
                   help="no: runs without start/termination times (lost events, imports), "
                        "so that planning looks up their first/last batches")
    p.add_argument("--history-reps", type=int, default=1,
                   help="whole-history streams per size (10^6 batches take minutes)")
    p.add_argument("--chunk", type=int, default=100_000, help="batches per load transaction")
    p.add_argument("--admin-url", help="a Postgres to create the databases in (else pgserver)")
    main(p.parse_args())
