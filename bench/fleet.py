"""Fleet capacity: N driver processes journaling into one Postgres, against a floor.

Each driver is its own process running the listener's real writer
(``offset_journal.writer.Writer``, as ``OffsetJournalListener`` starts it) and handing
it progress events the way the listener does (``{"type": "progress", "json": ...}``,
Kafka-shaped progress JSON with ``--partitions`` partitions). The floor: the same
number of processes, each with one psycopg connection writing the same rows per batch
(the batch row ``INSERT ... RETURNING id`` and one ``COPY`` of the partition rows, one
transaction per batch, as bench/journal_write.py's floor) into scratch copies of the
journal's tables.

Per N, every process follows one schedule (wall-clock phases), variants alternating
from round to round:

* paced: one batch per second per driver (drivers spread over the second), for
  ``--paced`` seconds: journaled batches/s, hand-off -> commit latency (submit() to
  the end of the writer's transaction; the floor: start to commit of its write);
* burst: each driver as fast as it can for ``--burst`` seconds (the writer kept at most
  50 events behind): the sustained batches/s one Postgres takes from N drivers;
* rest: between phases; Postgres connections held (pg_stat_activity by
  application_name), sampled every 0.25 s by the coordinator.

    .venv/bin/python bench/fleet.py [--drivers 1,8,32 --rounds 2 --paced 10 --burst 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import header, journal_database, kafka_progress, postgres, quantile, table

FLOOR_APP = "bench-floor"
WRITER_APP = "offset-journal"
MAX_BEHIND = 50


# ------------------------------------------------------------------ driver process


def floor_rows(payload: str) -> tuple[Any, list[tuple[Any, ...]]]:
    from offset_journal.records import batch_from_progress

    rec = batch_from_progress(payload)
    return rec, [(s.index, p.topic, p.partition, p.start, p.end)
                 for s in rec.sources for p in s.partitions]


class Driver:
    def __init__(self, url: str, index: int, n: int, partitions: int) -> None:
        from offset_journal.writer import Writer, WriterConfig

        self.url, self.index, self.n, self.partitions = url, index, n, partitions
        self.batches = {"writer": 0, "floor": 0}  # a run each: no gaps between phases
        self.spool = tempfile.mkdtemp(prefix="oj-fleet-")
        self.writer = Writer(WriterConfig(url, spool_dir=self.spool))
        self.sent: dict[int, float] = {}
        self.commits: list[tuple[float, float]] = []  # (wall time, latency s)
        original = self.writer._transaction

        def timed(journal: Any, events: list[dict[str, Any]]) -> None:
            original(journal, events)
            now, wall = time.perf_counter(), time.time()
            for ev in events:
                t = self.sent.pop(id(ev), None)
                if t is not None:
                    self.commits.append((wall, now - t))

        self.writer._transaction = timed  # type: ignore[method-assign]
        self.writer.start()

    def payload(self, kind: str = "writer") -> str:
        self.batches[kind] += 1
        return kafka_progress(self.batches[kind], self.partitions,
                              run_id=f"fleet-{self.n}-{self.index}", name=f"job-{self.index}")

    def submit(self) -> None:
        ev = {"type": "progress", "json": self.payload()}
        self.sent[id(ev)] = time.perf_counter()
        self.writer.submit(ev)

    def ticks(self, end: float, paced: bool) -> Iterator[None]:
        """Yield once per turn until `end`: once a second, staggered by driver, when paced;
        as often as asked otherwise."""
        tick = time.time() + self.index / self.n
        while time.time() < end:
            if paced:
                time.sleep(max(0.0, tick - time.time()))
                if time.time() >= end:
                    return
                tick += 1.0
            yield

    def writer_phase(self, end: float, paced: bool) -> None:
        self.commits.clear()
        for _ in self.ticks(end, paced):
            while not paced and self.writer._pending >= MAX_BEHIND and time.time() < end:
                time.sleep(0.001)
            if time.time() < end:
                self.submit()

    def floor_phase(self, end: float, paced: bool) -> list[tuple[float, float]]:
        import psycopg
        import sqlalchemy as sa
        from journal_write import floor_write

        dsn = sa.engine.make_url(self.url).set(drivername="postgresql").render_as_string(False)
        out: list[tuple[float, float]] = []
        with psycopg.connect(dsn, application_name=FLOOR_APP) as conn:
            for _ in self.ticks(end, paced):
                rec, rows = floor_rows(self.payload("floor"))
                t0 = time.perf_counter()
                floor_write(conn, rec, rows)
                out.append((time.time(), time.perf_counter() - t0))
        return out

    def run(self, schedule: list[dict[str, Any]]) -> list[dict[str, Any]]:
        results = []
        for phase in schedule:
            time.sleep(max(0.0, phase["start"] - time.time()))
            kind, paced = phase["kind"], phase["paced"]
            if kind == "writer":
                self.writer_phase(phase["end"], paced)
                self.writer.flush(max(0.5, phase["end"] + phase["gap"] - 1.0 - time.time()))
                done = list(self.commits)
            else:
                done = self.floor_phase(phase["end"], paced)
            results.append({**phase, "commits": done})
        return results


def child(args: argparse.Namespace) -> None:
    driver = Driver(args.url, args.index, args.n, args.partitions)
    print("ready", flush=True)
    schedule = json.loads(sys.stdin.readline())
    results = driver.run(schedule)
    driver.writer.close(30)
    Path(args.out).write_text(json.dumps(results))


# ------------------------------------------------------------------ coordinator


def make_schedule(start: float, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Writer and floor phases, alternating which goes first per round, ``--gap`` apart."""
    phases, t = [], start
    for r in range(args.rounds):
        for paced, secs in ((True, args.paced), (False, args.burst)):
            order = ["writer", "floor"] if r % 2 == 0 else ["floor", "writer"]
            for kind in order:
                phases.append({"kind": kind, "paced": paced, "round": r, "start": t,
                               "end": t + secs, "gap": args.gap})
                t += secs + args.gap
    return phases


