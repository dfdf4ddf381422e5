"""``offset-journal demo``: the project's story, end to end, on this machine.

A journaled Kafka -> Parquet job (jobs/kafka_to_sink.py) runs as "v1"; it is stopped
mid-stream for an upgrade that needs a NEW checkpoint; more records arrive meanwhile;
"v2" starts on an empty checkpoint from the journal, its plan holding the journal
against what v1's file sink committed (its ``_spark_metadata`` log, with v1's checkpoint
for a batch the sink holds beyond the journal). The demo then proves that every record
produced is in the output exactly once, and shows offset history in SQL.

With no URLs it uses an embedded Postgres (pgserver) and a real single-node Kafka broker
started from Maven Central's jars (both from :mod:`offset_journal.local.services`); given
--database-url and --bootstrap-servers it runs against those. It needs the ``demo``
extra (``pip install 'offset-journal[demo]'``); without it, it says so in one line.
Spark reads Kafka with its own connector (``format("kafka")``), whose jars (matching
this PySpark) go in through ``spark.jars``.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..formatting import table
from ..journal import Journal
from ..journal.db import ENV_URL, upgrade
from ..local.services import KafkaCluster, start_kafka, start_postgres, wait_for_kafka
from ..redaction import redact
from ..values import parse_timeout

INSTALL_HINT = "pip install 'offset-journal[demo]'"

def _say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class _Progress:
    """One line that counts up while Spark starts: redrawn in place on a terminal, and
    a line per change where output goes to a file or a pipe (never the same line
    twice, as 'v1 batches so far: 0' was, once every half second)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.last: object = None
        self.tty = sys.stdout.isatty()

    def show(self, value: object) -> None:
        if value == self.last:
            return
        self.last = value
        line = f"[demo {time.strftime('%H:%M:%S')}]   {self.label}: {value}"
        if self.tty:
            print(f"\r{line}\x1b[K", end="", flush=True)
        else:
            print(line, flush=True)

    def done(self) -> None:
        if self.tty and self.last is not None:
            print(flush=True)


def _jobs_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # offset_journal/
    for candidate in (package.parent / "jobs", package / "_jobs"):
        if (candidate / "kafka_to_sink.py").is_file():
            return candidate
    raise SystemExit("offset-journal: error: the jobs/ folder is not installed")


def _load_job(name: str) -> Any:
    path = _jobs_dir() / f"{name}.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def missing_requirements(*, embedded_postgres: bool = True) -> list[str]:
    """The packages the demo needs that do not import here (pip names, in order).

    Spark with its Kafka connector, confluent-kafka to produce the records, and pgserver
    when no database is given: the ``demo`` extra. (Java and Maven are checked when the
    jars are fetched.)"""
    needed = {"pyspark": "pyspark", "confluent_kafka": "confluent-kafka"}
    if embedded_postgres:
        needed["pgserver"] = "pgserver"
    missing = []
    for module, package in needed.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    return missing


def _start_services(args: argparse.Namespace, work: Path,
                    stops: list[Any]) -> tuple[str, KafkaCluster]:
    """The journal database and the Kafka cluster: the given ones, else an embedded
    Postgres (its data in the work dir) and a local broker. Their ``stop`` go in
    ``stops``."""
    url = args.database_url or os.environ.get(ENV_URL)
    if url:
        _say(f"journal database: {redact(url)}")
    else:
        _say("starting an embedded Postgres for the journal (pgserver) ...")
        server = start_postgres(datadir=work / "pgdata", docker=False)
        stops.append(server.stop)
        url = server.create_database("journal_demo")
        _say("  embedded Postgres is up")
    _say("migrating the journal schema (alembic upgrade head) ...")
    upgrade(url)
    if not args.bootstrap_servers:
        _say("starting a single-node Kafka broker (KRaft; jars fetched once) ...")
    kafka = start_kafka(args.bootstrap_servers, docker=False)
    stops.append(kafka.stop)
    if kafka.kind == "external":
        # A broker just started (docker-compose up -d) answers after some seconds.
        _say(f"waiting for Kafka at {kafka.bootstrap_servers} to answer "
             f"(up to {args.kafka_wait:g} s) ...")
        wait_for_kafka(kafka, timeout=args.kafka_wait)
    _say(f"Kafka: {kafka.bootstrap_servers} ({kafka.kind})")
    return url, kafka


