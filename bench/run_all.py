"""Run every benchmark one after the other and print their markdown tables.

    .venv/bin/python bench/run_all.py            # quick sizes (a few minutes)
    .venv/bin/python bench/run_all.py --full     # the sizes in bench/README.md's figures
    .venv/bin/python bench/run_all.py --tiny     # each script once, tiny: does it run?
    .venv/bin/python bench/run_all.py --only journal_write,restart_planning
    .venv/bin/python bench/run_all.py --tiny --jobs 2   # two at a time (figures then meaningless)

Each script's progress goes to stderr; the tables go to stdout (and to ``--out``). The
tiny sizes are what tests/house/test_bench.py runs, so that a benchmark the code has moved
away from fails the suite instead of the next person measuring with it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (script, arguments)
QUICK = {
    "journal_write": ("journal_write", ["--reps", "12"]),
    "callback_handoff": ("callback_handoff", ["--events", "300", "--rounds", "1"]),
    "restart_planning": ("restart_planning", ["--sizes", "1000,10000,100000", "--rounds", "10",
                                              "--cli-reps", "3"]),
    "outage_memory": ("outage_memory", ["--minutes", "2", "--rate", "30"]),
    "stream_overhead": ("stream_overhead", ["--rounds", "3", "--files", "10"]),
    "parse": ("parse", ["--rounds", "10"]),
    "replay": ("replay", ["--events", "100", "--rounds", "3"]),
    "capacity": ("capacity", ["--jobs", "2", "--batches", "300"]),
    "prune": ("prune", ["--jobs", "10", "--batches", "500"]),
    "migration": ("migration", ["--jobs", "10", "--batches", "200"]),
    "report_scale": ("report_scale", ["--reps", "1"]),
    "fleet": ("fleet", ["--drivers", "1,8", "--rounds", "1", "--paced", "5", "--burst", "5"]),
    "fleet_pgbouncer": ("fleet", ["--pgbouncer", "--pool-size", "4", "--drivers", "8",
                                  "--rounds", "1", "--paced", "5", "--burst", "5"]),
    "check_fleet": ("check_fleet", ["--queries", "200", "--batches", "5", "--repeat", "3"]),
    "ceiling": ("ceiling", ["--partitions", "100", "--cores", "2", "--duration", "3",
                            "--drivers", "8", "--refine", "0"]),
    "savepoint": ("savepoint", ["--sizes", "100000", "--seeded-max", "100000"]),
    "savepoint_schedule": ("savepoint_schedule", ["--keys", "100000", "--every", "10,100",
                                                  "--batches", "200"]),
    "restore": ("restore", ["--sizes", "100000"]),
    "recovery": ("recovery", ["--sizes", "100000,1000000", "--memory", "6g"]),
    "db_failover": ("db_failover", ["--rounds", "1", "--reps", "40", "--seconds", "20",
                                    "--window", "8"]),
    "sink_check": ("sink_check", ["--batches", "10000", "--rounds", "5"]),
    "sink_chaos": ("sink_chaos", ["--kills", "3", "--records", "200"]),
    "object_store": ("object_store", ["--batches", "2000", "--keys", "100000"]),
}

FULL = {
    "journal_write": ("journal_write", ["--reps", "42"]),
    "callback_handoff": ("callback_handoff", ["--events", "2000", "--rounds", "3"]),
    "restart_planning": ("restart_planning", ["--rounds", "30", "--cli-reps", "7"]),
    "restart_planning_no_run_events": ("restart_planning", ["--rounds", "30", "--cli-reps", "3",
                                                            "--run-events", "no"]),
    "restart_planning_many_runs": ("restart_planning", ["--rounds", "30", "--cli-reps", "3",
                                                        "--batches-per-run", "1000"]),
    "outage_memory": ("outage_memory", ["--minutes", "10", "--rate", "1"]),
    "stream_overhead": ("stream_overhead", ["--rounds", "12", "--files", "40",
                                            "--variants", "without,with,empty"]),
    "parse": ("parse", ["--rounds", "40"]),
    "replay": ("replay", ["--events", "300", "--rounds", "8"]),
    "capacity": ("capacity", ["--jobs", "3", "--batches", "1000"]),
    "prune": ("prune", ["--jobs", "100", "--batches", "1000"]),
    "migration": ("migration", []),
    "report_scale": ("report_scale", []),
    "fleet": ("fleet", ["--drivers", "1,8,32", "--rounds", "2", "--paced", "8", "--burst", "6"]),
    "fleet_pgbouncer": ("fleet", ["--pgbouncer", "--pool-size", "10", "--drivers", "100",
                                  "--rounds", "2", "--paced", "15", "--burst", "10",
                                  "--gap", "10", "--max-behind", "10"]),
    "check_fleet": ("check_fleet", ["--queries", "1000", "--batches", "5,20", "--repeat", "5"]),
    "ceiling": ("ceiling", ["--partitions", "10,100,1000", "--cores", "1,2", "--duration",
                            "30"]),
    "savepoint": ("savepoint", ["--sizes", "100000,1000000,10000000"]),
    "savepoint_schedule": ("savepoint_schedule", ["--keys", "100000,1000000", "--every",
                                                  "10,100", "--batches", "300", "--rounds",
                                                  "2", "--memory", "6g"]),
    "restore": ("restore", ["--sizes", "100000,1000000,10000000", "--seeded-max", "1000000",
                            "--memory", "8g"]),
    "recovery": ("recovery", ["--sizes", "1000000,10000000", "--memory", "8g"]),
    "db_failover": ("db_failover", []),
    "sink_check": ("sink_check", ["--batches", "10000", "--rounds", "15"]),
    "sink_chaos": ("sink_chaos", ["--kills", "10", "--records", "600"]),
    "object_store": ("object_store", ["--batches", "10000", "--keys", "100000,1000000"]),
}

# Every script once, as small as it goes: seconds each (the Spark one about 30).
TINY = {
    "journal_write": ("journal_write", ["--reps", "1", "--warmup", "0", "--sizes", "1,10"]),
    "callback_handoff": ("callback_handoff", ["--events", "20", "--rounds", "1",
                                              "--warmup", "2", "--rate", "200",
                                              "--partitions", "3", "--rtt-ms", "5"]),
    "restart_planning": ("restart_planning", ["--sizes", "100,200", "--rounds", "1",
                                              "--cli-reps", "1", "--batches-per-run", "50"]),
    "outage_memory": ("outage_memory", ["--minutes", "0.1", "--rate", "30",
                                        "--partitions", "3", "--retry-max", "1"]),
    "stream_overhead": ("stream_overhead", ["--rounds", "1", "--files", "2",
                                            "--rows-per-file", "100"]),
    "parse": ("parse", ["--rounds", "2", "--warmup", "0", "--sizes", "10,100"]),
    "replay": ("replay", ["--events", "5", "--rounds", "1", "--warmup", "0",
                          "--partitions", "3"]),
    "capacity": ("capacity", ["--jobs", "1", "--batches", "10", "--partitions", "3"]),
    "prune": ("prune", ["--jobs", "2", "--batches", "20", "--partitions", "3"]),
    "migration": ("migration", ["--jobs", "2", "--batches", "10", "--partitions", "3",
                                "--sample", "0.1"]),
    "report_scale": ("report_scale", ["--partitions", "3", "--batches", "40", "--runs", "2",
                                      "--reps", "1"]),
    "fleet": ("fleet", ["--drivers", "2", "--rounds", "1", "--paced", "1", "--burst", "1",
                        "--gap", "0.5", "--partitions", "3"]),
    "fleet_pgbouncer": ("fleet", ["--pgbouncer", "--pool-size", "2", "--drivers", "2",
                                  "--rounds", "1", "--paced", "1", "--burst", "1",
                                  "--gap", "0.5", "--partitions", "3", "--max-behind", "5"]),
    "check_fleet": ("check_fleet", ["--queries", "20", "--batches", "2", "--repeat", "1",
                                    "--partitions", "3", "--live-queries", "4",
                                    "--live-topics", "2", "--live-partitions", "2"]),
    "ceiling": ("ceiling", ["--partitions", "10", "--cores", "2", "--duration", "1",
                            "--drivers", "2", "--refine", "0", "--start-rate", "20",
                            "--max-rate", "40"]),
    "savepoint": ("savepoint", ["--sizes", "200", "--seeded-max", "200", "--memory", "1g"]),
    "savepoint_schedule": ("savepoint_schedule", ["--keys", "200", "--every", "2",
                                                  "--batches", "5", "--rows", "50",
                                                  "--memory", "1g"]),
    "restore": ("restore", ["--sizes", "200", "--providers", "hdfs", "--seeded-max", "200",
                            "--memory", "1g"]),
    "recovery": ("recovery", ["--sizes", "200", "--batches", "2", "--per-batch", "20",
                              "--memory", "1g"]),
    "db_failover": ("db_failover", ["--rounds", "1", "--warm", "1", "--after", "1", "--late", "1",
                                    "--reps", "2", "--warmup", "0", "--seconds", "2",
                                    "--window", "1", "--rate", "5"]),
    "sink_check": ("sink_check", ["--batches", "200", "--rounds", "1"]),
    "sink_chaos": ("sink_chaos", ["--kills", "1", "--records", "40", "--more", "10",
                                  "--window", "2"]),
    "object_store": ("object_store", ["--batches", "30", "--keys", "200", "--memory", "1g"]),
}


@dataclass(frozen=True)
class Outcome:
    """One script's run: its exit code, tables (stdout), progress (stderr, when it was
    captured) and wall time."""

    name: str
    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    captured: bool = False  # stderr was held, not shown as it ran


def run_one(name: str, plan: dict[str, tuple[str, list[str]]], *, capture: bool,
            env: dict[str, str] | None = None, timeout: float | None = None) -> Outcome:
    """Run one script of ``plan``; its progress goes to this stderr unless ``capture``.
    A script still running after ``timeout`` seconds is killed (exit -9)."""
    script, script_args = plan[name]
    cmd = [sys.executable, str(HERE / f"{script}.py"), *script_args]
    if not capture:
        print(f"== {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env,
                              stderr=subprocess.PIPE if capture else None, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return Outcome(name, cmd, -9, _text(exc.stdout),
                       f"{_text(exc.stderr)}\nkilled: still running after {timeout:.0f}s",
                       time.perf_counter() - t0, capture)
    return Outcome(name, cmd, proc.returncode, proc.stdout, proc.stderr or "",
                   time.perf_counter() - t0, capture)


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def run_many(names: list[str], plan: dict[str, tuple[str, list[str]]], *, jobs: int = 1,
             env: dict[str, str] | None = None, timeout: float | None = None,
             done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run ``names`` of ``plan``, ``jobs`` at a time, in ``names``' order (the outcomes
    too). With more than one job each script's progress is captured and handed over
    whole (to ``done``, as each ends), not interleaved with the others'. Running
    several at once is for "does everything run?" (``--tiny``): their figures then
    measure the neighbours too."""
    capture = jobs > 1
    if not capture:
        outcomes = []
        for name in names:
            outcome = run_one(name, plan, capture=False, env=env, timeout=timeout)
            if done is not None:
                done(outcome)
            outcomes.append(outcome)
        return outcomes
    with ThreadPoolExecutor(jobs) as pool:
        futures = {name: pool.submit(run_one, name, plan, capture=True, env=env,
                                     timeout=timeout)
                   for name in names}
        if done is not None:
            for future in as_completed(futures.values()):
                done(future.result())
        return [futures[name].result() for name in names]


