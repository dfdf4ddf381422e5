"""The command line's grammar: the parser (no command runs here; the argument types are
in ``_arg_types``).

The commands themselves are in :mod:`offset_journal.cli`; :func:`build_parser` is
handed that module and points each subcommand at its ``cmd_*`` function.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any, NoReturn

from ..local.jars import JAR_SETS
from ._arg_types import (  # noqa: F401 (batch_arg, duration_arg, time_arg: tests and jobs)
    batch_arg,
    bounded_arg,
    count_value,
    directory_arg,
    duration_arg,
    duration_threshold_arg,
    key_value_arg,
    lag_threshold_arg,
    name_arg,
    non_negative_arg,
    past_time_arg,
    positive_arg,
    time_arg,
    timeout_arg,
    topics_arg,
)
from ._state_cmds import add_state
from .plan_args import add_plan_options, savepoint_ref

PROG = "offset-journal"


class UsageError(Exception):
    """Bad command-line input: exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse prints the usage and exits; we want one line and a return value."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# --------------------------------------------------------------------------- parser


def build_parser(commands: Any) -> argparse.ArgumentParser:
    """The ``offset-journal`` parser; ``commands``: the module with the ``cmd_*``
    functions (offset_journal.cli)."""
    parser = _Parser(
        prog=PROG,
        description="Look at the Spark offset journal and restart queries on new "
                    "checkpoints from it.",
    )
    parser.add_argument("--database-url", default=None,
                        help="journal database URL (default: $OFFSET_JOURNAL_DATABASE_URL)")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more (-v: info, -vv: debug and tracebacks)")
    parser.add_argument("--timeout", type=timeout_arg, default=None, metavar="SECONDS",
                        help="give up, in one line, when the command has not finished in "
                             "this many seconds: a database or cluster that accepts and "
                             "never answers (default: $OFFSET_JOURNAL_TIMEOUT, else 120; "
                             "jars and demo: none)")
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")

    common, kafka_opts, plan_opts = _shared_options()
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subs.required = True
    _add_db(subs, common, commands)
    _add_rejected(subs, common, commands)
    _add_journal_views(subs, common, commands)
    _add_plans(subs, (common, plan_opts, kafka_opts), commands)
    _add_prune(subs, common, commands)
    _add_checkpoint(subs, common, commands)
    _add_savepoint(subs, common, commands)
    add_state(subs, common, _Parser)
    _add_tools(subs, (common, kafka_opts), commands)
    _add_health(subs, (common, kafka_opts), commands)
    _add_losses(subs, common, commands)
    return parser


Subparsers = Any
"""What ``add_subparsers`` returns (argparse keeps its type private)."""


def _shared_options() -> tuple[argparse.ArgumentParser, ...]:
    """Parent parsers: options every subcommand takes, Kafka options, plan options."""
    # Accept --database-url and -v after the subcommand too, without overriding the
    # global value when absent there.
    common = _Parser(add_help=False)
    common.add_argument("--database-url", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)
    common.add_argument("--timeout", type=timeout_arg, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)

    kafka_opts = _Parser(add_help=False)
    kafka_opts.add_argument("--kafka-config", metavar="KEY=VALUE", type=key_value_arg,
                            action="append",
                            help="extra librdkafka setting (security, SASL), repeatable")
    kafka_opts.add_argument("--kafka-timeout", type=timeout_arg, default=10.0, metavar="SECONDS",
                            help="Kafka request timeout (default 10)")

    plan_opts = _Parser(add_help=False)
    plan_opts.add_argument("query", help="query name (as journaled)")
    plan_opts.add_argument("--bootstrap-servers", metavar="HOSTS",
                           help="check against this Kafka cluster: new partitions, deleted "
                                "topics, data loss")
    plan_opts.add_argument("--subscribe", metavar="TOPICS", type=topics_arg,
                           help="comma-separated topics the NEW job subscribes to, when "
                                "they differ from the journaled job's")
    plan_opts.add_argument("--checkpoint", metavar="DIR",
                           help="the NEW checkpoint location: refused if it holds offsets")
    plan_opts.add_argument("--state-aware", action="store_true",
                           help="windowed aggregation in append mode: rewind so windows "
                                "not yet emitted are rebuilt")
    plan_opts.add_argument("--window", type=duration_arg, metavar="DURATION",
                           help="window length for --state-aware (e.g. 10m)")
    add_plan_options(plan_opts)

    return common, kafka_opts, plan_opts


