"""What a restore checks of the new query before it writes anything: that the query runs
on the new checkpoint it was given (not on the old one), that its file sink's log does
not already hold the batch ids it will write (they would be skipped, their records
lost), and that a checkpoint of another query now at the old checkpoint's location
gives neither the carried watermark nor RocksDB bytes; and that the journal shows the
bootstrap run of ``state restore``, linked to its plan. Real Spark 4.2 with its Kafka
connector on the test broker, real Postgres."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from tests import restore_support as rs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUERIES = """
def _ids(spark, starting):
    from pyspark.sql import functions as F

    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "{servers}")
            .option("subscribe", "{topic}").option("startingOffsets", starting[0])
            .option("maxOffsetsPerTrigger", "10").load()
            .select(F.col("value").cast("string").cast("long").alias("id"))
            .dropDuplicates(["id"]))


def v2_on_the_old_checkpoint(spark, checkpoint, starting):
    return (_ids(spark, starting).writeStream.format("parquet").queryName("ids")
            .option("path", "{v2_out}").option("checkpointLocation", "{v1_ck}"))


def v2_into_the_old_output(spark, checkpoint, starting):
    return (_ids(spark, starting).writeStream.format("parquet").queryName("ids")
            .option("path", "{v1_out}").option("checkpointLocation", checkpoint))


def v2(spark, checkpoint, starting):
    return (_ids(spark, starting).writeStream.format("parquet").queryName("ids")
            .option("path", "{v2_out}").option("checkpointLocation", checkpoint))


def v2_started(spark, checkpoint, starting):
    return (_ids(spark, starting).writeStream.format("parquet").queryName("ids")
            .option("path", "{v2_out}-started").option("checkpointLocation", checkpoint)
            .start())


def v2_raced(spark, checkpoint, starting):
    # another restore into the same location, started meanwhile, got there first
    import os

    os.makedirs(checkpoint, exist_ok=True)
    with open(os.path.join(checkpoint, "metadata"), "w") as f:
        f.write('{{"id": "{other_id}"}}')
    return v2(spark, checkpoint, starting)
"""
OTHER_ID = "00000000-0000-4000-8000-000000000049"


def _files(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p), p.stat().st_mtime_ns) for p in root.rglob("*"))


@contextmanager
def _no_listener(spark: Any, listener: Any) -> Iterator[None]:
    """The session as the command's own is: no journal listener attached."""
    spark.streams.removeListener(listener)
    try:
        yield
    finally:
        spark.streams.addListener(listener)


