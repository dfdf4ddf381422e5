"""Checkpoints on S3, read through the commands a user runs, on a real S3 server on
loopback (moto, credentials checked): ``checkpoint inspect``,
``import`` and ``compare`` of an ``s3a://`` checkpoint, the plan's new-checkpoint and
file-sink checks on ``s3a://`` locations, credentials the standard ways and never shown,
and bad input in one line with nothing recorded. Spark's own runs on S3 are in
tests/jobs/test_s3_jobs.py."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from offset_journal.checkpoint import file_sink_metadata, is_new_checkpoint
from offset_journal.errors import CheckpointError
from tests import s3_support, support
from tests.jobs_support import load_job
from tests.s3_support import upload
from tests.support import count_rows, one_error_line, sql_rows, write_checkpoint

bucket, cli = s3_support.bucket, support.cli  # the fixtures
TOPIC = "orders"
QUERY_ID = "0f5d7c2e-6d1b-4a51-9d0c-3c1f4b9f7a10"


def _offsets(n: int) -> dict[str, dict[str, int]]:
    return {TOPIC: {"0": 10 * n, "1": 10 * n + 5}}

def checkpoint_on_s3(server: Any, bucket: str, tmp_path: Path, prefix: str = "chk/v1",
                     batches: int = 3) -> str:
    local = write_checkpoint(tmp_path / prefix.replace("/", "-"), QUERY_ID,
                             [([_offsets(i + 1)], True) for i in range(batches)],
                             initial={"0": _offsets(0)})
    return upload(server, local, bucket, prefix)


def test_inspect_import_and_compare_read_an_s3a_checkpoint(s3_server, bucket, journal_url,
                                                          tmp_path, cli):
    url = checkpoint_on_s3(s3_server, bucket, tmp_path)
    code, out, err = cli("checkpoint", "inspect", url)
    assert code == 0, err
    report = json.loads(out)
    assert report["query_id"] == QUERY_ID and report["batches"] == 3
    assert report["last_committed"]["starting_offsets"] == {"0": json.dumps(
        {TOPIC: {"0": 30, "1": 35}}, separators=(",", ":"))}
    assert report["problems"] == []
    code, same, err = cli("checkpoint", "inspect", url.replace("s3a://", "s3://"))
    assert code == 0, err
    assert {**json.loads(same), "path": url} == report  # s3:// is the same store

    code, out, err = cli("--database-url", journal_url, "checkpoint", "import", url,
                         "--query-name", "orders-on-s3")
    assert code == 0, err
    assert "imported 3 batches" in out
    code, out, err = cli("--database-url", journal_url, "checkpoint", "import", url,
                         "--query-name", "orders-on-s3")
    assert code == 0 and "imported 0 batches" in out and "3 were already" in out, out + err
    code, out, err = cli("--database-url", journal_url, "checkpoint", "compare", url,
                         "orders-on-s3", "--format", "json")
    assert code == 0, err
    compared = json.loads(out)
    assert compared["checkpoint"]["batch_id"] == 2 and compared["journal"]["batch_id"] == 2
    assert {(p["partition"], p["checkpoint"], p["journal"]) for p in compared["partitions"]} \
        == {(0, 30, 30), (1, 35, 35)}


def test_the_new_checkpoint_and_file_sink_checks_on_s3a(s3_server, bucket, journal_url,
                                                       tmp_path, cli):
    """An empty prefix is new, a prefix with offsets/ is not (a plan refuses it), a
    missing bucket is an error; an output prefix with a file sink's log is the trap."""
    used = checkpoint_on_s3(s3_server, bucket, tmp_path)
    assert is_new_checkpoint(f"s3a://{bucket}/chk/v2")
    assert is_new_checkpoint(f"s3a://{bucket}/")
    assert not is_new_checkpoint(used)
    with pytest.raises(CheckpointError, match="bucket oj-missing-bucket does not exist"):
        is_new_checkpoint("s3a://oj-missing-bucket/chk/v2")

    code, out, err = cli("--database-url", journal_url, "checkpoint", "import", used,
                         "--query-name", "orders")
    assert code == 0, err
    code, out, err = cli("--database-url", journal_url, "plan", "orders", "--checkpoint", used)
    assert one_error_line(code, err).endswith(
        f"location {used} already holds batches up to 2: Spark would resume from it and "
        "ignore startingOffsets; use a new, empty location")
    client = s3_server.client()
    for name in ("0", "1", "2.compact", "3"):
        client.put_object(Bucket=bucket, Key=f"out/_spark_metadata/{name}", Body=b"v1\n")
    assert file_sink_metadata(f"s3a://{bucket}/out") == 3
    assert file_sink_metadata(f"s3a://{bucket}/other") is None
    code, out, err = cli("--database-url", journal_url, "plan", "orders", "--checkpoint",
                         f"s3a://{bucket}/chk/v2", "--output-path", f"s3a://{bucket}/out")
    assert code == 0, err
    assert (f"output path s3a://{bucket}/out already has a file sink log (_spark_metadata, up "
            "to batch 3)") in " ".join(out.split())
    job = load_job("kafka_to_sink")  # the job refuses to start there
    args = job.parser().parse_args(["--bootstrap-servers", "127.0.0.1:1", "--topics", TOPIC,
                                    "--query-name", "orders", "--checkpoint",
                                    f"s3a://{bucket}/chk/v2", "--output", f"s3a://{bucket}"])
    with pytest.raises(job.JobError, match="already holds a file-sink log"):
        job.decide_start(args, output_path=f"s3a://{bucket}/out")


