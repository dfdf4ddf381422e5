"""The journal's ceiling: the sustained batches/s one Postgres takes with hand-off ->
commit p99 under 1 s, through PgBouncer, at 10 / 100 / 1,000 partitions per batch, with
Postgres pinned to 1 and then 2 cores (``taskset``: the postmaster and every process it
has forked, and so every backend it forks later).

``--drivers`` driver processes (bench/fleet.py's ``Driver``: the listener's real writer,
handed progress events as the listener hands them) share an offered rate, paced evenly
(each driver at rate / drivers, spread over its interval). The rate climbs a ladder
(doubling from ``--start-rate``) for ``--duration`` seconds a step until a step fails:
its p99 hand-off -> commit is 1 s or more, or it journals less than 95 % of what was
offered; then it bisects between the last step that held and the first that failed
(``--refine`` steps). The ceiling is the highest rate that held. Each step also says
the CPU seconds Postgres's processes spent per batch (from /proc), which gives the
formula for another machine: batches/s ~ cores x busy share / CPU per batch.

When Postgres has fewer cores than the machine, the drivers and PgBouncer are pinned to
the others (``--shared`` leaves them on every core); when it has them all, they share
them with it, so the figures are a floor for a machine where Postgres has its cores to
itself. The load average is printed with each step: other work on the machine
shows there.

    .venv/bin/python bench/ceiling.py [--partitions 10,100,1000 --cores 1,2 --duration 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import header, journal_database, postgres, quantile, table

P99_LIMIT = 1.0
KEPT_UP = 0.95


# ------------------------------------------------------------------ driver process


def child(args: argparse.Namespace) -> None:
    """One driver: warm up, then per step line on stdin ({start, end, rate}) submit at
    the step's rate, wait for the writer to commit, print the step's commits."""
    from fleet import Driver

    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    driver = Driver(args.url, args.index, args.n, args.partitions, pooled=True,
                    max_behind=1_000_000)
    print("ready", flush=True)
    for line in sys.stdin:
        step = json.loads(line)
        if not step:
            break
        driver.commits.clear()
        interval = args.n / step["rate"]  # this driver's seconds between batches
        tick = step["start"] + interval * args.index / args.n
        submitted = 0
        while tick < step["end"]:
            time.sleep(max(0.0, tick - time.time()))
            driver.submit()
            submitted += 1
            tick += interval
        driver.writer.flush(max(1.0, step["drain"]))
        print(json.dumps({"submitted": submitted, "commits": driver.commits,
                          "left": driver.writer._pending}), flush=True)
    driver.writer.close(30)


# ------------------------------------------------------------------ Postgres CPU


def postgres_pids(conn: Any) -> list[int]:
    """The postmaster and every process under it."""
    data_dir = conn.execute("SHOW data_directory").fetchone()[0]
    postmaster = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [postmaster], [postmaster]
    while todo:
        pid = todo.pop()
        kids = [c for c, p in parents.items() if p == pid]
        out += kids
        todo += kids
    return out


def pin(pids: list[int], cores: set[int]) -> None:
    for pid in pids:
        try:
            os.sched_setaffinity(pid, cores)
        except OSError:
            pass  # a backend that has just ended


def cpu_seconds(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / tick


# ------------------------------------------------------------------ coordinator


def start_drivers(url: str, n: int, partitions: int, cpus: set[int]
                  ) -> list[subprocess.Popen[str]]:
    procs = []
    for i in range(n):
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--child", "--url", url, "--index", str(i), "--n",
             str(n), "--partitions", str(partitions), "--cpus",
             ",".join(map(str, sorted(cpus)))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        if i % 4 == 3:  # a few interpreters importing at once, not all
            for p in procs[-4:]:
                _ready(p)
    for p in procs[-(n % 4 or 4):]:
        _ready(p)
    return procs


def _ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    if getattr(proc, "_oj_ready", False):
        return
    line = proc.stdout.readline()
    if not line.startswith("ready"):
        raise RuntimeError(f"a driver did not start (exit {proc.poll()}): {line!r}")
    proc._oj_ready = True  # type: ignore[attr-defined]


def run_step(procs: list[subprocess.Popen[str]], rate: float, duration: float,
             pg: tuple[Any, list[int]]) -> dict[str, Any]:
    conn, pids = pg
    pids[:] = postgres_pids(conn)
    start = time.time() + 1.0
    step = {"start": start, "end": start + duration, "rate": rate, "drain": 10.0}
    cpu0 = cpu_seconds(pids)
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(json.dumps(step) + "\n")
        p.stdin.flush()
    results = []
    for p in procs:
        assert p.stdout is not None
        results.append(json.loads(p.stdout.readline()))
    cpu = cpu_seconds(postgres_pids(conn)) - cpu0
    lat = [c[1] for r in results for c in r["commits"]]
    in_step = [c for r in results for c in r["commits"] if c[0] <= step["end"] + 1.0]
    offered = sum(r["submitted"] for r in results)
    p99 = quantile(lat, 0.99) if lat else float("inf")
    done = len(in_step) / duration
    held = p99 < P99_LIMIT and len(in_step) >= KEPT_UP * offered and not any(
        r["left"] for r in results)
    return {"rate": rate, "offered": offered / duration, "journaled": done,
            "p50": quantile(lat, 0.5) if lat else float("inf"), "p99": p99, "held": held,
            "cpu_per_batch": cpu / max(1, len(lat)), "load": os.getloadavg()[0]}


def ladder(procs: list[subprocess.Popen[str]], args: argparse.Namespace,
           pg: tuple[Any, list[int]], label: str) -> tuple[float, list[dict[str, Any]]]:
    steps: list[dict[str, Any]] = []
    rate, best, worst = args.start_rate, 0.0, None
    while rate <= args.max_rate:
        s = run_step(procs, rate, args.duration, pg)
        steps.append(s)
        _say(label, s)
        if not s["held"]:
            worst = rate
            break
        best, rate = rate, rate * 2
    for _ in range(args.refine if worst is not None else 0):
        rate = (best + worst) / 2  # type: ignore[operator]
        s = run_step(procs, rate, args.duration, pg)
        steps.append(s)
        _say(label, s)
        best, worst = (rate, worst) if s["held"] else (best, rate)
    return best, steps


def _say(label: str, s: dict[str, Any]) -> None:
    print(f"{label}: rate {s['rate']:.0f}/s -> {s['journaled']:.0f}/s, p99 "
          f"{s['p99'] * 1e3:.0f} ms, {'held' if s['held'] else 'FAILED'}, load "
          f"{s['load']:.1f}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--partitions", default="10,100,1000",
                        help="partitions per batch, comma-separated")
    parser.add_argument("--cores", default="1,2",
                        help="cores Postgres is pinned to, comma-separated counts")
    parser.add_argument("--drivers", type=int, default=16)
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument("--duration", type=float, default=10.0,
                        help="seconds per step (raise it for a quiet, longer run)")
    parser.add_argument("--start-rate", type=float, default=50.0)
    parser.add_argument("--max-rate", type=float, default=6400.0)
    parser.add_argument("--refine", type=int, default=2)
    parser.add_argument("--shared", action="store_true",
                        help="leave the drivers and PgBouncer on every core")
    parser.add_argument("--cpus", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.partitions = int(args.partitions)
        child(args)
        return
    import psycopg
    import sqlalchemy as sa

    from offset_journal.local.pgbouncer import start_pgbouncer

    header("Ceiling: sustained batches/s with hand-off -> commit p99 under 1 s", args)
    rows = []
    with postgres() as server:
        bouncer = start_pgbouncer(server.admin_url, pool_size=args.pool_size)
        try:
            direct = sa.engine.make_url(server.admin_url).set(drivername="postgresql")
            conn = psycopg.connect(direct.render_as_string(hide_password=False),
                                   autocommit=True)
            all_cores = sorted(os.sched_getaffinity(0))
            for parts in [int(p) for p in args.partitions.split(",")]:
                for cores in [int(c) for c in args.cores.split(",")]:
                    url = journal_database(server, "oj_ceiling")
                    pids = postgres_pids(conn)
                    pin(pids, set(all_cores[:cores]))
                    others = set(all_cores[cores:])
                    clients = set(all_cores) if args.shared or not others else others
                    pin([bouncer.process.pid], clients)
                    procs = start_drivers(bouncer.url_for(url), args.drivers, parts,
                                          clients)
                    try:
                        best, steps = ladder(procs, args, (conn, pids),
                                             f"{parts} partitions, {cores} core(s)")
                    finally:
                        for p in procs:
                            assert p.stdin is not None
                            p.stdin.write("{}\n")
                            p.stdin.flush()
                        for p in procs:
                            p.wait(60)
                    held = [s for s in steps if s["held"]]
                    at = max(held, key=lambda s: s["rate"]) if held else None
                    rows.append([parts, cores, "shared" if clients & set(all_cores[:cores])
                                 else f"{len(clients)} other", f"{best:,.0f}", f"{best * 10:,.0f}",
                                 f"{at['p99'] * 1e3:.0f}" if at else "-",
                                 f"{at['cpu_per_batch'] * 1e3:.2f}" if at else "-",
                                 f"{min(s['load'] for s in steps):.1f}-"
                                 f"{max(s['load'] for s in steps):.1f}"])
                    pin(postgres_pids(conn), set(all_cores))
        finally:
            bouncer.stop()
    print(table(["partitions/batch", "Postgres cores", "drivers' cores", "batches/s (p99 < 1 s)",
                 "jobs at 1 batch / 10 s", "p99 ms there", "Postgres CPU ms/batch",
                 "load average"], rows))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