def sample_connections(url: str, stop: threading.Event, samples: list[tuple[float, int, int]]
                       ) -> None:
    import psycopg
    import sqlalchemy as sa

    dsn = sa.engine.make_url(url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(dsn, autocommit=True, application_name="bench-sampler") as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE application_name = %s), "
                "count(*) FILTER (WHERE application_name = %s) FROM pg_stat_activity "
                "WHERE datname = current_database()", (WRITER_APP, FLOOR_APP)).fetchone()
            assert row is not None
            samples.append((time.time(), row[0], row[1]))
            stop.wait(0.25)


def run_fleet(url: str, n: int, args: argparse.Namespace) -> tuple[list[Any], list[Any], float]:
    outdir = tempfile.mkdtemp(prefix="oj-fleet-out-")
    procs = []
    for i in range(n):
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--child", "--url", url, "--index", str(i), "--n", str(n),
             "--partitions", str(args.partitions), "--out", f"{outdir}/{i}.json"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().startswith("ready")
    schedule = make_schedule(time.time() + 2.0, args)
    samples: list[tuple[float, int, int]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_connections, args=(url, stop, samples))
    sampler.start()
    t0 = time.time()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(json.dumps(schedule) + "\n")
        p.stdin.flush()
    for p in procs:
        p.wait(timeout=schedule[-1]["end"] - time.time() + 120)
    stop.set()
    sampler.join()
    results = [json.loads(Path(f"{outdir}/{i}.json").read_text()) for i in range(n)]
    if os.environ.get("FLEET_DEBUG"):
        print(json.dumps(results)[:3000], file=sys.stderr)
    return results, samples, time.time() - t0


