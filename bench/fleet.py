"""Fleet capacity: N driver processes journaling into one Postgres, against a floor.

Each driver is its own process running the listener's real writer
(``offset_journal.capture.writer.Writer``, as ``OffsetJournalListener`` starts it) and handing
it progress events the way the listener does (``{"type": "progress", "json": ...}``,
Kafka-shaped progress JSON with ``--partitions`` partitions). The floor: the same
number of processes, each with one psycopg connection writing the same rows per batch
as bench/journal_write.py's floor (``floor_source``, ``floor_write``: the batch row and
its source row with the offset arrays, encoded by the journal's own functions, by one
plain statement, one transaction per batch) into scratch copies of the journal's tables.
It parses and encodes each payload before its transaction, so both sides pay the
event's JSON; only the writer does that inside its transaction.

Per N, every process follows one schedule (wall-clock phases), variants alternating
from round to round:

* paced: one batch per second per driver (drivers spread over the second), for
  ``--paced`` seconds: journaled batches/s, hand-off -> commit latency (submit() to
  the end of the writer's transaction; the floor: start to commit of its write);
* burst: each driver as fast as it can for ``--burst`` seconds (the writer kept at most
  ``--max-behind`` events behind): the sustained batches/s one Postgres takes from N
  drivers;
* rest: between phases; Postgres connections held (pg_stat_activity by
  application_name), sampled every 0.25 s by the coordinator.

The processes start ``--start-parallel`` at a time (an interpreter start and the
writer's imports take about 1 s of CPU each), and each writer journals one warm-up batch
(its connect and SQLAlchemy's first-connect queries) before the schedule: neither is
part of a measured phase.

``--pgbouncer``: the writers and the floor alike go through one PgBouncer
(``offset_journal.local.pgbouncer``: Debian's ``pgbouncer`` on loopback, transaction
pooling, ``--pool-size`` server connections, PgBouncer's defaults otherwise) in front of
that Postgres; the floor then prepares nothing on the server (``prepare_threshold=None``,
as the writer's engine). The coordinator samples the server connections on Postgres
itself (pg_stat_activity, not through the pooler) and PgBouncer's ``SHOW POOLS``
(clients waiting for a server connection, the longest wait), and prints the settings.

After each N: every batch each driver submitted is counted in the journal
(``offset_journal.batches`` per run; the floor's in ``scratch.batches``), rejected
events in the writers' stats and in ``offset_journal.rejected_events``, and what the
writers logged (warnings and errors, collected in each driver process).

    .venv/bin/python bench/fleet.py [--drivers 1,8,32 --rounds 2 --paced 10 --burst 8]
    .venv/bin/python bench/fleet.py --pgbouncer --pool-size 10 --drivers 100 [...]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import (
    header,
    journal_database,
    kafka_progress,
    median,
    postgres,
    quantile,
    table,
)

FLOOR_APP = "bench-floor"
WRITER_APP = "offset-journal"
POOLER_KEYS = ("pool_mode", "default_pool_size", "min_pool_size", "reserve_pool_size",
               "reserve_pool_timeout", "max_client_conn", "max_db_connections",
               "max_user_connections", "server_idle_timeout", "server_lifetime",
               "server_reset_query", "server_reset_query_always", "query_wait_timeout",
               "query_timeout", "idle_transaction_timeout", "ignore_startup_parameters",
               "auth_type", "stats_users")

STAT_KEYS = ("total_xact_count", "total_query_count", "total_xact_time", "total_query_time",
             "total_wait_time")

Sample = dict[str, float]


def plain_dsn(url: str, **changes: Any) -> str:
    """A SQLAlchemy URL as psycopg itself takes it."""
    import sqlalchemy as sa

    return sa.engine.make_url(url).set(drivername="postgresql", **changes) \
        .render_as_string(hide_password=False)


# ------------------------------------------------------------------ driver process


def floor_batch(payload: str) -> tuple[Any, dict[str, Any]]:
    """The floor's work before its transaction: parse the payload as the writer does and
    encode its Kafka source as the journal stores it (bench/journal_write's floor)."""
    from journal_write import floor_source

    from offset_journal.records import batch_from_progress

    rec = batch_from_progress(payload)
    return rec, floor_source(rec)[0]


class Payloads:
    """A driver's progress JSONs (``kafka_progress``), batch after batch, filled into one
    template by two substitutions: about 50x cheaper than building each. A real driver
    gets its JSON from the JVM; here the driver's main thread builds it, and the writer
    thread, holding a server connection, should not wait for the GIL meanwhile. Checked
    against ``kafka_progress`` at start; built by it when they differ."""

    MARK = 900001  # the template's batch id: offsets MARK * 1000 + 7 * i, ends MARK + 1

    def __init__(self, partitions: int, run_id: str, name: str) -> None:
        self.partitions, self.run_id, self.name = partitions, run_id, name
        text = self.build(self.MARK)
        self.template = text.replace(str(self.MARK + 1), "\0").replace(str(self.MARK), "\1")
        self.exact = all(self.fill(b) == self.build(b) for b in (1, 2, 99, 1234))

    def build(self, batch_id: int) -> str:
        return kafka_progress(batch_id, self.partitions, run_id=self.run_id, name=self.name)

    def fill(self, batch_id: int) -> str:
        return self.template.replace("\1", str(batch_id)).replace("\0", str(batch_id + 1))

    def __call__(self, batch_id: int) -> str:
        return self.fill(batch_id) if self.exact else self.build(batch_id)


class LogTally(logging.Handler):
    """The library's warnings and errors in a driver process: counted, and the first few
    distinct messages kept (instead of N processes printing them)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()
        self.first: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname] += 1
        msg = f"{record.levelname}: {record.getMessage()}"[:400]
        if len(self.first) < 5 and msg not in self.first:
            self.first.append(msg)


class Driver:
    def __init__(self, url: str, index: int, n: int, partitions: int, *,
                 pooled: bool = False, max_behind: int = 50) -> None:
        from offset_journal.capture.writer import Writer, WriterConfig

        self.url, self.index, self.n, self.partitions = url, index, n, partitions
        self.max_behind = max_behind
        # behind a transaction pooler nothing may be prepared on the server (the writer's
        # engine prepares nothing either; PgBouncer 1.18 keeps no prepared statements)
        self.floor_connect: dict[str, Any] = {"application_name": FLOOR_APP}
        if pooled:
            self.floor_connect["prepare_threshold"] = None
        self.batches = {"writer": 0, "floor": 0}  # a run each: no gaps between phases
        self.payloads = Payloads(partitions, f"fleet-{n}-{index}", f"job-{index}")
        self.spool = tempfile.mkdtemp(prefix="oj-fleet-")
        self.writer = Writer(WriterConfig(url, spool_dir=self.spool))
        self.sent: dict[int, float] = {}
        self.commits: list[tuple[float, float]] = []  # (wall time, latency s)
        self.faults: Counter[str] = Counter()
        self._time_transactions()
        self._note_faults()
        self.writer.start()
        self.warm_ok = self.warm()

    def _time_transactions(self) -> None:
        """Wrap the writer's transaction: hand-off -> commit per event it commits; and
        count its transactions and the parsing done inside them (the writer parses its
        events in the transaction, holding a server connection)."""
        import offset_journal.capture.writer as writer_module

        original, parse = self.writer._transaction, writer_module.batch_from_progress
        self.txn = [0, 0.0]  # transactions, parsing inside them s

        def timed_parse(payload: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return parse(payload)
            finally:
                self.txn[1] += time.perf_counter() - t0

        def timed(journal: Any, events: list[dict[str, Any]]) -> None:
            original(journal, events)
            now, wall = time.perf_counter(), time.time()
            self.txn[0] += 1
            for ev in events:
                t = self.sent.pop(id(ev), None)
                if t is not None:
                    self.commits.append((wall, now - t))

        self.writer._transaction = timed  # type: ignore[method-assign]
        writer_module.batch_from_progress = timed_parse

    def _note_faults(self) -> None:
        """Count every error the writer backs off on by SQLSTATE and message (its log
        line has the message's first line only)."""
        from offset_journal.capture.writer import sqlstate

        original = self.writer._mark_down

        def noted(exc: BaseException) -> None:
            first = (str(exc).splitlines() or [""])[0]
            self.faults[f"{sqlstate(exc) or 'no SQLSTATE'}: {type(exc).__name__}: "
                        f"{first}"[:300]] += 1
            original(exc)

        self.writer._mark_down = noted  # type: ignore[method-assign]

    def warm(self) -> bool:
        """One batch journaled before the schedule (not timed): the writer's connect and
        SQLAlchemy's first-connect queries are not part of a measured phase."""
        self.writer.submit({"type": "progress", "json": self.payload()})
        return self.writer.flush(60)

    def payload(self, kind: str = "writer") -> str:
        self.batches[kind] += 1
        return self.payloads(self.batches[kind])

    def submit(self) -> None:
        ev = {"type": "progress", "json": self.payload()}
        self.sent[id(ev)] = time.perf_counter()
        self.writer.submit(ev)

    def ticks(self, start: float, end: float, paced: bool) -> Iterator[None]:
        """Yield once per turn from `start` until `end`: when paced, once a second at the
        driver's place in the second, on the phase's clock (a turn that comes late is
        taken at once, not dropped); as often as asked otherwise."""
        time.sleep(max(0.0, start - time.time()))
        tick = start + self.index / self.n
        while time.time() < end:
            if paced:
                time.sleep(max(0.0, tick - time.time()))
                if time.time() >= end:
                    return
                tick += 1.0
            yield

    def writer_phase(self, start: float, end: float, paced: bool) -> None:
        self.commits.clear()
        self.txn[:] = [0, 0.0]
        for _ in self.ticks(start, end, paced):
            if not paced:
                self.wait_behind(end)
            if time.time() < end:
                self.submit()

    def wait_behind(self, end: float) -> None:
        """Block until the writer has fewer than ``max_behind`` events pending (or until
        `end`): on the writer's own condition, which it notifies as events are done. Not
        by polling: 100 processes polling every millisecond take a core of their own."""
        w = self.writer
        with w._cond:
            w._cond.wait_for(lambda: w._pending < self.max_behind,
                             timeout=max(0.0, end - time.time()))

    def floor_phase(self, start: float, end: float, paced: bool) -> list[tuple[float, float]]:
        """The floor's writes: connected before the phase (as the writer's connection
        is open before its phase), parsing each payload before its transaction."""
        import psycopg
        from journal_write import floor_write

        out: list[tuple[float, float]] = []
        with psycopg.connect(plain_dsn(self.url), **self.floor_connect) as conn:
            for _ in self.ticks(start, end, paced):
                rec, source = floor_batch(self.payload("floor"))
                t0 = time.perf_counter()
                floor_write(conn, rec, source)
                out.append((time.time(), time.perf_counter() - t0))
        return out

    def run(self, schedule: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every phase of the schedule, with the process's CPU time (all threads) from the
        previous phase's end; a writer phase also says whether its backlog was committed
        before the next phase, and its last commit's time after its end."""
        results = []
        for phase in schedule:
            start, end, paced, extra = phase["start"], phase["end"], phase["paced"], {}
            cpu = time.process_time()
            if phase["kind"] == "writer":
                self.writer_phase(start, end, paced)
                ok = self.writer.flush(max(0.5, end + phase["gap"] - 1.0 - time.time()))
                done = list(self.commits)
                last = max((c[0] for c in done), default=end)
                extra = {"flushed": ok, "drained": max(0.0, last - end), "txn": list(self.txn),
                         "left": self.writer._pending}
            else:
                done = self.floor_phase(start, end, paced)
            results.append({**phase, **extra, "commits": done,
                            "cpu": time.process_time() - cpu})
        return results


def child(args: argparse.Namespace) -> None:
    tally = LogTally()
    logging.getLogger("offset_journal").addHandler(tally)
    driver = Driver(args.url, args.index, args.n, args.partitions, pooled=args.pooled,
                    max_behind=args.max_behind)
    print("ready", flush=True)
    schedule = json.loads(sys.stdin.readline())
    phases = driver.run(schedule)
    closed = driver.writer.close(30)
    use = resource.getrusage(resource.RUSAGE_SELF)  # all threads; ru_maxrss in KiB
    Path(args.out).write_text(json.dumps({
        "phases": phases, "submitted": driver.batches, "warm_ok": driver.warm_ok,
        "closed": closed, "stats": dataclasses.asdict(driver.writer.stats()),
        "log": {"counts": dict(tally.counts), "first": tally.first},
        "faults": dict(driver.faults),
        "rss_mb": use.ru_maxrss / 1024, "cpu_s": use.ru_utime + use.ru_stime}))
    if closed:  # else the spool is evidence
        shutil.rmtree(driver.spool, ignore_errors=True)


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


def server_counts(conn: Any) -> Sample:
    """Client backends on this database (but the sampler's own): by application name,
    all, running a statement, and idle in a transaction (waiting for their client)."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE application_name = %s), "
        "count(*) FILTER (WHERE application_name = %s), count(*), "
        "count(*) FILTER (WHERE state = 'active'), "
        "count(*) FILTER (WHERE state LIKE 'idle in transaction%%') FROM pg_stat_activity "
        "WHERE datname = current_database() AND backend_type = 'client backend' "
        "AND pid <> pg_backend_pid()", (WRITER_APP, FLOOR_APP)).fetchone()
    assert row is not None
    return {"writer": row[0], "floor": row[1], "server": row[2], "server_active": row[3],
            "server_idle_tx": row[4]}


def console_row(console: Any, command: str, database: str) -> dict[str, Any]:
    """The row of `database` in a SHOW command's answer on PgBouncer's console."""
    cur = console.execute(command)
    names = [d.name for d in cur.description or []]
    for values in cur.fetchall():
        row = dict(zip(names, values, strict=True))
        if row["database"] == database:
            return row
    return {}


def pool_counts(console: Any, database: str) -> Sample:
    """PgBouncer's SHOW POOLS for the database: clients served and waiting for a server
    connection, server connections, the oldest waiting client's wait (s); and its SHOW
    STATS totals (transactions, and microseconds held by transactions, in queries, and
    waited by clients)."""
    pools, stats = console_row(console, "SHOW POOLS", database), \
        console_row(console, "SHOW STATS", database)
    out: Sample = {k: float(stats.get(k, 0)) for k in STAT_KEYS}
    if pools:
        out.update(cl_active=pools["cl_active"], cl_waiting=pools["cl_waiting"],
                   sv_active=pools["sv_active"], sv_idle=pools["sv_idle"],
                   maxwait=pools["maxwait"] + pools.get("maxwait_us", 0) / 1e6)
    return out


def sample_connections(url: str, console_dsn: str | None, stop: threading.Event,
                       samples: list[Sample]) -> None:
    """Every 0.25 s until `stop`: pg_stat_activity on the Postgres of `url` (directly,
    never through the pooler) and, with a pooler, its SHOW POOLS."""
    import psycopg
    import sqlalchemy as sa

    database = str(sa.engine.make_url(url).database)
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(psycopg.connect(plain_dsn(url), autocommit=True,
                                                   application_name="bench-sampler"))
        # the console takes the simple query protocol only: psycopg must never prepare
        console = (stack.enter_context(psycopg.connect(console_dsn, autocommit=True,
                                                       prepare_threshold=None))
                   if console_dsn else None)
        while not stop.is_set():
            sample: Sample = {"t": time.time(), **server_counts(conn)}
            if console is not None:
                sample.update(pool_counts(console, database))
            samples.append(sample)
            stop.wait(0.25)


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("ready"):
        raise RuntimeError(f"a driver process did not start (exit {proc.poll()}): {line!r}")


def start_drivers(url: str, n: int, args: argparse.Namespace, outdir: str
                  ) -> tuple[list[subprocess.Popen[str]], float]:
    """N driver processes, at most ``--start-parallel`` of them starting at once (on 2
    cores, 100 interpreters importing at once only queue for the CPU). Returns them,
    each warmed up and waiting for the schedule, and the seconds it took."""
    t0, k = time.time(), max(1, args.start_parallel)
    procs: list[subprocess.Popen[str]] = []
    for i in range(n):
        if i >= k:
            wait_ready(procs[i - k])
        cmd = [sys.executable, __file__, "--child", "--url", url, "--index", str(i),
               "--n", str(n), "--partitions", str(args.partitions), "--out",
               f"{outdir}/{i}.json", "--max-behind", str(args.max_behind)]
        procs.append(subprocess.Popen(cmd + (["--pooled"] if args.pgbouncer else []),
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    for p in procs[max(0, n - k):]:
        wait_ready(p)
    return procs, time.time() - t0


def run_fleet(url: str, n: int, args: argparse.Namespace, direct_url: str,
              console_dsn: str | None) -> dict[str, Any]:
    """Start N drivers on `url`, run the schedule, sample connections on `direct_url`.
    Returns the drivers' results, the samples, the run's and the start's seconds."""
    outdir = tempfile.mkdtemp(prefix="oj-fleet-out-")
    procs, started = start_drivers(url, n, args, outdir)
    print(f"N={n}: {n} driver processes ready in {started:.0f}s, load average "
          f"{os.getloadavg()}", file=sys.stderr, flush=True)
    schedule = make_schedule(time.time() + 2.0, args)
    samples: list[Sample] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_connections,
                               args=(direct_url, console_dsn, stop, samples))
    sampler.start()
    t0 = time.time()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(json.dumps(schedule) + "\n")
        p.stdin.flush()
    for p in procs:
        p.wait(timeout=max(10.0, schedule[-1]["end"] - time.time() + 120))
    stop.set()
    sampler.join()
    results = [json.loads(Path(f"{outdir}/{i}.json").read_text()) for i in range(n)]
    shutil.rmtree(outdir, ignore_errors=True)
    if os.environ.get("FLEET_DEBUG"):
        print(json.dumps(results)[:3000], file=sys.stderr)
    return {"results": results, "samples": samples, "took": time.time() - t0,
            "started": started}


def summarize(n: int, results: list[Any]) -> list[list[Any]]:
    """The rows of the throughput table for one N."""
    by: dict[tuple[str, bool, int], list[Any]] = {}
    for driver in results:
        for ph in driver["phases"]:
            by.setdefault((ph["kind"], ph["paced"], ph["round"]), []).append(ph)
    rate: dict[tuple[str, bool], list[float]] = {}
    lat: dict[tuple[str, bool], list[float]] = {}
    cpu: defaultdict[tuple[str, bool], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for (kind, paced, _), phs in by.items():
        cpu[(kind, paced)][0] += sum(ph["cpu"] for ph in phs)
        cpu[(kind, paced)][1] += sum(len(ph["commits"]) for ph in phs)
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
                     f"{quantile(fl, .5) * 1e3:.1f} / {quantile(fl, .99) * 1e3:.1f}",
                     " / ".join(f"{c / max(1, b) * 1e3:.1f}"
                                for c, b in (cpu[("writer", paced)], cpu[("floor", paced)]))])
    return rows


def fmt_rates(xs: list[float]) -> str:
    return f"{quantile(xs, .5):.1f} ({min(xs):.1f}-{max(xs):.1f})"


Spans = list[tuple[float, float]]


def phase_spans(results: list[Any]) -> dict[str, Spans]:
    """The writer's and the floor's phases (start, end), and the rests between them
    (from 1.5 s after a phase to the next one)."""
    spans = sorted((p["start"], p["end"], p["kind"]) for p in results[0]["phases"])
    out: dict[str, Spans] = {k: [(a, b) for a, b, kind in spans if kind == k]
                             for k in ("writer", "floor")}
    out["rest"] = [(b + 1.5, c) for (_, b, _), (c, _, _) in zip(spans, spans[1:], strict=False)]
    return out


def peak(samples: list[Sample], key: str, within: Spans) -> float:
    """The largest `key` of the samples taken within any of the spans."""
    return max((s.get(key, 0) for s in samples if any(a <= s["t"] <= b for a, b in within)),
               default=0)


def connection_row(n: int, results: list[Any], samples: list[Sample]) -> list[Any]:
    """Connections per driver: at rest (from 1.5 s after a phase to the next one) and
    under load (during the phases), the maximum of the samples."""
    spans = phase_spans(results)
    w_rest, w_load = peak(samples, "writer", spans["rest"]), peak(samples, "writer",
                                                                   spans["writer"])
    f_load = peak(samples, "floor", spans["floor"])
    return [n, f"{w_rest / n:.2f}", f"{w_load / n:.2f}", f"{f_load / n:.2f}", int(w_rest),
            int(w_load)]


def pooled_connection_row(n: int, pool: int, results: list[Any], samples: list[Sample]
                          ) -> list[Any]:
    """Server connections on Postgres (all of them the pooler's) in the writer's and the
    floor's phases, at rest, after the run; PgBouncer's clients waiting and longest wait."""
    spans = phase_spans(results)
    w, f = spans["writer"], spans["floor"]

    def both(key: str, scale: float = 1.0) -> str:
        return f"{peak(samples, key, w) * scale:.0f} / {peak(samples, key, f) * scale:.0f}"

    overall = max((s["server"] for s in samples), default=0)
    return [n, pool, both("server"), both("server_active"), both("server_idle_tx"),
            f"{peak(samples, 'server', spans['rest']):.0f}",
            f"{samples[-1]['server']:.0f}" if samples else "-", f"{overall:.0f}",
            "yes" if overall <= pool else "**NO**", both("cl_waiting"),
            both("maxwait", 1e3)]


def sample_at(samples: list[Sample], t: float) -> Sample:
    """The last sample taken at or before `t` (else the first)."""
    before = [s for s in samples if s["t"] <= t]
    return before[-1] if before else samples[0]


def pooler_phase_totals(results: list[Any], samples: list[Sample]
                        ) -> dict[tuple[str, bool], defaultdict[str, float]]:
    """Per (variant, paced): PgBouncer's SHOW STATS deltas from each phase's start to the
    next phase's (a writer's backlog, committed after its phase, counts with it), rounds
    summed; the hold during the phases alone ("busy"); the batches committed and, for the
    writer, its transactions and the parsing inside them (its own clock)."""
    phases = sorted(results[0]["phases"], key=lambda p: p["start"])
    bounds = [p["start"] for p in phases] + [samples[-1]["t"]]
    agg: dict[tuple[str, bool], defaultdict[str, float]] = {}
    for ph, a, b in zip(phases, bounds, bounds[1:], strict=False):
        s0, s1, s_end = sample_at(samples, a), sample_at(samples, b), sample_at(samples, ph["end"])
        c = agg.setdefault((ph["kind"], ph["paced"]), defaultdict(float))
        for k in STAT_KEYS:
            c[k] += s1[k] - s0[k]
        c["busy"] += (s_end["total_xact_time"] - s_end["total_wait_time"]
                      - s0["total_xact_time"] + s0["total_wait_time"])
        c["seconds"] += ph["end"] - ph["start"]
        mine = [p for d in results for p in d["phases"] if p["start"] == ph["start"]]
        c["batches"] += sum(len(p["commits"]) for p in mine)
        c["txn"] += sum(p["txn"][0] for p in mine if "txn" in p)
        c["parse"] += sum(p["txn"][1] for p in mine if "txn" in p)
    return agg


def pooler_phase_rows(n: int, results: list[Any], samples: list[Sample]) -> list[list[Any]]:
    """PgBouncer's view per variant and load. Its transaction and query times start when
    the client's first packet arrives, before a server connection is found; so a server
    connection's hold is the transaction time less the wait, its time in queries the
    query time less the wait, and the rest (idle in transaction) is the client's."""
    rows = []
    totals = pooler_phase_totals(results, samples)
    for (kind, paced), c in sorted(totals.items(), key=lambda kv: (not kv[0][1], kv[0][0])):
        x = max(1, c["total_xact_count"])
        hold = (c["total_xact_time"] - c["total_wait_time"]) / x / 1e3
        queries = (c["total_query_time"] - c["total_wait_time"]) / x / 1e3
        parse = f"{c['parse'] / max(1, c['txn']) * 1e3:.1f}" if kind == "writer" else "0"
        rows.append([n, kind, "paced 1/s" if paced else "burst",
                     f"{c['total_xact_count']:.0f}", f"{c['batches'] / x:.2f}",
                     f"{c['total_query_count'] / x:.1f}", f"{hold:.1f}", f"{queries:.1f}",
                     f"{hold - queries:.1f}",
                     f"{hold * x / max(1, c['batches']):.1f}",
                     f"{c['total_wait_time'] / x / 1e3:.1f}",
                     f"{c['busy'] / 1e6 / c['seconds']:.1f}", parse])
    return rows


def journal_counts(url: str) -> dict[str, Any]:
    """Batches per run in the journal and in the floor's scratch table, and the rows of
    rejected_events: read on Postgres directly, after every driver has closed."""
    import psycopg

    with psycopg.connect(plain_dsn(url)) as conn:
        writer = conn.execute("SELECT run_id, count(*) FROM offset_journal.batches "
                              "GROUP BY run_id").fetchall()
        floor = conn.execute("SELECT run_id, count(*) FROM scratch.batches "
                             "GROUP BY run_id").fetchall()
        row = conn.execute("SELECT count(*) FROM offset_journal.rejected_events").fetchone()
    return {"writer": dict(writer), "floor": dict(floor), "rejected_events": row[0] if row else 0}


def integrity_rows(n: int, results: list[Any], counts: dict[str, Any]) -> list[list[Any]]:
    """Per variant: batches submitted against rows in the table, per driver (its run);
    for the writer also its stats (rejected, lost, spooled) and what it logged."""
    rows = []
    for kind in ("writer", "floor"):
        sent = [d["submitted"][kind] for d in results]
        kept = [counts[kind].get(f"fleet-{n}-{i}", 0) for i in range(n)]
        complete = sum(a == b for a, b in zip(sent, kept, strict=True))
        missing = sum(max(0, a - b) for a, b in zip(sent, kept, strict=True))
        extra = sum(max(0, b - a) for a, b in zip(sent, kept, strict=True))
        row = [n, kind, sum(sent), sum(kept), f"{complete}/{n}", missing, extra]
        if kind == "writer":
            stats = [d["stats"] for d in results]
            logged = Counter[str]()
            for d in results:
                logged.update(d["log"]["counts"])
            row += [f"{sum(s['rejected'] for s in stats)} / {counts['rejected_events']}",
                    sum(s["lost"] for s in stats), sum(s["spooled"] for s in stats),
                    f"{logged['WARNING']} / {logged['ERROR'] + logged['CRITICAL']}"]
        else:
            row += ["-", "-", "-", "-"]
        rows.append(row)
    return rows


def process_row(n: int, started: float, k: int, results: list[Any]) -> list[Any]:
    """Start-up, memory and CPU per driver process; how the writers' backlogs drained."""
    rss, cpu = [d["rss_mb"] for d in results], [d["cpu_s"] for d in results]
    phases = [ph for d in results for ph in d["phases"] if ph["kind"] == "writer"]
    drained = {p: max((ph["drained"] for ph in phases if ph["paced"] is p), default=0.0)
               for p in (True, False)}
    late = [ph for ph in phases if not ph["flushed"]]
    return [n, f"{started:.0f} ({k} at a time)", f"{median(rss):.0f} ({max(rss):.0f})",
            f"{median(cpu):.1f} ({max(cpu):.1f})", f"{drained[True]:.1f} / {drained[False]:.1f}",
            f"{len(late)} of {len(phases)}, {sum(ph['left'] for ph in late)} events",
            sum(not d["warm_ok"] for d in results),
            sum(not d["closed"] for d in results)]


def log_messages(results: list[Any]) -> list[str]:
    """The distinct warnings and errors the drivers' writers logged (the first ten), and
    the errors they backed off on, by SQLSTATE and message, with their counts."""
    out: list[str] = []
    for d in results:
        out += [m for m in d["log"]["first"] if m not in out]
    faults: Counter[str] = Counter()
    for d in results:
        faults.update(d["faults"])
    return out[:10] + [f"backed off on {k} (x{v})" for k, v in faults.most_common(10)]


# ------------------------------------------------------------------ the pooler


@contextlib.contextmanager
def pooler(server: Any, args: argparse.Namespace) -> Iterator[Any]:
    """PgBouncer in front of `server` with ``--pgbouncer`` (else None): transaction
    pooling, ``--pool-size`` server connections, and the server's role allowed SHOW
    on PgBouncer's console (``stats_users``: read-only, no effect on pooling)."""
    if not args.pgbouncer:
        yield None
        return
    import sqlalchemy as sa

    from offset_journal.local.pgbouncer import start_pgbouncer

    user = sa.engine.make_url(server.admin_url).username or "postgres"
    bouncer = start_pgbouncer(server.admin_url, pool_size=args.pool_size,
                              settings={"stats_users": user})
    try:
        yield bouncer
    finally:
        bouncer.stop()


def console_dsn(bouncer: Any, url: str) -> str:
    """PgBouncer's admin console (database ``pgbouncer``) as the role of `url`."""
    return plain_dsn(bouncer.url_for(url), database="pgbouncer")


def pooler_settings(bouncer: Any, url: str) -> str:
    """PgBouncer's version, its pgbouncer.ini verbatim, and the pooling settings in
    effect (SHOW CONFIG) beside PgBouncer's defaults."""
    import psycopg

    from offset_journal.local.pgbouncer import pgbouncer_binary

    binary = pgbouncer_binary() or "pgbouncer"
    version = subprocess.run([binary, "--version"], capture_output=True, text=True)
    ini = (bouncer.workdir / "pgbouncer.ini").read_text().strip()
    with psycopg.connect(console_dsn(bouncer, url), autocommit=True,
                         prepare_threshold=None) as conn:
        config = {r[0]: r[1:3] for r in conn.execute("SHOW CONFIG").fetchall()}
    rows = [[k, f"`{config[k][0]}`", f"`{config[k][1]}`"] for k in POOLER_KEYS if k in config]
    return (f"PgBouncer: {binary}, {version.stdout.splitlines()[0]}. Its pgbouncer.ini as "
            f"offset_journal.local.pgbouncer wrote it (all else at PgBouncer's defaults):\n\n"
            f"```ini\n{ini}\n```\n\nThe pooling settings in effect (`SHOW CONFIG` on "
            "PgBouncer's console):\n\n"
            + table(["setting", "value", "PgBouncer's default"], rows) + "\n")


def pooler_log_summary(log: str) -> str:
    """PgBouncer's warnings and errors (counted, first five distinct) and its own stats
    lines (one a minute: transactions/s, average transaction and wait times)."""
    bad = [line for line in log.splitlines()
           if re.search(r"\] (WARNING|ERROR|FATAL) ", line)]
    distinct: list[str] = []
    for line in bad:
        msg = re.sub(r"[CS]-0x[0-9a-f]+", "*", line.split("] ", 1)[-1])
        if msg not in distinct and len(distinct) < 5:
            distinct.append(msg)
    stats = [line.split("] ", 1)[-1] for line in log.splitlines() if "] LOG stats:" in line]
    out = f"PgBouncer's log: {len(bad)} warning/error lines"
    out += "".join(f"\n    {m}" for m in distinct)
    return out + "\nPgBouncer's stats lines:" + "".join(f"\n    {s}" for s in stats)


# ------------------------------------------------------------------ main


def measure(server: Any, bouncer: Any, n: int, args: argparse.Namespace,
            out: dict[str, list[Any]]) -> None:
    """One N: a fresh journal database (and scratch tables), the fleet, its rows."""
    from journal_write import SCRATCH

    from offset_journal.journal.db import make_engine

    url = journal_database(server, f"oj_fleet{n}")
    engine = make_engine(url)
    with engine.begin() as c:
        c.exec_driver_sql(SCRATCH)
    engine.dispose()
    run = run_fleet(bouncer.url_for(url) if bouncer else url, n, args, url,
                    console_dsn(bouncer, url) if bouncer else None)
    results, samples = run["results"], run["samples"]
    out["tput"] += summarize(n, results)
    if bouncer is not None:
        out["conns"].append(pooled_connection_row(n, args.pool_size, results, samples))
        out["pooler"] += pooler_phase_rows(n, results, samples)
    else:
        out["conns"].append(connection_row(n, results, samples))
    out["integrity"] += integrity_rows(n, results, journal_counts(url))
    out["procs"].append(process_row(n, run["started"], args.start_parallel, results))
    out["messages"] += [f"N={n}: {m}" for m in log_messages(results)]
    print(f"N={n}: {run['took']:.0f}s, load average {os.getloadavg()}", file=sys.stderr,
          flush=True)
    print(f"N={n} done ({run['took']:.0f} s after the processes started), load average "
          f"{os.getloadavg()}")


def tree_state() -> str:
    """The checkout measured: HEAD, and the files with uncommitted changes."""
    root = Path(__file__).resolve().parent.parent

    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True)
        return done.stdout.rstrip("\n")  # not strip(): porcelain lines start with a space

    changed = [line[3:] for line in git("status", "--porcelain").splitlines()]
    return (f"Code: {root} at HEAD {git('rev-parse', '--short', 'HEAD') or '?'}, "
            + (f"uncommitted changes in {', '.join(changed)}" if changed else "clean"))


