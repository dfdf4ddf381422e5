"""Run by test_connect.py in its own process: one Spark Connect session (a local server,
started once: its JVM is most of the time), the journal listener attached, runs two
queries one after the other, and prints one JSON line with what Connect reported of each:

- ``files``: a file source (three files, one per batch), whose offsets the journal keeps
  as Spark reports them;
- ``kafka``: Spark's own Kafka connector (its jars on the server's ``spark.jars``: the
  local Connect server is a classic Spark driver started by ``.remote("local[2]")``,
  and the builder's settings reach it when it starts).

    python tests/connect_job.py SPOOL_DIR BOOTSTRAP_SERVERS TOPIC QUERY_NAME
"""

import json
import os
import sys
import tempfile

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
work = tempfile.mkdtemp()


def offsets(value):
    return json.loads(value) if isinstance(value, str) else value


def finished(q):
    """What Connect's progress said of each batch of ``q``, once the journal has its end.
    (Depending on the Spark version the listener runs in this client, as 4.x streams
    events to it, or on the server; waiting here is a no-op in the latter case.)"""
    q.awaitTermination()
    listener.wait_terminated(q.runId, timeout=60)
    batches = [{"batchId": p["batchId"],
                "sources": [{"description": s["description"],
                             "numInputRows": s["numInputRows"],
                             "startOffset": offsets(s["startOffset"]),
                             "endOffset": offsets(s["endOffset"])} for s in p["sources"]]}
               for p in q.recentProgress]
    return {"run_id": str(q.runId), "exception": str(q.exception() or ""), "batches": batches}


src = os.path.join(work, "in")
os.mkdir(src)
for i in range(3):
    with open(os.path.join(src, f"f{i}.json"), "w") as f:
        f.write("\n".join(json.dumps({"n": i * 10 + k}) for k in range(4)))
files = (spark.readStream.schema("n long").option("maxFilesPerTrigger", 1).json(src)
         .writeStream.format("noop").option("checkpointLocation", os.path.join(work, "ck-files"))
         .queryName("connect_q").trigger(availableNow=True).start())
files_result = finished(files)

kafka = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "9").load()
         .writeStream.format("noop").option("checkpointLocation", os.path.join(work, "ck-kafka"))
         .queryName(name).trigger(availableNow=True).start())
print(json.dumps({"files": files_result, "kafka": finished(kafka)}))
sys.stdout.flush()
spark.stop()  # the Connect client's listener thread keeps the process alive otherwise