def _journal_text(url: str) -> str:
    """Every row of every journal table, as text."""
    tables = [r[0] for r in sql_rows(url, "select table_name from information_schema.tables "
                                          "where table_schema = 'offset_journal' and "
                                          "table_type = 'BASE TABLE'")]
    return "\n".join(str(row) for t in tables for row in sql_rows(
        url, f"select row_to_json(t)::text from offset_journal.{t} t"))  # noqa: S608


def test_bad_s3_input_is_one_line_and_records_nothing(s3_server, bucket, journal_url,
                                                      tmp_path, cli, monkeypatch):
    url = checkpoint_on_s3(s3_server, bucket, tmp_path)
    s3_server.client().put_object(Bucket=bucket, Key="junk/readme.txt", Body=b"not Spark's")
    cases = {
        "s3a://oj-no-such-bucket/chk/v1": "s3a://oj-no-such-bucket/chk/v1: bucket "
                                          "oj-no-such-bucket does not exist",
        f"s3a://{bucket}/junk": "not a Spark checkpoint (no metadata file, offsets/ or "
                                f"commits/): s3a://{bucket}/junk",
        f"s3a://{bucket}/nothing-here": f"checkpoint directory does not exist: s3a://{bucket}"
                                        "/nothing-here",
        f"s3a://AKIAEXAMPLE:hunter2@{bucket}/chk/v1": "credentials in a URL are not taken "
                                                       f"(s3a://***@{bucket}/chk/v1)",
    }
    for where, said in cases.items():
        for argv in (["checkpoint", "inspect", where],
                     ["--database-url", journal_url, "checkpoint", "import", where,
                      "--query-name", "orders"]):
            line = one_error_line(*cli(*argv)[::2])
            assert said in line, line
            assert "hunter2" not in line
    code, out, err = cli("--database-url", journal_url, "plan", "orders", "--checkpoint",
                         "s3a://oj-no-such-bucket/chk/v2")
    assert "bucket oj-no-such-bucket does not exist" in one_error_line(code, err)

    for wrong in ({"AWS_SECRET_ACCESS_KEY": "not-the-secret"},
                  {"AWS_ACCESS_KEY_ID": "AKIAOTHERUSER0000000"}):
        with monkeypatch.context() as env:
            for name, value in wrong.items():
                env.setenv(name, value)
            for argv in (["checkpoint", "inspect", url],
                         ["--database-url", journal_url, "checkpoint", "import", url,
                          "--query-name", "orders"],
                         ["--database-url", journal_url, "plan", "orders", "--checkpoint",
                          f"s3a://{bucket}/chk/v2"]):
                line = one_error_line(*cli(*argv)[::2])
                assert "the object store refused access" in line, line
                assert "not-the-secret" not in line

    with monkeypatch.context() as env:  # s3a:// without the extra installed
        env.setitem(sys.modules, "s3fs", None)
        line = one_error_line(*cli("checkpoint", "inspect", url)[::2])
        assert line.endswith(f"reading s3a:// paths needs s3fs: pip install "
                             f"'offset-journal[s3]' ({url})"), line
    for table in ("query_runs", "batches", "restart_plans"):
        assert count_rows(journal_url, table) == 0, table


