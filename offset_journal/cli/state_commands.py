"""``offset-journal state ...``: a stopped query's state, changed in place.

``state repartition --checkpoint CK --partitions N`` runs Spark's offline repartition
of a RocksDB checkpoint (:mod:`offset_journal.savepoint.restore.repartition`): refused
while the journal says the query runs, journaled as a decision. It needs PySpark and
offset-journal's state-restore helper jar, which it builds (Maven, once) and puts on the
local session's class path itself.
"""

from __future__ import annotations

import argparse
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
                    "the query runs. Needs PySpark (a local session; --master for another) "
                    "and Maven (the helper jar, built once).")
    rep.add_argument("--checkpoint", required=True, metavar="CK",
                     help="the stopped query's checkpoint directory (or URL)")
    rep.add_argument("--partitions", required=True, type=int, metavar="N",
                     help="the shuffle partitions the query runs with from its next batch")
    rep.add_argument("--assume-stopped", action="store_true",
                     help="the query is stopped although the journal has no termination "
                          "for its last run (killed before it was journaled); recorded")
    rep.add_argument("--master", default=None,
                     help="Spark master for the repartition (default local[*])")
    rep.add_argument("--no-record", action="store_true",
                     help="leave the repartition unjournaled (restart_plans)")
    rep.set_defaults(func=cmd_state_repartition)


def state_session(master: str | None) -> tuple[Any, bool]:
    """The running SparkSession (False: not ours to stop; it must have the helper jar),
    else a local one with the helper jar on its class path (True)."""
    from ..errors import ConfigError
    from ..local.jars import state_restore_jar

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
               .config("spark.jars", str(state_restore_jar())))
    return builder.getOrCreate(), True


def cmd_state_repartition(args: argparse.Namespace) -> int:
    from ..journal import Journal
    from ..journal.db import resolve_url
    from ..savepoint.restore.repartition import repartition_state

    with Journal(resolve_url(args.database_url)) as journal:
        spark, own = state_session(args.master)
        try:
            done = repartition_state(spark, args.checkpoint, args.partitions, journal=journal,
                                     assume_stopped=args.assume_stopped,
                                     record=not args.no_record)
        finally:
            if own:
                spark.stop()
    which = f"query {done.query_name!r}" if done.query_name else f"query id {done.query_id}"
    print(f"repartitioned the state of {which} at {done.checkpoint}: "
          f"{done.partitions_before} -> {done.partitions} partitions (batch {done.batch_id}, "
          "which reads nothing); start the query again on the same checkpoint")
    if done.plan_id is not None:
        print(f"journaled as decision {done.plan_id}")
    elif done.record_problem:
        import sys

        print(f"offset-journal: warning: {done.record_problem}", file=sys.stderr)
    return 0