def main(args: argparse.Namespace) -> None:
    via = (f" through PgBouncer (transaction pooling, pool of {args.pool_size})"
           if args.pgbouncer else "")
    header(f"Fleet capacity: N drivers{via} into one Postgres", args)
    print(f"{tree_state()}  \nLoad average at the start: {os.getloadavg()}\n")
    out: dict[str, list[Any]] = {k: [] for k in ("tput", "conns", "pooler", "integrity",
                                                  "procs", "messages")}
    pool_log = ""
    with postgres(args.admin_url) as server, pooler(server, args) as bouncer:
        if bouncer is not None:
            print(pooler_settings(bouncer, server.admin_url))
        for n in args.drivers:
            measure(server, bouncer, n, args, out)
        pool_log = bouncer.log() if bouncer is not None else ""
    report(args, out, pool_log)


def report(args: argparse.Namespace, out: dict[str, list[Any]], pool_log: str) -> None:
    print(f"\n{args.rounds} rounds per N, writer and floor alternating; {args.partitions} "
          f"partitions per batch; paced phases {args.paced}s, burst phases {args.burst}s "
          f"(writer at most {args.max_behind} events behind), {args.gap}s apart. "
          "batches/s: median (min-max) over rounds; latency: all batches of all rounds "
          "(the floor's write includes its wait for a connection from the pooler, if any); "
          "driver CPU: the driver processes' CPU time (all threads) over their batches.\n")
    print(table(["drivers", "load", "writer batches/s", "floor batches/s",
                 "writer / floor", "writer hand-off->commit p50 / p99 ms",
                 "floor write p50 / p99 ms", "driver CPU per batch ms, writer / floor"],
                out["tput"]))
    if args.pgbouncer:
        print("\nPostgres server connections (pg_stat_activity on Postgres itself, every "
              "client backend of the journal's database but the sampler's; sampled every "
              "0.25 s), and PgBouncer's SHOW POOLS. 'a / b': writer phases / floor "
              "phases, the maximum of the samples.\n")
        print(table(["drivers", "pool size", "server connections", "running a statement",
                     "idle in transaction",
                     "at rest (max)", "after the run", "peak, whole run", "<= pool size",
                     "clients waiting in PgBouncer", "longest wait ms"], out["conns"]))
        print("\nPgBouncer per phase (SHOW STATS from each phase's start to the next "
              "phase's, rounds summed). Held: a transaction's hold on its server connection "
              "(PgBouncer's transaction time less the client's wait for a server "
              "connection), split into queries running and idle in transaction (the "
              "client's own work between statements); busy: server connections held on "
              "average during the phases. Last column: parsing inside the transaction (the "
              "writer's own clock; the floor parses before its transaction).\n")
        print(table(["drivers", "variant", "load", "transactions", "batches per transaction",
                     "statements per transaction", "held per transaction ms", "of it in queries ms",
                     "of it idle in transaction ms", "held per batch ms",
                     "client wait per transaction ms", "server connections busy (avg)",
                     "parsing inside the transaction, per transaction ms"], out["pooler"]))
    else:
        print("\nPostgres connections (pg_stat_activity, sampled every 0.25 s): per "
              "driver, and in total.\n")
        print(table(["drivers", "writer per driver at rest",
                     "writer per driver under load (max)", "floor per driver under load (max)",
                     "writer total at rest (max)", "writer total under load (max)"],
                    out["conns"]))
    report_health(out, pool_log)


