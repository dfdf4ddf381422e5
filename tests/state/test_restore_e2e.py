"""Savepoints restored into a NEW checkpoint at JVM speed: the savepoint's
state written straight into the new query's state store into another number of shuffle
partitions, by the function, the jobs and the command, and a stopped query's state
repartitioned in place; bad input refused in one line. Real Spark 4.2 with its Kafka
connector on the test broker, real Postgres. The other operators' upgrades are in
tests/state/test_restore_operators.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from tests import restore_support as rs

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_aggregation_restored_into_eight_partitions_with_a_changed_projection(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1: groupBy(grp).agg(count, max, sum) on the HDFS-backed store, 4 shuffle
    partitions; v2: the same aggregation with one more output column, on a NEW
    checkpoint, 8 partitions, its state restored from v1's savepoint while records kept
    arriving: every key's state, and the output of every key that received records, equal
    the totals over all records; the state sits in 8 partitions.

    First the bad input, each refused in one line, a refused restore's new checkpoint
    removed: v2's operators do not match (named), a value that cannot be mapped, a type
    changed, a checkpoint that is not new (left untouched), a savepoint whose state file
    is gone, an HDFS-backed checkpoint to repartition in place. Last the command: ``state
    restore --query FILE:FUNCTION`` restores the savepoint into 3 partitions before the
    new query is deployed, which resumes on it."""
    from pyspark.sql import functions as F

    from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf
    from offset_journal.state import restore_savepoint

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    produced = kafka_cluster.produce(kafka_topic, 70, value=rs.amounts)
    v1_ck, v2_ck, sp = tmp_path / "ck-v1", tmp_path / "ck-v2", tmp_path / "sp"
    with session_conf(spark, "spark.sql.shuffle.partitions", "4"), \
            session_conf(spark, PROVIDER_CONF, rs.HDFS):
        rs.run(rs.totals(rs.events(spark, servers, kafka_topic)).writeStream.outputMode("update")
             .format("noop"), "totals", v1_ck, listener)
    produced += kafka_cluster.produce(kafka_topic, 25, start=70,
                                      value=lambda i: rs.amounts(i) if i % 5 else f"g9,{i}")
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                          "totals", "--checkpoint", str(v1_ck), "--to", str(sp))
    assert code == 0, err
    starting = rs.ends(journal_url, str(sp))
    _refused(spark, journal_url, rs.events(spark, servers, kafka_topic, starting), sp, v1_ck,
             tmp_path, capsys)

    out_dir = tmp_path / "out"

    def write(batch: Any, batch_id: int) -> None:
        batch.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(str(out_dir))

    def v2() -> Any:
        totals = rs.totals(rs.events(spark, servers, kafka_topic, starting))
        return (totals.withColumn("mean", F.col("total") / F.col("n")).writeStream
                .outputMode("update").foreachBatch(write).queryName("totals")
                .option("checkpointLocation", str(v2_ck)))

    with session_conf(spark, "spark.sql.shuffle.partitions", "8"), \
            Journal(journal_url) as journal:
        restored = restore_savepoint(spark, str(sp), str(v2_ck), v2, journal=journal)
    assert restored.partitions == 8 and restored.keys == 7
    (op,) = restored.layout.operators
    assert (op.decision, op.path) == ("restored", "typed")
    rs.run(v2(), "totals", v2_ck, listener)

    reference = rs.check_upgraded_totals(spark, produced, v2_ck, out_dir, 70)

    _by_command(spark, listener, journal_url, (servers, kafka_topic, starting), sp, reference,
                tmp_path, capsys)


