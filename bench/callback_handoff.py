"""Time spent inside OffsetJournalListener.onQueryProgress: database healthy, slow, down.

Each (scenario, round) runs in a fresh child process, so a writer still working off a
backlog never competes with the next measurement. The child starts a listener, sends a
query-started event and warm-up events, then calls ``onQueryProgress`` ``--events``
times at ``--rate`` per second with Kafka-shaped progress JSON (``--partitions``
partitions) held by a tiny event object, the way Spark's callback reads
``event.progress.json``. Timed: the call alone (perf_counter_ns around it). Also shown:
how late the caller woke for its tick, which is where a busy writer thread holding the
GIL would show up. Scenarios run round-robin over ``--rounds`` rounds.

* none: an empty callback instead of the listener, the measurement's own floor here;
* healthy: the embedded Postgres over its Unix socket;
* slow: the same through bench/delay_proxy.py adding ``--rtt-ms`` to every round trip;
* down: a URL to a closed port on 127.0.0.1.

    .venv/bin/python bench/callback_handoff.py [--events 1000 --rate 50 --rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

from _common import (
    QUERY_ID,
    ProgressEvent,
    delay_proxy,
    free_port,
    header,
    journal_database,
    kafka_progress,
    minmax,
    postgres,
    quantile,
    table,
    tcp_url,
    unix_socket,
)


class _Noop:
    """Scenario "none": an empty callback, the measurement's own floor on this machine."""

    _writer = None

    def onQueryStarted(self, event: object) -> None:
        pass

    def onQueryProgress(self, event: object) -> None:
        pass


class _Started:
    id, name, timestamp = QUERY_ID, "bench_q", "2026-01-01T00:00:00.000Z"

    def __init__(self, run_id: str) -> None:
        self.runId = run_id


def child(args: argparse.Namespace) -> None:
    from offset_journal.capture.listener import OffsetJournalListener

    total = args.warmup + args.events
    run_id = str(uuid.uuid4())  # a run of its own: every batch is new to the journal
    events = [ProgressEvent(kafka_progress(i, args.partitions, run_id=run_id))
              for i in range(total)]
    spool = tempfile.mkdtemp(prefix="oj-bench-spool-")
    listener = _Noop() if args.url == "none" else OffsetJournalListener(
        args.url, spool_dir=spool, queue_size=args.queue_size, connect_timeout=2)
    listener.onQueryStarted(_Started(run_id))
    lat: list[int] = []
    late: list[int] = []
    period = 1.0 / args.rate
    clock = time.perf_counter
    tick = clock()
    for i, ev in enumerate(events):
        tick += period
        while (now := clock()) < tick:
            time.sleep(max(0.0, min(tick - now, 0.01)))
        t0 = time.perf_counter_ns()
        listener.onQueryProgress(ev)
        t1 = time.perf_counter_ns()
        if i >= args.warmup:
            lat.append(t1 - t0)
            late.append(int((t0 / 1e9 - tick) * 1e9))
    writer = listener._writer
    out = {"lat": lat, "late": late, "written": writer.written if writer else 0,
           "spooled": writer.spooled if writer else 0,
           "queued": writer.queue.qsize() if writer else 0}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)  # do not let atexit flush a backlog: the next measurement is waiting


def run_child(args: argparse.Namespace, url: str) -> dict:
    cmd = [sys.executable, __file__, "--child", "--url", url, "--events", str(args.events),
           "--rate", str(args.rate), "--partitions", str(args.partitions),
           "--warmup", str(args.warmup), "--queue-size", str(args.queue_size)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(args: argparse.Namespace) -> None:
    header("Callback hand-off: time inside onQueryProgress", args)
    with postgres(args.admin_url) as server:
        url = journal_database(server)
        sock = unix_socket(url)
        target = sock or f"{server_host(url)}"
        with delay_proxy(target, args.rtt_ms) as port:
            urls = {"none": "none", "healthy": url, "slow": tcp_url(url, port),
                    "down": f"postgresql://nobody@127.0.0.1:{free_port()}/none"}
            samples: dict[str, list[dict]] = {k: [] for k in args.scenarios}
            for r in range(args.rounds):
                for name in args.scenarios:
                    res = run_child(args, urls[name])
                    samples[name].append(res)
                    print(f"round {r + 1} {name}: p50 {quantile(res['lat'], .5) / 1e3:.1f} us, "
                          f"p99 {quantile(res['lat'], .99) / 1e3:.1f} us, written "
                          f"{res['written']}, spooled {res['spooled']}, queued {res['queued']}",
                          file=sys.stderr, flush=True)
    rows = []
    for name in args.scenarios:
        lat = [x / 1e3 for res in samples[name] for x in res["lat"]]
        late = [x / 1e3 for res in samples[name] for x in res["late"]]
        p99s = [quantile(res["lat"], 0.99) / 1e3 for res in samples[name]]
        rows.append([
            name, len(lat), f"{quantile(lat, .5):.1f}", f"{quantile(lat, .99):.1f}",
            minmax(p99s, "{:.1f}"), f"{max(lat):.1f}",
            "" if name == "none" else "yes" if quantile(lat, .99) <= 1000 else "**no**",
            f"{quantile(late, .5):.0f} / {quantile(late, .99):.0f}",
            sum(res["written"] for res in samples[name]),
            sum(res["spooled"] for res in samples[name]),
            max(res["queued"] for res in samples[name]),
        ])
    print(table(["database", "calls", "p50 us", "p99 us", "p99 per round (min-max) us",
                 "max us", "p99 <= 1 ms", "caller wake-up late p50 / p99 us",
                 "journaled by the end", "spooled by the end", "still queued (max)"], rows))


def server_host(url: str) -> str:
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    return f"{u.host or '127.0.0.1'}:{u.port or 5432}"


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1000, help="measured calls per round")
    p.add_argument("--rate", type=float, default=50.0, help="calls per second")
    p.add_argument("--partitions", type=int, default=64, help="Kafka partitions per event")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--rtt-ms", type=float, default=50.0)
    p.add_argument("--queue-size", type=int, default=10_000)
    p.add_argument("--scenarios", type=lambda s: s.split(","),
                   default=["none", "healthy", "slow", "down"],
                   help="none (an empty callback: the floor), healthy, slow, down")
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    a = p.parse_args()
    child(a) if a.child else main(a)
