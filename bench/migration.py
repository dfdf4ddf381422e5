"""The in-place upgrade 0012 -> 0013 (Kafka offsets as per-source arrays) on a big journal:
how long it takes, how much disk it needs on the way, and that it keeps every value.

1. A journal at revision 0012_kafka_cluster is filled with set-based SQL, as the owner
   (the history guard lets it through): ``--jobs`` runs of ``--batches`` batches 10 s
   apart, one Kafka source of ``--partitions`` partitions each, written as the previous
   release's writer left them: batches with their durations, state operators and sink;
   batch_sources with start/end offset JSON NULL (0003), the whole latestOffset JSON
   and the connector's metrics; one kafka_partitions row per partition and batch.
   Offsets: per partition a base in [10^8, 10^10] from a seeded hash, the end advancing
   0-2,000 per batch, start = the previous batch's end, latest = end + 0-500. The
   batches of all jobs are interleaved in time (ids in trigger order), as a fleet's are.
   Then CHECKPOINT and VACUUM ANALYZE.
2. A fingerprint of every partition value (count, sums of start/end/latest, sum of a
   hash of each whole row) and of every source's latestOffset JSON (source_offsets).
3. ``--by-statement``: the migration's SQL, split into statements, run one by one with
   timing in one transaction on a copy of the database (CREATE DATABASE ... TEMPLATE,
   FILE_COPY), dropped afterwards.
4. ``offset_journal.journal.db.upgrade(url, "0013_offsets_as_arrays")`` timed, while a thread
   sums the data directory's allocated blocks (pg_wal apart too) every ``--sample``
   seconds; WAL written from pg_current_wal_lsn().
5. The fingerprints again, through the kafka_partitions view (must be equal, or the
   script exits 1), what is left in kafka_partition_rows, the layouts, the sizes after
   the upgrade, after a plain VACUUM and after VACUUM FULL. (The source_offsets query
   does not compare like with like: before the upgrade its latestOffset column is the
   stored JSON and Postgres leaves the lateral join out; after it, the JSON is rebuilt
   from the arrays for every source.)

    .venv/bin/python bench/migration.py [--jobs 100 --batches 1000 --partitions 100]
    .venv/bin/python bench/migration.py --jobs 10 --batches 100 --by-statement  # 10^5 rows
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from _common import ROOT, header, postgres, table

MIB = 1024 ** 2
EPOCH = "2026-01-01T00:00:00Z"
TARGET = "0013_offsets_as_arrays"
MIGRATION = ROOT / "migrations" / "versions" / f"{TARGET}.py"
DURATIONS = {"addBatch": 650, "commitOffsets": 40, "getBatch": 1, "latestOffset": 12,
             "queryPlanning": 30, "triggerExecution": 812, "walCommit": 45}
STATE_OPERATORS = [{"operatorName": "stateStoreSave", "numRowsTotal": 5120,
                    "numRowsUpdated": 120, "memoryUsedBytes": 1048576}]

# ------------------------------------------------------------------ the old journal's SQL
# Parameters only (psycopg's %(name)s), no SQL built from strings.

RUNS = """
CREATE TEMP TABLE bench_runs AS
SELECT j AS job, md5('run/' || j)::uuid::text AS run_id,
       md5('query/' || j)::uuid::text AS query_id, 'job-' || lpad(j::text, 3, '0') AS query_name
FROM generate_series(0, %(jobs)s - 1) AS j"""

QUERY_RUNS = """
INSERT INTO offset_journal.query_runs (run_id, query_id, query_name, named, started_at, host,
                                       pid, execution, kafka_cluster_id)
SELECT run_id, query_id, query_name, true, %(epoch)s::timestamptz - interval '1 minute',
       'driver-' || job || '.example.internal', 4000 + job, 'MicroBatchExecution',
       'Zs9kq2WZTd2bq1lJ4ZJrCw'
FROM bench_runs"""

# Per (job, partition): its topic, partition number and the end of the batch before.
STATE = """
CREATE TEMP TABLE bench_state AS
SELECT r.job, p, 'topic-' || lpad((p / 100)::text, 3, '0') AS topic, p %% 100 AS partition,
       100000000 + ((hashint8extended(r.job * 1000003::bigint + p, %(seed)s) %% 9900000001)
                    + 9900000001) %% 9900000001 AS last_end
