"""The batch in flight with the sink on S3, against an S3 server on loopback checking
every signature. On the real parts (Spark 4.2 with Spark's Kafka connector and S3A, a
real broker, Postgres): a file-sink job on ``s3a://`` SIGKILLed after its sink logged
batch N and before ``commits/N``, then restarted as the docs say, from the plan that
``starting-offsets --checkpoint NEW --old-checkpoint OLD`` hands out, with nothing but
the Hadoop configuration Spark itself read (``HADOOP_CONF_DIR``). The plan reads the
sink the journal names where it lives, so every record is in the output once, by
(topic, partition, offset). And the command alone: the journaled sink read unasked,
refused in one line when the store refuses the credentials."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from offset_journal import Journal
from tests import s3_support, support
from tests.jobs_support import load_job, run_to_end, start_driver
from tests.s3_support import core_site, kill_after_s3_sink_commit, upload
from tests.support import count_rows, one_error_line, write_checkpoint

bucket, cli = s3_support.bucket, support.cli  # the fixtures
PER_BATCH = 300


def _journaled(url: str, name: str) -> int:
    with Journal(url) as journal:
        last = journal.last_batch(name)
    return -1 if last is None else last.batch_id


def _keys(server: Any, bucket: str, prefix: str) -> set[str]:
    answer = server.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {o["Key"][len(prefix):] for o in answer.get("Contents", [])}


@pytest.mark.spark
@pytest.mark.slow
def test_killed_with_the_sink_on_s3_the_documented_restart_is_exactly_once(
        journaled_spark, s3a_spark, s3_server, bucket, journal_url, kafka_cluster,
        kafka_topic, cli, tmp_path, monkeypatch):
    spark, listener = journaled_spark
    job = load_job("kafka_to_sink")
    name = "orders-s3-killed"
    base = f"s3a://{bucket}"
    ck1, ck2 = f"{base}/ck1", f"{base}/ck2"
    # The store's settings and credentials only where Spark reads them: core-site.xml.
    conf_dir = core_site(tmp_path / "hadoop", s3_server.hadoop_conf())
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3",
                     "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(variable)
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf_dir))

    produced = kafka_cluster.produce(kafka_topic, 6 * PER_BATCH)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", name, "--database-url", journal_url, "--sink", "parquet",
              "--output", f"{base}/out1", "--max-offsets-per-trigger", str(PER_BATCH)]
    log = tmp_path / "v1.log"
    proc = start_driver("kafka_to_sink", [*common, "--checkpoint", ck1, "--trigger",
                                          "300 milliseconds", "--spool-dir",
                                          str(tmp_path / "spool")], log)
    sink = job.output_dir_for(f"{base}/out1", ck1).split("/", 3)[3]
    try:
        batch = kill_after_s3_sink_commit(
            s3_server, proc, bucket, sink, "ck1",
            after=lambda: _journaled(journal_url, name) >= 1, log=log)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert str(batch) in _keys(s3_server, bucket, "ck1/offsets/")
    assert str(batch) not in _keys(s3_server, bucket, "ck1/commits/")
    assert str(batch) in _keys(s3_server, bucket, f"{sink}/_spark_metadata/")
    journaled = _journaled(journal_url, name)
    assert journaled < batch  # the journal is behind the sink: N is the batch in flight

    produced += kafka_cluster.produce(kafka_topic, PER_BATCH, start=6 * PER_BATCH)
    code, out, err = cli("--database-url", journal_url, "starting-offsets", name,
                         "--bootstrap-servers", kafka_cluster.bootstrap_servers,
                         "--checkpoint", ck2, "--old-checkpoint", ck1)
    assert code == 0, err
    handed = json.loads(out)
    run_to_end(spark, listener, job, [*common, "--checkpoint", ck2,
                                      "--starting-offsets", json.dumps(handed)])

    rows = []
    for checkpoint in (ck1, ck2):
        rows += spark.read.parquet(job.output_dir_for(f"{base}/out1", checkpoint)).collect()
    got = Counter((r["topic"], r["partition"], r["offset"]) for r in rows)
    twice = sorted(k for k, n in got.items() if n > 1)
    assert not twice, f"{len(twice)} records written twice (batch {batch} in flight, " \
                      f"journal at {journaled}), e.g. {twice[:3]}"
    assert got == Counter((kafka_topic, p, o) for p, o, *_ in produced), "a record is missing"
    with Journal(journal_url) as j:
        plan = j.recorded_plans(name)[-1]
    assert plan.sink is not None and plan.sink["last_batch"] == batch
    assert plan.sink["path"] == job.output_dir_for(f"{base}/out1", ck1)


def test_the_journaled_sink_on_s3_is_read_unasked_and_refused_when_it_cannot_be(
        cli, s3_server, bucket, journal_url, tmp_path, monkeypatch):
    """The journal names the file sink at s3a://B/out, which logged batches 0..5; the
    journal has 0..3, the old checkpoint (on this disk) offsets/0..5 and commits/0..4.
    Credentials only in core-site.xml: a wrong secret is one line naming --sink, nothing
    recorded or journaled; the right one, and the plan starts after batch 5."""
    from tests.checkpoint.test_sink_logs import sink_log
    from tests.cli.test_sink_cli import journal_batches_0_to_3
    from tests.restart.test_sink_plan import ends

    out = f"s3a://{bucket}/out"
    query_id = journal_batches_0_to_3(journal_url, out)
    old = write_checkpoint(tmp_path / "ck-v1", query_id, [([ends(b)], b <= 4) for b in range(6)],
                           initial={"0": {"orders": {"0": 0, "1": 0}}})
    upload(s3_server, sink_log(tmp_path / "out", range(6)), bucket, "out")
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(variable)
    argv = ["--database-url", journal_url, "starting-offsets", "orders", "--checkpoint",
            str(tmp_path / "ck-v2"), "--old-checkpoint", str(old)]

    wrong = core_site(tmp_path / "wrong", s3_server.hadoop_conf(secret_key="not-the-secret"))
    monkeypatch.setenv("HADOOP_CONF_DIR", str(wrong))
    code, got, err = cli(*argv)
    line = one_error_line(code, err)
    assert got == "" and f"the old query's sink, the file sink at {out} (its journaled " \
        f"description), cannot be read: {out}: the object store refused access" in line
    assert "(--sink PATH for a file sink, --sink delta:PATH for a Delta table)" in line
    assert "not-the-secret" not in line
    assert count_rows(journal_url, "batches") == 4
    assert count_rows(journal_url, "restart_plans") == 0

    right = core_site(tmp_path / "right", s3_server.hadoop_conf())
    monkeypatch.setenv("HADOOP_CONF_DIR", str(right))
    code, got, err = cli(*argv)
    assert code == 0, err
    assert got.strip() == '{"orders":{"0":60,"1":120}}'  # after batch 5: offsets/5
    assert count_rows(journal_url, "batches") == 6
