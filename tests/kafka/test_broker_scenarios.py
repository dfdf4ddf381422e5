"""What the restart planner exists for, on a real broker with Spark's own connector:
partitions added (while the job runs, and while no job runs), records deleted before
they were read (refused, then accepted with --allow-data-loss), topics deleted, topics
deleted then recreated (refused, then read from earliest with --restart-recreated-topic),
and the broker restarting under a running job or down while planning.

Each test runs a journaled job, makes the situation happen on the broker, asks the
command for a plan, starts a new job on a NEW checkpoint from the journal, and checks
by (topic, partition, offset) what the sink holds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.cli import main as cli_main
from tests.jobs_support import load_job, read_parquet_outputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _flat(text: str) -> str:
    """``plan`` wraps its lines for a terminal: compare its words, not its layout."""
    return " ".join(text.split())


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("offset-journal: error: "), err
    return lines[0]


def _job_args(kafka: Any, topics: str, name: str, url: str, out: Path, ck: Path,
              *extra: str) -> list[str]:
    return ["--bootstrap-servers", kafka.bootstrap_servers, "--topics", topics,
            "--query-name", name, "--database-url", url, "--sink", "parquet",
            "--output", str(out), "--checkpoint", str(ck), "--max-offsets-per-trigger", "30",
            *extra]


def _run(spark: Any, listener: Any, argv: list[str]) -> Any:
    job = load_job("kafka_to_sink")
    q = job.build_query(spark, job.parser().parse_args(argv))
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)
    return q


def _sink(spark: Any, out: Path) -> list[tuple[str, int, int]]:
    return read_parquet_outputs(spark, out, ["topic", "partition", "offset"])


def _exactly(got: list[tuple[str, int, int]], produced: list[tuple[str, int, int]]) -> None:
    assert len(got) == len(set(got)), "a record was written twice"
    assert sorted(got) == sorted(produced)


def _produce(kafka: Any, topic: str, n: int, start: int = 0) -> list[tuple[str, int, int]]:
    return [(topic, p, o) for p, o, _k, _v in kafka.produce(topic, n, start=start)]


@pytest.mark.containers
def test_partitions_added_while_the_job_runs_are_read_from_earliest_and_journaled(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """Spark's connector notices partitions added under a running subscription and reads
    them from their start; the journal then has them, and the restart names them all."""
    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 2)
    produced = _produce(kafka_cluster, kafka_topic, 20)
    job = load_job("kafka_to_sink")
    argv = _job_args(kafka_cluster, kafka_topic, "grows-live", journal_url, tmp_path / "out",
                     tmp_path / "ck-v1", "--trigger", "300 milliseconds")
    q = job.build_query(spark, job.parser().parse_args(argv))
    try:
        _wait(lambda: _read(q) >= 20, q, "v1 read the first 20 records")
        kafka_cluster.add_partitions(kafka_topic, 4)
        produced += _produce(kafka_cluster, kafka_topic, 40, start=20)
        _wait(lambda: _read(q) >= 60, q, "v1 read the records in the new partitions")
    finally:
        q.stop()
    assert listener.wait_terminated(q.runId, 60)
    last = Journal(journal_url).last_batch("grows-live")
    assert last is not None
    assert {p.partition for p in last.sources[0].partitions} == {0, 1, 2, 3}

    code, out, _err = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                           "grows-live", "--bootstrap-servers", kafka_cluster.bootstrap_servers)
    assert code == 0
    assert set(json.loads(out)[kafka_topic]) == {"0", "1", "2", "3"}
    produced += _produce(kafka_cluster, kafka_topic, 12, start=60)
    _run(spark, listener, _job_args(kafka_cluster, kafka_topic, "grows-live", journal_url,
                                    tmp_path / "out", tmp_path / "ck-v2", "--from-journal"))
    _exactly(_sink(spark, tmp_path / "out"), produced)


def test_partitions_added_while_no_job_runs_start_at_earliest(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 2)
    produced = _produce(kafka_cluster, kafka_topic, 30)
    _run(spark, listener, _job_args(kafka_cluster, kafka_topic, "grows-idle", journal_url,
                                    tmp_path / "out", tmp_path / "ck-v1"))
    kafka_cluster.add_partitions(kafka_topic, 3)
    produced += _produce(kafka_cluster, kafka_topic, 30, start=30)

    code, out, _ = _cli(capsys, "--database-url", journal_url, "plan", "grows-idle",
                        "--bootstrap-servers", kafka_cluster.bootstrap_servers)
    assert code == 0, out
    assert f"{kafka_topic}-2" in out and "-2 (earliest)" in out
    code, out, _ = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                        "grows-idle", "--bootstrap-servers", kafka_cluster.bootstrap_servers)
    assert code == 0
    offsets = json.loads(out)[kafka_topic]
    assert offsets["2"] == -2 and offsets["0"] > 0 and offsets["1"] > 0

    _run(spark, listener, _job_args(kafka_cluster, kafka_topic, "grows-idle", journal_url,
                                    tmp_path / "out", tmp_path / "ck-v2", "--from-journal"))
    _exactly(_sink(spark, tmp_path / "out"), produced)


def test_a_new_partition_that_lost_records_before_any_job_read_it_is_data_loss(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """While no job runs, a partition is added, records are written
    to it, and DeleteRecords (as retention would) removes its first 15 before any job read
    them: it began at offset 0, so that is DATA LOSS, as for a journaled partition (here
    partition 0 too). --restart-recreated-topic on this topic, which was not recreated, is
    refused instead of restarting it at earliest; with --allow-data-loss the new job reads
    exactly what is still in the logs, once each."""
    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 2)
    _produce(kafka_cluster, kafka_topic, 20)
    _run(spark, listener, _job_args(kafka_cluster, kafka_topic, "grows-lossy", journal_url,
                                    tmp_path / "out", tmp_path / "ck-v1"))
    kafka_cluster.add_partitions(kafka_topic, 3)
    produced = _produce(kafka_cluster, kafka_topic, 60, start=20)
    assert {p for _t, p, _o in produced} == {0, 1, 2}
    kafka_cluster.delete_records(kafka_topic, {0: 12, 2: 15})
    assert kafka_cluster.watermarks(kafka_topic)[2] == (15, 20)

    servers = ("--bootstrap-servers", kafka_cluster.bootstrap_servers)
    code, out, _ = _cli(capsys, "--database-url", journal_url, "plan", "grows-lossy", *servers)
    assert code != 0
    loss = _flat(out).split("DATA LOSS", 1)[1]
    assert loss.startswith(": 17 records in 2 partitions were deleted")
    assert f"{kafka_topic}-2 starts at 0 but its log starts at 15: records 0..14" in loss
    assert f"{kafka_topic}-0 starts at 10 but its log starts at 12: records 10..11" in loss
    code, out, err = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                          "grows-lossy", *servers)
    assert code != 0 and out == "" and "DATA LOSS" in _one_error_line(err)

    code, out, _ = _cli(capsys, "--database-url", journal_url, "plan", "grows-lossy", *servers,
                        "--restart-recreated-topic", kafka_topic)
    said = _flat(out)
    assert code != 0 and "named as recreated" in said and "no journaled offset lies" in said
    assert "read again" not in said and "DATA LOSS" in said

    code, out, err = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                          "grows-lossy", *servers, "--allow-data-loss")
    assert code == 0 and "DATA LOSS accepted" in err
    assert json.loads(out) == {kafka_topic: {"0": 12, "1": 10, "2": 15}}
    _run(spark, listener, _job_args(kafka_cluster, kafka_topic, "grows-lossy", journal_url,
                                    tmp_path / "out-v2", tmp_path / "ck-v2",
                                    "--from-journal", "--allow-data-loss"))
    still_there = [r for r in produced
                   if not (r[1] == 0 and r[2] < 12) and not (r[1] == 2 and r[2] < 15)]
    _exactly(_sink(spark, tmp_path / "out-v2"), still_there)


@pytest.mark.containers
def test_records_deleted_before_they_were_read_are_reported_as_data_loss(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """While the job was down, DeleteRecords (as retention would) removed records the
    journal says were not processed yet: the plan says so per partition, with numbers,
    and starting-offsets refuses to hand anything out."""
    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 2)
    _produce(kafka_cluster, kafka_topic, 20)
    _run(spark, listener, _job_args(kafka_cluster, kafka_topic, "lossy", journal_url,
                                    tmp_path / "out", tmp_path / "ck-v1"))
    journaled = {p.partition: p.end for p in
                 Journal(journal_url).last_offsets("lossy")[0].partitions}
    assert journaled == {0: 10, 1: 10}
    _produce(kafka_cluster, kafka_topic, 20, start=20)  # offsets 10..19 in each partition
    kafka_cluster.delete_records(kafka_topic, {0: 14})
    assert kafka_cluster.watermarks(kafka_topic)[0] == (14, 20)

    code, out, _ = _cli(capsys, "--database-url", journal_url, "plan", "lossy",
                        "--bootstrap-servers", kafka_cluster.bootstrap_servers)
    assert code != 0
    assert "DATA LOSS" in out
    loss = _flat(out).split("DATA LOSS", 1)[1]
    assert f"{kafka_topic}-0 starts at 10 but its log starts at 14: records 10..13" in loss
    assert f"{kafka_topic}-1 starts" not in loss
    code, out, err = _cli(capsys, "--database-url", journal_url, "starting-offsets", "lossy",
                          "--bootstrap-servers", kafka_cluster.bootstrap_servers)
    assert code != 0 and out == ""
    assert "DATA LOSS" in _one_error_line(err)


def test_retention_data_loss_is_refused_then_accepted_with_allow_data_loss(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """Records the journal says were not read yet are deleted while no job runs: in one
    topic by DeleteRecords (partition 0 only), in another by time retention
    (``retention.ms`` + ``segment.ms``, records with old timestamps). The plan reports
    each partition's journaled offset, log start and count before anything starts,
    starting-offsets refuses; with --allow-data-loss those partitions start at the log
    start and a new job reads everything still in the logs exactly once."""
    spark, listener = journaled_spark
    pruned, aged = kafka_topic, kafka_topic + "-aged"
    kafka_cluster.create_topic(pruned, 2)
    kafka_cluster.create_topic(aged, 2)
    old = 1_600_000_000_000  # 2020: long past any retention.ms
    _produce(kafka_cluster, pruned, 20)
    kafka_cluster.produce(aged, 20, timestamp_ms=old)
    # The job plans for itself from the journal, with the same choice (what the CLI
    # printed above is what it starts from).
    _run(spark, listener, _job_args(kafka_cluster, f"{pruned},{aged}", "retained",
                                    journal_url, tmp_path / "out", tmp_path / "ck-v1"))
    journaled = {(p.topic, p.partition): p.end for p in
                 Journal(journal_url).last_offsets("retained")[0].partitions}
    assert journaled == {(t, p): 10 for t in (pruned, aged) for p in (0, 1)}
    _produce(kafka_cluster, pruned, 20, start=20)  # offsets 10..19 in each partition
    kafka_cluster.produce(aged, 20, start=20, timestamp_ms=old)
    kafka_cluster.delete_records(pruned, {0: 14})
    _age_out(kafka_cluster, aged)  # everything, offsets 0..19, is gone
    kafka_cluster.produce(aged, 10, start=40)  # offsets 20..24, kept

    servers = ("--bootstrap-servers", kafka_cluster.bootstrap_servers)
    code, out, _ = _cli(capsys, "--database-url", journal_url, "plan", "retained", *servers)
    assert code != 0
    loss = _flat(out).split("DATA LOSS", 1)[1]
    assert loss.startswith(": 24 records in 3 partitions were deleted")
    assert (f"{pruned}-0 starts at 10 but its log starts at 14: records 10..13 were deleted "
            "before being read (journaled offset 10, log start 14, 4 records lost)") in loss
    for p in (0, 1):
        assert (f"{aged}-{p} starts at 10 but its log starts at 20: records 10..19 were "
                "deleted before being read (journaled offset 10, log start 20, 10 records "
                "lost)") in loss
    assert f"{pruned}-1 starts" not in loss and "--allow-data-loss" in loss
    code, out, err = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                          "retained", *servers)
    assert code != 0 and out == "" and "DATA LOSS" in _one_error_line(err)

    code, out, _ = _cli(capsys, "--database-url", journal_url, "plan", "retained", *servers,
                        "--allow-data-loss")
    assert code == 0, out
    said = _flat(out)
    assert "DATA LOSS accepted (--allow-data-loss): 24 records in 3 partitions" in said
    assert (f"{pruned}-0 starts at its log start 14, not at the journaled 10: records 10..13 "
            "(4 records) are lost") in said
    code, out, err = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                          "retained", *servers, "--allow-data-loss")
    assert code == 0 and "DATA LOSS accepted" in err
    assert json.loads(out) == {pruned: {"0": 14, "1": 10}, aged: {"0": 20, "1": 20}}

    # The job plans for itself from the journal, with the same choice (what the CLI
    # printed above is what it starts from).
    _run(spark, listener, _job_args(kafka_cluster, f"{pruned},{aged}", "retained",
                                    journal_url, tmp_path / "out-v2", tmp_path / "ck-v2",
                                    "--from-journal", "--allow-data-loss"))
    still_there = ([(pruned, 0, o) for o in range(14, 20)]
                   + [(pruned, 1, o) for o in range(10, 20)]
                   + [(aged, p, o) for p in (0, 1) for o in range(20, 25)])
    _exactly(_sink(spark, tmp_path / "out-v2"), still_there)


def _age_out(kafka: Any, topic: str, timeout: float = 90) -> None:
    """Let time retention delete every record of ``topic`` (their timestamps are old),
    then keep new records again. The broker checks retention every second, but not in
    its first 30 s (log.initial.task.delay.ms)."""
    _topic_config(kafka, topic, {"retention.ms": "1000", "segment.ms": "100"})
    deadline = time.monotonic() + timeout
    while not all(low == high > 0 for low, high in kafka.watermarks(topic).values()):
        assert time.monotonic() < deadline, f"retention did not empty {topic}"
        time.sleep(0.5)
    _topic_config(kafka, topic, {"retention.ms": "-1", "segment.ms": "604800000"})


def _topic_config(kafka: Any, topic: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in config.items()]
    resource = ConfigResource("topic", topic, incremental_configs=entries)
    for fut in kafka.admin().incremental_alter_configs([resource]).values():
        fut.result(30)


def test_a_deleted_topic_is_left_out_with_a_warning_and_the_rest_is_exactly_once(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    spark, listener = journaled_spark
    gone = kafka_topic + "-gone"
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.create_topic(gone, 2)
    produced = _produce(kafka_cluster, kafka_topic, 20)
    _produce(kafka_cluster, gone, 10)
    _run(spark, listener, _job_args(kafka_cluster, f"{kafka_topic},{gone}", "loses-a-topic",
                                    journal_url, tmp_path / "out", tmp_path / "ck-v1"))
    kafka_cluster.delete_topic(gone)
    produced += _produce(kafka_cluster, kafka_topic, 20, start=20)

    code, out, _ = _cli(capsys, "--database-url", journal_url, "plan", "loses-a-topic",
                        "--bootstrap-servers", kafka_cluster.bootstrap_servers,
                        "--subscribe", kafka_topic)
    assert code == 0, out
    code, out, err = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                          "loses-a-topic", "--bootstrap-servers",
                          kafka_cluster.bootstrap_servers)
    assert code == 0
    assert set(json.loads(out)) == {kafka_topic}
    assert f"topic {gone}" in err and "no longer exists" in err
    # What the options do about it: Spark fails a query subscribed to a missing topic.
    said = _flat(err)
    assert "deleted and not created again" in said and f"{gone}-0: 5, {gone}-1: 5" in said
    assert f"Subscribe the new job without {gone}" in said
    code, out, _ = _cli(capsys, "--database-url", journal_url, "plan", "loses-a-topic",
                        "--bootstrap-servers", kafka_cluster.bootstrap_servers,
                        "--subscribe", f"{kafka_topic},{gone}")
    assert code != 0 and f"subscribes to {gone}, which the cluster does not have" in _flat(out)

    _run(spark, listener, _job_args(kafka_cluster, kafka_topic, "loses-a-topic", journal_url,
                                    tmp_path / "out", tmp_path / "ck-v2", "--from-journal"))
    got = [r for r in _sink(spark, tmp_path / "out") if r[0] == kafka_topic]
    _exactly(got, produced)


@pytest.mark.containers
def test_a_recreated_topic_is_never_skipped_silently(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """Deleted and created again under the same name, the topic's offsets start at 0
    again, below what the journal holds: the plan must stop and say so."""
    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 2)
    _produce(kafka_cluster, kafka_topic, 40)
    _run(spark, listener, _job_args(kafka_cluster, kafka_topic, "recreated", journal_url,
                                    tmp_path / "out", tmp_path / "ck-v1"))
    kafka_cluster.delete_topic(kafka_topic)
    kafka_cluster.create_topic(kafka_topic, 2)
    _produce(kafka_cluster, kafka_topic, 6)
    assert kafka_cluster.watermarks(kafka_topic) == {0: (0, 3), 1: (0, 3)}

    code, out, _ = _cli(capsys, "--database-url", journal_url, "plan", "recreated",
                        "--bootstrap-servers", kafka_cluster.bootstrap_servers)
    assert code != 0
    assert f"{kafka_topic}-0 starts at 20, beyond its log end 3" in _flat(out)
    assert "recreated" in out
    code, out, err = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                          "recreated", "--bootstrap-servers", kafka_cluster.bootstrap_servers)
    assert code != 0 and out == ""
    assert "beyond its log end" in _one_error_line(err)
    said = _flat(err)
    assert f"{kafka_topic}-1 starts at 20, beyond its log end 3" in said
    assert "probably deleted and recreated" in said
    assert f"--restart-recreated-topic {kafka_topic}" in said

    # A typo in the choice is one line, not a plan.
    code, out, err = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                          "recreated", "--bootstrap-servers", kafka_cluster.bootstrap_servers,
                          "--restart-recreated-topic", kafka_topic + "-typo")
    assert code != 0 and out == "" and "neither journaled" in _one_error_line(err)
    # The explicit choice: the new topic from earliest, with a warning.
    chosen = ("--bootstrap-servers", kafka_cluster.bootstrap_servers,
              "--restart-recreated-topic", kafka_topic)
    code, out, _ = _cli(capsys, "--database-url", journal_url, "plan", "recreated", *chosen)
    assert code == 0, out
    assert f"topic {kafka_topic} starts at -2 (earliest) in all 2 partitions" in _flat(out)
    code, out, err = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                          "recreated", *chosen)
    assert code == 0 and json.loads(out) == {kafka_topic: {"0": -2, "1": -2}}
    assert "--restart-recreated-topic" in err
    new_records = [(kafka_topic, p, o) for p in (0, 1) for o in range(3)]
    new_records += _produce(kafka_cluster, kafka_topic, 4, start=6)
    _run(spark, listener, _job_args(kafka_cluster, kafka_topic, "recreated", journal_url,
                                    tmp_path / "out-v2", tmp_path / "ck-v2",
                                    "--from-journal", "--restart-recreated-topic",
                                    kafka_topic))
    _exactly(_sink(spark, tmp_path / "out-v2"), new_records)


def _read(query: Any) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def _wait(done: Any, query: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.2)


def test_a_broker_restart_under_a_running_journaled_job(
        journaled_spark, journal_url, tmp_path, capsys):
    """The broker is killed (SIGKILL) under a job with a 500 ms processing-time trigger,
    kept down while `plan` and `starting-offsets` run against it, then started again.

    What Spark did (Spark 4.2.0, its Kafka connector, Kafka 4.1.1; broker down ~45 s,
    ~25 s of it the broker's own restart): the query neither failed nor stopped. Its
    trigger waited in "Getting offsets from KafkaV2[Subscribe[outage]]", no batch was
    started or reported during the outage (so nothing reached the journal), and within
    ~4 s of the broker being back it read the records produced meanwhile. Both commands
    ended after ~10 s (the --kafka-timeout default) with one line, "cannot read cluster
    metadata at HOST:PORT: ... Broker transport failure", and exit status 1.

    Proven here: the journal holds exactly the batches the checkpoint committed, each
    with the checkpoint's offsets, and the sink has every record exactly once. The
    broker is this test's own, so the session's broker is never disturbed.
    """
    from offset_journal.local.kafka import start_local_kafka
    from offset_journal.local.services import KafkaCluster

    spark, listener = journaled_spark
    broker = start_local_kafka()  # ~8 s; ours alone, killed and restarted at will
    kafka = KafkaCluster(broker.bootstrap_servers, "local", broker=broker, _stop=broker.stop)
    try:
        kafka.create_topic("outage", 2)
        produced = _produce(kafka, "outage", 40)
        job = load_job("kafka_to_sink")
        argv = _job_args(kafka, "outage", "outage", journal_url, tmp_path / "out",
                         tmp_path / "ck-v1", "--trigger", "500 milliseconds")
        q = job.build_query(spark, job.parser().parse_args(argv))
        try:
            _wait(lambda: _read(q) >= 40, q, "the job read the first 40 records")
            broker.kill()
            for command in ("plan", "starting-offsets"):
                _refused_quickly(capsys, journal_url, command, broker.bootstrap_servers)
            assert q.isActive and q.exception() is None  # Spark waits; it does not fail
            broker.start()
            produced += _produce(kafka, "outage", 40, start=40)
            _wait(lambda: _read(q) >= 80, q, "the job read the records after the restart",
                  timeout=180)
        finally:
            q.stop()
        assert listener.wait_terminated(q.runId, 60)
        _journal_matches_checkpoint(journal_url, "outage", tmp_path / "ck-v1")
        _exactly(_sink(spark, tmp_path / "out"), produced)
    finally:
        kafka.stop()


def test_planning_with_the_broker_down_is_one_line_within_the_timeout(journal_url, capsys):
    """Nothing listens on the port: one line and exit 1, within --kafka-timeout."""
    import socket

    from tests.support import journal_batches, kafka_progress

    journal_batches(journal_url, [kafka_progress(0, None, {"orders": {"0": 5}}, minute=1)])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        servers = f"127.0.0.1:{sock.getsockname()[1]}"
    for command in ("plan", "starting-offsets"):
        _refused_quickly(capsys, journal_url, command, servers, "--kafka-timeout", "2",
                         within=10)


def _refused_quickly(capsys: pytest.CaptureFixture[str], url: str, command: str,
                     servers: str, *extra: str, within: float = 30) -> None:
    started = time.monotonic()
    query = "orders" if extra else "outage"
    code, out, err = _cli(capsys, "--database-url", url, command, query,
                          "--bootstrap-servers", servers, *extra)
    took = time.monotonic() - started
    assert code == 1 and out == "", (code, out)
    line = _one_error_line(err)
    assert f"cannot read cluster metadata at {servers}" in line
    assert took < within, f"{command} took {took:.1f} s with the broker down"


def _journal_matches_checkpoint(url: str, name: str, checkpoint: Path) -> None:
    """Every journaled batch is a batch the checkpoint committed (offsets/ + commits/),
    with the same end offsets, and starts where the checkpoint's previous batch ended;
    and every committed batch is journaled."""
    from offset_journal.checkpoint import kafka_end_offsets, read_checkpoint
    from offset_journal.offsets import kafka_offsets

    ck = read_checkpoint(checkpoint)
    batches = Journal(url).history(name)
    assert [b.batch_id for b in batches] == [b.batch_id for b in ck.committed_batches()]
    for b in batches:
        committed = ck.batch(b.batch_id)
        assert committed is not None and committed.committed
        ends: dict[str, dict[int, int | None]] = {}
        starts: dict[str, dict[int, int | None]] = {}
        for p in b.sources[0].partitions:
            ends.setdefault(p.topic, {})[p.partition] = p.end
            starts.setdefault(p.topic, {})[p.partition] = p.start
        assert kafka_end_offsets(committed)[0] == ends, b.batch_id
        previous = ck.start_offsets_of(b.batch_id)
        if b.batch_id > 0 and previous is not None:
            assert kafka_offsets(previous[0]) == starts, b.batch_id

