"""A driver whose listener bus drops streaming events (tests/capture/test_listener_bus.py).

Its own process, because the queue's capacity is a SparkContext setting: Spark's
``spark.scheduler.listenerbus.eventqueue.streams.capacity`` is tiny, and a second
listener on the same queue (``streams``: every StreamingQueryListener is called from
its one thread) blocks on batch ``--block-at`` until the checkpoint has committed
``--block-for`` batches more. Meanwhile Spark posts every batch's events into the full
queue and drops them, progress events too; the journal's listener never sees those
batches. The query reads Kafka through Spark's connector into the noop sink and stops
when ``--stop-file`` appears.

argv: BOOTSTRAP TOPIC CHECKPOINT DATABASE_URL QUERY_NAME SPOOL STOP_FILE
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

CAPACITY = "spark.scheduler.listenerbus.eventqueue.streams.capacity"


def _committed(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else 0


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("bootstrap", "topic", "checkpoint", "url", "query", "spool", "stop"):
        p.add_argument(name)
    p.add_argument("--capacity", default="8")
    p.add_argument("--block-at", type=int, default=2)
    p.add_argument("--block-for", type=int, default=6)
    args = p.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener

    import offset_journal
    from offset_journal.local.jars import spark_jars_value

    spark = (SparkSession.builder.appName("listener-bus-drop").master("local[2]")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.jars", spark_jars_value())
             .config(CAPACITY, args.capacity).getOrCreate())
    listener = offset_journal.attach(spark, database_url=args.url, spool_dir=args.spool)
    checkpoint = Path(args.checkpoint)

    class Slow(StreamingQueryListener):
        """Another listener that takes its time once, as a slow one in production."""

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            if event.progress.batchId != args.block_at:
                return
            want = _committed(checkpoint) + args.block_for
            deadline = time.monotonic() + 120
            while _committed(checkpoint) < want and time.monotonic() < deadline:
                time.sleep(0.05)
            print(f"slow listener: released with {_committed(checkpoint)} batches "
                  "committed", flush=True)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Slow())
    df = (spark.readStream.format("kafka")
          .option("kafka.bootstrap.servers", args.bootstrap).option("subscribe", args.topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "4").load())
    query = (df.writeStream.format("noop").queryName(args.query)
             .option("checkpointLocation", args.checkpoint)
             .trigger(processingTime="100 milliseconds").start())
    stop = Path(args.stop)
    deadline = time.monotonic() + 600
    while not stop.exists() and query.isActive and time.monotonic() < deadline:
        time.sleep(0.1)
    query.stop()
    listener.close()
    spark.stop()


if __name__ == "__main__":
    main()