def test_an_endpoint_that_does_not_answer_fails_in_bounded_time(s3_server, bucket, tmp_path,
                                                                 cli, monkeypatch):
    """A server that takes the connection and never answers: the request's own timeout
    (fsspec's configuration sets it here, one attempt of 1 s), and without it the
    command's deadline; each one line, within seconds."""
    import fsspec.config

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(128)  # never accepted: the kernel completes the handshake, nothing answers
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{silent.getsockname()[1]}")
        url = f"s3a://{bucket}/chk/v1"
        with monkeypatch.context() as conf:
            conf.setitem(fsspec.config.conf, "s3", {"config_kwargs": {
                "connect_timeout": 1, "read_timeout": 1, "retries": {"max_attempts": 1}}})
            began = time.monotonic()
            line = one_error_line(*cli("checkpoint", "inspect", url)[::2])
            assert time.monotonic() - began < 20
            assert f"{url}: no answer from the object store" in line, line
            with pytest.raises(CheckpointError, match="no answer from the object store"):
                is_new_checkpoint(url)  # what a job checks before it starts
        began = time.monotonic()
        line = one_error_line(*cli("--timeout", "3", "checkpoint", "inspect", url)[::2])
        assert time.monotonic() - began < 15
        assert "no answer within 3 s" in line and "object store" in line, line
    finally:
        silent.close()


def test_credentials_come_the_standard_ways_and_are_never_shown(
        s3_server, bucket, journal_url, tmp_path, cli, monkeypatch, caplog):
    """The environment, a profile, and the Hadoop configuration Spark reads (with the
    endpoint there too): each reads the checkpoint; the secret is never in the output,
    the log or the journal."""
    url = checkpoint_on_s3(s3_server, bucket, tmp_path)
    secret = s3_server.secret_key
    caplog.set_level("DEBUG")
    seen: list[str] = []

    def read(*argv: str) -> None:
        code, out, err = cli(*argv)
        assert code == 0, err
        seen.extend([out, err])

    read("-vv", "checkpoint", "inspect", url)  # the environment (the fixture's)
    with monkeypatch.context() as env:  # a profile
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            env.delenv(name)
        credentials = tmp_path / "credentials"
        credentials.write_text(f"[oj]\naws_access_key_id = {s3_server.access_key}\n"
                               f"aws_secret_access_key = {secret}\n")
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
        env.setenv("AWS_PROFILE", "oj")
        read("-vv", "checkpoint", "inspect", url)
    with monkeypatch.context() as env:  # core-site.xml, as Spark reads it
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3"):
            env.delenv(name)
        conf_dir = tmp_path / "hadoop-conf"
        conf_dir.mkdir()
        props = {**s3_server.hadoop_conf(), "fs.s3a.endpoint":
                 s3_server.endpoint.removeprefix("http://")}
        (conf_dir / "core-site.xml").write_text("<configuration>" + "".join(
            f"<property><name>{k}</name><value>{v}</value></property>"
            for k, v in props.items()) + "</configuration>")
        env.setenv("HADOOP_CONF_DIR", str(conf_dir))
        read("-vv", "--database-url", journal_url, "checkpoint", "import", url,
             "--query-name", "orders")
        read("-vv", "--database-url", journal_url, "checkpoint", "compare", url, "orders")
        env.setenv("AWS_SECRET_ACCESS_KEY", "what-botocore-would-take")  # the conf wins
        read("checkpoint", "inspect", url)
    assert count_rows(journal_url, "batches") == 3
    everything = "\n".join([*seen, caplog.text, _journal_text(journal_url)])
    assert secret not in everything and "what-botocore-would-take" not in everything


