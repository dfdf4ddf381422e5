"""Helpers for the tests on the S3 server (tests/test_s3*.py)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_S3", "HADOOP_CONF_DIR")


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
