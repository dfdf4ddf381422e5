"""The journal's own database fails over: what the failover window costs and buys.

Three parts, in one run:

1. **Failover.** A primary and a streaming standby on loopback (offset_journal.
   local_standby: pgserver's binaries, pg_basebackup, fsync off as nothing here loses
   the machine), a Writer journaling ``--rate`` batches a second (``--partitions-failover``
   partitions) through a libpq multi-host URL over both, with the writer's default
   retries. After ``--warm`` seconds the primary's processes are SIGKILLed (and the
   delaying proxy's, when the standby is held behind) and ``pg_ctl promote`` is called
   at once (or ``--late`` seconds later, one more row): the time from that call to the
   first batch journaled on the new primary (its own clock, ``batches.recorded_at``),
   the batches the standby lacked and the writer journaled again, and a check that
   every batch is there once and the audit is clean. Variants: asynchronous at
   loopback speed, held ``--held-ms`` behind by offset_journal.local.delay_proxy, and
   synchronous replication.
2. **Write cost.** ``Journal.write_batch`` as the writer journals it, on the embedded
   Postgres (fsync on), at 1 and 100 partitions, in one database: today's (no window)
   against the window's (the guard in the write's own statement, the event appended
   to the window, the window checked), two writers of each kind taking turns in an
   order that rotates each rep, ``--reps`` reps after ``--warmup``; the two of a kind
   against each other show the noise.
3. **Memory and disk.** A Writer with the default window (``--window`` seconds) fed
   ``--rate`` batches a second for ``--seconds`` seconds, at 1 and 100 partitions:
   the window's segments on disk (sampled each second) and the Python memory its code
   holds (tracemalloc, allocations made in offset_journal/capture/_recent.py).

    .venv/bin/python bench/db_failover.py                       # about 10 minutes
    .venv/bin/python bench/db_failover.py --rounds 1 --reps 40 --seconds 20 --window 8
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from _common import (
    QUERY_ID,
    dir_bytes,
    header,
    journal_database,
    kafka_progress,
    median,
    postgres,
    quantile,
    table,
)

WRITER = "oj_writer"
DB = "journal"
NAME = "bench_q"


def _event(i: int, partitions: int, run_id: str) -> dict[str, Any]:
    from offset_journal.records import PROGRESS

    return {"type": PROGRESS, "json": kafka_progress(i, partitions, run_id=run_id,
                                                     query_id=QUERY_ID, name=NAME)}


@contextmanager
def _servers() -> Iterator[Callable[[], Any]]:
    from offset_journal.local.standby import ServerSet, journal_template, workdir

    base = workdir()
    sets: list[Any] = []
    try:
        template = journal_template(base, WRITER, DB)

        def make() -> Any:
            sets.append(ServerSet(template))
            return sets[-1]

        yield make
    finally:
        for made in sets:
            made.close()
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ 1. failover


def failover_round(make: Callable[[], Any], variant: str, args: argparse.Namespace,
                   late: float = 0.0) -> dict[str, Any]:
    import uuid

    from offset_journal import Journal
    from offset_journal.audit import audit_query
    from offset_journal.capture.writer import Writer, WriterConfig
    from offset_journal.local.standby import make_synchronous, multi_host_url

    servers = make()
    spool = tempfile.mkdtemp(prefix="oj-bench-failover-")
    try:
        primary = servers.primary()
        standby = servers.standby(primary, held_ms=args.held_ms if variant == "held" else 0)
        if variant == "sync":
            make_synchronous(primary, standby)
        standby.wait_replayed(primary.wal_lsn())  # streaming: lagging only by the proxy
        url = multi_host_url([primary, standby], DB, WRITER)
        writer = Writer(WriterConfig(url, spool))
        writer.start()
        run_id = str(uuid.uuid4())
        sent = 0

        def send_until(until: float) -> None:
            nonlocal sent
            while time.monotonic() < until:
                writer.submit(_event(sent, args.partitions_failover, run_id))
                sent += 1
                time.sleep(max(0.0, 1 / args.rate - 0.0005))

        send_until(time.monotonic() + args.warm)
        assert writer.flush(30)  # acknowledged, every one of them
        before = sent
        killed_wall = time.time()
        servers.lose(primary)
        send_until(time.monotonic() + late)
        promote_wall = time.time()
        standby.promote()
        lacked = before - _count(standby.url(DB))
        send_until(time.monotonic() + args.after)
        ok = writer.close(60)
        with Journal(standby.url(DB)) as journal:
            audit = audit_query(journal, NAME).exit_code
        ids = [r[0] for r in _sql(standby.url(DB), "SELECT batch_id FROM offset_journal.batches "
                                  "WHERE run_id = :r ORDER BY batch_id", r=run_id)]
        # when the first batch was journaled on the new primary, by its own clock (the
        # same machine's as this one's)
        first = _sql(standby.url(DB), "SELECT min(recorded_at) FROM offset_journal.batches "
                     "WHERE recorded_at > :t", t=datetime.fromtimestamp(killed_wall,
                                                                         timezone.utc))[0][0]
        stats = writer.stats()
        whole = ok and ids == list(range(sent)) and audit == 0 and stats.lost == 0
        return {"first_s": (first.timestamp() - promote_wall) if first else float("nan"),
                "lacked": lacked, "rejournaled": stats.rejournaled, "sent": sent,
                "whole": whole}
    finally:
        shutil.rmtree(spool, ignore_errors=True)


def _sql(url: str, statement: str, **params: Any) -> list[Any]:
    import sqlalchemy as sa

    from offset_journal.journal.db import resolve_url

    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(statement), params)
            return list(result) if result.returns_rows else []
    finally:
        engine.dispose()


def _count(url: str) -> int:
    return int(_sql(url, "SELECT count(*) FROM offset_journal.batches")[0][0])


def failover(make: Callable[[], Any], args: argparse.Namespace) -> None:
    rows = []
    plans = [("asynchronous, loopback", "async", 0.0),
             (f"asynchronous, held {args.held_ms:.0f} ms behind", "held", 0.0),
             ("synchronous", "sync", 0.0),
             (f"asynchronous, promoted {args.late:.0f} s after the kill", "async", args.late)]
    for label, variant, late in plans:
        results = []
        for r in range(args.rounds):
            print(f"failover: {label}, round {r + 1}", file=sys.stderr, flush=True)
            results.append(failover_round(make, variant, args, late))
        firsts = [x["first_s"] for x in results]
        rows.append([label, len(results), f"{median(firsts) * 1e3:.0f} "
                     f"({min(firsts) * 1e3:.0f}-{max(firsts) * 1e3:.0f})",
                     "/".join(str(x["lacked"]) for x in results),
                     "/".join(str(x["rejournaled"]) for x in results),
                     "/".join(str(x["sent"]) for x in results),
                     "yes" if all(x["whole"] for x in results) else "**no**"])
    print(f"\n### 1. Failover: {args.rate:g} batches/s of {args.partitions_failover} "
          f"partitions, the primary lost after {args.warm:g} s\n")
    print(table(["replication", "rounds", "promotion -> first batch on it, ms (min-max)",
                 "batches the standby lacked", "re-journaled", "batches sent",
                 "every batch once, audit clean"], rows))


# ------------------------------------------------------------------ 2. write cost


def write_cost(args: argparse.Namespace) -> list[list[Any]]:
    """Per way in (straight to Postgres, through PgBouncer in transaction mode) and size,
    in one database: two writers' journals as today (no window) and two with the window,
    their writes taking turns (the order rotating each rep); the second of each kind
    shows how far two identical writers differ here (noise)."""
    from offset_journal.journal.server import expect_server, server_seen
    from offset_journal.local.pgbouncer import start_pgbouncer

    rows = []
    with postgres(args.admin_url) as server:
        url = journal_database(server)
        if args.commit == "off":  # no flush to wait for: the write's own work only
            database = url.rpartition("/")[2].partition("?")[0]
            _sql(server.admin_url, f"ALTER DATABASE {database} SET synchronous_commit = off")
        bouncer = start_pgbouncer(server.admin_url, pool_size=4)
        try:
            for via, via_url in (("direct", url), ("PgBouncer", bouncer.url_for(url))):
                folder = tempfile.mkdtemp(prefix="oj-bench-window-")
                try:
                    rows += _cost_rows(args, via, via_url, Path(folder), expect_server,
                                       server_seen)
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
        finally:
            bouncer.stop()
    return rows


KINDS = ("today", "window", "today again", "window again")


def _cost_rows(args: argparse.Namespace, via: str, url: str, folder: Path,
               expect_server: Any, server_seen: Any) -> list[list[Any]]:
    from offset_journal.capture._recent import RecentWindow
    from offset_journal.capture.writer import WriterConfig, writer_journal
    from offset_journal.records import batch_from_progress

    journals: dict[str, Any] = {}
    for kind in KINDS:
        window_s = 0.0 if kind.startswith("today") else 60.0
        journal = writer_journal(WriterConfig(url, "unused", failover_window=window_s))
        conn = journal.engine.connect()
        window = None
        if window_s:  # as the writer: the server its connection found, expected
            seen = server_seen(conn)
            assert seen is not None
            expect_server(journal.engine, seen)
            window = (RecentWindow(folder / kind.replace(" ", "-"), window_s), seen.key)
        journals[kind] = (journal, conn, window)
    rows = []
    for size in (1, 100):
        times: dict[str, list[float]] = {k: [] for k in KINDS}
        cpu: dict[str, list[float]] = {k: [] for k in KINDS}
        for rep in range(args.warmup + args.reps):
            for kind in KINDS[rep % 4:] + KINDS[:rep % 4]:
                event = _event(rep, size, f"cost-{via}-{kind}-{size}".replace(" ", "-"))
                rec = batch_from_progress(event["json"])
                journal, conn, window = journals[kind]
                backend = _backend_cpu_ns(conn)
                c0 = time.thread_time_ns()
                t0 = time.perf_counter()
                assert journal.write_batch(rec, conn)
                if window is not None:  # what the writer does once it committed
                    window[0].append([event], window[1])
                    window[0].check(window[1], lambda _: None)
                t1 = time.perf_counter()
                c1 = time.thread_time_ns()
                if rep >= args.warmup:
                    times[kind].append(t1 - t0)
                    cpu[kind].append((c1 - c0 + _backend_cpu_ns(conn) - backend) / 1e9)
        rows.append([via, size, _ms(times["today"]), _ms(times["window"]),
                     _ratio(times["window"], times["today"]),
                     _ratio(times["window again"], times["today again"]),
                     _ratio(times["today again"], times["today"]),
                     _ms(cpu["today"]), _ms(cpu["window"]),
                     _ratio(cpu["window"], cpu["today"]),
                     _ratio(cpu["window again"], cpu["today again"]),
                     _ratio(cpu["today again"], cpu["today"])])
        print(f"write cost: {via}, {size} partitions done", file=sys.stderr, flush=True)
    for journal, conn, window in journals.values():
        if window is not None:
            window[0].close()
        conn.close()
        journal.close()
    return rows


def _backend_cpu_ns(conn: Any) -> int:
    """CPU time the connection's server process has run (/proc/PID/schedstat, in ns):
    the server here is on this machine. Through PgBouncer: every server process of the
    database's pool (idle ones add nothing)."""
    import sqlalchemy as sa

    pids = _POOL_PIDS.get(id(conn))
    if pids is None:
        pid = conn.connection.driver_connection.info.backend_pid
        if Path(f"/proc/{pid}/schedstat").exists():
            pids = [pid]
        else:  # a pooler's key: the server processes are Postgres's of this database
            with conn.begin():
                pids = [r[0] for r in conn.execute(sa.text(
                    "SELECT pid FROM pg_catalog.pg_stat_activity WHERE datname = "
                    "pg_catalog.current_database() AND backend_type = 'client backend'"))]
        _POOL_PIDS[id(conn)] = pids
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except FileNotFoundError:
            continue
    return total


