"""Object stores for the checkpoint reader: ``s3a://`` (and ``s3://``, ``s3n://``)
opened with s3fs, configured the standard ways, its errors said in one line, and
listings that use S3's key order instead of listing a whole log.

Configuration, strongest first: fsspec's own for ``s3`` (``fsspec.config.conf``, the
``FSSPEC_S3`` environment variable or its config files), the Hadoop configuration Spark
reads too (``fs.s3a.*`` and ``fs.s3a.bucket.<bucket>.*`` in
``$HADOOP_CONF_DIR/core-site.xml``: endpoint, region, path-style access, plain HTTP,
access key, secret key, session token), then botocore's own chain (``AWS_*``
environment variables, ``AWS_PROFILE`` and the shared credentials and config files,
``AWS_ENDPOINT_URL_S3``). Requests time out and are retried a bounded number of times
(:data:`TIMEOUTS`), so an endpoint that does not answer fails a read within about a
minute instead of hanging; fsspec's configuration may set other bounds.
"""

from __future__ import annotations

import logging
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..errors import CheckpointError
from ..formatting import first_line
from ..redaction import redact
from ..values import S3_SCHEMES

log = logging.getLogger(__name__)

TIMEOUTS: dict[str, Any] = {"connect_timeout": 10, "read_timeout": 20,
                            "retries": {"max_attempts": 3, "mode": "standard"}}
"""botocore's settings for every request (unless fsspec's configuration sets them)."""
S3FS_RETRIES = 1
"""s3fs's own retry loop runs around botocore's: once is enough with botocore retrying."""
_HADOOP_KEYS = ("endpoint", "endpoint.region", "path.style.access",
                "connection.ssl.enabled", "access.key", "secret.key", "session.token")
_NO_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError")
_NO_ANSWER = ("ConnectionError", "HTTPClientError", "ConnectTimeoutError", "ReadTimeoutError",
              "EndpointConnectionError", "ConnectionClosedError", "FSTimeoutError",
              "TimeoutError")


def is_object_store(scheme: str | None) -> bool:
    return scheme in S3_SCHEMES


def hadoop_conf_file() -> dict[str, str]:
    """The ``fs.s3a.*`` properties of ``$HADOOP_CONF_DIR/core-site.xml`` ({} when there
    is none); CheckpointError when that file is not Hadoop's XML."""
    directory = os.environ.get("HADOOP_CONF_DIR")
    path = os.path.join(directory, "core-site.xml") if directory else None
    if path is None or not os.path.isfile(path):
        return {}
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise CheckpointError(f"{path}: not a Hadoop configuration file: {exc}") from None
    out = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name and value is not None and name.strip().startswith("fs.s3a."):
            out[name.strip()] = value.strip()
    return out


def options_from_hadoop(conf: Mapping[str, str], bucket: str) -> dict[str, Any]:
    """s3fs's keyword arguments from ``fs.s3a.*`` settings (pure): a bucket's own
    (``fs.s3a.bucket.<bucket>.*``) over the general ones, as S3A reads them."""
    def get(key: str) -> str | None:
        value = conf.get(f"fs.s3a.bucket.{bucket}.{key}", conf.get(f"fs.s3a.{key}"))
        return value.strip() if value is not None and value.strip() else None

    out: dict[str, Any] = {}
    endpoint = get("endpoint")
    if endpoint is not None:
        if "://" not in endpoint:
            secure = (get("connection.ssl.enabled") or "true").lower() != "false"
            endpoint = f"{'https' if secure else 'http'}://{endpoint}"
        out["endpoint_url"] = endpoint
    region = get("endpoint.region")
    if region is not None:
        out["client_kwargs"] = {"region_name": region}
    if (get("path.style.access") or "").lower() == "true":
        out["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    for key, name in (("access.key", "key"), ("secret.key", "secret"),
                      ("session.token", "token")):
        value = get(key)
        if value is not None:
            out[name] = value
    return out


def _merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments merged, later layers winning; the nested dicts (config_kwargs,
    client_kwargs) merged key by key."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
                out[key] = _merged(out[key], value)
            else:
                out[key] = value
    return out


def s3_options(bucket: str, hadoop: Mapping[str, str] | None = None) -> dict[str, Any]:
    """s3fs's keyword arguments for ``bucket``: :data:`TIMEOUTS`, then the Hadoop
    configuration (``hadoop``, else core-site.xml's), then fsspec's own for s3."""
    import fsspec.config

    user: dict[str, Any] = {}
    for proto in ("s3", "s3a"):
        user = _merged(user, fsspec.config.conf.get(proto, {}))
    conf = hadoop_conf_file() if hadoop is None else hadoop
    return _merged({"config_kwargs": TIMEOUTS}, options_from_hadoop(conf, bucket), user)


