"""An S3 server on loopback for the tests and the benchmarks: moto's threaded server
(``moto[server]``, a dev dependency), with the settings that point Spark's ``s3a://``
(Hadoop configuration) and Python's ``s3fs`` (the standard AWS environment) at it.

Credentials are checked, as on S3: the server starts with IAM authentication on, and
:func:`start_s3` creates one IAM user allowed ``s3:*`` whose access key it hands out. A
request signed with another key or secret is refused (403), so wrong credentials fail
here as they would there. moto keeps its state per process, so the server is the test
process's own (one per test session, on a free loopback port), as is its request count
(:meth:`S3Server.requests`, from the server's request log: what the benchmarks report).

Nothing here reaches past loopback: the endpoint is 127.0.0.1, Spark's credentials come
from the Hadoop configuration only (no instance-metadata lookup), and the environment
for Python turns botocore's instance-metadata lookup off.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

log = logging.getLogger(__name__)

REGION = "us-east-1"
USER = "offset-journal"
SIMPLE_PROVIDER = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
_REQUEST_LINE = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+"')
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _RequestLog(logging.Handler):
    """Counts the requests the server logs (werkzeug logs one line per request), by
    kind: LIST, GET, HEAD, PUT, DELETE, POST (multi-object delete, multipart)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counts: Counter[str] = Counter()
        self.guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        match = _REQUEST_LINE.search(_ANSI.sub("", record.getMessage()))
        if match is None:
            return
        method, target = match.groups()
        kind = "LIST" if method == "GET" and "list-type=" in target else method
        with self.guard:
            self.counts[kind] += 1


@dataclass
class S3Server:
    """A running S3 server: its endpoint, the one user's key, and the settings for Spark
    (:meth:`hadoop_conf`) and for Python clients (:meth:`environ`)."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str = REGION
    _server: Any = None
    _log: _RequestLog = field(default_factory=_RequestLog)

    def hadoop_conf(self, bucket: str | None = None, **overrides: str) -> dict[str, str]:
        """``fs.s3a.*`` settings (for ``spark.hadoop.*`` or a session's Hadoop conf):
        this endpoint, path-style, plain HTTP, this user's key, the credentials from the
        configuration only, and timeouts and retries kept short, so that an endpoint
        that stops answering fails a request in seconds rather than minutes. With
        ``bucket``, the same as per-bucket settings (``fs.s3a.bucket.B.*``);
        ``overrides`` (``secret_key="..."``: dots as underscores) replace any of them."""
        conf = {
            "endpoint": self.endpoint, "endpoint.region": self.region,
            "path.style.access": "true", "connection.ssl.enabled": "false",
            "access.key": self.access_key, "secret.key": self.secret_key,
            "aws.credentials.provider": SIMPLE_PROVIDER,
            "connection.establish.timeout": "5s", "connection.timeout": "30s",
            "attempts.maximum": "2", "retry.limit": "2", "retry.interval": "100ms",
            # copyFromLocalFile (RocksDB's SST files) through the SDK's transfer manager
            # (its Netty client) reads the "100 Continue" moto's server sends as the
            # upload's final status: the plain upload (the sync client) is used instead
            "optimized.copy.from.local.enabled": "false",
        }
        conf.update({k.replace("_", "."): v for k, v in overrides.items()})
        prefix = f"fs.s3a.bucket.{bucket}." if bucket else "fs.s3a."
        return {prefix + k: v for k, v in conf.items()}

    def environ(self, **overrides: str) -> dict[str, str]:
        """The standard AWS environment for Python clients (botocore, s3fs): this
        endpoint, key and region, and no instance-metadata lookup."""
        env = {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
               "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_DEFAULT_REGION": self.region,
               "AWS_EC2_METADATA_DISABLED": "true"}
        env.update(overrides)
        return env

    def client(self) -> Any:
        """A boto3 S3 client of this server's user (to make buckets, list keys)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key)

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name``; returns its ``s3a://`` URL."""
        self.client().create_bucket(Bucket=name)
        return f"s3a://{name}"

    def requests(self) -> Counter[str]:
        """Requests served so far, by kind (LIST, GET, HEAD, PUT, DELETE, POST)."""
        with self._log.guard:
            return Counter(self._log.counts)

    def stop(self) -> None:
        logging.getLogger("werkzeug").removeHandler(self._log)
        if self._server is not None:
            self._server.stop()
            self._server = None


def start_s3() -> S3Server:
    """Start moto's S3 server on a free loopback port, IAM authentication on, with one
    user allowed every S3 action. ConfigError when moto is not installed."""
    try:
        import moto.settings
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.iam.models import iam_backends
        from moto.server import ThreadedMotoServer
    except ImportError:
        raise ConfigError("the local S3 server needs moto: pip install 'moto[server]' "
                          "(in offset-journal's dev extra)") from None
    # Every request is authenticated from the first one (moto's switch is per process).
    moto.settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    iam = iam_backends[DEFAULT_ACCOUNT_ID]["global"]
    if USER not in iam.users:
        iam.create_user(REGION, USER, "/", None)
        iam.put_user_policy(USER, "s3", json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    key = iam.create_access_key(USER)
    request_log = _RequestLog()
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.addHandler(request_log)  # werkzeug then adds no stderr handler of its own
    werkzeug.setLevel(logging.INFO)
    werkzeug.propagate = False
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    log.info("S3 server (moto) on http://%s:%d", host, port)
    return S3Server(f"http://{host}:{port}", key.access_key_id, key.secret_access_key,
                    _server=server, _log=request_log)


__all__ = ["S3Server", "start_s3"]