def _add_db(subs: Subparsers, common: argparse.ArgumentParser, commands: Any) -> None:
    db = subs.add_parser("db", help="journal schema", parents=[common])
    db_subs = db.add_subparsers(dest="db_command", metavar="ACTION", parser_class=_Parser)
    db_subs.required = True
    db_upgrade = db_subs.add_parser("upgrade", help="create or upgrade the journal schema",
                                    parents=[common])
    db_upgrade.add_argument("--sql", action="store_true",
                            help="print the upgrade as a SQL script for a DBA instead "
                                 "(no database needed; apply it with psql)")
    db_upgrade.add_argument("--from", dest="start", metavar="REVISION",
                            help="with --sql: the revision the database is at (`db current`)"
                                 "; default: an empty database")
    db_upgrade.set_defaults(func=commands.cmd_db_upgrade)
    db_subs.add_parser("current", help="show the schema revision",
                       parents=[common]).set_defaults(func=commands.cmd_db_current)
    grant = db_subs.add_parser(
        "grant", parents=[common],
        help="grant least privileges to a writer role (the listener) and a reader role",
        description="Grant a writer role (the listener: read and add journal rows only) "
                    "and a reader role (SELECT only) what they need, as the schema's "
                    "owner. Run it again after `db upgrade`. See docs/security.md.")
    grant.add_argument("--writer", metavar="ROLE", help="the role the listener connects as")
    grant.add_argument("--reader", metavar="ROLE", help="a role that only reads the journal")
    grant.add_argument("--planner", metavar="ROLE",
                       help="a role that reads the journal and records the restart plans "
                            "it makes")
    grant.add_argument("--dry-run", action="store_true",
                       help="print the SQL instead of running it")
    grant.set_defaults(func=commands.cmd_db_grant)


def _add_rejected(subs: Subparsers, common: argparse.ArgumentParser, commands: Any) -> None:
    rejected = subs.add_parser("rejected", parents=[common],
                               help="events the journal refused (rejected_events)")
    rejected_subs = rejected.add_subparsers(dest="rejected_command", metavar="ACTION",
                                            parser_class=_Parser)
    rejected_subs.required = True
    rej_list = rejected_subs.add_parser("list", parents=[common], help="list them")
    rej_list.add_argument("--query", metavar="NAME", help="only this query's")
    rej_list.set_defaults(func=commands.cmd_rejected_list)
    rej_replay = rejected_subs.add_parser(
        "replay", parents=[common],
        help="journal them again (after fixing what refused them); each leaves "
             "rejected_events only once journaled")
    rej_replay.add_argument("--id", type=int, action="append", metavar="N",
                            help="only this one (repeat for more); default: all")
    rej_replay.add_argument("--query", metavar="NAME", help="only this query's")
    rej_replay.set_defaults(func=commands.cmd_rejected_replay)


def _add_journal_views(subs: Subparsers, common: argparse.ArgumentParser,
                       commands: Any) -> None:
    runs = subs.add_parser("runs", help="runs of a query (or of all queries)", parents=[common])
    runs.add_argument("query", nargs="?", type=name_arg("the query name"), help="query name")
    runs.set_defaults(func=commands.cmd_runs)

    history = subs.add_parser("history", help="journaled batches of a query, oldest first",
                              parents=[common])
    history.add_argument("query")
    history.add_argument("--format", choices=("table", "json", "csv"), default="table")
    history.add_argument("--limit", type=positive_arg, metavar="N",
                         help="only the newest N batches")
    history.set_defaults(func=commands.cmd_history)

    audit = subs.add_parser(
        "audit", parents=[common],
        help="prove nothing was skipped or read twice across runs and checkpoints",
        description="Walk every journaled batch of QUERY per Kafka partition, in the "
                    "journal's order, and report each gap (offsets never processed) and "
                    "overlap (processed twice), planned (a recorded plan asked for it) or "
                    "unexplained. Exit 0: contiguous or planned; 3: something is not.")
    audit.add_argument("query")
    audit.add_argument("--since", type=time_arg, metavar="TIME",
                       help="report only what began at or after TIME (ISO 8601, naive = "
                            "UTC; or --since=-1d); earlier batches are still read")
    audit.add_argument("--format", choices=("table", "json"), default="table")
    audit.set_defaults(func=commands.cmd_audit)

    report = subs.add_parser(
        "report", parents=[common], help="write a query's journal as one HTML report",
        description="Write one self-contained HTML file (no network needed to view it): "
                    "runs and restarts on a timeline, lag and offsets per partition, batch "
                    "durations, input rows and freshness, and the findings to look at.")
    report.add_argument("query", type=name_arg("the query name"), help="query name")
    report.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="the HTML file to write (replaced)")
    report.add_argument("--since", type=time_arg, metavar="TIME",
                        help="only batches triggered at or after TIME (ISO 8601 or -7d)")
    report.add_argument("--buckets", type=bounded_arg(10, 2000), default=240, metavar="N",
                        help="time buckets per chart (default 240)")
    report.add_argument("--top", type=bounded_arg(1, 50), default=8, metavar="N",
                        help="partitions drawn one by one, the furthest behind (default 8); "
                             "the others as one band")
    report.add_argument("--no-audit", action="store_true",
                        help="skip the continuity audit (its gaps and overlaps, and the "
                             "plan each restart came from); it reads every partition row")
    report.set_defaults(func=commands.cmd_report)