_POOL_PIDS: dict[int, list[int]] = {}


def _ratio(num: list[float], den: list[float]) -> str:
    """Median over median, and the median of the per-rep ratios (p25-p75)."""
    per_rep = [a / b for a, b in zip(num, den, strict=True)]
    return (f"{median(num) / median(den):.3f}; {quantile(per_rep, .5):.3f} "
            f"({quantile(per_rep, .25):.2f}-{quantile(per_rep, .75):.2f})")


def _ms(xs: list[float]) -> str:
    return f"{quantile(xs, .5) * 1e3:.3f} ({quantile(xs, .25) * 1e3:.3f}-" \
           f"{quantile(xs, .75) * 1e3:.3f})"


# ------------------------------------------------------------------ 3. memory and disk


def footprint(args: argparse.Namespace) -> list[list[Any]]:
    import uuid

    from offset_journal.capture.writer import Writer, WriterConfig

    rows = []
    with postgres(args.admin_url) as server:
        for size in (1, 100):
            url = journal_database(server)
            spool = Path(tempfile.mkdtemp(prefix="oj-bench-footprint-"))
            writer = Writer(WriterConfig(url, str(spool), failover_window=args.window))
            writer.start()
            run_id = str(uuid.uuid4())
            tracemalloc.start()
            disk, memory = [], []
            start = time.monotonic()
            i = 0
            while time.monotonic() - start < args.seconds:
                writer.submit(_event(i, size, run_id))
                i += 1
                if i % max(1, int(args.rate)) == 0:
                    disk.append(sum(p.stat().st_size for p in spool.glob("recent-*")))
                    snap = tracemalloc.take_snapshot().filter_traces(
                        [tracemalloc.Filter(True, "*offset_journal/capture/_recent.py")])
                    memory.append(sum(s.size for s in snap.statistics("filename")))
                time.sleep(1 / args.rate)
            tracemalloc.stop()
            assert writer.close(30)
            held = [d for t, d in enumerate(disk) if t >= 2 * args.window]  # steady state
            rows.append([size, i, f"{max(disk) / 1024:,.0f}",
                         f"{median(held) / 1024:,.0f}" if held else "-",
                         f"{max(memory) / 1024:,.1f}", f"{dir_bytes(spool) / 1024:,.0f}"])
            shutil.rmtree(spool, ignore_errors=True)
            print(f"footprint: {size} partitions done", file=sys.stderr, flush=True)
    return rows


