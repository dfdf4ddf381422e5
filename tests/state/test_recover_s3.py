"""``state recover`` with everything on ``s3a://`` of the S3 server on loopback: the old
query's checkpoint, its savepoint, its file sink and the new checkpoint. The old
checkpoint's ``state/`` deleted on S3; the command restores the savepoint into a new
checkpoint on S3 and replays the old batches since (the ``offsets/N`` it writes, the
file sink's empty log entries: on S3 too). Real Spark 4.2 with S3A and the Kafka
connector, a real broker, real Postgres. The query is tests/state/test_recover_e2e.py's
dedup: a pair seen again after a state that lost it would be written twice."""

from __future__ import annotations

import runpy
from collections import Counter
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.checkpoint.sinks import read_file_sink_log
from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf
from tests import restore_support as rs
from tests import s3_support
from tests.support import count_rows

bucket = s3_support.bucket  # the fixture

QUERY_FILE = '''
from pyspark.sql import functions as F


def dedup(spark, checkpoint, starting):
    frame = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "{servers}")
             .option("subscribe", "{topic}").option("startingOffsets", starting[0])
             .option("maxOffsetsPerTrigger", "8").load())
    v = F.split(F.col("value").cast("string"), ",")
    pairs = frame.select(v[0].alias("grp"), v[1].cast("long").alias("amount"))
    out = "{out}/" + checkpoint.rstrip("/").rsplit("/", 1)[-1]
    return (pairs.dropDuplicates(["grp", "amount"]).writeStream.format("parquet")
            .option("path", out).queryName("dedup").option("checkpointLocation", checkpoint))
'''


def _value(i: int) -> str:
    return f"g{i % 5},{i % 13}"  # 65 pairs: most records repeat one seen before


def _keys(client: Any, bucket: str, prefix: str) -> list[str]:
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


@pytest.mark.slow  # the jar sets resolved (cached, fetched once)
def test_a_state_commands_own_session_gets_s3a_for_a_path_on_s3():
    """Run from a shell, `state recover` (and restore, repartition) start a session of
    their own: with a checkpoint or savepoint on S3 it needs hadoop-aws, or Spark cannot
    open s3a:// at all."""
    from offset_journal.cli._state_cmds import state_jars
    from offset_journal.local.jars import s3a_spark_jars_value

    s3a = s3a_spark_jars_value().split(",")
    on_s3 = state_jars(kafka=True, paths=["/tmp/new", None, "s3a://b/sp/1"]).split(",")
    assert set(s3a) <= set(on_s3) and any("hadoop-aws" in j for j in on_s3)
    local = state_jars(kafka=True, paths=["/tmp/new", "/tmp/sp"]).split(",")
    assert not set(s3a) & set(local)


@pytest.mark.spark
@pytest.mark.slow
def test_a_broken_checkpoint_on_s3_recovered_by_the_command(
        journaled_spark, s3a_spark, s3_server, bucket, journal_url, kafka_cluster,
        kafka_topic, tmp_path, capsys):
    """v1 (s3a://) runs to batch 2, savepoint to s3a://, runs to batch 4; its state/
    deleted on S3 while records keep arriving. --reread-sink with the file sink: refused
    before anything is written or recorded. Then the recovery: batches 3..4 replayed on
    S3 (written nowhere, the sink log whole), the query resumed; every key's state
    equals a never-broken query's, each pair written once across v1 and the new query."""
    spark, listener = journaled_spark
    client = s3_server.client()
    base = f"s3a://{bucket}"
    v1, new, never, out = f"{base}/ck-v1", f"{base}/ck-new", f"{base}/ck-never", f"{base}/out"
    path = tmp_path / "dedup.py"
    path.write_text(QUERY_FILE.format(servers=kafka_cluster.bootstrap_servers,
                                      topic=kafka_topic, out=out))
    build = runpy.run_path(str(path))["dedup"]
    produced: list[Any] = []

    def produce(count: int) -> None:
        produced.extend(kafka_cluster.produce(kafka_topic, count, start=len(produced),
                                              value=_value))

    def recover(*extra: str) -> tuple[int, str, str]:
        return rs.cli(capsys, "--database-url", journal_url, "state", "recover", "dedup",
                      "--to", new, "--query", f"{path}:dedup",
                      "--bootstrap-servers", kafka_cluster.bootstrap_servers, *extra)

    with session_conf(spark, "spark.sql.shuffle.partitions", "3"), \
            session_conf(spark, PROVIDER_CONF, rs.HDFS):
        produce(24)
        rs.run(build(spark, v1, ["earliest"]), "dedup", v1, listener)
        code, _o, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                               "dedup", "--checkpoint", v1, "--to", f"{base}/sp")
        assert code == 0, err
        produce(16)
        rs.run(build(spark, v1, ["earliest"]), "dedup", v1, listener)
    assert read_file_sink_log(f"{out}/ck-v1").last_batch == 4
    state = _keys(client, bucket, "ck-v1/state/")
    assert state
    for key in state:
        client.delete_object(Bucket=bucket, Key=key)
    produce(20)  # records keep arriving

    plans = count_rows(journal_url, "restart_plans")
    code, _out, err = recover("--reread-sink")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "--reread-sink: the query's sink is a file sink" in err
    assert _keys(client, bucket, "ck-new/") == [], "the refused recovery wrote a checkpoint"
    assert count_rows(journal_url, "restart_plans") == plans, "the refusal recorded a plan"

    code, out_text, err = recover()
    assert code == 0, err
    decision = "recovered from savepoint 1 (batch 2): batches 3..4 read again into state, " \
               "not written"
    assert decision in out_text and "recorded as plan" in out_text
    for n in (1, 2):  # the replays' offsets/N, written by the recovery on S3, and run
        assert f"ck-new/offsets/{n}" in _keys(client, bucket, f"ck-new/offsets/{n}")
        assert f"ck-new/commits/{n}" in _keys(client, bucket, f"ck-new/commits/{n}")
    rs.run(build(spark, new, ["earliest"]), "dedup", new, listener)
    rs.run(build(spark, never, ["earliest"]), "never", never)  # not journaled as "dedup"

    expected = {(g, int(a)) for g, a in (v.decode().split(",") for *_x, v in produced)}
    for checkpoint in (new, never):
        got = {(r.key.grp, r.key.amount) for r in rs.state(spark, checkpoint)}
        assert got == expected, checkpoint
    written = Counter((r.grp, r.amount) for d in ("ck-v1", "ck-new")
                      for r in spark.read.parquet(f"{out}/{d}").collect())
    assert set(written) == expected and max(written.values()) == 1, "a pair written twice"
    held = read_file_sink_log(f"{out}/ck-new")
    assert held is not None and held.batches[:3] == (0, 1, 2)
    for n in (1, 2):  # in the log (readers need every id), with no file
        body = client.get_object(Bucket=bucket, Key=f"out/ck-new/_spark_metadata/{n}")
        assert body["Body"].read().decode().strip() == "v1", "a batch read again was written"
    with Journal(journal_url) as journal:
        plan = journal.recorded_plans("dedup")[-1]
    assert plan.request["recovery"]["old_batches"] == [3, 4]