def _add_prune(subs: Subparsers, common: argparse.ArgumentParser, commands: Any) -> None:
    prune = subs.add_parser(
        "prune", parents=[common],
        help="delete batches triggered before a time (keeps each query's newest batch)",
        description="Delete journaled batches triggered before TIME, with their offsets. "
                    "Each query's newest batch is kept (a new checkpoint starts from it). "
                    "Point-in-time and state-aware restarts rewind into history: keep "
                    "more than your longest rewind. Needs DELETE on the journal (the "
                    "schema's owner; the writer and reader roles cannot).")
    prune.add_argument("--before", type=time_arg, required=True, metavar="TIME",
                       help="ISO 8601 (naive = UTC) or relative: --before=-30d")
    prune.add_argument("--query", metavar="NAME", help="only this query's batches")
    prune.add_argument("--dry-run", action="store_true",
                       help="count what would be deleted, delete nothing")
    prune.set_defaults(func=commands.cmd_prune)


def _add_plans(subs: Subparsers, parents: tuple[argparse.ArgumentParser, ...],
               commands: Any) -> None:
    common, plan_opts, kafka_opts = parents
    starting = subs.add_parser(
        "starting-offsets", parents=[common, plan_opts, kafka_opts],
        help="print only the startingOffsets JSON for a new checkpoint",
        description="Print only the JSON to pass as startingOffsets; warnings go to "
                    "stderr. Exits 1 without printing when the plan has errors (data "
                    "loss), unless --force.",
    )
    starting.add_argument("--source", type=non_negative_arg, default=None, metavar="N",
                          help="source index (default: the query's Kafka source)")
    starting.add_argument("--force", action="store_true",
                          help="print the offsets even when the plan has errors")
    starting.add_argument("--format", dest="offsets_format",
                          choices=("starting-offsets", "by-timestamp", "json"),
                          default="starting-offsets",
                          help="by-timestamp (with --from-time): Spark's "
                               "startingOffsetsByTimestamp JSON instead, for Spark to "
                               "look the time up (with startingOffsetsByTimestampStrategy"
                               "=latest); json: an object with the startingOffsets text, "
                               "the plan's id and, from --savepoint, the savepoint and its "
                               "manifest's SHA-256 (initial_state's expect_sha256)")
    starting.set_defaults(func=commands.cmd_starting_offsets)

    plan = subs.add_parser("plan", parents=[common, plan_opts, kafka_opts],
                           help="explain how a query restarts on a new checkpoint",
                           description="Explain the restart plan; exits 1 when it has errors. "
                                       "A preview: not recorded unless --record "
                                       "(starting-offsets and a job's --from-journal record "
                                       "the plan they hand out).")
    plan.add_argument("--record", action="store_true",
                      help="record this plan (restart_plans) as the one a job starts from: "
                           "when you start it by hand with the options printed here")
    plan.add_argument("--source", type=non_negative_arg, default=None, metavar="N",
                      help="only this source (default: all)")
    plan.add_argument("--output-path", metavar="PATH",
                      help="file sink output path: warns when its _spark_metadata log "
                           "would make the new query skip batches")
    plan.add_argument("--format", choices=("text", "json"), default="text")
    plan.set_defaults(func=commands.cmd_plan)