def test_state_restore_checks_the_new_querys_checkpoint_and_sink_and_journals_its_bootstrap(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1: Kafka -> dropDuplicates(id) -> a parquet file sink (batches 0..3 in its
    ``_spark_metadata``, 0..N); a savepoint at batch N; 20 more records. ``state restore``, in
    a session without a listener (as the command's own is):

    - a query that names v1's checkpoint instead of the one it is given is refused in one
      line before any batch runs: v1's checkpoint and sink untouched, the new checkpoint
      not made, no plan recorded, nothing journaled;
    - the same query writing into v1's output directory is refused in one line (its file
      sink would skip batches 1..N of the new query): the new checkpoint removed, v1's
      output untouched, no plan recorded; the same in a session that keeps no progress;
    - a function that starts its query is refused, the query stopped; a restore that
      finds another restore's checkpoint at the location leaves it alone;
    - the query on an output directory of its own is restored, then run: every record is
      in the output exactly once; the journal holds the bootstrap run's batch, the plan
      linked to it, and the audit takes the link and finds nothing unexplained."""
    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    kafka_cluster.produce(kafka_topic, 40, value=str)
    v1_ck, v1_out, v2_out = tmp_path / "ck-v1", tmp_path / "out-v1", tmp_path / "out-v2"
    new_ck, sp = tmp_path / "ck-v2", tmp_path / "sp"
    query_file = tmp_path / "queries.py"
    query_file.write_text(QUERIES.format(servers=servers, topic=kafka_topic, v1_ck=v1_ck,
                                         v1_out=v1_out, v2_out=v2_out, other_id=OTHER_ID))
    from runpy import run_path

    queries = run_path(str(query_file))
    rs.run(queries["v2"](spark, str(v1_ck), ["earliest"]).option("path", str(v1_out)), "ids",
           v1_ck, listener)
    logged = sorted(int(p.name) for p in (v1_out / "_spark_metadata").iterdir()
                    if p.name.isdigit())
    assert logged == list(range(len(logged))) and len(logged) > 2
    code, _out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                             "ids", "--checkpoint", str(v1_ck), "--to", str(sp))
    assert code == 0, err
    kafka_cluster.produce(kafka_topic, 20, start=40, value=str)
    with Journal(journal_url) as journal:
        runs_before = {r.run_id for r in journal.runs("ids")}

    def restore(function: str) -> tuple[int, str, str]:
        with _no_listener(spark, listener):
            return rs.cli(capsys, "--database-url", journal_url, "state", "restore", str(sp),
                          "--to", str(new_ck), "--query", f"{query_file}:{function}")

    _refused(restore, spark, tmp_path, logged[-1])
    with Journal(journal_url) as journal:
        assert not [p for p in journal.recorded_plans("ids") if p.request.get("restore")]
        assert {r.run_id for r in journal.runs("ids")} == runs_before

    code, out, err = restore("v2")
    assert code == 0, err
    assert "recorded as plan" in out
    rs.run(queries["v2"](spark, str(new_ck), [rs.ends(journal_url, str(sp))]), "ids", new_ck,
           listener)
    ids = [r.id for d in (v1_out, v2_out) for r in spark.read.parquet(str(d)).collect()]
    assert Counter(ids) == Counter(range(60)), "every record in the output exactly once"
    _bootstrap_journaled(journal_url, new_ck, capsys)


def _refused(restore: Any, spark: Any, tmp_path: Path, last: int) -> None:
    """Each refusal of the test above, in one line, leaving v1's checkpoint and output
    as they were and no new checkpoint (``last``: the batch v1's sink logged last)."""
    v1_ck, v1_out, v2_out = tmp_path / "ck-v1", tmp_path / "out-v1", tmp_path / "out-v2"
    new_ck = tmp_path / "ck-v2"
    v1_files, v1_sink = _files(v1_ck), _files(v1_out)
    code, _out, err = restore("v2_on_the_old_checkpoint")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("offset-journal: error:") and str(v1_ck) in err and str(new_ck) in err
    assert _files(v1_ck) == v1_files, "no batch ran on the old checkpoint"
    assert _files(v1_out) == v1_sink and not v2_out.exists() and not new_ck.exists()

    code, _out, err = restore("v2_into_the_old_output")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"{v1_out}/_spark_metadata" in err and f"batches 1..{last}" in err, err
    assert not new_ck.exists(), "the refused restore's checkpoint is removed"
    assert _files(v1_out) == v1_sink and _files(v1_ck) == v1_files
    _raced(restore, new_ck)
    _started(restore, new_ck, spark)
    _no_progress_kept(restore, spark, new_ck, last)
    assert _files(v1_out) == v1_sink and _files(v1_ck) == v1_files


def _raced(restore: Any, new_ck: Path) -> None:
    """A restore that finds another one's ``metadata`` in its new checkpoint when it
    comes to write its own (both found the location new) is refused in one line and
    leaves that checkpoint as it found it: removing it would delete the other
    restore's work, which may have finished."""
    code, _out, err = restore("v2_raced")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "has a query id already" in err, err
    assert json.loads((new_ck / "metadata").read_text())["id"] == OTHER_ID
    shutil.rmtree(new_ck)


def _started(restore: Any, new_ck: Path, spark: Any) -> None:
    """A function that starts the query itself, before the restore could check where it
    runs: the query stopped at once, the restore refused in one line, the checkpoint the
    started query made at the new location removed."""
    code, _out, err = restore("v2_started")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "started the query itself" in err, err
    assert [q.name for q in spark.streams.active] == [], "the started query was stopped"
    assert not new_ck.exists(), "what it made at the new location is removed"


def _no_progress_kept(restore: Any, spark: Any, new_ck: Path, last: int) -> None:
    """A session that keeps no progress (numRecentProgressUpdates 1: Spark keeps one
    fewer) has the bootstrap's sink checked all the same: v1's output refused."""
    from offset_journal.savepoint.spark import session_conf

    with session_conf(spark, "spark.sql.streaming.numRecentProgressUpdates", "1"):
        code, _out, err = restore("v2_into_the_old_output")
    assert code == 1 and f"batches 1..{last}" in err, err
    assert not new_ck.exists(), "the refused restore's checkpoint is removed"


def _bootstrap_journaled(journal_url: str, new_ck: Path, capsys: Any) -> None:
    """The bootstrap run's batch 0 is in the journal, the restore's plan linked to that
    run, and the audit takes the link."""
    query_id = json.loads((new_ck / "metadata").read_text())["id"]
    with Journal(journal_url) as journal:
        (plan,) = [p for p in journal.recorded_plans("ids") if p.request.get("restore")]
        (bootstrap,) = plan.run_ids
        batch = journal.batch("ids", bootstrap, 0)
    assert batch is not None and batch.query_id == query_id
    assert batch.num_input_rows == 0, "the bootstrap batch reads nothing"
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "audit", "ids",
                            "--format", "json")
    assert code == 0, out + err
    (start,) = [r for r in json.loads(out)["runs"] if r["run_id"] == bootstrap]
    assert (start["plan_id"], start["link"]) == (plan.id, "recorded")


def test_a_checkpoint_of_another_query_at_the_old_path_gives_no_watermark(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys, caplog):
    """jobs/windowed_counts.py: v1 to its end, a savepoint; v1's checkpoint then removed
    and another query started at the same path (the documented reuse of a location),
    its records an hour later: its batches carry a watermark far beyond v1's. v2,
    restored from the savepoint, takes v1's watermark from the journal (said in the
    log), not that checkpoint's: every window is emitted once with its exact count."""
    from tests.jobs_support import load_job, run_to_end

    spark, listener = journaled_spark
    job = load_job("windowed_counts")
    produced = kafka_cluster.produce(kafka_topic, 60, timestamp_ms=rs.click_ms)
    common = rs.windowed_args(kafka_cluster.bootstrap_servers, journal_url)
    mine = [*common, "--topics", kafka_topic, "--query-name", "clicks",
            "--output", str(tmp_path / "out")]
    v1_ck = tmp_path / "ck-v1"
    run_to_end(spark, listener, job, [*mine, "--checkpoint", str(v1_ck)])
    code, _out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                             "clicks", "--checkpoint", str(v1_ck), "--to", str(tmp_path / "sp"))
    assert code == 0, err
    shutil.rmtree(v1_ck)
    other = kafka_topic + "-other"
    kafka_cluster.produce(other, 160, timestamp_ms=lambda i: rs.click_ms(i) + 3_600_000)
    run_to_end(spark, listener, job, [*common, "--topics", other, "--query-name", "other",
                                      "--output", str(tmp_path / "out-other"),
                                      "--checkpoint", str(v1_ck)])
    produced += kafka_cluster.produce(kafka_topic, 60, start=60, timestamp_ms=rs.click_ms)
    kafka_cluster.produce(kafka_topic, 1, start=10_000,
                          timestamp_ms=lambda i: rs.CLICK_T0 + 7_200_000)
    caplog.set_level("INFO", logger="offset_journal")
    run_to_end(spark, listener, job, [*mine, "--checkpoint", str(tmp_path / "ck-v2"),
                                      "--from-journal", "--savepoint", str(tmp_path / "sp"),
                                      "--restore"])
    carried = _journaled_watermark(journal_url, tmp_path / "sp")
    assert f"watermark: {carried} ms (the journal's batch" in caplog.text
    assert f"{v1_ck} is now the checkpoint of query id" in caplog.text
    rs.check_each_window_once(spark, tmp_path / "out", produced)


