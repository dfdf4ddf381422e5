"""Driver memory through a database outage: RSS and Python allocations stay bounded.

The listener's callbacks are called as Spark would call them, one Kafka-shaped progress
event (``--partitions`` partitions, built on the fly so that the benchmark holds none)
per simulated second, for ``--minutes`` simulated minutes, while the journal's URL
points at a closed port on 127.0.0.1. ``--rate`` compresses time (events sent per real
second; 1 = real time). Reported at each simulated minute: RSS (/proc/self/statm),
tracemalloc's current and peak, the writer's queue length and the spool on disk.
Then the database comes back (bench/delay_proxy.py starts on that port, no delay, in
front of the embedded Postgres) and the time to replay the spool is measured.

    .venv/bin/python bench/outage_memory.py --minutes 10 --rate 1     # the real thing
    .venv/bin/python bench/outage_memory.py --minutes 10 --rate 20    # 600 events in 30 s
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from _common import (
    QUERY_ID,
    RUN_ID,
    ProgressEvent,
    dir_bytes,
    free_port,
    header,
    journal_database,
    kafka_progress,
    postgres,
    rmtree,
    rss_bytes,
    table,
    unix_socket,
)

MiB = 2**20


class _Started:
    id, runId, name, timestamp = QUERY_ID, RUN_ID, "bench_q", "2026-01-01T00:00:00.000Z"


def main(args: argparse.Namespace) -> None:
    import sqlalchemy as sa

    from offset_journal.capture.listener import OffsetJournalListener
    from offset_journal.journal.db import resolve_url

    header("Driver memory through a database outage", args)
    spool = tempfile.mkdtemp(prefix="oj-bench-outage-")
    with postgres(args.admin_url) as server:
        real_url = journal_database(server)
        port = free_port()
        down_url = sa.engine.make_url(real_url).set(
            host="127.0.0.1", port=port,
            query={k: v for k, v in sa.engine.make_url(real_url).query.items() if k != "host"},
        ).render_as_string(hide_password=False)
        total = int(args.minutes * 60)
        # Warm up imports and one payload before the baseline, so that it is not growth.
        kafka_progress(0, args.partitions)
        gc.collect()
        tracemalloc.start()
        rss0 = rss_bytes()
        listener = OffsetJournalListener(down_url, spool_dir=spool, queue_size=args.queue_size,
                                         spool_max_bytes=args.spool_max_bytes,
                                         retry_max=args.retry_max, connect_timeout=2)
        listener.onQueryStarted(_Started())
        writer = listener._writer
        assert writer is not None

        rows = []
        peak_rss = rss0

        def sample(minute: str, sent: int) -> None:
            nonlocal peak_rss
            cur, peak = tracemalloc.get_traced_memory()
            rss = rss_bytes()
            peak_rss = max(peak_rss, rss)
            rows.append([minute, sent, f"{rss / MiB:.1f}", f"{(rss - rss0) / MiB:+.1f}",
                         f"{cur / MiB:.2f}", f"{peak / MiB:.2f}", writer.queue.qsize(),
                         f"{dir_bytes(spool) / MiB:.2f}", writer.spooled, writer.spool.dropped])
            print(" | ".join(str(c) for c in rows[-1]), file=sys.stderr, flush=True)

        sample("start", 0)
        period = 1.0 / args.rate
        tick = time.perf_counter()
        for i in range(total):
            tick += period
            delay = tick - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            listener.onQueryProgress(ProgressEvent(kafka_progress(i, args.partitions)))
            if (i + 1) % 60 == 0:
                sample(f"{(i + 1) // 60}", i + 1)
        time.sleep(1.0)  # let the writer spool what it still holds
        sample("end of outage", total)

        proxy = subprocess.Popen([sys.executable, str(Path(__file__).with_name("delay_proxy.py")),
                                  "--listen", str(port), "--target",
                                  unix_socket(real_url) or "127.0.0.1:5432", "--rtt-ms", "0"],
                                 stdout=subprocess.PIPE, text=True)
        engine = sa.create_engine(resolve_url(real_url))
        count = sa.text("select count(*) from offset_journal.batches")
        try:
            assert proxy.stdout is not None and proxy.stdout.readline().startswith("listening")
            t0 = time.perf_counter()
            # Done when every event is a row in the journal and the spool is empty.
            journaled = 0
            while time.perf_counter() - t0 < args.recover_timeout:
                with engine.connect() as conn:
                    journaled = conn.execute(count).scalar_one()
                # The spool's own files: the failover window keeps what was journaled
                # in the same folder for its 60 s, which is not replay still to do.
                if journaled + writer.spool.dropped >= total and not writer.spool.size():
                    break
                time.sleep(0.1)
            recovery = time.perf_counter() - t0
            flushed = journaled + writer.spool.dropped >= total
            sample("after replay", total)
            listener.close()
        finally:
            proxy.terminate()
            proxy.wait(10)
            engine.dispose()
    rmtree(spool)

    print(f"\n{total} events ({args.partitions} partitions each) over {args.minutes} simulated "
          f"minutes at {args.rate}/s; queue_size {args.queue_size}, spool_max_bytes "
          f"{args.spool_max_bytes}. Memory in MiB, RSS growth relative to the start.\n")
    print(table(["simulated minute", "events", "RSS", "RSS growth", "tracemalloc current",
                 "tracemalloc peak", "queue", "spool on disk", "events spooled", "dropped"],
                rows))
    dropped = writer.spool.dropped
    print(f"\nDatabase back: {'all' if flushed else 'NOT all'} spooled events journaled "
          f"({journaled} of {total} batches; {dropped} dropped by the spool's size cap) "
          f"{recovery:.1f}s after it came back (includes the writer's retry backoff, at most "
          f"--retry-max {args.retry_max}s). Peak RSS {peak_rss / MiB:.1f} MiB "
          f"({(peak_rss - rss0) / MiB:+.1f} MiB).")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0, help="simulated outage length")
    p.add_argument("--rate", type=float, default=20.0,
                   help="events sent per real second (1 = real time)")
    p.add_argument("--partitions", type=int, default=64)
    p.add_argument("--queue-size", type=int, default=10_000)
    p.add_argument("--spool-max-bytes", type=int, default=None)
    p.add_argument("--retry-max", type=float, default=5.0, help="the writer's backoff cap")
    p.add_argument("--recover-timeout", type=float, default=120.0)
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    main(p.parse_args())
