"""Stateless Kafka -> sink job, journaled, restartable from the journal.

    spark-submit jobs/kafka_to_sink.py --bootstrap-servers HOST:9092 --topics orders \\
        --query-name orders-to-lake --checkpoint /chk/orders-v2 --sink parquet \\
        --output /lake/orders --database-url postgresql://... --from-journal

Sinks:
  parquet   files under OUTPUT/checkpoint=<hash of the checkpoint path>: one directory
            per checkpoint, so a new checkpoint never meets an old ``_spark_metadata``
            log (which would make Spark skip its first batches as already committed).
  postgres  rows upserted into a table keyed by (topic, partition, offset): replaying a
            batch after a crash writes nothing twice (an idempotent sink).
  delta     Delta Lake's streaming sink, one table at OUTPUT for every checkpoint: Delta
            skips a batch its log already holds for the same query id, and a new
            checkpoint is a new query id, so nothing of the new query is skipped.

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
    decide_start,
    link_start,
    output_dir_for,
    read_kafka,
    run_job,
)

log = logging.getLogger("offset_journal.jobs.kafka_to_sink")

SINK_COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp")


def libpq_url(url: str) -> str:
    """A URL psycopg can connect with, from a SQLAlchemy or libpq one."""
    import sqlalchemy as sa

    from offset_journal.journal.db import resolve_url

    return sa.engine.make_url(resolve_url(url)).set(drivername="postgresql").render_as_string(
        hide_password=False)


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


def parser() -> Any:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--sink", choices=("parquet", "postgres", "delta"), default="parquet")
    p.add_argument("--output", help="parquet: base output directory; delta: the table")
    p.add_argument("--sink-url", help="postgres: sink database (default: the journal's)")
    p.add_argument("--sink-table", default="kafka_records", help="postgres: sink table")
    return p


def build_query(spark: Any, args: Any) -> Any:
    """Start the streaming query (the listener should already be attached)."""
    if args.sink == "parquet":
        if not args.output:
            raise JobError("--output is required with --sink parquet")
        out = output_dir_for(args.output, args.checkpoint)
        start = decide_start(args, output_path=out)
        writer = read_kafka(spark, args, start).writeStream.format("parquet").option("path", out)
    elif args.sink == "delta":
        if not args.output:
            raise JobError("--output is required with --sink delta")
        start = decide_start(args)
        writer = (read_kafka(spark, args, start).select(*SINK_COLUMNS).writeStream
                  .format("delta").option("path", args.output))
    else:
        url = args.sink_url or args.database_url
        ensure_sink_table(url, args.sink_table)
        start = decide_start(args)
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