def _journaled_watermark(journal_url: str, savepoint: Path) -> int:
    """The watermark the journal has for v1's batch the savepoint was taken at."""
    from offset_journal.savepoint import load_savepoint

    with Journal(journal_url) as journal:
        m = load_savepoint(str(savepoint), journal, verify=False).manifest
        batch = journal.batch(m.query_name, m.run_id, m.batch_id)
    assert batch is not None and batch.watermark is not None
    return int(batch.watermark.timestamp() * 1000)


def test_the_rocksdb_bytes_of_another_querys_checkpoint_at_the_old_path_are_not_copied(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1: transformWithState on RocksDB (checkpoint format v2), a savepoint; v1's
    checkpoint then removed and the same query started at that path on other records:
    its checkpoint has the savepoint's batch id, the same column families, other state.
    The restore, which takes transformWithState's TTL indexes and timers from the old
    checkpoint's bytes only, does not copy these: refused in one line saying the path now
    holds another query's checkpoint, the new checkpoint removed."""
    import sys

    from pyspark import cloudpickle

    from offset_journal.errors import RestoreError
    from offset_journal.savepoint.spark import (
        FORMAT_CONF,
        PROVIDER_CONF,
        ROCKSDB_PROVIDER,
        session_conf,
    )
    from offset_journal.state import restore_savepoint

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark, listener = journaled_spark
    servers, other = kafka_cluster.bootstrap_servers, kafka_topic + "-other"
    kafka_cluster.produce(kafka_topic, 60, value=rs.amounts)
    kafka_cluster.produce(other, 150, value=lambda i: f"x{i % 5},{i}")

    def writer(topic: str, starting: str) -> Any:
        out = rs.events(spark, servers, topic, starting).groupBy("grp").transformWithState(
            rs.sessions(), "grp string, n long", "Update", "ProcessingTime")
        return out.writeStream.outputMode("update").format("noop")

    v1_ck, v2_ck, sp = tmp_path / "ck-v1", tmp_path / "ck-v2", tmp_path / "sp"
    with session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER), \
            session_conf(spark, FORMAT_CONF, "2"), \
            session_conf(spark, "spark.sql.streaming.noDataMicroBatches.enabled", "false"):
        rs.run(writer(kafka_topic, "earliest"), "sessions", v1_ck, listener)
        code, _out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                                 "sessions", "--checkpoint", str(v1_ck), "--to", str(sp))
        assert code == 0, err
        shutil.rmtree(v1_ck)
        rs.run(writer(other, "earliest"), "sessions-other", v1_ck, listener)
        starting = rs.ends(journal_url, str(sp))

        def v2() -> Any:
            return writer(kafka_topic, starting).queryName("sessions").option(
                "checkpointLocation", str(v2_ck))

        with Journal(journal_url) as journal, pytest.raises(RestoreError) as caught:
            restore_savepoint(spark, str(sp), str(v2_ck), v2, journal=journal)
    message = str(caught.value)
    assert "\n" not in message and "transformWithState state is restored from" in message
    assert f"{v1_ck} is now the checkpoint of query id" in message
    assert not v2_ck.exists(), "the refused restore's checkpoint is removed"