def _add_checkpoint(subs: Subparsers, common: argparse.ArgumentParser, commands: Any) -> None:
    ckpt = subs.add_parser("checkpoint", help="read Spark checkpoint directories",
                           parents=[common])
    ckpt_subs = ckpt.add_subparsers(dest="checkpoint_command", metavar="ACTION",
                                    parser_class=_Parser)
    ckpt_subs.required = True
    inspect = ckpt_subs.add_parser("inspect", parents=[common],
                                   help="last committed batch and its offsets, as JSON")
    inspect.add_argument("dir", help="checkpoint directory or URL")
    inspect.add_argument("--all", action="store_true", help="every batch, not only the last")
    inspect.set_defaults(func=commands.cmd_checkpoint_inspect)
    imp = ckpt_subs.add_parser("import", parents=[common],
                               help="journal a checkpoint's committed batches (idempotent)")
    imp.add_argument("dir")
    imp.add_argument("--query-name", required=True, type=name_arg("--query-name"),
                     help="journal them under this name")
    imp.set_defaults(func=commands.cmd_checkpoint_import)
    compare = ckpt_subs.add_parser("compare", parents=[common],
                                   help="checkpoint's last committed batch vs the journal's "
                                        "last batch, per Kafka partition")
    compare.add_argument("dir")
    compare.add_argument("query")
    compare.add_argument("--format", choices=("table", "json"), default="table")
    compare.set_defaults(func=commands.cmd_checkpoint_compare)


def _add_savepoint(subs: Subparsers, common: argparse.ArgumentParser, commands: Any) -> None:
    sp = subs.add_parser("savepoint", parents=[common],
                         help="a stateful query's state at one batch, for a new checkpoint")
    sp_subs = sp.add_subparsers(dest="savepoint_command", metavar="ACTION",
                                parser_class=_Parser)
    sp_subs.required = True
    create = sp_subs.add_parser(
        "create", parents=[common],
        help="export every stateful operator's state at the newest batch both the "
             "checkpoint and the journal have, and record it; on a schedule, with "
             "retention (--under, --keep, --max-age)",
        description="Export the state of every stateful operator of the checkpoint (of a "
                    "running or stopped query) at the newest batch both its commits/ and "
                    "the journal have, to Parquet under DIR with a manifest (operators, "
                    "schemas, row counts, checksums), and record the savepoint in the "
                    "journal. Needs PySpark (a local session; --master for another). From "
                    "cron: --under DIR makes each savepoint its own directory there "
                    "(nothing new when the newest there holds the batch already), and "
                    "--keep/--max-age delete the query's older savepoints there, never "
                    "the newest nor one a recorded plan starts from; with either, the "
                    "command exits as check does: 0 ok, 1 warning (taken, but something "
                    "was not recorded or not deleted), 2 critical (no savepoint taken), "
                    "3 unknown (bad arguments).")
    create.add_argument("query", type=name_arg("the query name"), help="query name")
    create.add_argument("--checkpoint", required=True, metavar="CHECKPOINT",
                        type=directory_arg, help="the query's checkpoint directory (or URL)")
    where = create.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", metavar="DIR", type=directory_arg,
                       help="a new or empty directory for the savepoint")
    where.add_argument("--under", metavar="DIR", type=directory_arg,
                       help="make the savepoint its own new directory under DIR (a "
                            "schedule's location: QUERY-batchN-TIME)")
    create.add_argument("--keep", type=positive_arg, default=None, metavar="N",
                        help="then delete the query's savepoints in the same location "
                             "beyond the N newest")
    create.add_argument("--max-age", type=duration_arg, default=None, metavar="DURATION",
                        help="then delete the query's savepoints in the same location "
                             "older than DURATION (e.g. 7d)")
    create.add_argument("--master", default=None,
                        help="Spark master for the export (default local[*])")
    create.add_argument("--no-record", action="store_true",
                        help="leave the savepoint unrecorded in the journal (savepoints)")
    create.set_defaults(func=commands.cmd_savepoint_create)
    listed = sp_subs.add_parser("list", parents=[common],
                                help="the savepoints recorded for a query")
    listed.add_argument("query", type=name_arg("the query name"), help="query name")
    listed.set_defaults(func=commands.cmd_savepoint_list)
    show = sp_subs.add_parser("show", parents=[common],
                              help="check a savepoint (manifest, files) and show it")
    show.add_argument("savepoint", metavar="ID|DIR", type=savepoint_ref,
                      help="the savepoint's id in the journal, or its directory (digits "
                           "are an id unless such a directory exists; ./20261125 forces "
                           "a path)")
    show.add_argument("--query", metavar="NAME", default=None,
                      help="refuse a savepoint of another query")
    show.add_argument("--unrecorded-savepoint", action="store_true",
                      help="show a savepoint directory whose manifest the journal did not "
                           "record (made with --no-record) instead of refusing it")
    show.add_argument("--format", choices=("text", "json"), default="text")
    show.set_defaults(func=commands.cmd_savepoint_show)


