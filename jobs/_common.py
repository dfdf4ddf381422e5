"""What the jobs in this folder share: options, the Kafka reader, the journal restart.

Every job takes Kafka bootstrap servers, topics, a query name, a checkpoint location
and the journal's database URL, and with ``--from-journal`` seeds ``startingOffsets``
from the journal when its checkpoint is new. The jobs read Kafka with Spark's own
connector (``format("kafka")``): given with ``spark-submit --packages`` or
``spark.jars``, or else fetched once from Maven Central by :mod:`offset_journal.local.jars`.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shlex
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

from offset_journal import redact
from offset_journal.checkpoint import file_sink_metadata, is_new_checkpoint
from offset_journal.cli.plan_args import add_plan_options, request_from_args
from offset_journal.errors import OffsetJournalError
from offset_journal.formatting import first_line
from offset_journal.journal import Journal
from offset_journal.restart import MODE_STATE_AWARE, plan_restart
from offset_journal.values import on_s3, url_scheme

log = logging.getLogger("offset_journal.jobs")


class JobError(OffsetJournalError, RuntimeError):
    """The job refuses to start (its message says why, in one line)."""


class _JobParser(argparse.ArgumentParser):
    """A malformed option is one line (JobError), as every other refusal to start."""

    def error(self, message: str) -> NoReturn:
        raise JobError(message)


def base_parser(description: str) -> argparse.ArgumentParser:
    p = _JobParser(description=description)
    p.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    p.add_argument("--topics", required=True, help="comma-separated topics to subscribe to")
    p.add_argument("--query-name", required=True,
                   help="the journal key: stays the same across checkpoints")
    p.add_argument("--checkpoint", required=True, help="checkpoint location")
    p.add_argument("--database-url", default=None,
                   help="journal database (else OFFSET_JOURNAL_DATABASE_URL)")
    p.add_argument("--from-journal", action="store_true",
                   help="on a NEW checkpoint, start where the journal says the query stopped")
    p.add_argument("--starting-offsets", default="earliest",
                   help="startingOffsets for a new checkpoint without --from-journal "
                        "(or when the journal has nothing for this query)")
    add_plan_options(p, job=True)
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--trigger", default="available-now",
                   help="'available-now' (process what is there, then stop) or an interval "
                        "such as '1 second'")
    p.add_argument("--spool-dir", default=None, help="journal spool directory")
    p.add_argument("--master", default=None,
                   help="Spark master (default: spark-submit's, else local[*]); "
                        "local-cluster[2,1,1024] runs executors in JVMs of their own")
    return p


@dataclass
class Start:
    """Where the query starts: the options for readStream and, for state-aware restarts,
    the event-time cut-off below which windows were already emitted."""

    starting_offsets: str
    reason: str
    event_time_cutoff: datetime | None = None
    plan_id: int | None = None  # the recorded restart plan (restart_plans), if any
    savepoint: str | None = None  # a plan from a savepoint: its directory
    savepoint_sha256: str | None = None  # ... and the manifest the plan checked
    seeded: tuple[int, ...] = ()  # the savepoint's operators the new query seeds
    restore: bool = False  # the plan restores the savepoint into the new checkpoint (JVM)
    plan: Any = None  # ... that plan (a RestartPlan), which start_query restores from


def output_dir_for(base: str, checkpoint: str) -> str:
    """A file-sink output directory of its own per checkpoint.

    The file sink keeps a ``_spark_metadata`` log keyed by batch id in its output
    directory: a NEW checkpoint writing into the SAME directory would have its first
    batches skipped as "already committed". One directory per checkpoint avoids that.
    """
    digest = checkpoint_digest(checkpoint)
    if url_scheme(base) is not None:  # s3a://bucket/out: a key prefix, joined with "/"
        return f"{base.rstrip('/')}/checkpoint={digest}"
    return os.path.join(base, f"checkpoint={digest}")


def checkpoint_digest(checkpoint: str) -> str:
    """A short name for a checkpoint location (its absolute path, or its URL, hashed)."""
    if url_scheme(checkpoint) is None:
        checkpoint = os.path.abspath(checkpoint)
    return hashlib.sha1(checkpoint.encode()).hexdigest()[:12]


def decide_start(args: argparse.Namespace, *, state_aware: bool = False,
                 window: Any = None, output_path: str | None = None,
                 sink: str | None = None, txn_app_id: str | None = None) -> Start:
    """Pick startingOffsets: the journal's plan for a new checkpoint with --from-journal,
    else the given default. Spark ignores startingOffsets on an existing checkpoint.
    ``sink``/``txn_app_id``: the OLD query's sink, when the journal cannot name it (a
    foreachBatch writing Delta); the plan reads the others from the journal."""
    if not is_new_checkpoint(args.checkpoint):
        return Start(args.starting_offsets, "existing checkpoint: Spark resumes from it")
    if output_path is not None and file_sink_metadata(output_path) is not None:
        raise JobError(f"output path {output_path} already holds a file-sink log "
                       "(_spark_metadata) from another checkpoint: a new checkpoint writing "
                       "there would have its first batches skipped")
    if not args.from_journal:
        return Start(args.starting_offsets, "new checkpoint, --from-journal not given")
    # The journal or Kafka being away, or a checkpoint that cannot be read, stop the
    # job with one line, not a traceback.
    try:
        with Journal(args.database_url) as journal:
            if journal.last_batch(args.query_name) is None:
                return Start(args.starting_offsets,
                             f"the journal has no batch of {args.query_name!r} yet")
            request = request_from_args(
                args, args.query_name, bootstrap_servers=args.bootstrap_servers,
                checkpoint=args.checkpoint, output_path=output_path,
                mode=MODE_STATE_AWARE if state_aware else None, window=window,
                subscribe=[t.strip() for t in args.topics.split(",") if t.strip()],
                **({"old_sink": sink, "txn_app_id": txn_app_id} if sink else {}))
            plan = plan_restart(args.database_url, request, journal=journal,
                                record=not args.no_record)
    except OffsetJournalError as exc:
        raise JobError(redact(first_line(exc))) from None
    for w in plan.warnings:
        log.warning("restart plan: %s", w)
    if plan.record_problem:
        log.warning("restart plan: %s", plan.record_problem)
    if not plan.ok:
        raise JobError("restart plan has errors: " + "; ".join(plan.errors))
    log.info("restart plan:\n%s", plan.explain())
    seeded = tuple(c.operator_id for c in plan.state if c.decision == "seeded")
    restore = any(c.decision == "restored" for c in plan.state)
    return Start(plan.starting_offsets(0), "from the journal", plan.event_time_cutoff,
                 plan.plan_id, plan.savepoint_location, plan.savepoint_sha256, seeded,
                 restore, plan if restore else None)


def start_query(spark: Any, args: argparse.Namespace, start: Start,
                writer: Any, rules: Any = None) -> Any:
    """Start the query ``writer()`` builds (its trigger set). With a plan that restores
    a savepoint, the restore comes first, as ``state restore`` does it
    (:func:`offset_journal.restart.restoring.restore_from_plan`: the new query's
    bootstrap batch, every operator's state written into the new checkpoint, ``rules``
    the mappings the job declares, the plan linked to the bootstrap run); the query
    then resumes on the checkpoint."""
    if not start.restore:
        return link_start(args, start, writer().start())
    from offset_journal.restart.restoring import restore_from_plan

    try:
        with Journal(args.database_url) as journal:
            done = restore_from_plan(journal, spark, start.plan, args.checkpoint, writer,
                                     rules=rules)
    except OffsetJournalError as exc:
        raise JobError(redact(first_line(exc))) from None
    for warning in done.warnings:
        log.warning("%s", warning)
    log.info("%s", done.restored.explain())
    return writer().start()


def link_start(args: argparse.Namespace, start: Start, query: Any) -> Any:
    """Link the started query's run to the restart plan it started from, so that the
    audit knows where the run began (Spark reports no start offsets for a new
    checkpoint's first batch). A journal that refuses the link costs a warning, never
    the job: the audit then matches the run to the plan by its offsets."""
    if start.plan_id is None:
        return query
    try:
        with Journal(args.database_url) as journal:
            journal.link_plan(start.plan_id, str(query.runId))
    except OffsetJournalError as exc:
        log.warning("run %s not linked to restart plan %s: %s", query.runId, start.plan_id,
                    redact(first_line(exc)))
    return query


def read_kafka(spark: Any, args: argparse.Namespace, start: Start) -> Any:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("subscribe", args.topics)
        .option("startingOffsets", start.starting_offsets)
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    return reader.load()


def apply_trigger(writer: Any, trigger: str) -> Any:
    if trigger in ("available-now", "availableNow"):
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=trigger)


def make_spark(app_name: str, master: str | None = None, delta: bool = False, *,
               restore: bool = False, s3a: bool = False) -> Any:
    """The job's session. Spark's Kafka connector comes from ``--packages`` or
    ``spark.jars`` when the submitter gave it (checked: it must be this Spark's exact
    version); else its jars (matching this PySpark exactly) are added to ``spark.jars``,
    which also ships them to executors. ``master`` (``--master``) overrides the
    submitter's, e.g. ``local-cluster[2,1,1024]`` for executors in JVMs of their own.
    ``delta``: Delta Lake's session settings, and its jars unless submitted with them.
    ``restore`` (``--restore``): offset-journal's state-restore helper jar too, unless
    the submitter gave it (under spark-submit: ``--jars`` with the path
    ``offset-journal jars state-restore`` prints).
    ``s3a`` (a path on S3): hadoop-aws the same way unless the submitter gave it; the
    endpoint and credentials come from the submitter's Hadoop configuration
    (``spark.hadoop.fs.s3a.*``, core-site.xml) or the environment, as for any Spark job."""
    from pyspark.sql import SparkSession

    from offset_journal.local.jars import (
        DELTA_SPARK_CONF,
        check_connector_matches,
        installed_spark_version,
        spark_jars_value,
    )

    given_jars, packages, on_class_path = submitted_jars()
    builder = SparkSession.builder.appName(app_name).config("spark.sql.shuffle.partitions", "4")
    if master:
        builder = builder.master(master)
    spark_version = installed_spark_version()
    added: list[str] = []
    if any("spark-sql-kafka-0-10" in p for p in packages):
        _check_package(spark_version, packages)
    elif any("spark-sql-kafka-0-10" in j for j in given_jars):
        check_connector_matches(spark_version, given_jars)
    elif not on_class_path:
        added.append(spark_jars_value())
    if delta:
        for key, value in DELTA_SPARK_CONF.items():
            builder = builder.config(key, value)
    if not on_class_path:
        added += _optional_jars(given_jars, packages, s3a=s3a, delta=delta, restore=restore)
    if added:
        builder = builder.config("spark.jars", ",".join([*given_jars, *added]))
    return builder.getOrCreate()


def _optional_jars(jars: list[str], packages: list[str], *, s3a: bool, delta: bool,
                   restore: bool) -> list[str]:
    """hadoop-aws (``s3a``), Delta Lake (``delta``) and the state-restore helper
    (``restore``) for ``spark.jars``, each unless the submitter gave it."""
    from offset_journal.local.helper_jar import is_helper_jar
    from offset_journal.local.jars import (
        delta_spark_jars_value,
        s3a_spark_jars_value,
        state_restore_jar,
    )

    given = [*jars, *packages]
    out = []
    if s3a and not any("hadoop-aws" in g for g in given):
        out.append(s3a_spark_jars_value())
    if delta and not any("delta-spark" in g for g in given):
        out.append(delta_spark_jars_value())
    if restore and not any(is_helper_jar(j) for j in jars):
        out.append(str(state_restore_jar()))
    return out


def submitted_jars() -> tuple[list[str], list[str], bool]:
    """The jars (``spark.jars``, ``--jars``) and packages (``--packages``) the submitter
    gave, and whether the connector is already on the driver's class path. Under
    spark-submit the driver's JVM is already running and knows them; else they are in
    PYSPARK_SUBMIT_ARGS, read here without starting a JVM, because jars added after the
    JVM started would reach executors but not the driver's class path (where Spark looks
    the "kafka" data source up)."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return _jars_of_running_jvm()
    jars: list[str] = []
    packages: list[str] = []
    words = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    for flag, value in zip(words, [*words[1:], ""], strict=False):
        if flag == "--conf" and "=" in value:
            flag, value = value.split("=", 1)
        if flag in ("--jars", "spark.jars"):
            jars += _split(value)
        elif flag in ("--packages", "spark.jars.packages"):
            packages += _split(value)
    return jars, packages, False


