"""End to end on a multi-process Spark: ``local-cluster[2,1,1024]`` runs a standalone
master, two workers and their executors, each executor a JVM of its own, as on a real
cluster. Spark's Kafka connector reaches those executors only through ``spark.jars``;
the upgraded job starts on a new checkpoint from the journal, exactly once by
(topic, partition, offset)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from offset_journal import Journal
from offset_journal.local.jars import (
    connector_jar_name,
    installed_scala_binary,
    installed_spark_version,
)
from tests.jobs_support import JOBS, read_parquet_outputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MASTER = "local-cluster[2,1,1024]"


def spark_home(tmp_path: Path) -> Path:
    """A SPARK_HOME for pip-installed PySpark. local-cluster's workers launch executors
    with the class path of ``$SPARK_HOME/jars`` and keep their work directories (one per
    executor, with its log) in ``$SPARK_HOME/work``; a home of its own, linking to
    PySpark's ``bin`` and ``jars``, keeps those out of the installed package."""
    import pyspark

    installed = Path(pyspark.__file__).resolve().parent
    home = tmp_path / "spark-home"
    home.mkdir()
    for part in ("bin", "jars"):
        (home / part).symlink_to(installed / part)
    return home


def _run_job(argv: list[str], home: Path, log: Path) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_HOME=str(home),
               # the launcher's class-path builder asks for the Scala version outside a
               # Spark build tree: the one PySpark's jars are built for
               SPARK_SCALA_VERSION=installed_scala_binary())
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    with log.open("w") as out:
        done = subprocess.run([sys.executable, str(JOBS / "kafka_to_sink.py"), *argv], env=env,
                              stdout=out, stderr=subprocess.STDOUT, timeout=300)
    assert done.returncode == 0, log.read_text()[-4000:]


def _executor_logs(home: Path) -> list[str]:
    """The stderr of every executor the workers started, for every application."""
    return [p.read_text(errors="replace") for p in sorted((home / "work").glob("app-*/*/stderr"))]


def test_upgrade_on_local_cluster_is_exactly_once(spark, journal_url, kafka_cluster, kafka_topic,
                                                  tmp_path):
    home = spark_home(tmp_path)
    produced = [(kafka_topic, p, o) for p, o, _k, _v in kafka_cluster.produce(kafka_topic, 120)]
    common = ["--master", MASTER, "--bootstrap-servers", kafka_cluster.bootstrap_servers,
              "--topics", kafka_topic, "--query-name", "lake-on-cluster",
              "--database-url", journal_url, "--sink", "parquet",
              "--output", str(tmp_path / "out"), "--max-offsets-per-trigger", "80",
              "--spool-dir", str(tmp_path / "spool")]
    _run_job(common + ["--checkpoint", str(tmp_path / "ck-v1")], home, tmp_path / "v1.log")

    # The executors were JVMs of their own, which ran the Kafka reads with the connector
    # they fetched from the driver (spark.jars), not from any class path of theirs.
    # (Stopping a local cluster makes its workers start and lose a few more executors
    # while they shut down; only executors that ran tasks are looked at.)
    logs = [text for text in _executor_logs(home) if "Running task" in text]
    assert len(logs) == 2, f"expected 2 executors that ran tasks, found {len(logs)}"
    connector = connector_jar_name(installed_spark_version())
    for text in logs:
        assert re.search(rf"Fetching spark://\S+/jars/{re.escape(connector)}", text), \
            text[-3000:]
        assert "Assigned to partition(s): " + kafka_topic in text  # a Kafka read ran here
    pids = {m.group(1) for text in logs
            for m in re.finditer(r"Started daemon with process name: (\d+)@", text)}
    assert len(pids) == 2 and str(os.getpid()) not in pids, pids

    produced += [(kafka_topic, p, o)
                 for p, o, _k, _v in kafka_cluster.produce(kafka_topic, 60, start=120)]
    _run_job(common + ["--checkpoint", str(tmp_path / "ck-v2"), "--from-journal"], home,
             tmp_path / "v2.log")

    rows = read_parquet_outputs(spark, tmp_path / "out", ["topic", "partition", "offset"])
    assert len(rows) == len(set(rows)), "a record was written twice"
    assert sorted(rows) == sorted(produced), "a record was lost"
    runs = Journal(journal_url).runs("lake-on-cluster")
    assert len(runs) == 2 and len({r.query_id for r in runs}) == 2
    assert all(r.terminated_at is not None and r.exception is None for r in runs)
    v1 = min(runs, key=lambda r: r.started_at)
    v1_end = Journal(journal_url).history("lake-on-cluster", run_id=v1.run_id)[-1]
    # v2 started where v1's last journaled batch ended, every partition named
    started = re.search(r"startingOffsets=(\{.*\}) \(from the journal\)",
                        (tmp_path / "v2.log").read_text())
    assert started, (tmp_path / "v2.log").read_text()[-3000:]
    assert json.loads(started.group(1)) == {kafka_topic: {
        str(p.partition): p.end for p in v1_end.sources[0].partitions}}