def _add_tools(subs: Subparsers, parents: tuple[argparse.ArgumentParser, ...],
               commands: Any) -> None:
    common, kafka_opts = parents
    group = subs.add_parser("commit-group", parents=[common, kafka_opts],
                            help="commit the journal's last offsets to a consumer group "
                                 "(for lag monitoring)")
    group.add_argument("query")
    group.add_argument("--group", required=True, type=name_arg("the consumer group id"),
                       help="consumer group id")
    group.add_argument("--bootstrap-servers", required=True, metavar="HOSTS")
    group.add_argument("--source", type=non_negative_arg, default=None, metavar="N",
                       help="the Kafka source to take offsets from (default: all)")
    group.add_argument("--accept-cluster", metavar="ID", type=name_arg("the cluster id"),
                       help="the Kafka cluster at --bootstrap-servers, whose id is ID, is the "
                            "one the journal's run read, although the journal says another: "
                            "overrule the refusal")
    group.add_argument("--dry-run", action="store_true", help="show, do not commit")
    group.set_defaults(func=commands.cmd_commit_group)

    jars = subs.add_parser(
        "jars", parents=[common],
        help="fetch (once) and print the JVM jars: Spark's Kafka connector, Delta Lake, "
             "hadoop-aws (s3a) or the state-restore helper (built) for spark.jars, or the "
             "Kafka broker's class path")
    jars.add_argument("set", choices=list(JAR_SETS))
    jars.add_argument("--version", dest="jar_version", default=None,
                      help="default: the installed PySpark's (connector, state-restore; "
                           "for the connector, $OFFSET_JOURNAL_CONNECTOR_VERSION picks another "
                           "patch of its minor), the installed delta-spark's (delta), the "
                           "Hadoop PySpark bundles (s3a) or the pinned Kafka release (broker)")
    jars.add_argument("--format", choices=["spark-jars", "classpath", "list"],
                      default="spark-jars",
                      help="comma-separated (spark.jars), a Java class path, or one per line")
    jars.add_argument("--packages", action="store_true",
                      help="print the --packages coordinate instead (fetches nothing)")
    jars.set_defaults(func=commands.cmd_jars)

    # Everything after "demo" is the demo's own (main() splits it off before parsing:
    # argparse.REMAINDER cannot start with an option).
    demo = subs.add_parser("demo", help="run the demo (arguments are passed on)",
                           add_help=False)
    demo.set_defaults(func=commands.cmd_demo, demo_args=[])


def _add_health(subs: Subparsers, parents: tuple[argparse.ArgumentParser, ...],
                commands: Any) -> None:
    common, kafka_opts = parents
    retention = subs.add_parser(
        "retention", parents=[common, kafka_opts],
        help="when Kafka's retention deletes records a query has not read",
        description="Per query and Kafka partition it reads: the next offset to read (its "
                    "last journaled batch's end), the log start and end, the unread "
                    "records, and when retention deletes the first of them at the "
                    "earliest (from that record's timestamp, the topic's retention.ms, "
                    "retention.bytes and segment settings, and the log's growth). "
                    "Records already deleted unread are DATA LOSS, as `plan` says. "
                    "Exits 1 when a partition has lost records, a query could not be "
                    "forecast, or --all selects no query (said in one line).")
    retention.add_argument("query", nargs="?", type=name_arg("the query name"),
                           help="query name (or --all)")
    retention.add_argument("--all", action="store_true", help="every journaled query")
    retention.add_argument("--bootstrap-servers", required=True, metavar="HOSTS")
    retention.add_argument("--format", choices=("text", "json"), default="text")
    retention.add_argument("--record", action="store_true",
                           help="keep the forecast in offset_journal.retention_forecasts "
                                "(replacing these queries' rows), for `check` and Grafana; "
                                "needs the planner role or the owner")
    _add_rate_window(retention)
    _add_scope(retention)
    retention.set_defaults(func=commands.cmd_retention)
    _add_check(subs, parents, commands)


