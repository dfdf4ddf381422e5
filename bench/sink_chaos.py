"""Exactly once into a file sink and a Delta sink across driver SIGKILLs at random
points.

One driver process (Python and its JVM) runs two journaled queries of
``jobs/kafka_to_sink.py`` from one Kafka topic: ``--sink parquet`` and ``--sink delta``.
It is SIGKILLed at a random moment, uniform in ``--window`` seconds: from when both
queries started for one kill in three, else from when both committed a first batch (the
Delta query starts slowly), so a kill lands anywhere: before a query's first batch,
inside a batch, between its sink's commit and ``commits/N``, between batches. More
records are produced; the next driver starts both queries on NEW checkpoints with
``--from-journal --old-checkpoint`` (the newest earlier checkpoint that planned a
batch). After ``--kills`` kills a last driver drains the topic (``availableNow``) and
reads both sinks (the file sink through each checkpoint's ``_spark_metadata``): every
(partition, offset) of the topic must be there exactly once. Printed per kill: where
each query stood (the batch its sink held last, its last commit, the journal's last
batch); then the totals: records, duplicates, missing, and the kills that caught a batch
in flight (the sink ahead of ``commits/``: the case a plan from the journal alone writes
twice).

    .venv/bin/python bench/sink_chaos.py [--kills 10 --records 600]

``--driver`` runs one driver (the script starts it; not run by hand).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
JOBS = HERE.parent / "jobs"
SINKS = ("parquet", "delta")
DRIVER_ENV = {"PYSPARK_SUBMIT_ARGS": "--conf spark.databricks.delta.snapshotPartitions=2 "
                                     "--conf spark.ui.showConsoleProgress=false pyspark-shell"}


def checkpoints(work: Path, sink: str, cycle: int) -> tuple[Path, Path | None]:
    """This cycle's new checkpoint, and the newest earlier one that planned a batch."""
    for c in range(cycle - 1, -1, -1):
        old = work / f"ck-{sink}-{c}"
        if any((old / "offsets").glob("[0-9]*")):
            return work / f"ck-{sink}-{cycle}", old
    return work / f"ck-{sink}-{cycle}", None


# --------------------------------------------------------------------------- the driver


def run_driver(args: argparse.Namespace) -> None:
    """Both queries from the journal, until killed (or, ``--final``, drained and read)."""
    sys.path.insert(0, str(JOBS))  # the jobs' own _common, not bench's
    import _common as jobs_common  # type: ignore[import-not-found]
    import kafka_to_sink  # type: ignore[import-not-found]

    import offset_journal

    work = Path(args.work)
    spark = jobs_common.make_spark("sink-chaos", None, delta=True)
    spark.sparkContext.setLogLevel("ERROR")
    listener = offset_journal.attach(spark, database_url=args.url,
                                     spool_dir=str(work / "spool"),
                                     kafka_bootstrap_servers=args.bootstrap_servers)
    queries = []
    for sink in SINKS:
        new, old = checkpoints(work, sink, args.cycle)
        argv = ["--bootstrap-servers", args.bootstrap_servers, "--topics", args.topic,
                "--query-name", f"chaos-{sink}", "--database-url", args.url,
                "--sink", sink, "--output", str(work / f"out-{sink}"),
                "--checkpoint", str(new), "--from-journal",
                "--trigger", "available-now" if args.final else "400 milliseconds"]
        if not args.final:  # the last driver drains in one batch
            argv += ["--max-offsets-per-trigger", str(args.max_offsets)]
        argv += ["--old-checkpoint", str(old)] if old is not None else []
        queries.append(kafka_to_sink.build_query(spark, kafka_to_sink.parser().parse_args(argv)))
    print("started", flush=True)
    if not args.final:
        spark.streams.awaitAnyTermination()
        return
    for q in queries:
        q.awaitTermination()
        assert q.exception() is None, q.exception()
        listener.wait_terminated(q.runId, 120)
    listener.close()
    read = {sink: sink_rows(spark, sink, work / f"out-{sink}") for sink in SINKS}
    print("ROWS " + json.dumps(read), flush=True)


