"""`offset-journal check --all` on a fleet of 1,000 queries: how long it takes, and that
it does not grow with the history; and the live check (``--bootstrap-servers``) on a
real broker.

Each of ``--queries`` queries gets ``--batches`` batches of ``--partitions`` partitions
(realistic offsets: bench/_common's REALISTIC) in one run, a recorded retention forecast
per partition at its last batch's end (as ``retention --record`` leaves it: every fifth
query at risk, the others caught up), a few flagged problems, spool losses and rejected
events. Then, ``--repeat`` times each: the library call (``check_fleet``, in process)
and the command as cron runs it (a new interpreter, ``offset-journal check --all`` with
every threshold), with the statements the library sent. The default deadline of a
command is 120 s.

Live (``--live-queries N``, 0 to skip): a local broker (offset_journal.local.kafka),
``--live-topics`` topics of ``--live-partitions`` partitions holding 200 records each
(every other topic size-limited), and N queries, each reading every partition of one
topic from its own offsets (so a partition is read at N / topics offsets: that many
rounds of the one consumer). The library call and the command, with
``--bootstrap-servers``.

    .venv/bin/python bench/check_fleet.py [--queries 1000 --batches 5 --partitions 100]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from _common import (
    header,
    journal_database,
    median,
    postgres,
    progress_json,
    realistic_progress,
    table,
)

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
            ends = json.loads(payload)["sources"][0]["endOffset"]
            risky = q % 5 == 0
            journal.record_forecasts([name], [
                {"query_name": name, "source_index": 0, "topic": topic,
                 "partition": int(p), "status": "at-risk" if risky else "caught-up",
                 "next_offset": end, "log_start": 0, "log_end": end + 4000 * risky,
                 "unread": 4000 * risky, "lost": 0, "first_unread_at": now if risky else None,
                 "basis": "time" if risky else None,
                 "loss_earliest": now + timedelta(hours=(q % 48) + 1) if risky else None,
                 "loss_latest": now + timedelta(hours=(q % 48) + 2) if risky else None}
                for topic, parts in ends.items() for p, end in parts.items()])
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


@contextmanager
def kafka() -> Iterator[str]:
    """The broker named by OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS (the test session's),
    else a local one started here and stopped after."""
    servers = os.environ.get("OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS")
    if servers:
        yield servers
        return
    from offset_journal.local.kafka import start_local_kafka

    broker = start_local_kafka()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


def fill_live(url: str, servers: str, args: argparse.Namespace) -> int:
    """Topics on the broker, records in them, and the queries' batches; returns the
    distinct (partition, next offset) pairs the check reads a record at."""
    from offset_journal.journal import Journal
    from offset_journal.kafka.admin import admin_client, create_topic
    from offset_journal.records import batch_from_progress

    admin = admin_client(servers)
    run = time.time_ns()  # topics of their own on a broker that may be shared
    topics = [f"live-{run}-{t:03d}" for t in range(args.live_topics)]
    for t, topic in enumerate(topics):
        config = {"retention.ms": str(24 * 3600 * 1000)}
        if t % 2:
            config["retention.bytes"] = str(1 << 20)
        create_topic(admin, topic, args.live_partitions, config=config)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for topic in topics:
        for p in range(args.live_partitions):
            for i in range(200):
                producer.produce(topic, value=b"v%05d" % i, partition=p)
        producer.flush(30)
    rng = random.Random(7)
    stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")
    pairs = set()
    with Journal(url) as journal:
        for q in range(args.live_queries):
            topic = topics[q % len(topics)]
            end = {topic: {str(p): rng.randint(0, 199) for p in range(args.live_partitions)}}
            pairs |= {(topic, p, o) for p, o in end[topic].items()}
            payload = progress_json(0, end, end, {topic: {p: 200 for p in end[topic]}},
                                    rows=0, lags=None, name=f"live-{q:04d}",
                                    run_id=f"live-run-{q}", query_id=f"live-qid-{q}",
                                    timestamp=stamp)
            assert journal.record_batch(batch_from_progress(payload))
    return len(pairs)


def measure_live(url: str, servers: str, pairs: int,
                 args: argparse.Namespace) -> list[list[Any]]:
    from offset_journal.health.check import Thresholds, parse_threshold
    from offset_journal.health.edge import KafkaAccess, check_fleet
    from offset_journal.journal import Journal
    from offset_journal.values import parse_duration

    limits = Thresholds(min_time_to_loss=parse_threshold("6h,1h", parse_duration,
                                                         minimum=True))
    kafka = KafkaAccess(servers)
    inproc, command = [], []
    problems = exit_code = 0
    with Journal(url) as journal:
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = check_fleet(journal, None, limits, kafka)
            inproc.append(time.perf_counter() - t0)
            problems = len(result.problems)
    env = {**os.environ, "OFFSET_JOURNAL_DATABASE_URL": url}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "offset_journal.cli", "check", "--all",
                               "--min-time-to-loss", "6h,1h", "--bootstrap-servers", servers],
                              env=env, capture_output=True, text=True, cwd=ROOT, check=False)
        command.append(time.perf_counter() - t0)
        exit_code = done.returncode
        assert exit_code in (0, 1, 2), done.stdout + done.stderr
    return [[f"{args.live_queries:,}", args.live_topics, args.live_partitions,
             f"{args.live_queries * args.live_partitions:,}", f"{pairs:,}", problems,
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
    parser.add_argument("--live-queries", type=int, default=100)
    parser.add_argument("--live-topics", type=int, default=10)
    parser.add_argument("--live-partitions", type=int, default=10)
    args = parser.parse_args()
    header("check --all on a fleet", args)
    rows, live = [], []
    with postgres() as server:
        for batches in [int(b) for b in args.batches.split(",")]:
            url = journal_database(server, "oj_check")
            one = argparse.Namespace(**{**vars(args), "batches": batches})
            fill(url, one)
            rows += measure(url, one)
        if args.live_queries:
            with kafka() as servers:
                url = journal_database(server, "oj_check_live")
                pairs = fill_live(url, servers, args)
                live = measure_live(url, servers, pairs, args)
    print(table(["queries", "batches each", "partitions", "statements", "problems", "exit",
                 "check_fleet ms: median (min-max)", "command s (interpreter included)",
                 "load average"], rows))
    if live:
        print()
        print("live, with --bootstrap-servers (a local broker):")
        print(table(["queries", "topics", "partitions each", "partitions read",
                     "records read (partition, offset)", "problems", "exit",
                     "check_fleet ms: median (min-max)", "command s (interpreter included)",
                     "load average"], live))


if __name__ == "__main__":
    main()