def _add_check(subs: Subparsers, parents: tuple[argparse.ArgumentParser, ...],
               commands: Any) -> None:
    common, kafka_opts = parents
    check = subs.add_parser(
        "check", parents=[common, kafka_opts],
        help="one health check for a fleet of queries (exit 0 ok, 1 warning, 2 critical, "
             "3 unknown)",
        description="Check every query named (or --all) and print one line per problem, "
                    "worst first, then a summary. Exit 0: ok; 1: a warning; 2: something "
                    "critical; 3: unknown (bad arguments, the journal or cluster did not "
                    "answer, a query with no batch, no forecast to go by), as monitoring "
                    "plugins do. A threshold is CRITICAL or WARNING,CRITICAL.")
    check.add_argument("queries", nargs="*", metavar="QUERY", type=name_arg("the query name"))
    check.add_argument("--all", action="store_true", help="every journaled query")
    check.add_argument("--max-lag", type=lag_threshold_arg, metavar="N[,N]",
                       help="records behind in the last batch (all partitions)")
    check.add_argument("--max-staleness", type=duration_threshold_arg(False), metavar="D[,D]",
                       help="time since the last batch was journaled (e.g. 10m,30m)")
    check.add_argument("--min-time-to-loss", type=duration_threshold_arg(True),
                       metavar="D[,D]",
                       help="time until retention deletes an unread record (e.g. 6h,1h); "
                            "from the forecasts `retention --record` kept, or live with "
                            "--bootstrap-servers. A query with no forecast (none recorded, "
                            "older than --max-forecast-age, a partition not forecast) is "
                            "unknown, a partition gone a warning. DATA LOSS is always "
                            "critical")
    check.add_argument("--max-forecast-age", type=duration_arg,
                       default=timedelta(minutes=15), metavar="DURATION",
                       help="recorded forecasts older than this are unknown: `retention "
                            "--record` stopped running (default 15m)")
    check.add_argument("--max-savepoint-age", type=duration_threshold_arg(False),
                       metavar="D[,D]",
                       help="a stateful query's newest savepoint older than this (e.g. "
                            "1h,6h), or none at all (critical); the line says how many "
                            "batches and records a recovery from it reads again today")
    check.add_argument("--since", type=past_time_arg, default=None, metavar="TIME",
                       help="count problems flagged on batches, spool losses and rejected "
                            "events from TIME on (ISO 8601 or -1d; default: -1d)")
    check.add_argument("--bootstrap-servers", metavar="HOSTS",
                       help="forecast retention live from this cluster instead of reading "
                            "the recorded forecasts")
    _add_rate_window(check)
    _add_scope(check)
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.set_defaults(func=commands.cmd_check)


def _add_losses(subs: Subparsers, common: argparse.ArgumentParser, commands: Any) -> None:
    losses = subs.add_parser(
        "losses", help="data losses `retention --record` recorded: list, acknowledge",
        description="Records retention deleted before a query read them, as `retention "
                    "--record` found them. Each stays critical in `check` and unexplained "
                    "in `audit`, also once the job has read on past them "
                    "(failOnDataLoss=false), until a restart plan accepted it "
                    "(--allow-data-loss) or a person acknowledges it.")
    losses_subs = losses.add_subparsers(dest="losses_command", metavar="ACTION",
                                        required=True)
    listed = losses_subs.add_parser("list", parents=[common],
                                    help="every recorded loss and what became of it")
    listed.add_argument("query", nargs="?", type=name_arg("the query name"),
                        help="query name (default: every query)")
    listed.set_defaults(func=commands.cmd_losses_list)
    ack = losses_subs.add_parser(
        "acknowledge", parents=[common],
        help="record that the query's open losses were dealt with, and why",
        description="Record a decision on every open loss of the query, up to where each "
                    "ends now (who: host and OS user; when; --reason): `check` and `audit` "
                    "then treat them as dealt with. Records lost after it are open again. "
                    "Needs the planner role or the owner.")
    ack.add_argument("query", type=name_arg("the query name"), help="query name")
    ack.add_argument("--reason", required=True, type=name_arg("--reason"), metavar="TEXT",
                     help="what was done about it (backfilled, accepted, ticket ...)")
    ack.set_defaults(func=commands.cmd_losses_acknowledge)


def _add_rate_window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate-window", type=duration_arg, default=None,
                        metavar="DURATION",
                        help="how far back a size-limited log's growth is measured, with "
                             "--bootstrap-servers (default 10m; a younger log over its age)")


def _add_scope(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exclude", action="append", metavar="PATTERN",
                        help="with --all: leave out the queries matching PATTERN "
                             "(shell-style, e.g. 'retired-*'; repeatable)")
    parser.add_argument("--active-within", type=duration_arg, default=None,
                        metavar="DURATION",
                        help="with --all: only the queries with a batch journaled within "
                             "DURATION (e.g. 7d): a retired query is left out")