def test_the_newest_sink_batch_is_found_in_key_order_without_listing_the_log(
        s3_server, bucket):
    """A file sink's log of 23,456 ids kept from 12,000 on (older ones deleted), in S3's
    key order: the newest id in a few requests, not the 12 pages a listing takes."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]  # 11,457 objects, put without HTTP
    for i in range(12_000, 23_457):
        backend.put_object(bucket, f"out/_spark_metadata/{i}{'.compact' if i % 10 == 9 else ''}",
                           b"v1\n")
    before = s3_server.requests()
    assert file_sink_metadata(f"s3a://{bucket}/out") == 23_456
    asked = s3_server.requests() - before
    assert asked["LIST"] <= 25 and set(asked) == {"LIST"}, asked


def test_a_plan_reads_the_old_querys_file_sink_and_checkpoint_on_s3a(s3_server, bucket,
                                                                     journal_url, tmp_path,
                                                                     cli):
    """The old query was killed after its file sink on s3a:// logged batch
    5 and before commits/5, the journal holds 0..3. The plan reads the sink's log and the
    old checkpoint's offsets/4..5 on S3, starts after batch 5 and journals 4 and 5. (Given,
    as the jobs give theirs; the journaled one unasked: tests/jobs/test_s3_sink_crash.py.)"""
    from tests.checkpoint.test_sink_logs import sink_log
    from tests.cli.test_sink_cli import journal_batches_0_to_3
    from tests.restart.test_sink_plan import ends

    out = f"s3a://{bucket}/out"
    query_id = journal_batches_0_to_3(journal_url, out)
    old = upload(s3_server, write_checkpoint(tmp_path / "ck-v1", query_id,
                                             [([ends(b)], b <= 4) for b in range(6)],
                                             initial={"0": {"orders": {"0": 0, "1": 0}}}),
                 bucket, "chk/v1")
    upload(s3_server, sink_log(tmp_path / "out", range(6)), bucket, "out")

    code, got, err = cli("--database-url", journal_url, "starting-offsets", "orders",
                         "--checkpoint", f"s3a://{bucket}/chk/v2", "--old-checkpoint", old,
                         "--sink", out)
    assert code == 0, err
    assert got.strip() == '{"orders":{"0":60,"1":120}}'  # after batch 5: offsets/5 on S3
    assert [r[0] for r in sql_rows(journal_url, "SELECT batch_id FROM offset_journal.batches "
                                                "ORDER BY batch_id")] == [0, 1, 2, 3, 4, 5]


# What a secret may hold that ends the bucket early ('/'), or looks like a second '@', a
# query or a fragment: none may change what is refused, nor show.
SECRETS = ["abc/defSECRET", "a+b/c=SECRET", "p@ss/SECRET", "SECRET#frag", "SE?CRET",
           "x:y/SECRET", "%2FSECRET"]


def _console(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    script = str(Path(sys.executable).parent / "offset-journal")
    return subprocess.run([script, *argv], capture_output=True, text=True, timeout=180,
                          env=env, check=False)


def test_credentials_in_a_url_are_refused_before_any_call_and_vv_shows_no_secret(
        s3_server, bucket, tmp_path, cli, caplog):
    """``s3a://KEY:SECRET@bucket/...`` is refused in one line whatever the secret holds
    ('/' made the bucket ``KEY:abc`` and botocore's "unexpected ParamValidationError"),
    before s3fs or botocore is called: not one DEBUG line of theirs. And -vv of a real
    read (the console script, as a user runs it) passes the libraries' DEBUG lines
    through the same redaction: neither the secret, nor the access key id, nor a
    request's signature, which botocore prints in its header dump and its own line."""
    url = checkpoint_on_s3(s3_server, bucket, tmp_path)
    caplog.set_level("DEBUG")
    for secret in SECRETS:
        where = f"s3a://AKIAINURL0EXAMPLE:{secret}@{bucket}/chk/v1"
        line = one_error_line(*cli("checkpoint", "inspect", where)[::2])
        assert f"credentials in a URL are not taken (s3a://***@{bucket}/chk/v1)" in line, line
        code, out, err = cli("-vv", "checkpoint", "inspect", where)
        assert code == 1 and out == "" and "credentials in a URL are not taken" in err
        assert "SECRET" not in err + caplog.text and "AKIAINURL0EXAMPLE" not in err
        called = [r.name for r in caplog.records
                  if r.name.split(".")[0] in ("s3fs", "botocore", "aiobotocore", "fsspec")]
        assert called == [], called
    env = dict(os.environ)
    for name in s3_support.AWS_VARIABLES:
        env.pop(name, None)
    env.update(s3_server.environ())
    refused = _console(env, "-vv", "checkpoint", "inspect",
                       f"s3a://AKIAINURL0EXAMPLE:abc/defSECRET@{bucket}/ck1")
    assert refused.returncode == 1 and "credentials in a URL are not taken" in refused.stderr
    assert "SECRET" not in refused.stderr and "DEBUG: s3fs" not in refused.stderr
    read = _console(env, "-vv", "checkpoint", "inspect", url)
    assert read.returncode == 0, read.stderr[-3000:]
    said = read.stderr
    assert "DEBUG: botocore.auth" in said and "DEBUG: s3fs" in said  # they did speak
    assert "Signature=***" in said and "Credential=***" in said, said[-3000:]
    assert s3_server.secret_key not in said and s3_server.access_key not in said
    assert not re.search(r"Signature[=:]\s*[0-9a-f]{64}", said), said[-3000:]
