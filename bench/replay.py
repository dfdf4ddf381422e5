"""Replay speed: the spool after an outage against live journaling, in one run.

Per round, alternating which goes first, each with a fresh writer and ``--events``
progress events (``--partitions`` Kafka partitions each, a new run per round):

* live: ``Writer.start()``, then every event handed over with ``submit()`` at once
  (the writer as fast as it goes, database up); timed from start() until ``flush()``
  says every event is in the journal;
* replay: the same number of events already in the spool, put there by
  ``Spool.append`` as the writer does when the database is away, then a writer started
  on that spool directory (the next driver, or the same writer once the database is
  back); timed from start() until ``flush()`` says the spool is empty and every event
  is in the journal.

Rates are events journaled per second, of wall time and of the driver process's CPU
time (``process_time``: all its threads; Postgres's own work is the same for both);
the ratio is replay / live of the same round.

    .venv/bin/python bench/replay.py [--events 400 --rounds 8 --partitions 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from _common import header, journal_database, kafka_progress, postgres, quantile, table


def events(run: str, n: int, partitions: int) -> list[dict[str, Any]]:
    return [{"type": "progress", "json": kafka_progress(b, partitions, run_id=run)}
            for b in range(1, n + 1)]


def live(url: str, evs: list[dict[str, Any]]) -> tuple[float, float]:
    from offset_journal.capture.writer import Writer, WriterConfig

    spool = tempfile.mkdtemp(prefix="oj-replay-")
    writer = Writer(WriterConfig(url, spool_dir=spool))
    t0, c0 = time.perf_counter(), time.process_time()
    writer.start()
    for ev in evs:
        writer.submit(ev)
    assert writer.flush(120)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert writer.stats().journaled == len(evs)
    writer.close()
    shutil.rmtree(spool, ignore_errors=True)
    return took, cpu


def replay(url: str, evs: list[dict[str, Any]]) -> tuple[float, float]:
    from offset_journal.capture._spool import Spool
    from offset_journal.capture.writer import Writer, WriterConfig

    spool = tempfile.mkdtemp(prefix="oj-replay-")
    s = Spool(spool)
    for i in range(0, len(evs), 20):  # as the writer spools them: a few at a time
        s.append(evs[i:i + 20])
    s.close()
    writer = Writer(WriterConfig(url, spool_dir=spool))
    t0, c0 = time.perf_counter(), time.process_time()
    writer.start()
    assert writer.flush(120)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert writer.stats().journaled == len(evs) and not writer.spool.pending()
    writer.close()
    shutil.rmtree(spool, ignore_errors=True)
    return took, cpu


def main(args: argparse.Namespace) -> None:
    header("Spool replay vs. live journaling", args)
    load = [os.getloadavg()[0]]
    rates: dict[str, list[float]] = {"live": [], "replay": []}
    cpu_rates: dict[str, list[float]] = {"live": [], "replay": []}
    ratios, cpu_ratios = [], []
    with postgres(args.admin_url) as server:
        url = journal_database(server)
        for r in range(args.warmup + args.rounds):
            took, cpu = {}, {}
            order = ["live", "replay"] if r % 2 == 0 else ["replay", "live"]
            for kind in order:
                evs = events(f"{kind}-{r}", args.events, args.partitions)
                took[kind], cpu[kind] = (live if kind == "live" else replay)(url, evs)
            load.append(os.getloadavg()[0])
            if r < args.warmup:
                continue
            for kind in rates:
                rates[kind].append(args.events / took[kind])
                cpu_rates[kind].append(args.events / cpu[kind])
            ratios.append(took["live"] / took["replay"])
            cpu_ratios.append(cpu["live"] / cpu["replay"])
            print(f"round {r}: live {rates['live'][-1]:.0f}/s, replay "
                  f"{rates['replay'][-1]:.0f}/s", file=sys.stderr, flush=True)

    def cell(xs: list[float], fmt: str = "{:.0f}") -> str:
        return (f"{fmt.format(quantile(xs, .5))} ({fmt.format(quantile(xs, .25))}-"
                f"{fmt.format(quantile(xs, .75))})")

    print(f"\n{args.rounds} rounds (after {args.warmup} warm-up), order alternating; "
          f"{args.events} events of {args.partitions} partitions per variant and round; "
          f"median (p25-p75). Load average (1 min) during the run: "
          f"{min(load):.1f}-{max(load):.1f}.\n")
    ok = quantile(ratios, .5) >= 0.8
    print(table(["time", "live events/s", "replay events/s", "replay / live", ">= 0.8"],
                [["wall", cell(rates["live"]), cell(rates["replay"]), cell(ratios, "{:.2f}"),
                  "yes" if ok else "**no**"],
                 ["driver CPU (process_time)", cell(cpu_rates["live"]),
                  cell(cpu_rates["replay"]), cell(cpu_ratios, "{:.2f}"), ""]]))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=400)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    main(p.parse_args())
