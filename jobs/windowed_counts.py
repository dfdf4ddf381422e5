"""Windowed counts with a watermark, Kafka -> Parquet in append mode (the knowledge-base
scenario), journaled and restartable from the journal with a state-aware plan.

    spark-submit jobs/windowed_counts.py --bootstrap-servers HOST:9092 --topics clicks \\
        --query-name clicks-per-minute --checkpoint /chk/clicks-v2 --output /lake/clicks \\
        --window "1 minute" --watermark "30 seconds" --database-url ... --from-journal

Event time is the Kafka record timestamp. Append mode emits a window once the
watermark passes its end; the windows still in state when the old checkpoint is
dropped were never emitted. With --from-journal on a new checkpoint, the job rewinds
to the earliest batch that may hold records of those windows (the journal's per-batch
event-time range and watermark tell which) and drops windows that end at or before the
old watermark, which the old run had emitted: none is emitted twice, none is missing.

Or keep the windows' state instead of rebuilding it (``savepoint create``, then
``--from-journal --savepoint ID|DIR --restore``): the state and the old watermark are
written into the new checkpoint before its first batch, which starts after the
savepoint's batch; nothing is read again.
"""

from __future__ import annotations

import logging
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    JobError,
    apply_trigger,
    base_parser,
    decide_start,
    output_dir_for,
    read_kafka,
    run_job,
    start_query,
)

log = logging.getLogger("offset_journal.jobs.windowed_counts")


def parse_duration(text: str) -> timedelta:
    """'1 minute', '30 seconds', '10s', '500 ms' -> timedelta (Spark's interval strings),
    as ``offset-journal plan --window`` reads them."""
    from offset_journal.values import parse_duration as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise JobError(str(exc)) from None


def parser() -> Any:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--output", required=True, help="base output directory")
    p.add_argument("--window", default="1 minute", help="tumbling window length")
    p.add_argument("--watermark", default="30 seconds", help="allowed lateness")
    return p


def build_query(spark: Any, args: Any) -> Any:
    from pyspark.sql import functions as F

    window = parse_duration(args.window)
    parse_duration(args.watermark)
    out = output_dir_for(args.output, args.checkpoint)
    restoring = args.savepoint is not None  # the state carried, not rebuilt by a rewind
    start = decide_start(args, state_aware=not restoring,
                         window=None if restoring else window, output_path=out)
    events = read_kafka(spark, args, start).select(
        F.col("topic"), F.col("timestamp").alias("event_time"))
    counts = (
        events.withWatermark("event_time", args.watermark)
        .groupBy(F.window("event_time", args.window), F.col("topic"))
        .count()
        .select(F.col("window.start").alias("window_start"),
                F.col("window.end").alias("window_end"), "topic", "count")
    )
    if start.event_time_cutoff is not None:
        # Windows ending at or before the old run's watermark were emitted by it.
        counts = counts.where(F.col("window_end") > F.lit(start.event_time_cutoff))
    log.info("starting %s: startingOffsets=%s (%s), emitted cut-off %s", args.query_name,
             start.starting_offsets, start.reason, start.event_time_cutoff)

    def writer() -> Any:
        return apply_trigger(counts.writeStream.format("parquet").outputMode("append")
                             .option("path", out).option("checkpointLocation", args.checkpoint)
                             .queryName(args.query_name), args.trigger)

    return start_query(spark, args, start, writer)


def main(argv: list[str] | None = None) -> int:
    return run_job("windowed_counts", parser(), build_query, argv)


if __name__ == "__main__":
    sys.exit(main())
