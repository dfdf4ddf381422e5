"""Checkpoints on S3, read through the commands a user runs, on a real S3 server on
loopback (moto, credentials checked; issue 42 items 2, 4 and 5): ``checkpoint inspect``,
``import`` and ``compare`` of an ``s3a://`` checkpoint, the plan's new-checkpoint and
file-sink checks on ``s3a://`` locations, credentials the standard ways and never shown,
and bad input in one line with nothing recorded. Spark's own runs on S3 are in
tests/test_s3_jobs.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from offset_journal.checkpoint import file_sink_metadata, is_new_checkpoint
from offset_journal.errors import CheckpointError
from tests.jobs_support import load_job
from tests.support import Cli, cli, count_rows, one_error_line, sql_rows, write_checkpoint  # noqa: F401

TOPIC = "orders"
QUERY_ID = "0f5d7c2e-6d1b-4a51-9d0c-3c1f4b9f7a10"
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_S3", "HADOOP_CONF_DIR")


def _offsets(n: int) -> dict[str, dict[str, int]]:
    return {TOPIC: {"0": 10 * n, "1": 10 * n + 5}}


@pytest.fixture
def bucket(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A bucket of this test's own, and the standard AWS environment pointing at the
    server (nothing else of the machine's: no profile, no Hadoop conf)."""
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.environ().items():
        monkeypatch.setenv(name, value)
    name = f"oj-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    return name


def upload(server: Any, local: Path, bucket: str, prefix: str) -> str:
    """Every file under ``local`` to ``s3a://bucket/prefix/...``; the URL."""
    client = server.client()
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.put_object(Bucket=bucket, Key=f"{prefix}/{path.relative_to(local).as_posix()}",
                          Body=path.read_bytes())
    return f"s3a://{bucket}/{prefix}"


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
