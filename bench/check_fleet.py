"""`offset-journal check --all` on a fleet of 1,000 queries: how long it takes, and that
it does not grow with the history.

Each of ``--queries`` queries gets ``--batches`` batches of ``--partitions`` partitions
(realistic offsets: bench/_common's REALISTIC) in one run, every fifth query a recorded
retention forecast per partition (as ``retention --record`` leaves it), a few flagged
problems, spool losses and rejected events. Then, ``--repeat`` times each: the library
call (``check_fleet``, in process) and the command as cron runs it (a new interpreter,
``offset-journal check --all`` with every threshold), with the statements the library
sent. The default deadline of a command is 120 s.

    .venv/bin/python bench/check_fleet.py [--queries 1000 --batches 5 --partitions 100]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from _common import header, journal_database, median, postgres, realistic_progress, table

ROOT = Path(__file__).resolve().parents[1]


def fill(url: str, args: argparse.Namespace) -> None:
    import sqlalchemy as sa

    from offset_journal.journal import Journal
    from offset_journal.records import batch_from_progress

    now = datetime.now(timezone.utc)

    def stamp(b: int) -> str:
        t = now - timedelta(seconds=10 * (args.batches - b))
        return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    t0 = time.time()
    with Journal(url) as journal:
        for q in range(args.queries):
            name = f"job-{q:04d}"
            for payload in realistic_progress(args.partitions, args.batches, seed=q,
                                              name=name, run_id=f"run-{q}",
                                              query_id=f"qid-{q}", timestamp=stamp):
                assert journal.record_batch(batch_from_progress(payload))
            if q % 5 == 0:
                journal.record_forecasts([name], [
                    {"query_name": name, "source_index": 0, "topic": f"topic-{p // 100:03d}",
                     "partition": p % 100, "status": "at-risk", "next_offset": 1000,
                     "log_start": 0, "log_end": 5000, "unread": 4000, "lost": 0,
                     "first_unread_at": now, "basis": "time",
                     "loss_earliest": now + timedelta(hours=(q % 48) + 1),
                     "loss_latest": now + timedelta(hours=(q % 48) + 2)}
                    for p in range(args.partitions)])
            if q % 100 == 7:
                journal.record_rejected("bench", '{"type": "progress", "json": "{bad"}')
        with journal.engine.begin() as conn:
            conn.execute(sa.text("ANALYZE"))
    print(f"journal filled in {time.time() - t0:.0f} s: {args.queries:,} queries x "
          f"{args.batches} batches x {args.partitions} partitions", file=sys.stderr)


ARGS = ["check", "--all", "--max-lag", "100000,1000000", "--max-staleness", "10m,1h",
        "--min-time-to-loss", "6h,1h", "--since=-1d"]


def measure(url: str, args: argparse.Namespace) -> list[list[Any]]:
    import sqlalchemy as sa

    from offset_journal.health.check import Thresholds, parse_threshold
    from offset_journal.health.edge import check_fleet
    from offset_journal.journal import Journal
    from offset_journal.values import parse_duration

    limits = Thresholds(parse_threshold("100000,1000000", int),
                        parse_threshold("10m,1h", parse_duration),
                        parse_threshold("6h,1h", parse_duration, minimum=True),
                        datetime.now(timezone.utc) - timedelta(days=1))
    statements: list[str] = []
    inproc, command = [], []
    problems = exit_code = 0
    with Journal(url) as journal:
        check_fleet(journal, None, limits)  # warm: connect, first-connect queries

        def seen(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
            statements.append(statement)

        for _ in range(args.repeat):
            statements.clear()
            sa.event.listen(journal.engine, "before_cursor_execute", seen)
            t0 = time.perf_counter()
            result = check_fleet(journal, None, limits)
            inproc.append(time.perf_counter() - t0)
            sa.event.remove(journal.engine, "before_cursor_execute", seen)
            problems = len(result.problems)
    env = {**os.environ, "OFFSET_JOURNAL_DATABASE_URL": url}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "offset_journal.cli", *ARGS], env=env,
                              capture_output=True, text=True, cwd=ROOT, check=False)
        command.append(time.perf_counter() - t0)
        exit_code = done.returncode
        assert exit_code in (0, 1, 2), done.stderr
    return [[f"{args.queries:,}", args.batches, args.partitions, len(statements), problems,
             exit_code, f"{median(inproc) * 1e3:.0f} ({min(inproc) * 1e3:.0f}-"
             f"{max(inproc) * 1e3:.0f})", f"{median(command):.2f} ({min(command):.2f}-"
             f"{max(command):.2f})", f"{os.getloadavg()[0]:.1f}"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--batches", default="5,20",
                        help="batches per query, comma-separated: one journal each")
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    header("check --all on a fleet", args)
    rows = []
    with postgres() as server:
        for batches in [int(b) for b in args.batches.split(",")]:
            url = journal_database(server, "oj_check")
            one = argparse.Namespace(**{**vars(args), "batches": batches})
            fill(url, one)
            rows += measure(url, one)
    print(table(["queries", "batches each", "partitions", "statements", "problems", "exit",
                 "check_fleet ms: median (min-max)", "command s (interpreter included)",
                 "load average"], rows))


if __name__ == "__main__":
    main()
