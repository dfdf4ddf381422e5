"""Run every benchmark one after the other and print their markdown tables.

    .venv/bin/python bench/run_all.py            # quick sizes (a few minutes)
    .venv/bin/python bench/run_all.py --full     # the sizes reported in bench/README.md
    .venv/bin/python bench/run_all.py --only journal_write,restart_planning

Each script's progress goes to stderr; the tables go to stdout (and to ``--out``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
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
    "fleet": ("fleet", ["--drivers", "1,8", "--rounds", "1", "--paced", "5", "--burst", "5"]),
    "db_failover": ("db_failover", ["--rounds", "1", "--reps", "40", "--seconds", "20",
                                    "--window", "8"]),
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
    "fleet": ("fleet", ["--drivers", "1,8,32", "--rounds", "2", "--paced", "8", "--burst", "6"]),
    "db_failover": ("db_failover", []),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="the full sizes (an hour or more)")
    p.add_argument("--only", type=lambda s: s.split(","),
                   help="comma-separated names (see QUICK and FULL)")
    p.add_argument("--out", help="also write the tables to this file")
    args = p.parse_args()
    plan = FULL if args.full else QUICK
    names = args.only or list(plan)
    outputs, failed = [], []
    for name in names:
        script, script_args = plan[name]
        cmd = [sys.executable, str(HERE / f"{script}.py"), *script_args]
        print(f"== {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        print(f"== {name}: exit {proc.returncode} after {time.perf_counter() - t0:.0f}s",
              file=sys.stderr, flush=True)
        if proc.returncode != 0:
            failed.append(name)
        outputs.append(proc.stdout)
        print(proc.stdout, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(outputs))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
