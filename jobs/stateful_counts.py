"""Running totals per group (count, max, sum) from Kafka, journaled, upgradable onto a
new checkpoint with its state kept (a savepoint).

    # v1: Spark's built-in aggregation
    spark-submit jobs/stateful_counts.py --bootstrap-servers HOST:9092 --topics amounts \\
        --query-name totals --checkpoint /chk/totals-v1 --output /lake/totals \\
        --database-url postgresql://...
    # stop it, take a savepoint of its checkpoint
    offset-journal savepoint create totals --checkpoint /chk/totals-v1 --to /sp/totals-1
    # v2: transformWithState (one more output column), on a NEW checkpoint, its state
    # restored into it at JVM speed (the helper jar: offset-journal jars state-restore)
    spark-submit --jars "$(offset-journal jars state-restore)" jobs/stateful_counts.py \\
        ... --checkpoint /chk/totals-v2 --engine transform-with-state --from-journal \\
        --savepoint /sp/totals-1 --restore
    # ... or seeded in Python instead (handleInitialState per key): --seed 0
    # ... or all of it in one call, verified, v1 back on its checkpoint if v2 fails:
    spark-submit jobs/stateful_counts.py ... --checkpoint /chk/totals-v2 \
        --engine transform-with-state --upgrade-from /chk/totals-v1 \
        --savepoint-to /sp/totals-1 --trigger '1 second'

Each record's value is ``GROUP,AMOUNT``. Output (update mode, one Parquet directory per
checkpoint, a ``batch_id`` column): per group that received records in a batch, its
``n`` (records), ``mx`` (largest amount) and ``total``; v2 adds ``mean``. With
``--from-journal`` on a new checkpoint this job needs ``--savepoint``: a stateful job
restarted from offsets alone would start its totals from zero. ``--restore`` writes the
savepoint's state into the new checkpoint before the first batch, for either engine
(the built-in aggregation again, say with more shuffle partitions, or transformWithState:
the aggregation's count, max and sum go into the value state's n, mx and total, the
mapping :func:`restore_rules` declares).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    JobError,
    Start,
    apply_trigger,
    base_parser,
    decide_start,
    output_dir_for,
    read_kafka,
    run_job,
    start_query,
)
from pyspark.sql import Row  # noqa: E402
from pyspark.sql.types import LongType, StructField, StructType  # noqa: E402

log = logging.getLogger("offset_journal.jobs.stateful_counts")

ENGINES = ("builtin", "transform-with-state")
TOTALS = StructType([StructField("n", LongType()), StructField("mx", LongType()),
                     StructField("total", LongType())])
V2_OUTPUT = "grp string, n long, mx long, total long, mean double"


def restore_rules() -> Any:
    """The restore's mapping: a built-in aggregation's buffer (count, max, sum, Spark's
    names) into the value state ``totals`` (n, mx, total)."""
    from offset_journal.state import Rules

    return Rules(variable={0: "totals"},
                 fields={0: {"n": "count", "mx": "max", "total": "sum"}})


def totals_processor() -> Any:
    """v2's processor (:class:`Totals`): its class is made here, where it is used,
    because PySpark's StatefulProcessor is 4.0's and v1 runs on 3.5 as well."""
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class Totals(StatefulProcessor):
        """v2's totals per group in one value state. Its initial state is a savepoint's: a
        built-in aggregation's buffer (count, max, sum, taken by position) or this
        processor's own value state (n, mx, total): the same three values in that order."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.totals = handle.getValueState("totals", TOTALS)

        def handleInitialState(self, key: Any, initialState: Row, timerValues: Any) -> None:
            n, mx, total = initialState[1], initialState[2], initialState[3]
            self.totals.update((n, mx, total))

        def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any,
                            ) -> Iterator[Row]:
            n, mx, total = self.totals.get() if self.totals.exists() else (0, None, 0)
            for row in rows:
                n, total = n + 1, total + row.amount
                mx = row.amount if mx is None or row.amount > mx else mx
            self.totals.update((n, mx, total))
            yield Row(grp=key[0], n=n, mx=mx, total=total, mean=total / n)

        def close(self) -> None:
            pass

    return Totals()


def parser() -> Any:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--output", required=True, help="base output directory")
    p.add_argument("--engine", choices=ENGINES, default="builtin",
                   help="builtin (groupBy().agg(), v1) or transform-with-state (v2)")
    up = p.add_argument_group("upgrade in one call (offset_journal.upgrade)")
    up.add_argument("--upgrade-from", default=None, metavar="OLD_CHECKPOINT",
                    help="upgrade the stopped v1 on OLD_CHECKPOINT to this job on the NEW "
                         "--checkpoint: a savepoint (--savepoint-to), its state restored, "
                         "this job started and verified, v1 started again on its own "
                         "checkpoint when it fails")
    up.add_argument("--upgrade-from-engine", choices=ENGINES, default="builtin",
                    help="v1's engine (default builtin)")
    up.add_argument("--savepoint-to", default=None, metavar="DIR",
                    help="where the upgrade's savepoint goes (new or empty)")
    up.add_argument("--verify-batches", type=int, default=2, metavar="K",
                    help="batches v2 must complete for the upgrade to hold (default 2)")
    up.add_argument("--verify-timeout", type=float, default=300.0, metavar="SECONDS",
                    help="how long v2 has for them (default 300)")
    return p


def writer_for(spark: Any, args: Any, start: Start) -> Any:
    """The function that builds this job's ``DataStreamWriter`` (not started) for
    ``args.engine`` on ``args.checkpoint``, reading from ``start``."""
    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    from offset_journal.savepoint import initial_state

    tws = args.engine == "transform-with-state"
    out = output_dir_for(args.output, args.checkpoint)
    values = F.split(F.col("value").cast("string"), ",")
    events = read_kafka(spark, args, start).select(
        values[0].alias("grp"), values[1].cast("long").alias("amount"))
    grouped = events.groupBy("grp")
    if not tws:
        if start.seeded:
            raise JobError("the built-in aggregation takes no initial state: run the "
                           "upgraded job with --engine transform-with-state, or restore "
                           "the savepoint (--restore)")
        totals = grouped.agg(F.count("*").alias("n"), F.max("amount").alias("mx"),
                             F.sum("amount").alias("total"))
    else:
        # The processor class travels to Python workers by value: they cannot import jobs/.
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        seed = None
        if start.savepoint is not None and start.seeded:
            if len(start.seeded) != 1:
                raise JobError(f"this job seeds one operator, not {list(start.seeded)}")
            # The directory is read again: the digest keeps the state to the manifest
            # whose offsets the plan checked.
            seed = initial_state(spark, start.savepoint, operator=start.seeded[0],
                                 expect_sha256=start.savepoint_sha256)
        totals = grouped.transformWithState(totals_processor(), V2_OUTPUT, "Update", "None",
                                            initialState=seed)

    def write(batch: Any, batch_id: int) -> None:
        batch.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(out)

    def writer() -> Any:
        return apply_trigger(totals.writeStream.outputMode("update").foreachBatch(write)
                             .option("checkpointLocation", args.checkpoint)
                             .queryName(args.query_name), args.trigger)

    return writer


def builder(args: Any, engine: str) -> Any:
    """``build(spark, checkpoint, starting_offsets)`` for :func:`offset_journal.upgrade`:
    this job's writer with ``engine`` on ``checkpoint`` (its output directory that
    checkpoint's own), from ``starting_offsets[0]``."""
    import copy

    def build(spark: Any, checkpoint: str, starting: Any) -> Any:
        own = copy.copy(args)
        own.checkpoint, own.engine = checkpoint, engine
        return writer_for(spark, own, Start(starting[0], "the upgrade's plan"))()

    return build


def upgrade_in_one_call(spark: Any, args: Any) -> Any:
    """``--upgrade-from``: v1 (stopped, on its own checkpoint) upgraded to this job on the
    new ``--checkpoint``; the query running afterwards (v2, or v1 rolled back). JobError
    (one line) when the upgrade is refused: v1 was not running, it stays as it was."""
    from offset_journal import Journal, upgrade

    if not args.savepoint_to:
        raise JobError("--upgrade-from needs --savepoint-to DIR (where the savepoint goes)")
    if args.verify_batches < 1:
        raise JobError(f"--verify-batches {args.verify_batches}: give a number >= 1")
    with Journal(args.database_url) as journal:
        done = upgrade(spark, None, builder(args, args.engine), args.checkpoint,
                       journal=journal, build_v1=builder(args, args.upgrade_from_engine),
                       savepoint_to=args.savepoint_to, checkpoint=args.upgrade_from,
                       query_name=args.query_name, rules=restore_rules(),
                       batches=args.verify_batches, timeout_s=args.verify_timeout,
                       bootstrap_servers=args.bootstrap_servers)
    log.info("%s", done.explain())
    if done.query is None:
        raise JobError(" ".join(done.explain().split()))
    return done.query


def upgraded_here(args: Any) -> Any:
    """The journaled upgrade that left v2 running on ``--checkpoint`` (None: none did,
    or the checkpoint is new): the same submit again, a driver restarted, resumes v2
    there rather than refusing a checkpoint that is no longer new."""
    from offset_journal import Journal
    from offset_journal.checkpoint import is_new_checkpoint
    from offset_journal.upgrading import upgraded_to

    if is_new_checkpoint(args.checkpoint):
        return None
    with Journal(args.database_url) as journal:
        return upgraded_to(journal.recorded_plans(args.query_name), args.checkpoint)


def build_query(spark: Any, args: Any) -> Any:
    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER, session_conf
    from offset_journal.spark_version import problem

    tws = args.engine == "transform-with-state"
    refused = problem("transform-with-state", str(spark.version)) if tws else None
    if refused is not None:  # before any plan is made or recorded
        raise JobError(refused)
    if args.upgrade_from:
        done = upgraded_here(args)
        if done is None:
            return upgrade_in_one_call(spark, args)
        log.info("upgrade %s left v2 running on %s: resuming it there (the upgrade from %s "
                 "is done)", done.id, args.checkpoint, args.upgrade_from)
    out = output_dir_for(args.output, args.checkpoint)
    if args.from_journal and args.savepoint is None:
        from offset_journal.checkpoint import is_new_checkpoint

        if is_new_checkpoint(args.checkpoint):
            raise JobError("a stateful job on a new checkpoint needs its state: give "
                           "--savepoint ID|DIR (offset-journal savepoint create)")
    start = decide_start(args, output_path=out)
    writer = writer_for(spark, args, start)
    log.info("starting %s (%s): startingOffsets=%s (%s)", args.query_name, args.engine,
             start.starting_offsets, start.reason)
    # transformWithState runs on the RocksDB state store only; the setting is taken when
    # the query starts (and kept in its checkpoint), so the session is left as it was.
    with session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER if tws else None):
        return start_query(spark, args, start, writer, restore_rules())


def main(argv: list[str] | None = None) -> int:
    return run_job("stateful_counts", parser(), build_query, argv)


if __name__ == "__main__":
    sys.exit(main())