def main(args: argparse.Namespace) -> None:
    header("The journal's database fails over: the failover window", args)
    if "failover" in args.parts:
        with _servers() as make:
            failover(make, args)
    if "cost" in args.parts:
        rows = write_cost(args)
        print(f"\n### 2. Write cost of the window: {args.reps} reps per size (after "
              f"{args.warmup} warm-up), synchronous_commit {args.commit}, taking turns, "
              "medians (p25-p75), ms\n")
        heads = ["way in", "partitions", "today", "with the window", "window / today",
                 "the same, second pair", "noise: today / today (two writers alike)"]
        print("Wall time, as the writer sees it:\n")
        print(table(heads, [row[:7] for row in rows]))
        print("\nCPU time spent on it, the writer's thread and the server processes "
              "(/proc/PID/schedstat), which other work on the machine disturbs less:\n")
        print(table(heads, [row[:2] + row[7:] for row in rows]))
        print("\nRatios: median over median; median of the per-rep ratios (p25-p75).")
    if "footprint" in args.parts:
        rows = footprint(args)
        print(f"\n### 3. The window at {args.rate:g} batches/s for {args.seconds:g} s, "
              f"window {args.window:g} s\n")
        print(table(["partitions", "batches", "disk, max KiB", "disk after 2 windows, "
                     "median KiB", "Python memory in recent.py, max KiB",
                     "left on disk at close, KiB"], rows))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", type=lambda s: s.split(","),
                   default=["failover", "cost", "footprint"])
    p.add_argument("--rounds", type=int, default=3, help="failovers per variant")
    p.add_argument("--rate", type=float, default=10.0, help="batches a second")
    p.add_argument("--partitions-failover", type=int, default=8)
    p.add_argument("--warm", type=float, default=5.0, help="seconds before the kill")
    p.add_argument("--after", type=float, default=4.0, help="seconds after the promotion")
    p.add_argument("--late", type=float, default=5.0, help="the late promotion's delay")
    p.add_argument("--held-ms", type=float, default=700.0)
    p.add_argument("--reps", type=int, default=500)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--seconds", type=float, default=150.0)
    p.add_argument("--window", type=float, default=60.0)
    p.add_argument("--commit", choices=("on", "off"), default="on",
                   help="synchronous_commit of the write-cost database (off: no flush "
                        "waited for, the strictest ratio)")
    p.add_argument("--admin-url", default=None)
    main(p.parse_args())
