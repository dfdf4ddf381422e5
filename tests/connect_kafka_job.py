"""Run by test_connect.py in its own process: a Spark Connect session (local server)
reading Kafka with Spark's own connector, the journal listener attached.

The local Connect server is a classic Spark driver started by ``.remote("local[2]")``;
``spark.jars`` given to the builder reaches it (and its class path) when it starts.

    python tests/connect_kafka_job.py SPOOL_DIR BOOTSTRAP_SERVERS TOPIC QUERY_NAME
"""

import json
import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402

import offset_journal  # noqa: E402
from offset_journal.local.jars import spark_jars_value  # noqa: E402

spool, bootstrap, topic, name = sys.argv[1:5]
spark = (SparkSession.builder.remote("local[2]")
         .config("spark.jars", spark_jars_value())
         .config("spark.ui.enabled", "false")
         .getOrCreate())
listener = offset_journal.attach(spark, spool_dir=spool)  # URL: OFFSET_JOURNAL_DATABASE_URL
q = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
     .option("subscribe", topic).option("startingOffsets", "earliest")
     .option("maxOffsetsPerTrigger", "9").load()
     .writeStream.format("noop").option("checkpointLocation", os.path.join(spool, "..", "ck"))
     .queryName(name).trigger(availableNow=True).start())
q.awaitTermination()
listener.wait_terminated(q.runId, timeout=60)


def offsets(value):
    return json.loads(value) if isinstance(value, str) else value


batches = [{"batchId": p["batchId"],
            "sources": [{"description": s["description"], "numInputRows": s["numInputRows"],
                         "startOffset": offsets(s["startOffset"]),
                         "endOffset": offsets(s["endOffset"])} for s in p["sources"]]}
           for p in q.recentProgress]
print(json.dumps({"run_id": str(q.runId), "exception": str(q.exception() or ""),
                  "batches": batches}))
sys.stdout.flush()
spark.stop()
