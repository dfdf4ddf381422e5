"""Helpers for the tests on the S3 server (tests/test_s3*.py)."""

from __future__ import annotations

import logging
import os
import queue
import re
import signal
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote

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


def core_site(directory: Path, settings: dict[str, str]) -> Path:
    """``directory/core-site.xml`` holding ``settings``, as a user writes Hadoop's
    configuration for ``HADOOP_CONF_DIR``; the directory."""
    from xml.sax.saxutils import escape

    directory.mkdir(parents=True, exist_ok=True)
    props = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value>"
                    "</property>\n" for k, v in settings.items())
    (directory / "core-site.xml").write_text(
        f'<?xml version="1.0"?>\n<configuration>\n{props}</configuration>\n')
    return directory


class _SinkLogPuts(logging.Handler):
    """The S3 server's request log (werkzeug logs a request before it answers it): on
    each PUT of a file sink log key (``PREFIX/_spark_metadata/N`` or ``N.compact``), the
    driver's process group is SIGSTOPped, so it cannot go on to ``commits/N``, and N is
    handed over."""

    def __init__(self, bucket: str, prefix: str, pid: int) -> None:
        super().__init__(logging.INFO)
        self.pattern = re.compile(
            rf'"PUT /{re.escape(bucket)}/{re.escape(prefix)}/_spark_metadata/([0-9]+)'
            r'(?:\.compact)?(?:\?\S*)? HTTP')
        self.pid = pid
        self.caught: queue.Queue[int] = queue.Queue()

    def emit(self, record: logging.LogRecord) -> None:
        match = self.pattern.search(unquote(record.getMessage()))
        if match is not None:
            os.killpg(self.pid, signal.SIGSTOP)
            self.caught.put(int(match.group(1)))


def kill_after_s3_sink_commit(server: Any, proc: Any, bucket: str, sink: str,
                              checkpoint: str, *, after: Any, log: Path,
                              timeout: float = 300) -> int:
    """SIGKILL the driver right after its file sink at ``s3a://bucket/sink`` logged a
    batch N and before Spark wrote ``checkpoint/commits/N`` (keys in ``bucket``), when
    ``after()`` holds; else it goes on (SIGCONT). tests/jobs_support.py's
    kill_after_sink_commit for a sink on S3, where no inotify can see a commit. Returns N."""
    client = server.client()
    watch = _SinkLogPuts(bucket, sink, proc.pid)
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.addHandler(watch)
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no sink commit caught before commits/N"
            try:
                batch = watch.caught.get(timeout=1.0)
            except queue.Empty:
                continue
            done = client.list_objects_v2(Bucket=bucket, Prefix=f"{checkpoint}/commits/{batch}")
            if not any(o["Key"].endswith(f"/{batch}") for o in done.get("Contents", [])) \
                    and after():
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
                return batch
            os.killpg(proc.pid, signal.SIGCONT)
    finally:
        werkzeug.removeHandler(watch)