def _start_spark() -> Any:
    """A local SparkSession reading Kafka with Spark's own connector."""
    from pyspark.sql import SparkSession

    from ..local.jars import spark_jars_value

    spark = (SparkSession.builder.master("local[2]").appName("offset-journal-demo")
             .config("spark.jars", spark_jars_value())
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    # Stopping v1 mid-batch makes Spark log the aborted task at ERROR: expected here.
    spark.sparkContext.setLogLevel("FATAL")
    return spark


def _prove(spark: Any, lake: Path, produced: list[tuple[int, int, bytes, bytes]]) -> bool:
    """Print whether every record produced is in the output exactly once."""
    rows: list[tuple[Any, ...]] = []
    for sub in sorted(p for p in lake.iterdir() if p.is_dir()):
        rows += [tuple(r) for r in spark.read.parquet(str(sub))
                 .select("partition", "offset").collect()]
    expected = {(p, o) for p, o, _k, _v in produced}
    got = set(rows)
    missing, dupes = expected - got, len(rows) - len(got)
    print()
    print("PROOF")
    print(f"  records produced     : {len(expected)}")
    print(f"  records in the output: {len(rows)}")
    print(f"  missing (gaps)       : {len(missing)}")
    print(f"  written twice        : {dupes}")
    print(f"  unexpected           : {len(got - expected)}")
    ok = not missing and not dupes and got == expected
    print("  RESULT: " + ("every record exactly once" if ok else "MISMATCH"))
    return ok


def _show_history(url: str, name: str) -> None:
    """Print the query's offset history in SQL, and its runs."""
    print()
    print(f"Offset history of partition 0 in SQL (query {name!r}):")
    journal = Journal(url)
    hist = journal.partition_history_with_plans(name, partition=0)
    print(table(["query_id", "batch", "trigger_at", "rows", "partition", "start", "end"],
                hist, rule=True))
    runs = journal.runs(name)
    print(f"\n{len(runs)} runs journaled under {name!r}, on "
          f"{len({r.query_id for r in runs})} checkpoints.")


def _audit_and_report(url: str, name: str, work: Path) -> bool:
    """What a user does next: the continuity audit (nothing skipped, nothing read twice,
    across both checkpoints) and the HTML report; True when the audit is clean."""
    from ..audit import audit_query, format_table
    from ..report import build_report

    print(f"\n$ offset-journal audit {name}")
    with Journal(url) as j:
        audited = audit_query(j, name)
        print(format_table(audited))
        page = work / "report.html"
        page.write_text(build_report(j, name), encoding="utf-8")
    print(f"\n$ offset-journal report {name} -o {page}")
    print(f"wrote {page} ({page.stat().st_size:,} bytes): open it in a browser")
    return bool(audited.ok)


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line and exit 2, as for every other command."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _seconds(text: str) -> float:
    try:
        return parse_timeout(text)
    except ValueError as exc:  # argparse shows an ArgumentTypeError's own words
        raise argparse.ArgumentTypeError(str(exc)) from None


def _started_from(url: str, name: str, run_id: str, preview: Any) -> str:
    """Which recorded plan the v2 run started from (the one its --from-journal recorded
    and linked), and whether it hands out the offsets of the preview shown."""
    from ..restart.record import handed_out

    with Journal(url) as j:
        linked = [p for p in j.recorded_plans(name) if run_id in p.run_ids]
    if not linked:
        return f"v2 (run {run_id}) is linked to no recorded plan"
    plan = linked[-1]
    same = ("the offsets shown above" if plan.kafka_offsets == tuple(handed_out(preview))
            else "NOT the offsets shown above: the journal changed in between")
    return (f"v2 (run {run_id}) started from plan {plan.id}, which its --from-journal "
            f"recorded and linked to the run: {same}")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="offset-journal demo", description=__doc__.splitlines()[0])
    p.add_argument("--database-url", help="journal database (default: an embedded Postgres)")
    p.add_argument("--bootstrap-servers", help="Kafka (default: a local single-node broker)")
    p.add_argument("--kafka-wait", type=_seconds, default=60.0, metavar="SECONDS",
                   help="how long to wait for --bootstrap-servers to answer (default 60)")
    p.add_argument("--records", type=int, default=400, help="records produced per phase")
    p.add_argument("--workdir", help="where checkpoints and output go (default: a temp dir)")
    return p