def _jars_of_running_jvm() -> tuple[list[str], list[str], bool]:
    """Under spark-submit: what it was given. The connector must already be on the
    driver's class path (given, or installed with Spark as on many clusters): jars
    added now would not reach it, and the query would fail later with "Failed to find
    data source: kafka"."""
    from py4j.java_gateway import JavaClass
    from pyspark import SparkConf, SparkContext

    from offset_journal.local.jars import JarsError, connector_coordinate, installed_spark_version

    SparkContext._ensure_initialized()
    conf = SparkConf()
    jars = _split(conf.get("spark.jars", ""))
    packages = _split(conf.get("spark.jars.packages", ""))
    jvm = SparkContext._jvm
    provider = jvm.org.apache.spark.sql.kafka010.KafkaSourceProvider  # type: ignore[union-attr]
    if not isinstance(provider, JavaClass):
        coordinate = connector_coordinate(installed_spark_version())
        raise JarsError("Spark's Kafka connector is not on the driver's class path: "
                        f"spark-submit --packages {coordinate} (or --jars with the output "
                        "of: offset-journal jars kafka-connector)")
    return jars, packages, True


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _check_package(spark_version: str, packages: list[str]) -> None:
    """A ``--packages`` connector coordinate must name this Spark's exact version (or the
    patch release of its minor the user chose) and Scala."""
    from offset_journal.local.jars import JarsError, connector_coordinate, connector_version

    expected = connector_coordinate(connector_version())
    for coordinate in packages:
        if "spark-sql-kafka-0-10" in coordinate and coordinate != expected:
            raise JarsError(f"--packages {coordinate} does not match Spark {spark_version}: "
                            f"expected {expected}")