def _say(outcome: Outcome) -> None:
    if outcome.captured:  # held: the command, then what it said, at once
        said = outcome.stderr.rstrip()
        print(f"== {' '.join(outcome.command[1:])}" + (f"\n{said}" if said else ""),
              file=sys.stderr, flush=True)
    print(f"== {outcome.name}: exit {outcome.returncode} after {outcome.seconds:.0f}s",
          file=sys.stderr, flush=True)
    print(outcome.stdout, flush=True)  # its tables, as it ends


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sizes = p.add_mutually_exclusive_group()
    sizes.add_argument("--full", action="store_true", help="the full sizes (an hour or more)")
    sizes.add_argument("--tiny", action="store_true",
                       help="every script once at a tiny size (a few minutes): does it run?")
    p.add_argument("--only", type=lambda s: s.split(","),
                   help="comma-separated names (see QUICK, FULL and TINY)")
    p.add_argument("--jobs", type=int, default=1,
                   help="scripts run at once (default 1; more only to see that they run: "
                        "their figures then measure each other)")
    p.add_argument("--out", help="also write the tables to this file")
    args = p.parse_args()
    plan = FULL if args.full else TINY if args.tiny else QUICK
    names = args.only or list(plan)
    unknown = [n for n in names if n not in plan]
    if unknown:
        p.error(f"no benchmark named {', '.join(unknown)} at these sizes "
                f"(there are: {', '.join(plan)})")
    if args.jobs < 1:
        p.error(f"--jobs {args.jobs}: give 1 or more")
    outcomes = run_many(names, plan, jobs=args.jobs, done=_say)
    if args.out:
        Path(args.out).write_text("\n".join(o.stdout for o in outcomes))
    return 1 if any(o.returncode != 0 for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