def sink_rows(spark: Any, sink: str, out: Path) -> list[list[int]]:
    """(partition, offset) of every row the sink holds, as its readers see it."""
    frames = ([spark.read.schema("partition INT, offset BIGINT").parquet(str(d))
               for d in sorted(out.iterdir()) if (d / "_spark_metadata").is_dir()]
              if sink == "parquet" else [spark.read.format("delta").load(str(out))])
    return [[r[0], r[1]] for df in frames for r in df.select("partition", "offset").collect()]


# --------------------------------------------------------------------------- the run


def start(args: argparse.Namespace, ctx: dict[str, Any], cycle: int, final: bool,
          ) -> subprocess.Popen[bytes]:
    log = Path(ctx["work"]) / f"driver-{cycle}.log"
    cmd = [sys.executable, __file__, "--driver", "--work", ctx["work"], "--url", ctx["url"],
           "--bootstrap-servers", ctx["servers"], "--topic", ctx["topic"],
           "--cycle", str(cycle), "--max-offsets", str(args.max_offsets)]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               **DRIVER_ENV)
    return subprocess.Popen([*cmd, *(["--final"] if final else [])], env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def where(ctx: dict[str, Any], cycle: int) -> dict[str, str]:
    """Per query: the batch its sink held last / its last commit / the journal's last."""
    from offset_journal.checkpoint import read_checkpoint
    from offset_journal.checkpoint.sinks import read_delta_txns, read_file_sink_log
    from offset_journal.journal import Journal

    work = Path(ctx["work"])
    out: dict[str, str] = {}
    with Journal(ctx["url"]) as journal:
        for sink in SINKS:
            ck = work / f"ck-{sink}-{cycle}"
            if not (ck / "metadata").exists():
                out[sink] = "not started"
                continue
            c = read_checkpoint(ck)
            if sink == "parquet":
                digest = hashlib.sha1(os.path.abspath(ck).encode()).hexdigest()[:12]
                log = read_file_sink_log(work / "out-parquet" / f"checkpoint={digest}")
                held = log.last_batch if log else None
            else:
                txns = read_delta_txns(work / "out-delta")
                held = txns.txns.get(c.query_id or "") if txns else None
            commit = c.last_committed.batch_id if c.last_committed else None
            last = journal.last_batch(f"chaos-{sink}")
            mine = last.batch_id if last and last.query_id == c.query_id else None
            flight = held is not None and (commit is None or held > commit)
            out[sink] = (f"sink {held} / commit {commit} / journal {mine}"
                         + (" IN FLIGHT" if flight else ""))
    return out


def wait_started(proc: subprocess.Popen[bytes], log: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while "started" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"driver did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def wait_journaled(proc: subprocess.Popen[bytes], ctx: dict[str, Any],
                   timeout: float = 600) -> None:
    from offset_journal.journal import Journal

    deadline = time.monotonic() + timeout
    with Journal(ctx["url"]) as journal:
        while not all(journal.last_batch(f"chaos-{sink}") for sink in SINKS):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the first driver journaled no batch of each query")
            time.sleep(0.2)


def wait_committed(proc: subprocess.Popen[bytes], ctx: dict[str, Any], cycle: int,
                   timeout: float = 600) -> None:
    """Until both queries' new checkpoints have a commit (or the driver died)."""
    deadline = time.monotonic() + timeout
    work = Path(ctx["work"])
    while not all(any((work / f"ck-{sink}-{cycle}" / "commits").glob("[0-9]*"))
                  for sink in SINKS):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"driver {cycle}: no commit of both queries")
        time.sleep(0.2)