def run_job(name: str, parser: argparse.ArgumentParser, build_query: Any,
            argv: list[str] | None = None) -> int:
    """The jobs' main(): parse, attach the journal listener, start, wait, flush.

    A job that refuses to start says why in one line on stderr and exits 2.
    """
    import sys

    import offset_journal

    try:
        args = parser.parse_args(argv)
    except JobError as exc:
        print(f"{name}: error: {offset_journal.redact(exc)}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        spark = make_spark(args.query_name, args.master,
                           delta=str(getattr(args, "sink", "")).startswith("delta"),
                           restore=bool(getattr(args, "restore", False)
                                        or getattr(args, "upgrade_from", None)),
                           s3a=on_s3(args.checkpoint, getattr(args, "output", None)))
    except offset_journal.ConfigError as exc:
        print(f"{name}: error: {offset_journal.redact(exc)}", file=sys.stderr)
        return 2
    listener = offset_journal.attach(spark, database_url=args.database_url,
                                     spool_dir=args.spool_dir,
                                     kafka_bootstrap_servers=args.bootstrap_servers)
    try:
        query = build_query(spark, args)
    except OffsetJournalError as exc:
        print(f"{name}: error: {offset_journal.redact(exc)}", file=sys.stderr)
        return 2
    query.awaitTermination()
    listener.wait_terminated(query.runId, timeout=60)
    listener.close()
    return 0