def _by_command(spark: Any, listener: Any, journal_url: str, source: tuple[str, str, str],
                sp: Path, reference: Any, tmp_path: Path, capsys: Any) -> None:
    """The command: the savepoint, restored before the new query is deployed."""
    import runpy

    servers, topic, starting = source
    query_file = tmp_path / "v2.py"
    query_file.write_text(QUERY_FILE.format(servers=servers, topic=topic))
    cli_ck = tmp_path / "ck-cli"
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "state", "restore", str(sp),
                            "--to", str(cli_ck), "--query", f"{query_file}:v2",
                            "--partitions", "3")
    assert code == 0, err
    assert "operator 0 (aggregation): restored (typed)" in out and "recorded as plan" in out
    rs.run(runpy.run_path(str(query_file))["v2"](spark, str(cli_ck), [starting]), "totals",
           cli_ck, listener)
    assert {r.key.grp: tuple(r.value) for r in rs.state(spark, cli_ck)} == reference
    assert {r.partition_id for r in rs.state(spark, cli_ck)} <= {0, 1, 2}
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "state", "restore", str(sp),
                            "--to", str(tmp_path / "ck-x"), "--query", f"{query_file}:nope")
    assert code == 2 and "no function 'nope' there" in err
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\n\n\ndef v2(spark, checkpoint, starting):\n    sys.exit(0)\n")
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "state", "restore", str(sp),
                            "--to", str(tmp_path / "ck-x"), "--query", f"{exits}:v2",
                            "--no-record")
    assert code == 1 and "v2() called sys.exit(0) instead of returning" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "ck-x").exists()


def _refused(spark: Any, journal_url: str, events: Any, sp: Path, v1_ck: Path,
             tmp_path: Path, capsys: Any) -> None:
    """Each bad input refused in one line (see the test above)."""
    import shutil

    from pyspark.sql import functions as F

    from offset_journal.errors import RestoreError, SavepointError
    from offset_journal.state import restore_savepoint

    def restore(frame: Any, checkpoint: Path) -> None:
        def v2() -> Any:
            return (frame.writeStream.outputMode("update").format("noop").queryName("totals")
                    .option("checkpointLocation", str(checkpoint)))
        with Journal(journal_url) as journal:
            restore_savepoint(spark, str(sp), str(checkpoint), v2, journal=journal)

    bad = tmp_path / "ck-bad"
    cases = [
        (events.dropDuplicates(["grp"]), r"operator 0 \(aggregation, stateStoreSave\) of the "
         r"savepoint is operator 0 \(dedup, dedupe\) in the new query"),
        (events.groupBy("grp").agg(F.count("*").alias("n"), F.sum("amount").alias("t")),
         r"the value has 3 field\(s\) in the savepoint \(count, max, sum\) and 2 in the new "
         r"query \(count, sum\)"),
        (events.groupBy("grp").agg(F.count("*").alias("n"), F.max("grp").alias("mx"),
                                   F.sum("amount").alias("t")),
         "field 'max' is long in the savepoint and string in the new query"),
    ]
    for frame, message in cases:
        with pytest.raises(RestoreError, match=message) as caught:
            restore(frame, bad)
        assert "\n" not in str(caught.value)
        assert not bad.exists(), "the refused restore's checkpoint is removed"
    before = sorted((p, p.stat().st_mtime_ns) for p in v1_ck.rglob("*"))
    with pytest.raises(RestoreError, match="is not a new checkpoint"):
        restore(rs.totals(events), v1_ck)
    assert sorted((p, p.stat().st_mtime_ns) for p in v1_ck.rglob("*")) == before
    victim = next((sp / "operator=0" / "part=0").glob("*.parquet"))
    shutil.move(victim, tmp_path / "elsewhere.parquet")
    with pytest.raises(SavepointError, match="is missing: the savepoint was altered"):
        restore(rs.totals(events), bad)
    assert not bad.exists()
    shutil.move(tmp_path / "elsewhere.parquet", victim)
    code, _out, err = rs.cli(capsys, "--database-url", journal_url, "state", "repartition",
                           "--checkpoint", str(v1_ck), "--partitions", "4")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "keeps its state on HDFSBackedStateStoreProvider" in err