FROM bench_runs r CROSS JOIN generate_series(0, %(partitions)s - 1) AS p"""

# Batches b0 .. b1 - 1 of every job: start = the previous end, end += 0..2000, lag 0..500.
GEN = """
CREATE TEMP TABLE bench_gen ON COMMIT DROP AS
SELECT x.job, x.p, x.batch_id, x.topic, x.partition, x.end_offset - x.inc AS start_offset,
       x.end_offset, x.end_offset + x.lag AS latest_offset
FROM (SELECT s.job, s.p, s.topic, s.partition, b.batch_id, h.inc, h.lag,
             s.last_end + sum(h.inc) OVER (PARTITION BY s.job, s.p ORDER BY b.batch_id)
                 AS end_offset
      FROM bench_state s
      CROSS JOIN generate_series(%(b0)s, %(b1)s - 1) AS b(batch_id)
      CROSS JOIN LATERAL (
          SELECT ((hashint8extended(k.k, %(seed)s + 1) %% 2001) + 2001) %% 2001 AS inc,
                 ((hashint8extended(k.k, %(seed)s + 2) %% 501) + 501) %% 501 AS lag
          FROM (SELECT (s.job * 1000003::bigint + s.p) * 1000003 + b.batch_id AS k) k) h) x"""

ADVANCE = """
UPDATE bench_state s SET last_end = g.end_offset FROM bench_gen g
WHERE g.job = s.job AND g.p = s.p AND g.batch_id = %(b1)s - 1"""

BATCHES = """
INSERT INTO offset_journal.batches (
    run_id, query_id, query_name, batch_id, trigger_at, batch_duration_ms, durations_ms,
    num_input_rows, input_rows_per_second, processed_rows_per_second, watermark,
    event_time_min, event_time_max, event_time_avg, state_operators, sink_description,
    num_output_rows)
SELECT r.run_id, r.query_id, r.query_name, a.batch_id, t.at, 812, %(durations)s::jsonb, a.n,
       a.n / 10.0, a.n / 0.812, t.at - interval '10 minutes', t.at - interval '11 seconds',
       t.at - interval '1 second', t.at - interval '6 seconds', %(state_ops)s::jsonb,
       'DeltaSink[s3://bucket/table]', a.n
FROM (SELECT job, batch_id, sum(end_offset - start_offset) AS n FROM bench_gen
      GROUP BY job, batch_id) a
JOIN bench_runs r ON r.job = a.job
CROSS JOIN LATERAL (SELECT %(epoch)s::timestamptz + a.batch_id * interval '10 seconds'
                           + a.job * interval '37 milliseconds' AS at) t
ORDER BY a.batch_id, a.job"""

SOURCES = """
INSERT INTO offset_journal.batch_sources (batch_pk, source_index, description, kind,
    start_offset, end_offset, latest_offset, num_input_rows, problem, metrics)
SELECT b.id, 0, %(description)s, 'kafka', NULL, NULL, a.latest, a.n, NULL,
       jsonb_build_object('avgOffsetsBehindLatest', (a.lag_sum::float8 / a.parts)::text,
                          'maxOffsetsBehindLatest', a.lag_max::text,
                          'minOffsetsBehindLatest', a.lag_min::text)
FROM (SELECT job, batch_id, jsonb_object_agg(topic, latest) AS latest, sum(n) AS n,
             sum(lag_sum) AS lag_sum, max(lag_max) AS lag_max, min(lag_min) AS lag_min,
             sum(parts) AS parts
      FROM (SELECT job, batch_id, topic, sum(end_offset - start_offset) AS n,
                   jsonb_object_agg(partition::text, latest_offset) AS latest,
                   sum(latest_offset - end_offset) AS lag_sum, count(*) AS parts,
                   max(latest_offset - end_offset) AS lag_max,
                   min(latest_offset - end_offset) AS lag_min
            FROM bench_gen GROUP BY job, batch_id, topic) t
      GROUP BY job, batch_id) a
JOIN bench_runs r ON r.job = a.job
JOIN offset_journal.batches b ON b.run_id = r.run_id AND b.batch_id = a.batch_id
ORDER BY b.id"""

PARTITIONS = """
INSERT INTO offset_journal.kafka_partitions (batch_pk, source_index, topic, partition,
                                             start_offset, end_offset, latest_offset)