def chaos(args: argparse.Namespace, ctx: dict[str, Any], cluster: Any) -> list[list[Any]]:
    rng = random.Random(args.seed)
    rows = []
    for cycle in range(args.kills):
        proc = start(args, ctx, cycle, final=False)
        t0 = time.monotonic()
        wait_started(proc, Path(ctx["work"]) / f"driver-{cycle}.log")
        if cycle == 0:  # a plan needs one journaled batch: before it, --starting-offsets
            wait_journaled(proc, ctx)
        # Two kills in three once both queries committed a batch here (the Delta query
        # starts slowly: else most kills would miss it), one in three from the start.
        early = cycle % 3 == 2
        if not early:
            wait_committed(proc, ctx, cycle)
        delay = rng.uniform(0, args.window)
        time.sleep(delay)  # the random point: no assertion rests on it
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        stood = where(ctx, cycle)
        rows.append([cycle + 1, f"{time.monotonic() - t0:.0f}",
                     f"{'start' if early else 'first commits'} + {delay:.1f}",
                     stood["parquet"], stood["delta"]])
        print(f"kill {cycle + 1}: {stood}", file=sys.stderr, flush=True)
        cluster.produce(ctx["topic"], args.more, start=args.records + cycle * args.more)
    return rows


def main(args: argparse.Namespace) -> int:
    from _common import header, journal_database, postgres, rmtree, table  # bench's

    from offset_journal.testing import start_kafka

    header("Exactly once into file and Delta sinks across driver SIGKILLs", args)
    work = tempfile.mkdtemp(prefix="oj-bench-chaos-")
    t0 = time.monotonic()
    cluster = start_kafka()
    try:
        with postgres(args.admin_url) as server:
            ctx = {"work": work, "url": journal_database(server, "oj_bench_chaos"),
                   "servers": cluster.bootstrap_servers, "topic": f"chaos-{os.getpid()}"}
            produced = len(cluster.produce(ctx["topic"], args.records))
            kills = chaos(args, ctx, cluster)
            produced += args.kills * args.more
            final = start(args, ctx, args.kills, final=True)
            final.wait(900)
            text = (Path(work) / f"driver-{args.kills}.log").read_text(errors="replace")
            line = [x for x in text.splitlines() if x.startswith("ROWS ")]
            if final.returncode != 0 or not line:
                raise SystemExit(f"the final driver failed:\n{text[-3000:]}")
            read = json.loads(line[-1][5:])
            expected = _expected(cluster, ctx["topic"])
    finally:
        cluster.stop()
    print(table(["kill", "driver s", "killed at", "parquet: sink / commit / journal",
                 "delta: sink / commit / journal"], kills))
    totals, bad = [], False
    for sink in SINKS:
        got = [tuple(r) for r in read[sink]]
        dupes, missing = len(got) - len(set(got)), len(expected - set(got))
        flights = sum(1 for k in kills if "IN FLIGHT" in k[3 + SINKS.index(sink)])
        bad |= bool(dupes or missing or set(got) - expected)
        totals.append([sink, args.kills, flights, produced, len(got), dupes, missing])
    print()
    print(table(["sink", "kills", "kills with a batch in flight", "records produced",
                 "rows in the sink", "duplicates", "missing"], totals))
    print(f"\n{args.kills + 1} driver starts, {time.monotonic() - t0:.0f} s in all.")
    if bad:
        print("\n**not exactly once**: work directory kept at " + work)
        return 1
    rmtree(work)
    return 0


def _expected(cluster: Any, topic: str) -> set[tuple[int, int]]:
    from offset_journal.kafka.admin import topic_state

    state = topic_state(cluster.bootstrap_servers, [topic], timeout=30)
    return {(p, o) for p, (low, high) in state[topic].items() for o in range(low, high)}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--records", type=int, default=600, help="records before the first kill")
    p.add_argument("--more", type=int, default=60, help="records produced after each kill")
    p.add_argument("--max-offsets", type=int, default=8, help="maxOffsetsPerTrigger")
    p.add_argument("--window", type=float, default=8.0,
                   help="the kill falls uniformly in this many seconds after the start, or "
                        "(two kills in three) after both queries' first commits")
    p.add_argument("--seed", type=int, default=41)
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    p.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--final", action="store_true", help=argparse.SUPPRESS)
    for name in ("--work", "--url", "--bootstrap-servers", "--topic"):
        p.add_argument(name, help=argparse.SUPPRESS)
    p.add_argument("--cycle", type=int, default=0, help=argparse.SUPPRESS)
    return p


if __name__ == "__main__":
    arguments = parser().parse_args()
    if arguments.driver:
        run_driver(arguments)
        sys.exit(0)
    sys.exit(main(arguments))
