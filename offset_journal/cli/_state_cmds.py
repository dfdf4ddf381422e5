"""``offset-journal state ...``: a query's state written where a query needs it.

``state restore SAVEPOINT --to NEW_CK --query FILE:FUNCTION`` restores a savepoint into
a new checkpoint of the new query (:func:`offset_journal.restart.restoring.restore_from_plan`)
before the query is deployed: the plan from the savepoint (recorded, ``--restore``), the
query's bootstrap batch, the state written; the query, started later on the checkpoint
(``spark-submit``), resumes after it. ``FUNCTION(spark, checkpoint, starting_offsets)``
returns the new query's ``DataStreamWriter`` (``starting_offsets``: each source's
``startingOffsets``, in source order).

``state repartition --checkpoint CK --partitions N`` runs Spark's offline repartition
of a RocksDB checkpoint (:mod:`offset_journal.state.repartition`): refused
while the journal says the query runs or has no run of it (``--assume-stopped``),
journaled as a decision, or said not to be.

Both need PySpark and offset-journal's state-restore helper jar, which the package ships
for the Spark minors they run on; they put it on the local session's ``spark.jars``
themselves (with Spark's Kafka connector for a restore: the new query reads Kafka).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


def add_state(subs: Any, common: argparse.ArgumentParser, parser_class: type) -> None:
    """The ``state`` command group."""
    state = subs.add_parser("state", parents=[common],
                            help="a stopped query's state, changed in place (repartition)")
    state_subs = state.add_subparsers(dest="state_command", metavar="ACTION",
                                      parser_class=parser_class)
    state_subs.required = True
    rep = state_subs.add_parser(
        "repartition", parents=[common],
        help="repartition a stopped query's RocksDB state in place into N shuffle "
             "partitions, journaled as a decision",
        description="Spark's offline state repartition: a batch that reads nothing is "
                    "added to the checkpoint, every store rewritten into N partitions; "
                    "the query, started again on the checkpoint, runs with N shuffle "
                    "partitions. RocksDB checkpoints only; refused while the journal says "
                    "the query runs, and for a query id the journal has no run of (it "
                    "cannot tell) unless --assume-stopped; a repartition that fails "
                    "removes what it wrote. Runs on Spark 4.2 (any patch). Needs PySpark (a "
                    "local session; --master for another; the helper jar is shipped).")
    rep.add_argument("--checkpoint", required=True, metavar="CK",
                     help="the stopped query's checkpoint directory (or URL)")
    rep.add_argument("--partitions", required=True, type=int, metavar="N",
                     help="the shuffle partitions the query runs with from its next batch")
    rep.add_argument("--assume-stopped", action="store_true",
                     help="the query is stopped although the journal cannot tell: no "
                          "termination journaled for its last run (killed before it was "
                          "journaled), or no run of its query id at all (not journaled "
                          "then); recorded with the decision")
    rep.add_argument("--master", default=None,
                     help="Spark master for the repartition (default local[*])")
    rep.add_argument("--no-record", action="store_true",
                     help="leave the repartition unjournaled (restart_plans)")
    rep.set_defaults(func=cmd_state_repartition)
    _add_restore(state_subs, common)
    _add_recover(state_subs, common)


def _add_restore(state_subs: Any, common: argparse.ArgumentParser) -> None:
    from ._query_file import query_ref
    from .plan_args import savepoint_ref

    res = state_subs.add_parser(
        "restore", parents=[common],
        help="restore a savepoint into a NEW checkpoint of the new query, before it is "
             "deployed (the plan recorded, the state written at JVM speed)",
        description="The plan from the savepoint (recorded), the new query's bootstrap "
                    "batch on the new checkpoint (it reads nothing), every operator's state "
                    "checked against the new query's and written; start the query on the "
                    "checkpoint afterwards. Runs on Spark 4.2 and 4.3 (any patch). Needs "
                    "PySpark (the helper jar is shipped).")
    res.add_argument("savepoint", metavar="ID|DIR", type=savepoint_ref,
                     help="the savepoint's id in the journal, or its directory")
    res.add_argument("--to", required=True, metavar="NEW_CHECKPOINT",
                     help="the new query's checkpoint: missing or empty")
    res.add_argument("--query", required=True, metavar="FILE:FUNCTION", type=query_ref,
                     help="a Python file (or module) and the function in it that returns "
                          "the new query's DataStreamWriter: FUNCTION(spark, checkpoint, "
                          "starting_offsets); the file runs when the command starts, "
                          "before Spark or the journal is touched (a regular file, 1 MiB "
                          "at most)")
    res.add_argument("--partitions", type=_positive, default=None, metavar="N",
                     help="the new query's shuffle partitions (default: the old query's)")
    res.add_argument("--bootstrap-servers", default=None,
                     help="the Kafka cluster: the plan checks its offsets there and starts "
                          "partitions added since at their log start")
    res.add_argument("--map-field", action="append", default=[], metavar="OP:NEW=OLD",
                     type=_pair,
                     help="a field renamed on purpose in operator OP's state (repeatable)")
    res.add_argument("--into-state", action="append", default=[], metavar="OP:NAME",
                     type=_named_state,
                     help="the value state an aggregation goes into when operator OP of "
                          "the new query is a transformWithState with several")
    res.add_argument("--rename-state", action="append", default=[], metavar="OP:NEW=OLD",
                     type=_pair,
                     help="a transformWithState state variable renamed (repeatable)")
    res.add_argument("--assume-matched", action="append", default=[], metavar="OP:BOOL",
                     type=_matched,
                     help="an outer or semi stream-stream join OP restored from the "
                          "savepoint's rows, which carry no 'matched' flag: write every row "
                          "as matched (true: a row that never matched emits no null-padded "
                          "row) or unmatched (false: one that did emits one too); recorded "
                          "with the plan")
    res.add_argument("--time-zone", default=None, metavar="ZONE", type=_zone,
                     help="the time zone the new query's session runs in "
                          "(spark.sql.session.timeZone), e.g. America/New_York or +05:00: "
                          "a date field that became a timestamp is each date at midnight "
                          "there; recorded with the plan")
    res.add_argument("--discard-state", action="store_true",
                     help="accept losing the state of operators that cannot be carried "
                          "(recorded with the plan as its decision)")
    res.add_argument("--unrecorded-savepoint", action="store_true",
                     help="accept a savepoint directory the journal did not record")
    res.add_argument("--master", default=None, help="Spark master (default local[*])")
    res.add_argument("--no-record", action="store_true", help="leave the plan unrecorded")
    res.set_defaults(func=cmd_state_restore)


def _add_recover(state_subs: Any, common: argparse.ArgumentParser) -> None:
    from ._query_file import query_ref
    from .plan_args import savepoint_ref

    rec = state_subs.add_parser(
        "recover", parents=[common],
        help="recover a lost or broken checkpoint of a stateful query into a NEW "
             "checkpoint: the newest usable savepoint restored, the batches since read "
             "again into state, not written (recorded as a plan)",
        description="The newest usable savepoint of QUERY (recorded, not deleted, its "
                    "checksums verified, its batch journaled) restored into NEW_CHECKPOINT "
                    "as `state restore` does; then every batch the old query ran after it "
                    "(up to the journal's last, or the sink's when later) run again once on "
                    "its own offsets and watermark, its sink swapped for noop, so the state "
                    "ends where the old query's did and nothing the sink holds is written "
                    "twice. Start the query on NEW_CHECKPOINT afterwards: it reads on from "
                    "there. Runs on Spark 4.2 and 4.3. Needs PySpark (the helper jar is "
                    "shipped).")
    rec.add_argument("query_name", metavar="QUERY", help="the query whose state is recovered")
    rec.add_argument("--to", required=True, metavar="NEW_CHECKPOINT",
                     help="the new query's checkpoint: missing or empty")
    rec.add_argument("--query", required=True, metavar="FILE:FUNCTION", type=query_ref,
                     help="a Python file (or module) and the function in it that returns "
                          "the query's DataStreamWriter: FUNCTION(spark, checkpoint, "
                          "starting_offsets), as for `state restore`; called once per "
                          "batch run here")
    rec.add_argument("--savepoint", default=None, metavar="ID|DIR", type=savepoint_ref,
                     help="recover from this savepoint (default: the newest usable one)")
    rec.add_argument("--bootstrap-servers", default=None,
                     help="the Kafka cluster: the plan checks its offsets there")
    rec.add_argument("--partitions", type=_positive, default=None, metavar="N",
                     help="the new query's shuffle partitions (default: the old query's)")
    rec.add_argument("--reread-sink", action="store_true",
                     help="let the query's own sink see the batches read again (an "
                          "idempotent or foreachBatch sink): the plan says how many")
    rec.add_argument("--master", default=None, help="Spark master (default local[*])")
    rec.add_argument("--no-record", action="store_true", help="leave the plan unrecorded")
    rec.set_defaults(func=cmd_state_recover)


def state_session(master: str | None, *, kafka: bool = False,
                  paths: Sequence[str | None] = ()) -> tuple[Any, bool]:
    """The running SparkSession (False: not ours to stop; it must have the helper jar),
    else a local one with the helper jar on its class path (:func:`state_jars`)."""
    from ..errors import ConfigError

    try:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigError("state repartition runs Spark: install PySpark "
                          "(pip install 'offset-journal[demo]')") from None
    if SparkContext._active_spark_context is not None:
        return SparkSession.builder.getOrCreate(), False
    builder = (SparkSession.builder.appName("offset-journal-state")
               .master(master or "local[*]").config("spark.ui.enabled", "false")
               .config("spark.jars", state_jars(kafka=kafka, paths=paths)))
    return builder.getOrCreate(), True


def state_jars(*, kafka: bool = False, paths: Sequence[str | None] = ()) -> str:
    """``spark.jars`` of a state command's own session: the helper jar, Spark's Kafka
    connector with ``kafka``, and hadoop-aws when one of ``paths`` is on S3 (Spark's
    own reads and writes of a checkpoint or savepoint there go through S3A)."""
    from ..local.jars import s3a_spark_jars_value, spark_jars_value, state_restore_jar
    from ..values import on_s3

    return ",".join([*([spark_jars_value()] if kafka else []),
                     *([s3a_spark_jars_value()] if on_s3(*paths) else []),
                     str(state_restore_jar())])


def cmd_state_repartition(args: argparse.Namespace) -> int:
    from ..journal import Journal
    from ..journal.db import resolve_url
    from ..restart.record import record_repartition
    from ..state.repartition import preflight, repartition_state

    with Journal(resolve_url(args.database_url)) as journal:
        preflight(args.checkpoint, args.partitions, journal,
                  assume_stopped=args.assume_stopped)
        spark, own = state_session(args.master, paths=[args.checkpoint])
        try:
            done = repartition_state(spark, args.checkpoint, args.partitions, journal=journal,
                                     assume_stopped=args.assume_stopped)
        finally:
            if own:
                spark.stop()
        if not args.no_record:
            done = record_repartition(journal, done)
    which = f"query {done.query_name!r}" if done.query_name else f"query id {done.query_id}"
    print(f"repartitioned the state of {which} at {done.checkpoint}: "
          f"{done.partitions_before} -> {done.partitions} partitions (batch {done.batch_id}, "
          "which reads nothing); start the query again on the same checkpoint")
    if done.plan_id is not None:
        print(f"journaled as decision {done.plan_id}")
    elif args.no_record:
        print("not journaled (--no-record)")
    elif done.record_problem:
        import sys

        print(f"offset-journal: warning: {done.record_problem}", file=sys.stderr)
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number >= 1")
    return value


def _pair(text: str) -> tuple[int, str, str]:
    """``OP:NEW=OLD``."""
    op, _, pair = text.partition(":")
    new, _, old = pair.partition("=")
    if not op.strip().isdigit() or not new.strip() or not old.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: use OPERATOR:NEW=OLD")
    return int(op), new.strip(), old.strip()


def _matched(text: str) -> tuple[int, bool]:
    """``OP:true`` or ``OP:false``."""
    op, _, flag = text.partition(":")
    if not op.strip().isdigit() or flag.strip().lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r}: use OPERATOR:true or OPERATOR:false")
    return int(op), flag.strip().lower() == "true"


def _zone(text: str) -> str:
    """A time zone Spark takes: a region (``America/New_York``), ``UTC``, or an offset
    (``+05:00``)."""
    import re
    import zoneinfo

    zone = text.strip()
    if re.fullmatch(r"(UTC|GMT)?[+-](0?\d|1[0-8])(:[0-5]\d)?|UTC|GMT|Z", zone):
        return zone
    try:
        zoneinfo.ZoneInfo(zone)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise argparse.ArgumentTypeError(
            f"{text!r}: not a time zone (a region such as America/New_York, UTC, or an "
            "offset such as +05:00)") from None
    return zone


def _named_state(text: str) -> tuple[int, str]:
    """``OP:NAME``."""
    op, _, name = text.partition(":")
    if not op.strip().isdigit() or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: use OPERATOR:NAME")
    return int(op), name.strip()


def _by_operator(pairs: list[tuple[int, str, str]]) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    for op, new, old in pairs:
        out.setdefault(op, {})[new] = old
    return out


def cmd_state_restore(args: argparse.Namespace) -> int:
    import sys

    from ..journal import Journal
    from ..journal.db import resolve_url
    from ..restart import PlanRequest, plan_restart
    from ..restart.restoring import restore_from_plan
    from ..savepoint import load_savepoint
    from ..savepoint.spark import session_conf
    from ..state import Rules
    from ._query_file import load_function
    from ._restore_flags import CommandFlags

    build = load_function(args.query)
    rules = Rules(variable=dict(args.into_state), fields=_by_operator(args.map_field),
                  variables=_by_operator(args.rename_state),
                  discard=bool(args.discard_state), matched=dict(args.assume_matched),
                  time_zone=args.time_zone, spelling=CommandFlags())
    with Journal(resolve_url(args.database_url)) as journal:
        found = load_savepoint(args.savepoint, journal, verify=False,
                               unrecorded=args.unrecorded_savepoint)
        m = found.manifest
        request = PlanRequest(
            m.query_name, savepoint=args.savepoint, restore=True, checkpoint=args.to,
            bootstrap_servers=args.bootstrap_servers, discard_state=args.discard_state,
            unrecorded_savepoint=args.unrecorded_savepoint,
            restore_rules=rules.recorded() or None).checked()
        # Recorded once the restore is done (restore_from_plan): a refused one leaves no plan.
        plan = plan_restart(None, request, journal=journal, record=False,
                            command="state-restore")
        if not plan.ok:
            from ..errors import RestartError

            raise RestartError("restart plan has errors: " + "; ".join(plan.errors))
        starting = [plan.starting_offsets(s.index) for s in plan.sources]
        partitions = args.partitions or max((o.partitions for o in m.operators), default=0)
        spark, own = state_session(args.master, kafka=True,
                                   paths=[args.to, found.location, m.checkpoint])
        try:
            with session_conf(spark, "spark.sql.shuffle.partitions",
                              str(partitions) if partitions else None):
                done = restore_from_plan(
                    journal, spark, plan, args.to, lambda: build(spark, args.to, starting),
                    request=None if args.no_record else request, savepoint=found,
                    rules=rules, command="state-restore")
        finally:
            if own:
                spark.stop()
    restored, plan = done.restored, done.plan  # the plan as recorded, if it was
    print(restored.explain())
    if plan.plan_id is not None:
        print(f"recorded as plan {plan.plan_id}, linked to the bootstrap run "
              f"{restored.bootstrap_run_id}; start the new query on {args.to}: it resumes "
              "after the restored batch")
    for warning in done.warnings:
        print(f"offset-journal: warning: {warning}", file=sys.stderr)
    return 0


def cmd_state_recover(args: argparse.Namespace) -> int:
    import sys

    from ..journal import Journal
    from ..journal.db import resolve_url
    from ..restart.recovery import recover
    from ._query_file import load_function

    build = load_function(args.query)
    with Journal(resolve_url(args.database_url)) as journal:
        spark, own = state_session(args.master, kafka=True,
                                   paths=[args.to, *_savepoint_places(journal, args)])
        try:
            done = recover(spark, journal, args.query_name, args.to,
                           lambda starting: build(spark, args.to, starting),
                           savepoint=args.savepoint, bootstrap_servers=args.bootstrap_servers,
                           reread_sink=args.reread_sink, partitions=args.partitions,
                           record=not args.no_record)
        finally:
            if own:
                spark.stop()
    print(done.explain())
    if done.plan.plan_id is not None:
        print(f"recorded as plan {done.plan.plan_id}; start the query on {args.to}: it "
              "resumes after the last batch read again")
    for warning in done.warnings:
        print(f"offset-journal: warning: {warning}", file=sys.stderr)
    return 0


def _savepoint_places(journal: Any, args: argparse.Namespace) -> list[str]:
    """Where the savepoints a recovery may restore live (the one given, else every one
    recorded of the query) and their checkpoints: the session needs S3A for any on S3."""
    if isinstance(args.savepoint, str):
        return [args.savepoint]
    return [p for r in journal.savepoints(args.query_name) for p in (r.location, r.checkpoint)]
