"""Spark on S3: the jobs in jobs/ with their checkpoints and
sinks on ``s3a://`` of a real S3 server on loopback (moto, credentials checked), read
by Spark's own S3A (hadoop-aws at PySpark's Hadoop) in the shared session; journaled,
stopped, restarted on a NEW ``s3a://`` checkpoint from the journal, exactly once by
(topic, partition, offset); a savepoint taken from and written to S3 and read back as a
new query's state, its checksums checked on S3's objects."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import pytest

from offset_journal import Journal
from tests import s3_support, support
from tests.jobs_support import load_job, run_to_end
from tests.s3_support import upload
from tests.support import one_error_line

pytestmark = [pytest.mark.spark, pytest.mark.slow]
bucket, cli = s3_support.bucket, support.cli  # the fixtures
PROFILE_PROVIDER = "org.apache.hadoop.fs.s3a.auth.ProfileAWSCredentialsProvider"


def _records(rows: Any) -> Counter[tuple[str, int, int]]:
    return Counter((r["topic"], r["partition"], r["offset"]) for r in rows)


def _produced(produced: list[tuple[Any, ...]], topic: str) -> Counter[tuple[str, int, int]]:
    return Counter((topic, p, o) for p, o, *_ in produced)


def test_file_sink_job_on_s3a_restarts_from_the_journal_exactly_once(
        journaled_spark, s3a_spark, bucket, journal_url, kafka_cluster, kafka_topic, cli):
    """kafka_to_sink with its checkpoint and file sink on s3a://: v1 runs, is stopped,
    records arrive, v2 starts on a new s3a:// checkpoint --from-journal. The commands
    read Spark's own checkpoint on S3 (inspect, compare, the plan's new-checkpoint check)."""
    spark, listener = journaled_spark
    job = load_job("kafka_to_sink")
    base = f"s3a://{bucket}"
    produced = kafka_cluster.produce(kafka_topic, 40)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "orders-s3", "--database-url", journal_url, "--sink", "parquet",
              "--output", f"{base}/out", "--max-offsets-per-trigger", "20"]
    v1_ck, v2_ck = f"{base}/chk/v1", f"{base}/chk/v2"
    v1 = run_to_end(spark, listener, job, [*common, "--checkpoint", v1_ck])
    assert len(v1.recentProgress) >= 2

    code, out, err = cli("checkpoint", "inspect", v1_ck)
    assert code == 0, err
    report = json.loads(out)
    assert report["query_id"] == str(v1.id) and report["problems"] == []
    last = Journal(journal_url).last_batch("orders-s3")
    assert report["last_committed"]["batch_id"] == last.batch_id
    code, out, err = cli("--database-url", journal_url, "checkpoint", "compare", v1_ck,
                         "orders-s3", "--format", "json")
    assert code == 0 and json.loads(out)["verdict"].startswith("same"), out + err
    code, out, err = cli("--database-url", journal_url, "plan", "orders-s3",
                         "--checkpoint", v1_ck)
    assert f"location {v1_ck} already holds batches up to {last.batch_id}" in \
        one_error_line(code, err)

    produced += kafka_cluster.produce(kafka_topic, 25, start=40)
    run_to_end(spark, listener, job, [*common, "--checkpoint", v2_ck, "--from-journal"])
    rows = []
    for checkpoint in (v1_ck, v2_ck):
        rows += spark.read.parquet(job.output_dir_for(f"{base}/out", checkpoint)).collect()
    got = _records(rows)
    assert max(got.values()) == 1, "a record was written twice"
    assert got == _produced(produced, kafka_topic)
    assert len(Journal(journal_url).runs("orders-s3")) == 2


def test_delta_sink_job_on_s3a_restarts_from_the_journal_exactly_once(
        journaled_spark, delta_spark, s3a_spark, bucket, journal_url, kafka_cluster,
        kafka_topic):
    """kafka_to_sink --sink delta: one Delta table on s3a:// for both checkpoints (Delta
    skips only batches of the same query id; a new checkpoint is a new one)."""
    spark, listener = journaled_spark
    job = load_job("kafka_to_sink")
    table = f"s3a://{bucket}/orders"
    produced = kafka_cluster.produce(kafka_topic, 30)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "orders-delta-s3", "--database-url", journal_url,
              "--sink", "delta", "--output", table]
    run_to_end(spark, listener, job, [*common, "--checkpoint", f"s3a://{bucket}/chk/v1"])
    produced += kafka_cluster.produce(kafka_topic, 15, start=30)
    run_to_end(spark, listener, job, [*common, "--checkpoint", f"s3a://{bucket}/chk/v2",
                                      "--from-journal"])
    got = _records(spark.read.format("delta").load(table).collect())
    assert max(got.values()) == 1, "a record was written twice"
    assert got == _produced(produced, kafka_topic)


def test_savepoint_from_and_to_s3a_seeds_the_upgraded_query(
        journaled_spark, s3a_spark, s3_server, bucket, journal_url, kafka_cluster,
        kafka_topic, cli):
    """stateful_counts v1 (groupBy().agg()) with its checkpoint on s3a://; `savepoint
    create --checkpoint s3a://... --to s3a://...`; `plan --savepoint`; v2
    (transformWithState, initial_state from the savepoint) on a new s3a:// checkpoint:
    its state for every key equals the totals over every record. The savepoint's
    checksums are checked on S3's objects: one object replaced is refused."""
    from tests.savepoint.test_savepoint_e2e import _amounts, _reference, _state

    spark, listener = journaled_spark
    job = load_job("stateful_counts")
    base = f"s3a://{bucket}"
    produced = kafka_cluster.produce(kafka_topic, 40, value=_amounts)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "totals-s3", "--database-url", journal_url,
              "--output", f"{base}/out"]
    v1_ck, v2_ck, sp = f"{base}/chk/v1", f"{base}/chk/v2", f"{base}/savepoints/1"
    run_to_end(spark, listener, job, [*common, "--checkpoint", v1_ck])
    produced += kafka_cluster.produce(kafka_topic, 15, start=40, value=_amounts)

    code, out, err = cli("--database-url", journal_url, "savepoint", "create", "totals-s3",
                         "--checkpoint", v1_ck, "--to", sp)
    assert code == 0, err
    assert "savepoint 1 of query 'totals-s3'" in out and f"in {sp}" in out
    code, out, err = cli("--database-url", journal_url, "savepoint", "show", "1")
    assert code == 0, err  # the manifest and every file checked on S3
    code, out, err = cli("--database-url", journal_url, "plan", "totals-s3", "--savepoint",
                         "1", "--seed", "0", "--checkpoint", v2_ck)
    assert code == 0 and "7 keys, seeded" in out, out + err

    run_to_end(spark, listener, job, [*common, "--checkpoint", v2_ck, "--engine",
                                      "transform-with-state", "--from-journal",
                                      "--savepoint", sp, "--seed", "0"])
    v2_state = {r.key.grp: tuple(r.value) for r in _state(spark, v2_ck, stateVarName="totals")}
    assert v2_state == _reference(produced), "v2's state for every key"

    client = s3_server.client()
    parts = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="savepoints/1/")
             ["Contents"] if o["Key"].endswith(".parquet")]
    client.put_object(Bucket=bucket, Key=parts[0], Body=b"PAR1 not the exported state PAR1")
    code, out, err = cli("--database-url", journal_url, "savepoint", "show", "1")
    assert "does not match its checksum in the manifest: the savepoint was altered" in \
        one_error_line(code, err)