SELECT b.id, 0, g.topic, g.partition, g.start_offset, g.end_offset, g.latest_offset
FROM bench_gen g
JOIN bench_runs r ON r.job = g.job
JOIN offset_journal.batches b ON b.run_id = r.run_id AND b.batch_id = g.batch_id
ORDER BY b.id, g.topic, g.partition"""

# ------------------------------------------------------------------ checks and sizes

FINGERPRINT = """
SELECT count(*), sum(start_offset), sum(end_offset), sum(latest_offset),
       sum(hashtext(concat_ws('/', batch_pk, source_index, topic, partition, start_offset,
                              end_offset, latest_offset))::bigint)
FROM offset_journal.kafka_partitions"""

LATEST_FINGERPRINT = """
SELECT count(*), count(latest_offset), sum(hashtext(latest_offset::text)::bigint)
FROM offset_journal.source_offsets"""

RELATION_SIZES = """
SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'offset_journal' AND c.relkind = 'r'"""

AFTER_COUNTS = """
SELECT (SELECT count(*) FROM offset_journal.kafka_partition_rows),
       (SELECT count(*) FROM offset_journal.kafka_layouts),
       count(*) FILTER (WHERE kafka_layout IS NOT NULL),
       count(*) FILTER (WHERE read_spans IS NOT NULL AND latest_lags IS NOT NULL),
       count(*) FILTER (WHERE kind = 'kafka' AND latest_offset IS NULL),
       count(*)
FROM offset_journal.batch_sources"""


def connect(url: str, autocommit: bool = True) -> Any:
    """A psycopg connection to a server URL (``postgresql://...?host=/socket/dir``)."""
    import psycopg

    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"),
                           autocommit=autocommit)


def mib(n: float) -> str:
    return f"{n / MIB:,.1f}"


def loadavg() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


# ------------------------------------------------------------------ disk


def disk_usage(datadir: str) -> tuple[int, int]:
    """(allocated bytes under ``datadir``, of which under pg_wal): st_blocks * 512 of
    every file, so sparse and preallocated files count as the disk they hold. Files
    removed while walking count 0."""
    total = wal = 0
    stack = [(datadir, False)]
    while stack:
        path, in_wal = stack.pop()
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append((e.path, in_wal or (path == datadir and e.name == "pg_wal")))
                    continue
                size = e.stat(follow_symlinks=False).st_blocks * 512
            except FileNotFoundError:
                continue
            total += size
            wal += size if in_wal else 0
    return total, wal


@dataclass
class DiskSampler:
    """Samples ``disk_usage(datadir)`` every ``interval`` seconds in a thread, keeping the
    first sample, the peaks and the count."""

    datadir: str
    interval: float = 0.5
    first: tuple[int, int] = (0, 0)
    peak_total: int = 0
    peak_wal: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        total, wal = disk_usage(self.datadir)
        if not self.samples:
            self.first = (total, wal)
        self.samples += 1
        self.peak_total = max(self.peak_total, total)
        self.peak_wal = max(self.peak_wal, wal)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> DiskSampler:
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


@dataclass
class Sizes:
    """One moment's sizes: the database, the data directory (and its pg_wal), tables."""

    database: int
    datadir: int | None
    wal: int | None
    relations: dict[str, int]


def sizes(url: str, datadir: str | None) -> Sizes:
    with connect(url) as conn:
        database = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        relations = dict(conn.execute(RELATION_SIZES).fetchall())
    total, wal = disk_usage(datadir) if datadir else (None, None)
    return Sizes(database, total, wal, relations)


def data_directory(admin_url: str) -> str | None:
    """The server's data directory when this process can read it (a local server)."""
    with connect(admin_url) as conn:
        path = conn.execute("SHOW data_directory").fetchone()[0]
    return path if os.access(os.path.join(path, "base"), os.R_OK | os.X_OK) else None


def wal_lsn(admin_url: str) -> str:
    with connect(admin_url) as conn:
        return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])


def wal_bytes(admin_url: str, start: str, end: str) -> int:
    with connect(admin_url) as conn:
        return int(conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)",
                                (end, start)).fetchone()[0])


def settings(admin_url: str) -> str:
    names = ("server_version", "shared_buffers", "work_mem", "maintenance_work_mem",
             "temp_buffers", "max_wal_size", "wal_level", "fsync")
    with connect(admin_url) as conn:
        return ", ".join(f"{n} {conn.execute('SELECT current_setting(%s)', (n,)).fetchone()[0]}"
                         for n in names)


# ------------------------------------------------------------------ the old journal