def summarize(n: int, results: list[Any], samples: list[Any]) -> tuple[list[str], list[str]]:
    """The rows of the throughput table and the connections table for one N."""
    by: dict[tuple[str, bool, int], list[Any]] = {}
    for driver in results:
        for ph in driver:
            by.setdefault((ph["kind"], ph["paced"], ph["round"]), []).append(ph)
    rate: dict[tuple[str, bool], list[float]] = {}
    lat: dict[tuple[str, bool], list[float]] = {}
    for (kind, paced, _), phs in by.items():
        start, end = phs[0]["start"], phs[0]["end"]
        done = [c for ph in phs for c in ph["commits"] if start <= c[0] <= end + 0.5]
        rate.setdefault((kind, paced), []).append(len(done) / (end - start))
        lat.setdefault((kind, paced), []).extend(c[1] for c in done)
    rows = []
    for paced in (True, False):
        w, f = rate[("writer", paced)], rate[("floor", paced)]
        ratios = [a / b for a, b in zip(w, f, strict=True) if b]
        wl, fl = lat[("writer", paced)], lat[("floor", paced)]
        rows.append([n, "paced 1/s" if paced else "burst", fmt_rates(w), fmt_rates(f),
                     f"{quantile(ratios, .5):.2f} ({min(ratios, default=0):.2f}-"
                     f"{max(ratios, default=0):.2f})",
                     f"{quantile(wl, .5) * 1e3:.1f} / {quantile(wl, .99) * 1e3:.1f}",
                     f"{quantile(fl, .5) * 1e3:.1f} / {quantile(fl, .99) * 1e3:.1f}"])
    return rows, connection_row(n, results, samples)


def fmt_rates(xs: list[float]) -> str:
    return f"{quantile(xs, .5):.1f} ({min(xs):.1f}-{max(xs):.1f})"


def connection_row(n: int, results: list[Any], samples: list[Any]) -> list[Any]:
    """Connections per driver: at rest (from 1.5 s after a phase to the next one) and
    under load (during the phases), the maximum of the samples."""
    spans = sorted((p["start"], p["end"], p["kind"]) for p in results[0])
    load = {k: [(a, b) for a, b, kind in spans if kind == k] for k in ("writer", "floor")}
    rest = [(b + 1.5, c) for (_, b, _), (c, _, _) in zip(spans, spans[1:], strict=False)]

    def peak(within: list[tuple[float, float]], col: int) -> int:
        return max((s[col] for s in samples if any(a <= s[0] <= b for a, b in within)),
                   default=0)

    w_rest, w_load, f_load = peak(rest, 1), peak(load["writer"], 1), peak(load["floor"], 2)
    return [n, f"{w_rest / n:.2f}", f"{w_load / n:.2f}", f"{f_load / n:.2f}", w_rest, w_load]


def main(args: argparse.Namespace) -> None:
    header("Fleet capacity: N drivers into one Postgres", args)
    print(f"Load average at the start: {os.getloadavg()}\n")
    tput, conns = [], []
    with postgres(args.admin_url) as server:
        for n in args.drivers:
            url = journal_database(server, f"oj_fleet{n}")
            from journal_write import SCRATCH

            from offset_journal.db import make_engine

            engine = make_engine(url)
            with engine.begin() as c:
                c.exec_driver_sql(SCRATCH)
            engine.dispose()
            results, samples, took = run_fleet(url, n, args)
            rows, crow = summarize(n, results, samples)
            tput += rows
            conns.append(crow)
            print(f"N={n}: {took:.0f}s, load average {os.getloadavg()}", file=sys.stderr,
                  flush=True)
            print(f"N={n} done, load average {os.getloadavg()}")
    print(f"\n{args.rounds} rounds per N, writer and floor alternating; {args.partitions} "
          f"partitions per batch; paced phases {args.paced}s, burst phases {args.burst}s. "
          "batches/s: median (min-max) over rounds; latency: all batches of all rounds.\n")
    print(table(["drivers", "load", "writer batches/s", "floor batches/s",
                 "writer / floor", "writer hand-off->commit p50 / p99 ms",
                 "floor write p50 / p99 ms"], tput))
    print("\nPostgres connections (pg_stat_activity, sampled every 0.25 s): per driver, "
          "and in total.\n")
    print(table(["drivers", "writer per driver at rest", "writer per driver under load (max)",
                 "floor per driver under load (max)", "writer total at rest (max)",
                 "writer total under load (max)"], conns))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--drivers", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 8, 32])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--paced", type=float, default=10.0)
    p.add_argument("--burst", type=float, default=8.0)
    p.add_argument("--gap", type=float, default=3.0)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    child(a) if a.child else main(a)