def test_spark_takes_s3a_credentials_from_a_profile_and_refuses_wrong_ones(
        s3a_spark, s3_server, tmp_path):
    """Per-bucket Hadoop settings as a user writes them: S3A's profile provider reads a
    shared credentials file; a wrong secret is refused, and not shown."""
    spark = s3a_spark
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    local = tmp_path / "t"
    spark.range(5).write.parquet(str(local))
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[oj]\naws_access_key_id = {s3_server.access_key}\n"
                           f"aws_secret_access_key = {s3_server.secret_key}\n")
    by_profile, wrong = (f"oj-{n}-{uuid.uuid4().hex[:8]}" for n in ("profile", "wrong"))
    settings = {
        by_profile: s3_server.hadoop_conf(
            by_profile, aws_credentials_provider=PROFILE_PROVIDER, access_key="",
            secret_key="", auth_profile_file=str(credentials), auth_profile_name="oj"),
        wrong: s3_server.hadoop_conf(wrong, secret_key="not-the-secret-at-all")}
    for name, bucket_conf in settings.items():
        s3_server.create_bucket(name)
        upload(s3_server, local, name, "t")
        for key, value in bucket_conf.items():
            conf.set(key, value)
    assert spark.read.parquet(f"s3a://{by_profile}/t").count() == 5
    with pytest.raises(Exception, match="AccessDenied|403") as refused:
        spark.read.parquet(f"s3a://{wrong}/t").count()
    assert "not-the-secret-at-all" not in str(refused.value)