def test_stateful_job_restores_an_aggregation_into_transform_with_state(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """jobs/stateful_counts.py: v1 the built-in aggregation (HDFS-backed, 2 partitions);
    v2 transformWithState on a NEW checkpoint with 3 partitions, ``--from-journal
    --savepoint --restore``: the plan records the restore as its decision, the
    aggregation's buffer goes into the value state through the job's declared mapping at
    JVM speed, v2's state and output equal the totals over all records, and the audit
    finds nothing unexplained (the plan is linked to the bootstrap run)."""
    from offset_journal.savepoint.spark import session_conf
    from tests.jobs_support import load_job, run_to_end

    spark, listener = journaled_spark
    job = load_job("stateful_counts")
    produced = kafka_cluster.produce(kafka_topic, 70, value=rs.amounts)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "totals", "--database-url", journal_url,
              "--output", str(tmp_path / "out"), "--max-offsets-per-trigger", "30"]
    v1_ck, v2_ck, sp = tmp_path / "ck-v1", tmp_path / "ck-v2", tmp_path / "sp"
    run_to_end(spark, listener, job, [*common, "--checkpoint", str(v1_ck)])
    produced += kafka_cluster.produce(kafka_topic, 25, start=70,
                                      value=lambda i: rs.amounts(i) if i % 5 else f"g9,{i}")
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                          "totals", "--checkpoint", str(v1_ck), "--to", str(sp))
    assert code == 0, err
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "plan", "totals",
                          "--savepoint", "1", "--restore", "--checkpoint", str(v2_ck),
                          "--format", "json")
    assert code == 0, out + err
    (state,) = json.loads(out)["state"]
    assert state["decision"] == "restored" and "the JVM path" in state["how"]

    with session_conf(spark, "spark.sql.shuffle.partitions", "3"):
        run_to_end(spark, listener, job, [*common, "--checkpoint", str(v2_ck), "--engine",
                                          "transform-with-state", "--from-journal",
                                          "--savepoint", str(sp), "--restore"])
    reference = rs.reference(produced)
    v2_state = rs.state(spark, v2_ck, stateVarName="totals")
    assert {r.key.grp: tuple(r.value) for r in v2_state} == reference
    assert {r.partition_id for r in v2_state} <= {0, 1, 2}
    rows = spark.read.parquet(job.output_dir_for(str(tmp_path / "out"), str(v2_ck))).collect()
    latest = {r.grp: r for r in sorted(rows, key=lambda r: r.batch_id)}
    assert set(latest) == {v.decode().split(",")[0] for *_x, v in produced[70:]}
    for grp, row in latest.items():
        assert (row.n, row.mx, row.total) == reference[grp]
        assert row.mean == pytest.approx(reference[grp][2] / reference[grp][0])

    with Journal(journal_url) as journal:
        (recorded,) = [p for p in journal.recorded_plans("totals") if p.request.get("restore")]
        assert recorded.request["state"] == [[0, "aggregation", 7, "restored"]]
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "audit", "totals")
    assert code == 0, out
    _the_command_restores_as_the_job_did(journal_url, common, sp, tmp_path, capsys)


def _the_command_restores_as_the_job_did(journal_url: str, common: list[str], sp: Path,
                                         tmp_path: Path, capsys: Any) -> None:
    """``state restore`` of the same savepoint, the same v2 and the same mapping (the
    job's rules as flags) goes through the job's restore from the plan: the same plan
    recorded (but for its command and checkpoint), linked to its own bootstrap run, which
    the journal holds."""
    from tests.jobs_support import JOBS

    query_file = tmp_path / "v2_tws.py"
    query_file.write_text(JOB_QUERY_FILE.format(jobs=str(JOBS), argv=common))
    cli_ck = tmp_path / "ck-cli"
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "state", "restore", str(sp),
                            "--to", str(cli_ck), "--query", f"{query_file}:v2",
                            "--partitions", "3", "--into-state", "0:totals",
                            "--map-field", "0:n=count", "--map-field", "0:mx=max",
                            "--map-field", "0:total=sum")
    assert code == 0, err
    with Journal(journal_url) as journal:
        job, cli = [p for p in journal.recorded_plans("totals") if p.request.get("restore")]
        runs = {r.run_id for r in journal.runs("totals")}

    def decided(p: Any) -> tuple[Any, ...]:
        return (p.position, p.mode, p.ok, p.kafka_offsets, p.anchor_run_id, p.anchor_batch_id,
                p.request["state"], p.request["savepoint"])

    assert decided(cli) == decided(job)
    assert (job.command, cli.command) == ("api", "state-restore")
    assert (job.checkpoint, cli.checkpoint) == (str(tmp_path / "ck-v2"), str(cli_ck))
    assert len(job.run_ids) == len(cli.run_ids) == 1 and job.run_ids != cli.run_ids
    assert {*job.run_ids, *cli.run_ids} <= runs


