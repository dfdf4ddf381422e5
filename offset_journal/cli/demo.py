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
    sys.modules[name] = module  # a job ships its own classes to Spark's workers by name
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


def _start_spark(*, restore: bool = False) -> Any:
    """A local SparkSession reading Kafka with Spark's own connector (and, to restore
    a savepoint, offset-journal's state-restore helper, which the package ships)."""
    from pyspark.sql import SparkSession

    from ..local.jars import spark_jars_value, state_restore_jar

    jars = spark_jars_value() + (f",{state_restore_jar()}" if restore else "")
    # The demo's driver, like its broker and database, on loopback only.
    spark = (SparkSession.builder.master("local[2]").appName("offset-journal-demo")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.jars", jars)
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
    p.add_argument("--stateful", action="store_true",
                   help="the stateful upgrade instead: running totals per group, a "
                        "savepoint, v2 on a new checkpoint with the state restored into it")
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


def _run_v1(spark: Any, job: Any, argv: list[str], listener: Any, *,
            to_end: bool = False) -> Any:
    """The job before the upgrade: a few batches on its own checkpoint, then stopped
    (mid-stream); ``to_end``: until it has read what is there (``availableNow``), as a
    stateful job is stopped at a batch's end for its savepoint."""
    _say("v1: running the job on checkpoint v1 ...")
    trigger = "available-now" if to_end else "1 second"
    v1 = job.build_query(spark, job.parser().parse_args(argv + ["--trigger", trigger]))
    deadline = time.monotonic() + 300
    progress = _Progress("v1 batches so far")
    while (v1.isActive if to_end else len(v1.recentProgress) < 3) and \
            time.monotonic() < deadline:
        progress.show(len(v1.recentProgress))
        time.sleep(0.5)
    progress.show(len(v1.recentProgress))
    progress.done()
    v1.stop()
    listener.wait_terminated(v1.runId, 60)
    read_v1 = sum(p["numInputRows"] for p in v1.recentProgress)
    _say(f"v1 stopped for the upgrade after {len(v1.recentProgress)} batches "
         f"({read_v1} records); its checkpoint is retired")
    return v1


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not _ready(args):
        return 1
    work = Path(args.workdir or tempfile.mkdtemp(prefix="offset-journal-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    stops: list[Any] = []
    try:
        url, kafka = _start_services(args, work, stops)
        story = _stateful_story if args.stateful else _upgrade_story
        return story(args, work, url, kafka, stops)
    finally:
        for stop in reversed(stops):
            try:
                stop()
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass


def _spark_with_listener(work: Path, url: str, kafka: KafkaCluster, stops: list[Any], *,
                         restore: bool = False) -> tuple[Any, Any]:
    """Spark (local[2]) with the journal listener attached."""
    from ..capture import attach

    _say("starting Spark (local[2]) and attaching the journal listener ...")
    spark = _start_spark(restore=restore)
    stops.append(spark.stop)
    listener = attach(spark, database_url=url, spool_dir=str(work / "spool"),
                      kafka_bootstrap_servers=kafka.bootstrap_servers)
    return spark, listener


def _upgrade_story(args: argparse.Namespace, work: Path, url: str, kafka: KafkaCluster,
                   stops: list[Any]) -> int:
    """v1 of a Kafka -> Parquet job, stopped for an upgrade; v2 on a NEW checkpoint from
    the journal; every record exactly once."""
    from ..restart import plan_restart

    topic = f"demo-orders-{int(time.time())}"
    produced = kafka.produce(topic, args.records)
    _say(f"produced {len(produced)} records to {topic} "
         f"({len({p for p, *_ in produced})} partitions)")
    spark, listener = _spark_with_listener(work, url, kafka, stops)
    job = _load_job("kafka_to_sink")
    name = "demo-orders-to-lake"
    common = ["--bootstrap-servers", kafka.bootstrap_servers, "--topics", topic,
              "--query-name", name, "--database-url", url, "--sink", "parquet",
              "--output", str(work / "lake"),
              "--max-offsets-per-trigger", str(max(10, args.records // 8))]
    v1_ck, v2_ck = str(work / "checkpoint-v1"), str(work / "checkpoint-v2")
    _run_v1(spark, job, common + ["--checkpoint", v1_ck], listener)

    more = kafka.produce(topic, args.records, start=args.records)
    produced += more
    _say(f"meanwhile {len(more)} more records arrived")

    # What `offset-journal plan` shows: a preview, not recorded. The job records the
    # plan it starts from (--from-journal) and links its run to it: one plan, one
    # number, for one upgrade.
    # --old-checkpoint: v1's sink may hold a batch its stop cut before the journal
    # had it; the plan reads the sink's log and takes that batch's offsets from v1's.
    preview = plan_restart(url, name, bootstrap_servers=kafka.bootstrap_servers,
                           checkpoint=v2_ck, subscribe=[topic], record=False,
                           old_checkpoint=v1_ck)
    _say(f"v2: the restart plan from the journal, as `offset-journal plan {name}` "
         "shows it:\n" + preview.explain())
    _say("v2: running the upgraded job on a NEW, empty checkpoint, with --from-journal ...")
    v2 = job.build_query(spark, job.parser().parse_args(
        common + ["--checkpoint", v2_ck, "--from-journal", "--old-checkpoint", v1_ck,
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


GROUPS = 12
"""Groups the stateful demo's v1 sees; the records that arrive while it is down add
four more, and reach every old one."""


def _amount(i: int, groups: int = GROUPS) -> str:
    return f"g{i % groups},{(i * 37) % 101}"


def _stateful_story(args: argparse.Namespace, work: Path, url: str, kafka: KafkaCluster,
                    stops: list[Any]) -> int:
    """v1 a running total per group (Spark's built-in aggregation, 2 shuffle
    partitions), stopped; more records; then ONE call, :func:`offset_journal.upgrade`:
    a savepoint of v1's state, restored into v2's NEW checkpoint (transformWithState, one
    more column, 4 partitions), v2 started and verified (v1 would be started again on
    its own checkpoint had v2 failed); every group's totals equal the totals over all
    records."""
    from ..savepoint.spark import session_conf
    from ..upgrading import upgrade

    topic = f"demo-amounts-{int(time.time())}"
    produced = kafka.produce(topic, args.records, value=_amount)
    _say(f"produced {len(produced)} amounts for {GROUPS} groups to {topic}")
    spark, listener = _spark_with_listener(work, url, kafka, stops, restore=True)
    job = _load_job("stateful_counts")
    name = "demo-totals"
    common = ["--bootstrap-servers", kafka.bootstrap_servers, "--topics", topic,
              "--query-name", name, "--database-url", url, "--output", str(work / "totals"),
              "--max-offsets-per-trigger", str(max(10, args.records // 8)),
              "--trigger", "available-now"]
    v1_ck, v2_ck = str(work / "checkpoint-v1"), str(work / "checkpoint-v2")
    v1 = _run_v1(spark, job, common[:-2] + ["--checkpoint", v1_ck], listener, to_end=True)
    more = kafka.produce(topic, args.records, start=args.records,
                         value=lambda i: _amount(i, GROUPS + 4))
    produced += more
    _say(f"meanwhile {len(more)} more amounts arrived, for {GROUPS + 4} groups")
    _say(f"v2: offset_journal.upgrade(spark, v1, build_v2, {v2_ck!r}, ...): what "
         "`savepoint create` then a job's --from-journal --savepoint --restore do, and v2 "
         "verified: transformWithState (one more column: the mean) on a NEW checkpoint "
         "with 4 shuffle partitions ...")
    job_args = job.parser().parse_args(common + ["--checkpoint", v1_ck])
    with session_conf(spark, "spark.sql.shuffle.partitions", "4"), Journal(url) as journal:
        done = upgrade(spark, v1, job.builder(job_args, "transform-with-state"), v2_ck,
                       journal=journal, build_v1=job.builder(job_args, "builtin"),
                       savepoint_to=str(work / "savepoint"), listener=listener,
                       rules=job.restore_rules())
    _say(done.explain())
    if done.savepoint is not None:
        _say(f"  {done.savepoint.label()}: the state at batch "
             f"{done.savepoint.manifest.batch_id}, every file checksummed")
    if done.query is None or not done.ok:
        return 1
    done.query.awaitTermination()
    listener.wait_terminated(done.query.runId, 60)
    _say(f"v2 caught up in {len(done.query.recentProgress)} batches")
    ok = _prove_totals(spark, job.output_dir_for(str(work / "totals"), v2_ck), produced)
    listener.close()
    clean = _audit_and_report(url, name, work)
    return 0 if ok and clean else 1


def _prove_totals(spark: Any, output: str, produced: list[tuple[int, int, bytes, bytes]],
                  ) -> bool:
    """Every group's last totals in v2's output against the totals over every record
    produced, before and after the upgrade: v2 counted on from v1's state."""
    expected: dict[str, tuple[int, int, int]] = {}
    for _p, _o, _k, value in produced:
        grp, amount = value.decode().split(",")
        n, mx, total = expected.get(grp, (0, int(amount), 0))
        expected[grp] = (n + 1, max(mx, int(amount)), total + int(amount))
    rows = sorted(spark.read.parquet(output).collect(), key=lambda r: r.batch_id)
    latest = {r.grp: (r.n, r.mx, r.total) for r in rows}
    wrong = sorted(g for g in expected if latest.get(g) != expected[g])
    ok = not wrong and set(latest) == set(expected)
    print()
    print("PROOF")
    print(f"  records produced          : {len(produced)}")
    print(f"  groups                    : {len(expected)}")
    print(f"  groups whose totals match : {len(expected) - len(wrong)}")
    print("  RESULT: " + ("every group's totals carried across the upgrade" if ok else
                         f"MISMATCH in {', '.join(wrong) or 'the groups written'}"))
    return ok
