"""Run by test_connect.py in its own process: a Spark Connect session (local server)
with the journal listener attached; the listener runs on the server side."""

import json
import os
import sys
import tempfile

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402

import offset_journal  # noqa: E402

spark = SparkSession.builder.remote("local[2]").getOrCreate()
# the URL comes from OFFSET_JOURNAL_DATABASE_URL
listener = offset_journal.attach(spark, spool_dir=sys.argv[1])
work = tempfile.mkdtemp()
src = os.path.join(work, "in")
os.mkdir(src)
for i in range(3):
    with open(os.path.join(src, f"f{i}.json"), "w") as f:
        f.write("\n".join(json.dumps({"n": i * 10 + k}) for k in range(4)))
q = (spark.readStream.schema("n long").option("maxFilesPerTrigger", 1).json(src)
     .writeStream.format("noop").option("checkpointLocation", os.path.join(work, "ck"))
     .queryName("connect_q").trigger(availableNow=True).start())
q.awaitTermination()
# Depending on the Spark version the listener runs in this client (4.x streams events to
# it) or on the server; waiting here is a no-op in the latter case.
listener.wait_terminated(q.runId, timeout=60)
print(json.dumps({"run_id": str(q.runId), "batches": [p["batchId"] for p in q.recentProgress]}))
sys.stdout.flush()
spark.stop()  # the Connect client's listener thread keeps the process alive otherwise