# --------------------------------------------------------------------------- in place


def test_a_running_jobs_checkpoint_repartitioned_in_place(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """A RocksDB aggregation on 2 partitions: ``state repartition`` is refused while the
    journal says it runs; stopped, repartitioned to 4 (journaled as a decision), resumed
    on the same checkpoint with records that arrived meanwhile: every key's state is the
    totals over all records, in 4 partitions, and the audit finds nothing unexplained."""
    import time

    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER, session_conf

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    produced = kafka_cluster.produce(kafka_topic, 60, value=rs.amounts)
    ck = tmp_path / "ck"

    def writer() -> Any:
        return rs.totals_writer(spark, servers, kafka_topic, ck)

    with session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER):
        q = writer().trigger(processingTime="200 milliseconds").start()
        deadline = time.monotonic() + 120
        with Journal(journal_url) as journal:
            while not any(r.terminated_at is None and r.batches
                          for r in journal.runs("totals")):
                assert time.monotonic() < deadline, "the run never showed in the journal"
                q.processAllAvailable()
        code, out, err = rs.cli(capsys, "--database-url", journal_url, "state", "repartition",
                              "--checkpoint", str(ck), "--partitions", "4")
        assert code == 1 and "is running on" in err and "--assume-stopped" in err, err
        q.processAllAvailable()
        q.stop()
        assert listener.wait_terminated(q.runId, 60)
        code, out, err = rs.cli(capsys, "--database-url", journal_url, "state", "repartition",
                              "--checkpoint", str(ck), "--partitions", "4")
        assert code == 0, err
        assert "2 -> 4 partitions" in out and "journaled as decision" in out
        code, out, err = rs.cli(capsys, "--database-url", journal_url, "state", "repartition",
                              "--checkpoint", str(ck), "--partitions", "4")
        assert code == 1 and "runs with 4 partitions already" in err
        produced += kafka_cluster.produce(kafka_topic, 30, start=60, value=rs.amounts)
        rs.run(writer(), "totals", ck, listener)
    state = rs.state(spark, ck)
    assert {r.key.grp: tuple(r.value) for r in state} == rs.reference(produced)
    assert {r.partition_id for r in state} == {0, 1, 2, 3}
    with Journal(journal_url) as journal:
        (decision,) = [p for p in journal.recorded_plans("totals") if p.mode == "repartition"]
    assert decision.request["repartition"]["to"] == 4 and decision.checkpoint == str(ck)
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "audit", "totals")
    assert code == 0, out


def test_a_query_the_journal_does_not_know_is_repartitioned_only_when_said_stopped(
        spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """A RocksDB aggregation on 2 partitions the journal has no run of (no listener).
    While it runs, ``state repartition`` is refused (the journal cannot tell), with
    ``--assume-stopped`` too (it runs in this session): the checkpoint byte for byte as
    it was, the query reads on. Stopped, refused without ``--assume-stopped``; with it, a
    repartition that fails after writing its batch (one partition's state file
    unreadable) removes what it wrote; with the file back it repartitions to 4, says it
    journaled nothing, and the query resumes with every key's totals in 4 partitions."""
    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER, session_conf
    from tests.support import count_rows, one_error_line

    servers = kafka_cluster.bootstrap_servers
    produced = kafka_cluster.produce(kafka_topic, 60, value=rs.amounts)
    ck = tmp_path / "ck"

    def writer() -> Any:
        return rs.totals_writer(spark, servers, kafka_topic, ck)

    def repartition(*extra: str) -> tuple[int, str, str]:
        return rs.cli(capsys, "--database-url", journal_url, "state", "repartition",
                      "--checkpoint", str(ck), "--partitions", "4", *extra)

    with session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER):
        q = writer().trigger(processingTime="200 milliseconds").start()
        q.processAllAvailable()
        found = rs.tree(ck)
        code, out, err = repartition()
        assert "has no run of query id" in one_error_line(code, err) and out == ""
        assert "--assume-stopped" in err
        code, out, err = repartition("--assume-stopped")
        assert "runs in this Spark session" in one_error_line(code, err)
        assert rs.tree(ck) == found
        produced += kafka_cluster.produce(kafka_topic, 30, start=60, value=rs.amounts)
        q.processAllAvailable()
        assert q.isActive and q.exception() is None
        q.stop()
        code, out, err = repartition()
        assert "has no run of query id" in one_error_line(code, err)

        victim = max((ck / "state" / "0" / "1").glob("*.zip"), key=lambda p: int(p.stem))
        kept = victim.read_bytes()
        victim.write_bytes(b"not a zip")
        found = rs.tree(ck)
        code, out, err = repartition("--assume-stopped")
        line = one_error_line(code, err)
        assert "cannot repartition the state of" in line, line
        assert "what it wrote is removed: the checkpoint is as it was" in line, line
        assert rs.tree(ck) == found
        victim.write_bytes(kept)

        code, out, err = repartition("--assume-stopped")
        assert code == 0, err
        assert "2 -> 4 partitions" in out
        assert "not journaled (the journal has no run of query id" in err
        assert count_rows(journal_url, "restart_plans") == 0
        produced += kafka_cluster.produce(kafka_topic, 20, start=90, value=rs.amounts)
        rs.run(writer(), "totals", ck)
    state = rs.state(spark, ck)
    assert {r.key.grp: tuple(r.value) for r in state} == rs.reference(produced)
    assert {r.partition_id for r in state} == {0, 1, 2, 3}