def build(url: str, args: argparse.Namespace) -> float:
    """The journal at 0012 with ``args``' data (see the module docstring); seconds."""
    from alembic import command

    from offset_journal.journal.db import alembic_config

    command.upgrade(alembic_config(url), "0012_kafka_cluster")
    topics = sorted({f"topic-{i // 100:03d}" for i in range(args.partitions)})
    params = {"jobs": args.jobs, "partitions": args.partitions, "seed": args.seed,
              "epoch": EPOCH, "description": f"KafkaV2[Subscribe[{','.join(topics)}]]",
              "durations": json.dumps(DURATIONS), "state_ops": json.dumps(STATE_OPERATORS)}
    t0 = time.perf_counter()
    with connect(url, autocommit=False) as conn:
        for sql in (RUNS, QUERY_RUNS, STATE):
            conn.execute(sql, params)
        conn.commit()
        step = max(1, args.chunk_rows // (args.jobs * args.partitions))
        for b0 in range(0, args.batches, step):
            chunk = {**params, "b0": b0, "b1": min(b0 + step, args.batches)}
            for sql in (GEN, ADVANCE, BATCHES, SOURCES, PARTITIONS):
                conn.execute(sql, chunk)
            conn.commit()
            if b0 // step % 10 == 0:
                print(f"built batches < {chunk['b1']:,} of {args.batches:,} "
                      f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    with connect(url) as conn:
        conn.execute("CHECKPOINT")
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
    return time.perf_counter() - t0


Fingerprint = tuple[tuple[Any, ...], tuple[Any, ...], float, float]


def fingerprints(url: str) -> Fingerprint:
    """(partition values' fingerprint, latestOffset JSONs' fingerprint, and the seconds
    each query took)."""
    with connect(url) as conn:
        t0 = time.perf_counter()
        rows = tuple(conn.execute(FINGERPRINT).fetchone())
        t1 = time.perf_counter()
        latest = tuple(conn.execute(LATEST_FINGERPRINT).fetchone())
    return rows, latest, t1 - t0, time.perf_counter() - t1


# ------------------------------------------------------------------ statement by statement

_TOKEN = re.compile(r"\$[A-Za-z_]*\$|'|--|;")


def split_sql(text: str) -> list[str]:
    """The statements of a SQL script: split at semicolons outside quotes, dollar
    quotes and comments."""
    out: list[str] = []
    start = pos = 0
    while (m := _TOKEN.search(text, pos)) is not None:
        tok = m.group()
        if tok == ";":
            out.append(text[start:m.end()].strip())
            start = pos = m.end()
            continue
        close = {"'": "'", "--": "\n"}.get(tok, tok)
        end = text.find(close, m.end())
        pos = len(text) if end < 0 else end + len(close)
    tail = text[start:].strip()
    if re.sub(r"--[^\n]*", "", tail).strip():
        out.append(tail)
    return [s for s in out if re.sub(r"--[^\n]*", "", s).strip(" \n;")]


class _RecordingOp:
    def __init__(self) -> None:
        self.sql: list[str] = []

    def execute(self, sql: str) -> None:
        self.sql.append(sql)


def migration_statements() -> list[str]:
    """What 0013's upgrade() executes, statement by statement (its op.execute calls
    recorded, then split)."""
    spec = importlib.util.spec_from_file_location("oj_migration_0013", MIGRATION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    recorder = _RecordingOp()
    setattr(module, "op", recorder)  # noqa: B010 (the migration reads it at call time)
    module.upgrade()
    return [s for block in recorder.sql for s in split_sql(block)]


def label(statement: str) -> str:
    text = " ".join(re.sub(r"--[^\n]*", "", statement).split())
    return (text[:90] + "...") if len(text) > 90 else text


@contextmanager
def copy_of(server: Any, url: str) -> Iterator[str]:
    """A copy of ``url``'s database (file copy, not through the WAL), dropped after."""
    import sqlalchemy as sa
    from psycopg import sql

    name = str(sa.engine.make_url(url).database)
    copy = f"{name}_copy"
    with connect(server.admin_url) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
            sql.Identifier(copy), sql.Identifier(name)))
    try:
        yield server.url_for(copy)
    finally:
        server.drop_database(server.url_for(copy))
        with connect(server.admin_url) as conn:
            conn.execute("CHECKPOINT")


def by_statement(url: str) -> list[tuple[str, float]]:
    """Each statement of the migration run in one transaction on ``url``, timed."""
    timings: list[tuple[str, float]] = []
    with connect(url, autocommit=False) as conn:
        for statement in migration_statements():
            t0 = time.perf_counter()
            conn.execute(statement)
            timings.append((label(statement), time.perf_counter() - t0))
        t0 = time.perf_counter()
        conn.commit()
        timings.append(("COMMIT", time.perf_counter() - t0))
    return timings


def statement_table(timings: list[tuple[str, float]]) -> str:
    total = sum(s for _, s in timings)
    rows = [[i + 1, f"`{text}`", f"{s:.2f}", f"{100 * s / total:.1f}"]
            for i, (text, s) in enumerate(timings) if s >= 0.01 or text == "COMMIT"]
    rows.append(["", "**all statements**", f"**{total:.2f}**", "100"])
    return table(["#", "statement (statements under 0.01 s left out)", "seconds", "%"], rows)


# ------------------------------------------------------------------ the run


@dataclass
class Results:
    build_s: float = 0.0
    upgrade_s: float = 0.0
    wal_written: int = 0
    disk: DiskSampler | None = None
    moments: dict[str, Sizes] = field(default_factory=dict)
    prints: dict[str, Fingerprint] = field(default_factory=dict)
    counts: tuple[int, ...] = ()
    statements: list[tuple[str, float]] = field(default_factory=list)
    loads: dict[str, str] = field(default_factory=dict)
    config: str = ""


def upgrade_measured(server: Any, url: str, datadir: str | None, interval: float,
                     res: Results) -> None:
    """``offset_journal.journal.db.upgrade(url, TARGET)``, timed, with the data directory sampled
    (to 0013 only: the later revisions are not what this measures)."""
    from offset_journal.journal.db import current_revision, upgrade

    lsn = wal_lsn(server.admin_url)
    print(f"upgrading from {current_revision(url)}", file=sys.stderr, flush=True)
    res.disk = DiskSampler(datadir, interval) if datadir else None
    with res.disk if res.disk is not None else nullcontext():
        t0 = time.perf_counter()
        upgrade(url, TARGET)
        res.upgrade_s = time.perf_counter() - t0
    res.wal_written = wal_bytes(server.admin_url, lsn, wal_lsn(server.admin_url))
    if current_revision(url) != TARGET:
        raise SystemExit(f"bench: the upgrade ended at {current_revision(url)}, not {TARGET}")


def vacuumed(url: str, datadir: str | None, full: bool) -> Sizes:
    with connect(url) as conn:
        conn.execute("VACUUM FULL" if full else "VACUUM")
        conn.execute("CHECKPOINT")
    return sizes(url, datadir)


def run(args: argparse.Namespace) -> Results:
    res = Results(loads={"start": loadavg()})
    with postgres(args.admin_url) as server:
        datadir = data_directory(server.admin_url)
        res.config = settings(server.admin_url)
        url = server.create_database("oj_migration")
        res.build_s = build(url, args)
        res.loads["after the build"] = loadavg()
        res.moments["before the upgrade (after VACUUM ANALYZE, CHECKPOINT)"] = sizes(url,
                                                                                    datadir)
        res.prints["before (table)"] = fingerprints(url)
        if args.by_statement:
            print("timing the statements on a copy", file=sys.stderr, flush=True)
            with copy_of(server, url) as copy:
                res.statements = by_statement(copy)
            res.loads["after the statements"] = loadavg()
        upgrade_measured(server, url, datadir, args.sample, res)
        res.loads["after the upgrade"] = loadavg()
        res.moments["right after the upgrade"] = sizes(url, datadir)
        res.prints["after (view)"] = fingerprints(url)
        with connect(url) as conn:
            res.counts = tuple(conn.execute(AFTER_COUNTS).fetchone())
        res.moments["after a plain VACUUM, CHECKPOINT"] = vacuumed(url, datadir, False)
        res.moments["after VACUUM FULL, CHECKPOINT"] = vacuumed(url, datadir, True)
        res.loads["end"] = loadavg()
    return res


# ------------------------------------------------------------------ the report


def size_rows(res: Results) -> list[list[str]]:
    def cell(v: int | None) -> str:
        return "-" if v is None else mib(v)

    moments = list(res.moments.items())
    rows = [[name, mib(s.database), cell(s.datadir), cell(s.wal)] for name, s in moments[:1]]
    if res.disk is not None:
        first = res.disk.first[0]
        rows.append([f"peak during the upgrade ({res.disk.samples} samples; growth "
                     f"+{mib(res.disk.peak_total - first)} MiB over its start)", "-",
                     mib(res.disk.peak_total), mib(res.disk.peak_wal)])
    rows += [[name, mib(s.database), cell(s.datadir), cell(s.wal)] for name, s in moments[1:]]
    return rows


def relation_table(res: Results) -> str:
    moments = list(res.moments.values())
    renamed = [{("kafka_partition_rows" if k == "kafka_partitions" else k): v
                for k, v in m.relations.items()} for m in moments]
    names = sorted({k for m in renamed for k, v in m.items() if v >= MIB})
    rows = [[("kafka_partitions (table) -> kafka_partition_rows"
              if n == "kafka_partition_rows" else n),
             *(mib(m.get(n, 0)) for m in renamed)] for n in names]
    rows.append(["**all journal tables**", *(mib(sum(m.values())) for m in renamed)])
    return table(["table (with indexes, TOAST), MiB", *res.moments], rows)


def fingerprint_table(res: Results) -> tuple[str, bool]:
    heads = ["kafka_partitions", "rows", "sum(start)", "sum(end)", "sum(latest)",
             "sum(row hash)", "seconds", "source_offsets: sources", "with latestOffset",
             "sum(its hash)", "seconds"]
    rows = [[name, *(f"{v:,}" if v is not None else "NULL" for v in part), f"{s1:.1f}",
             *(f"{v:,}" if v is not None else "NULL" for v in latest), f"{s2:.1f}"]
            for name, (part, latest, s1, s2) in res.prints.items()]
    (a, la, _, _), (b, lb, _, _) = res.prints.values()
    return table(heads, rows), a == b and la == lb


def report(res: Results, args: argparse.Namespace, total_s: float) -> None:
    rows = args.jobs * args.batches * args.partitions
    print(f"Server: {res.config}.  \nJournal: {args.jobs} jobs x {args.batches:,} batches x "
          f"{args.partitions} partitions = {rows:,} kafka_partitions rows, "
          f"{args.jobs * args.batches:,} batches and sources (seed {args.seed}), built at "
          f"0012_kafka_cluster in {res.build_s:.1f} s (set-based SQL, transactions of "
          f"~{args.chunk_rows:,} rows, then CHECKPOINT and VACUUM ANALYZE).\n")
    if res.statements:
        print("The migration's statements one by one, in one transaction, on a copy of "
              "the database (CREATE DATABASE ... TEMPLATE, STRATEGY FILE_COPY), before the "
              "measured upgrade:\n")
        print(statement_table(res.statements) + "\n")
    print(f"**Upgrade 0012 -> 0013 (offset_journal.journal.db.upgrade): {res.upgrade_s:.1f} s**, "
          f"{rows / res.upgrade_s:,.0f} partition rows/s; WAL written "
          f"{mib(res.wal_written)} MiB (pg_current_wal_lsn difference).\n")
    print(table(["moment", "pg_database_size MiB", "data directory on disk MiB "
                 "(allocated blocks)", "of which pg_wal MiB"], size_rows(res)) + "\n")
    print(relation_table(res) + "\n")
    left, layouts, converted, narrow, json_dropped, sources = res.counts
    print(f"After: {left:,} rows left in kafka_partition_rows, {layouts:,} kafka_layouts, "
          f"{converted:,} of {sources:,} batch_sources converted to arrays ({narrow:,} with "
          f"2-byte spans and lags), {json_dropped:,} with their latestOffset JSON dropped "
          "(rebuilt by source_offsets).\n")
    text, equal = fingerprint_table(res)
    print(text + "\n")
    print("Load average (1 / 5 / 15 min): "
          + "; ".join(f"{k}: {v}" for k, v in res.loads.items()) + "  ")
    print(f"Whole script: {total_s:.0f} s.\n")
    if not equal or left:
        print("fingerprint: DIFFERENT" if not equal else
              f"fingerprint: equal, but {left:,} rows left in kafka_partition_rows")
        raise SystemExit(1)
    print("fingerprint: equal")


def main(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    header("The in-place upgrade 0012 -> 0013 (Kafka offsets as arrays) on a big journal",
           args)
    res = run(args)
    report(res, args, time.perf_counter() - t0)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=100)
    p.add_argument("--batches", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--seed", type=int, default=22)
    p.add_argument("--chunk-rows", type=int, default=100_000,
                   help="partition rows per transaction of the build (default %(default)s)")
    p.add_argument("--sample", type=float, default=0.5,
                   help="seconds between samples of the data directory (default %(default)s)")
    p.add_argument("--by-statement", action="store_true",
                   help="also time the migration's statements one by one on a copy first")
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    main(p.parse_args())