def report_health(out: dict[str, list[Any]], pool_log: str) -> None:
    print("\nEvery batch submitted, in the table: rows per driver's run (writer: "
          "offset_journal.batches, including one warm-up batch per driver; floor: "
          "scratch.batches) after every driver closed; writer stats summed over drivers.\n")
    print(table(["drivers", "variant", "batches submitted", "rows in the table",
                 "drivers with every batch", "missing", "extra",
                 "rejected: writer stats / rejected_events rows", "lost (writer stats)",
                 "spooled (writer stats)", "writer log warnings / errors"], out["integrity"]))
    print("\nDriver processes: start of all N (before the schedule), peak RSS and CPU "
          "(user + system) per process, median (max); the writer's last commit of a phase's "
          "events after the phase's end, max over drivers, paced / burst (commits later "
          "than 1 s before the next phase are not seen); the writers' flush() at 1 s before "
          "the next phase: driver phases not flushed, and the events they still held (these "
          "commit at the start of the next phase).\n")
    print(table(["drivers", "start s", "RSS MB", "CPU s", "backlog committed after s",
                 "writer phases not flushed 1 s before the next", "warm-up not journaled",
                 "close() not flushed"], out["procs"]))
    print("\nWhat the writers logged (first distinct messages): "
          + ("".join(f"\n    {m}" for m in out["messages"]) or "nothing"))
    if pool_log:
        print("\n" + pooler_log_summary(pool_log))


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
    p.add_argument("--max-behind", type=int, default=50,
                   help="burst: a driver waits while its writer has this many events pending")
    p.add_argument("--start-parallel", type=int, default=3,
                   help="driver processes starting at once (before the schedule)")
    p.add_argument("--pgbouncer", action="store_true",
                   help="writers and floor through one PgBouncer (transaction pooling)")
    p.add_argument("--pool-size", type=int, default=10,
                   help="with --pgbouncer: its default_pool_size (server connections)")
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--pooled", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    child(a) if a.child else main(a)