# --------------------------------------------------------------------------- the command

JOB_QUERY_FILE = """
import sys

sys.path.insert(0, {jobs!r})
import stateful_counts as job  # noqa: E402


def v2(spark, checkpoint, starting):
    args = job.parser().parse_args({argv!r} + ["--checkpoint", checkpoint])
    return job.builder(args, "transform-with-state")(spark, checkpoint, starting)
"""

QUERY_FILE = """
from pyspark.sql import functions as F


def v2(spark, checkpoint, starting):
    values = F.split(F.col("value").cast("string"), ",")
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "{servers}")
              .option("subscribe", "{topic}").option("startingOffsets", starting[0]).load()
              .select(values[0].alias("grp"), values[1].cast("long").alias("amount")))
    totals = events.groupBy("grp").agg(F.count("*").alias("n"), F.max("amount").alias("mx"),
                                       F.sum("amount").alias("total"))
    return (totals.writeStream.outputMode("update").format("noop")
            .option("checkpointLocation", checkpoint))
"""


def test_windowed_job_keeps_its_windows_through_a_restore(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """jobs/windowed_counts.py upgraded with ``--from-journal --savepoint --restore``
    instead of the state-aware rewind: the windows open at the savepoint (one of them
    split across the upgrade) and v1's watermark carried into the new checkpoint, nothing
    read again; every window is emitted once, with its exact count, into the file sink."""
    from tests.jobs_support import load_job, read_parquet_outputs, run_to_end

    spark, listener = journaled_spark
    job = load_job("windowed_counts")
    produced = kafka_cluster.produce(kafka_topic, 75, timestamp_ms=rs.click_ms)
    common = [*rs.windowed_args(kafka_cluster.bootstrap_servers, journal_url), "--topics",
              kafka_topic, "--query-name", "clicks", "--output", str(tmp_path / "out")]
    run_to_end(spark, listener, job, common + ["--checkpoint", str(tmp_path / "ck-v1")])
    assert read_parquet_outputs(spark, tmp_path / "out", ["window_start", "count"])
    code, _out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                           "clicks", "--checkpoint", str(tmp_path / "ck-v1"),
                           "--to", str(tmp_path / "sp"))
    assert code == 0, err
    produced += kafka_cluster.produce(kafka_topic, 85, start=75, timestamp_ms=rs.click_ms)
    kafka_cluster.produce(kafka_topic, 1, start=10_000,
                          timestamp_ms=lambda i: rs.CLICK_T0 + 3_600_000)
    run_to_end(spark, listener, job, common + ["--checkpoint", str(tmp_path / "ck-v2"),
                                               "--from-journal", "--savepoint",
                                               str(tmp_path / "sp"), "--restore"])
    rs.check_each_window_once(spark, tmp_path / "out", produced)
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "audit", "clicks")
    assert code == 0, out