def refuse_credentials(text: str, bucket: str) -> None:
    """CheckpointError for ``s3a://KEY:SECRET@bucket/...`` whatever the secret holds
    (S3A no longer takes them either), before anything is called with it.

    A secret holding '/' ends what looks like the bucket early (``KEY:abc`` of
    ``KEY:abc/def@bucket``): no bucket name holds ':' or '@', so either one there means
    credentials. Where they end cannot be told from the text, so everything before its
    last '@' is left out of the message."""
    if ":" not in bucket and "@" not in bucket:
        return
    scheme, _, rest = text.partition("://")
    shown = f"{scheme}://***@{rest.rpartition('@')[2]}" if "@" in rest else f"{scheme}://***"
    raise CheckpointError(f"credentials in a URL are not taken ({redact(shown)}): give them "
                          "the standard ways (environment, profile, Hadoop conf)")


def open_s3(text: str) -> tuple[Any, str]:
    """An s3fs file system for ``text`` (an s3a://, s3:// or s3n:// URL) and the path in
    it (``bucket/key``). A fresh instance each time: credentials taken from the
    environment when it is made, not from an earlier one's."""
    root = text.split("://", 1)[1].strip("/")
    bucket = root.split("/", 1)[0]
    refuse_credentials(text, bucket)
    try:
        import s3fs
    except ImportError:
        scheme = text.split(":", 1)[0]
        raise CheckpointError(f"reading {scheme}:// paths needs s3fs: pip install "
                              f"'offset-journal[s3]' ({text})") from None
    if not bucket:
        raise CheckpointError(f"no bucket in {text}: use s3a://BUCKET/PATH")
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_options(bucket))
    fs.retries = S3FS_RETRIES
    return fs, root


def _error_code(exc: BaseException) -> str | None:
    cause = exc.__cause__ or exc.__context__
    response = getattr(cause, "response", None) or getattr(exc, "response", None)
    if isinstance(response, Mapping):
        return str((response.get("Error") or {}).get("Code") or "") or None
    return None


def translated(exc: BaseException, where: str) -> BaseException | None:
    """The one-line CheckpointError an object store's error means (None: keep it as it
    is: a missing key stays a FileNotFoundError, which callers handle)."""
    name = type(exc).__name__
    reason = first_line(exc)
    if isinstance(exc, PermissionError):
        return CheckpointError(
            f"{where}: the object store refused access ({reason}): check the credentials "
            "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or fs.s3a.access.key "
            "and fs.s3a.secret.key in core-site.xml)")
    if name in _NO_CREDENTIALS:  # botocore's, raised before any request is sent
        return CheckpointError(
            f"{where}: no credentials for the object store ({reason}): give them the "
            "standard ways (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or "
            "fs.s3a.access.key and fs.s3a.secret.key in core-site.xml)")
    if isinstance(exc, FileNotFoundError) and _error_code(exc) == "NoSuchBucket":
        bucket = where.split("://", 1)[-1].split("/", 1)[0]
        return CheckpointError(f"{where}: bucket {bucket} does not exist")
    if name in _NO_ANSWER or any(c.__name__ in _NO_ANSWER for c in type(exc).__mro__):
        return CheckpointError(f"{where}: no answer from the object store ({reason}); "
                               "check the endpoint (AWS_ENDPOINT_URL_S3 or fs.s3a.endpoint)")
    return None


@contextmanager
def said_in_one_line(where: str) -> Iterator[None]:
    """Errors of an object store call as :func:`translated` says them."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as exc:
        better = translated(exc, where)
        if better is None:
            raise
        raise better from None


def check_bucket(fs: Any, root: str, where: str) -> None:
    """CheckpointError when ``root``'s bucket does not exist or may not be read: S3
    says "no such key" for a path in a missing bucket through s3fs's isdir/exists."""
    bucket = root.split("/", 1)[0]
    try:
        fs.info(bucket)
    except FileNotFoundError:
        raise CheckpointError(f"{where}: bucket {bucket} does not exist") from None
    except Exception as exc:
        better = translated(exc, where)
        if better is None:
            raise
        raise better from None


def keys_after(fs: Any, directory: str, start_after: str, limit: int,
               prefix: str = "") -> tuple[list[str], bool]:
    """Names in ``directory`` (``bucket/key``) after ``start_after`` in S3's key order
    (UTF-8 bytes), at most ``limit`` (one request), that start with ``prefix``; and
    whether more follow."""
    bucket, _, key = directory.partition("/")
    base = f"{key.rstrip('/')}/" if key else ""
    answer = fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=base + prefix,
                        StartAfter=base + start_after, MaxKeys=limit)
    names = [str(item["Key"])[len(base):] for item in answer.get("Contents", [])]
    return [n for n in names if n and "/" not in n], bool(answer.get("IsTruncated"))


__all__ = ["S3_SCHEMES", "TIMEOUTS", "check_bucket", "is_object_store", "keys_after",
           "open_s3", "options_from_hadoop", "s3_options", "said_in_one_line", "translated"]