def _ready(args: argparse.Namespace) -> bool:
    """What the demo needs is installed (else one line saying what to install), and
    Spark's Python workers use this interpreter."""
    url = args.database_url or os.environ.get(ENV_URL)
    lacking = missing_requirements(embedded_postgres=not url)
    if lacking:
        # A core install (no extras): say what to install, in one line.
        sys.stderr.write(f"offset-journal: error: the demo needs {', '.join(lacking)}, "
                         f"not installed here: {INSTALL_HINT}\n")
        return False
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return True


def _run_v1(spark: Any, job: Any, argv: list[str], listener: Any) -> None:
    """The job before the upgrade: a few batches on its own checkpoint, then stopped."""
    _say("v1: running the job on checkpoint v1 ...")
    v1 = job.build_query(spark, job.parser().parse_args(argv + ["--trigger", "1 second"]))
    deadline = time.monotonic() + 300
    progress = _Progress("v1 batches so far")
    while len(v1.recentProgress) < 3 and time.monotonic() < deadline:
        progress.show(len(v1.recentProgress))
        time.sleep(0.5)
    progress.show(len(v1.recentProgress))
    progress.done()
    v1.stop()
    listener.wait_terminated(v1.runId, 60)
    read_v1 = sum(p["numInputRows"] for p in v1.recentProgress)
    _say(f"v1 stopped for the upgrade after {len(v1.recentProgress)} batches "
         f"({read_v1} records); its checkpoint is retired")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not _ready(args):
        return 1
    work = Path(args.workdir or tempfile.mkdtemp(prefix="offset-journal-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    stops: list[Any] = []
    try:
        url, kafka = _start_services(args, work, stops)
        topic = f"demo-orders-{int(time.time())}"
        produced = kafka.produce(topic, args.records)
        _say(f"produced {len(produced)} records to {topic} "
             f"({len({p for p, *_ in produced})} partitions)")

        _say("starting Spark (local[2]) and attaching the journal listener ...")
        from ..capture import attach
        from ..restart import plan_restart

        spark = _start_spark()
        stops.append(spark.stop)
        listener = attach(spark, database_url=url, spool_dir=str(work / "spool"),
                                         kafka_bootstrap_servers=kafka.bootstrap_servers)
        job = _load_job("kafka_to_sink")
        name = "demo-orders-to-lake"
        common = ["--bootstrap-servers", kafka.bootstrap_servers, "--topics", topic,
                  "--query-name", name, "--database-url", url, "--sink", "parquet",
                  "--output", str(work / "lake"),
                  "--max-offsets-per-trigger", str(max(10, args.records // 8))]

        _run_v1(spark, job, common + ["--checkpoint", str(work / "checkpoint-v1")], listener)

        more = kafka.produce(topic, args.records, start=args.records)
        produced += more
        _say(f"meanwhile {len(more)} more records arrived")

        # What `offset-journal plan` shows: a preview, not recorded. The job records the
        # plan it starts from (--from-journal) and links its run to it: one plan, one
        # number, for one upgrade.
        # --old-checkpoint: v1's sink may hold a batch its stop cut before the journal
        # had it; the plan reads the sink's log and takes that batch's offsets from v1's.
        preview = plan_restart(
            url, name, bootstrap_servers=kafka.bootstrap_servers,
            checkpoint=str(work / "checkpoint-v2"), subscribe=[topic], record=False,
            old_checkpoint=str(work / "checkpoint-v1"))
        _say(f"v2: the restart plan from the journal, as `offset-journal plan {name}` "
             "shows it:\n" + preview.explain())
        _say("v2: running the upgraded job on a NEW, empty checkpoint, with --from-journal "
             "...")
        v2 = job.build_query(spark, job.parser().parse_args(
            common + ["--checkpoint", str(work / "checkpoint-v2"), "--from-journal",
                      "--old-checkpoint", str(work / "checkpoint-v1"),
                      "--trigger", "available-now"]))
        _say(_started_from(url, name, str(v2.runId), preview))
        v2.awaitTermination()
        listener.wait_terminated(v2.runId, 60)
        _say(f"v2 caught up in {len(v2.recentProgress)} batches")

        ok = _prove(spark, work / "lake", produced)
        _show_history(url, name)
        listener.close()
        clean = _audit_and_report(url, name, work)
        return 0 if ok and clean else 1
    finally:
        for stop in reversed(stops):
            try:
                stop()
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass
