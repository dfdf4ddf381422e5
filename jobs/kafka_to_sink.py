"""Stateless Kafka -> sink job, journaled, restartable from the journal.

    spark-submit jobs/kafka_to_sink.py --bootstrap-servers HOST:9092 --topics orders \\
        --query-name orders-to-lake --checkpoint /chk/orders-v2 --sink parquet \\
        --output /lake/orders --database-url postgresql://... --from-journal

Sinks:
  parquet   files under OUTPUT/checkpoint=<hash of the checkpoint path>: one directory
            per checkpoint, so a new checkpoint never meets an old ``_spark_metadata``
            log (which would make Spark skip its first batches as already committed).
  delta     Delta's streaming sink into the table at OUTPUT, one table for every
            checkpoint: Delta keys its commits on the query id, which a new checkpoint
            changes.
  delta-txn foreachBatch appending to the Delta table at OUTPUT with Delta's idempotent
            writes: txnAppId = kafka_to_sink-<hash of the checkpoint path> (a new one per
            checkpoint), txnVersion = the batch id.
  postgres  rows upserted into a table keyed by (topic, partition, offset): replaying a
            batch after a crash writes nothing twice (an idempotent sink).

With ``--from-journal --old-checkpoint OLD`` the restart plan reads what the old
query's sink holds (this job's sink on OLD: its ``_spark_metadata`` log, or the Delta
table's ``txn`` of OLD's query id or txnAppId) and starts after the last batch the sink
holds, with that batch's offsets from OLD: exactly once into the sink across a driver
crash. (Without it the plan reads the file and Delta sinks the journal names.) The
postgres sink keeps no log and needs none: with ``--old-checkpoint`` the batches OLD has
beyond the journal are read again on purpose (the plan's ``--sink none``, a warning). A
job changing its sink kind on the upgrade leaves ``--old-checkpoint`` out.

Paths may be on S3 (``s3a://bucket/...``), the checkpoint as well as the output.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    JobError,
    apply_trigger,
    base_parser,
    checkpoint_digest,
    decide_start,
    link_start,
    output_dir_for,
    read_kafka,
    run_job,
)

from offset_journal.journal.db import libpq_url  # noqa: E402
from offset_journal.restart.request import SINK_NONE  # noqa: E402

log = logging.getLogger("offset_journal.jobs.kafka_to_sink")

SINK_COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp")


def ensure_sink_table(url: str, table: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (topic text NOT NULL, partition int NOT NULL, "
            "\"offset\" bigint NOT NULL, key bytea, value bytea, timestamp timestamptz, "
            "PRIMARY KEY (topic, partition, \"offset\"))").format(sql.Identifier(table)))


class PostgresSink:
    """foreachBatch sink: upsert each partition's rows, ignoring rows already there."""

    def __init__(self, url: str, table: str) -> None:
        self.url = libpq_url(url)
        self.table = table

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        url, table = self.url, self.table

        def write_partition(rows: Any) -> None:
            import psycopg
            from psycopg import sql

            stmt = sql.SQL(
                "INSERT INTO {} (topic, partition, \"offset\", key, value, timestamp) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
            ).format(sql.Identifier(table))
            batch = [tuple(r[c] for c in SINK_COLUMNS) for r in rows]
            if not batch:
                return
            with psycopg.connect(url) as conn, conn.cursor() as cur:
                cur.executemany(stmt, batch)

        batch_df.select(*SINK_COLUMNS).foreachPartition(write_partition)


def txn_app_id_for(checkpoint: str) -> str:
    """The delta-txn sink's txnAppId on a checkpoint: a new one per checkpoint, since a
    new checkpoint numbers its batches from 0 again and Delta skips every txnVersion not
    above the last one recorded for the appId."""
    return f"kafka_to_sink-{checkpoint_digest(checkpoint)}"


class DeltaTxnSink:
    """foreachBatch sink: append each batch to a Delta table with Delta's idempotent
    writes (txnAppId, txnVersion = batch id): a batch written again is skipped."""

    def __init__(self, path: str, app_id: str) -> None:
        self.path = path
        self.app_id = app_id

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        (batch_df.select(*SINK_COLUMNS).write.format("delta").mode("append")
         .option("txnAppId", self.app_id).option("txnVersion", batch_id).save(self.path))


def parser() -> Any:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--sink", choices=("parquet", "delta", "delta-txn", "postgres"),
                   default="parquet")
    p.add_argument("--output", help="parquet: base output directory; delta, delta-txn: "
                                    "the Delta table's path")
    p.add_argument("--sink-url", help="postgres: sink database (default: the journal's)")
    p.add_argument("--sink-table", default="kafka_records", help="postgres: sink table")
    return p


def build_query(spark: Any, args: Any) -> Any:
    """Start the streaming query (the listener should already be attached)."""
    if args.sink != "postgres" and not args.output:
        raise JobError(f"--output is required with --sink {args.sink}")
    old = args.old_checkpoint  # the old query's sink: this job's, on the old checkpoint
    if args.sink == "parquet":
        out = output_dir_for(args.output, args.checkpoint)
        start = decide_start(args, output_path=out,
                             sink=output_dir_for(args.output, old) if old else None)
        writer = read_kafka(spark, args, start).writeStream.format("parquet").option("path", out)
    elif args.sink == "delta":
        start = decide_start(args, sink=f"delta:{args.output}" if old else None)
        writer = (read_kafka(spark, args, start).select(*SINK_COLUMNS).writeStream
                  .format("delta").option("path", args.output))
    elif args.sink == "delta-txn":
        start = decide_start(args, sink=f"delta:{args.output}" if old else None,
                             txn_app_id=(args.txn_app_id or txn_app_id_for(old)) if old
                             else None)
        writer = read_kafka(spark, args, start).writeStream.foreachBatch(
            DeltaTxnSink(args.output, txn_app_id_for(args.checkpoint)))
    else:
        url = args.sink_url or args.database_url
        ensure_sink_table(url, args.sink_table)
        # An upsert keyed by (topic, partition, offset) keeps no log to read and needs
        # none: a batch in flight on OLD is read again on purpose (the plan warns), where
        # the plan would refuse for want of a sink log and this job has no flag to say it.
        start = decide_start(args, sink=SINK_NONE if old else None)
        writer = read_kafka(spark, args, start).writeStream.foreachBatch(
            PostgresSink(url, args.sink_table))
    log.info("starting %s: startingOffsets=%s (%s)", args.query_name, start.starting_offsets,
             start.reason)
    writer = writer.option("checkpointLocation", args.checkpoint).queryName(args.query_name)
    return link_start(args, start, apply_trigger(writer, args.trigger).start())


def main(argv: list[str] | None = None) -> int:
    return run_job("kafka_to_sink", parser(), build_query, argv)


if __name__ == "__main__":
    sys.exit(main())
