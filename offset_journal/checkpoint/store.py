"""Files of a checkpoint on the local disk or through fsspec (object stores through
:mod:`._remote`); whether a location is new, and whether an output path holds a file
sink's log."""

from __future__ import annotations

import logging
import os
import posixpath
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import CheckpointError
from ..values import url_scheme
from ._remote import check_bucket, is_object_store, keys_after, open_s3, said_in_one_line
from .model import Malformed

log = logging.getLogger(__name__)

# Only names made of digits are log files (crc and temp files are skipped); a file
# sink's log also has compacted N.compact files.
BATCH_NAME = re.compile(r"[0-9]+")
SINK_LOG_NAME = re.compile(r"([0-9]+)(?:\.compact)?")


class Store:
    """The few file operations the reader needs, over the local disk or fsspec. On an
    object store (``ordered``: S3) its errors are one line naming ``where`` (the URL
    given), and a missing bucket is an error, not a missing directory."""

    def __init__(self, fs: Any = None, where: str | None = None, ordered: bool = False,
                 ) -> None:
        self.fs = fs
        self.where = where
        self.ordered = ordered

    def _said(self, path: str) -> Any:
        return said_in_one_line(self.where or path)

    def join(self, base: str, *parts: str) -> str:
        if self.fs is None:
            return os.path.join(base, *parts)
        return posixpath.join(base, *parts)

    def kind(self, path: str) -> str | None:
        """ "dir", "file" or None (missing)."""
        if self.fs is None:
            if os.path.isdir(path):
                return "dir"
            return "file" if os.path.exists(path) else None
        with self._said(path):
            if self.fs.isdir(path):
                return "dir"
            if self.fs.exists(path):
                return "file"
        if self.ordered:
            check_bucket(self.fs, path, self.where or path)
        return None

    def files(self, path: str) -> list[str]:
        """Names of the regular files directly in ``path`` ([] when it is missing)."""
        return self._entries(path, "file")

    def dirs(self, path: str) -> list[str]:
        """Names of the directories directly in ``path``."""
        return self._entries(path, "directory")

    def _entries(self, path: str, kind: str) -> list[str]:
        if self.fs is None:
            try:
                with os.scandir(path) as entries:
                    return [e.name for e in entries
                            if (e.is_file() if kind == "file" else e.is_dir())]
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            with self._said(path):
                listed = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        return [
            str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
            for e in listed
            if e.get("type") == kind
        ]

    def size(self, path: str) -> int:
        if self.fs is None:
            return os.path.getsize(path)
        with self._said(path):
            return int(self.fs.size(path))

    def read(self, path: str) -> bytes:
        if self.fs is None:
            with open(path, "rb") as f:
                return f.read()
        with self._said(path):
            return bytes(self.fs.cat_file(path))

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes | BaseException]:
        """Each path's bytes, or the error reading it raised: an object store's many
        small files read concurrently (one request each, in flight together), the
        local disk's one after another."""
        if self.fs is None or not self.ordered:
            out: dict[str, bytes | BaseException] = {}
            for path in paths:
                try:
                    out[path] = self.read(path)
                except OSError as exc:
                    out[path] = exc
            return out
        with self._said(self.where or ""):
            got = self.fs.cat(list(paths), on_error="return")
        return {p: v if isinstance(v, BaseException) else bytes(v) for p, v in got.items()}

    def names_after(self, path: str, start_after: str, limit: int,
                    prefix: str = "") -> tuple[list[str], bool]:
        """File names in ``path`` after ``start_after`` in the store's key order (one
        request; ``ordered`` stores only), and whether more follow."""
        with self._said(path):
            return keys_after(self.fs, path, start_after, limit, prefix)

    def open_read(self, path: str) -> Any:
        """A binary file object for reading ``path`` in pieces (a large file)."""
        if self.fs is None:
            return open(path, "rb")  # noqa: SIM115 - the caller closes it
        with self._said(path):
            return self.fs.open(path, "rb")

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` (its directory made first); a savepoint's manifest."""
        if self.fs is None:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            return
        with self._said(path):
            if not self.ordered:  # s3fs's makedirs would create a missing bucket
                self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
            with self.fs.open(path, "wb") as f:
                f.write(data)

    def remove_tree(self, path: str) -> None:
        """Remove everything under ``path`` (a savepoint's partial files)."""
        with self._said(path):
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)


def open_store(path: str | os.PathLike[str], fs: Any) -> tuple[Store, str]:
    """Pick local or fsspec access for ``path``; fsspec is optional, so import lazily."""
    text = os.fspath(path)
    if fs is not None:
        return Store(fs), text
    scheme = url_scheme(text)
    if scheme is None:
        return Store(), text
    if is_object_store(scheme):
        filesystem, root = open_s3(text)
        return Store(filesystem, text, ordered=True), root
    try:
        import fsspec
    except ImportError:
        if scheme == "file":
            # file: URLs (Spark prints paths this way) need no extra package.
            return Store(), unquote(urlparse(text).path)
        raise CheckpointError(
            f"reading {scheme}:// paths needs fsspec (pip install fsspec): {text}"
        ) from None
    try:
        filesystem, root = fsspec.core.url_to_fs(text)
    except (ImportError, ValueError) as exc:
        raise CheckpointError(f"cannot open {text} with fsspec: {exc}") from exc
    return Store(filesystem), str(root)


def batch_ids(store: Store, directory: str) -> list[int]:
    """Batch ids of a metadata log: files named by digits only (crc and temp files skipped)."""
    ids = []
    for name in store.files(directory):
        if BATCH_NAME.fullmatch(name):
            ids.append(int(name))
        else:
            log.debug("ignoring %s in %s", name, directory)
    return sorted(ids)


def decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def snippet(text: str) -> str:
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def is_new_checkpoint(path: str | os.PathLike[str], *, fs: Any = None) -> bool:
    """True when a query started at ``path`` would honour ``startingOffsets``.

    That is a missing directory or one without offsets files; anything else resumes
    from the checkpoint instead.
    """
    store, root = open_store(path, fs)
    kind = store.kind(root)
    if kind is None:
        return True
    if kind != "dir":
        raise CheckpointError(f"checkpoint location is not a directory: {os.fspath(path)}")
    offsets = store.join(root, "offsets")
    if store.ordered:
        return not _any_log_file(store, offsets)
    return not batch_ids(store, offsets)


# Digits sort after "/" and before every letter: a listing that starts after "/" starts
# at the log's first file, past "." names (Spark's temp files), in S3's key order.
_BEFORE_DIGITS = "/"
_PAGE = 1000
_LISTED_DIGITS = 4  # ids below 10,000: at most 10 pages, fewer than a search asks


def _any_log_file(store: Store, directory: str) -> bool:
    """Whether ``directory`` holds a log file (a name of digits), in S3's key order: the
    first page after "/" (one request) tells, unless it holds only other names."""
    after = _BEFORE_DIGITS
    while True:
        names, more = store.names_after(directory, after, _PAGE)
        if any(BATCH_NAME.fullmatch(n) for n in names):
            return True
        if not more or not names or not names[-1][:1].isdigit():
            return False
        after = names[-1]


def _newest_log_id(store: Store, directory: str) -> int | None:
    """The highest batch id of a file sink's log (``N`` or ``N.compact``), in few
    requests. The first page in key order (one request) holds a short log whole. A
    longer one holds every id from its oldest kept to its newest, so its newest is found
    by asking whether id k is there (one request each): first how many digits it has,
    then, above 10,000 ids (where a listing takes more pages than the search takes
    requests), by halving; below, the rest of the listing is cheaper."""
    names, more = store.names_after(directory, _BEFORE_DIGITS, _PAGE)
    ids = [int(m.group(1)) for m in map(SINK_LOG_NAME.fullmatch, names) if m]
    if not ids:
        return None
    low = max(ids)
    if not more:
        return low

    def present(batch_id: int) -> bool:
        first, _ = store.names_after(directory, "", 1, prefix=str(batch_id))
        match = SINK_LOG_NAME.fullmatch(first[0]) if first else None
        return match is not None and int(match.group(1)) == batch_id

    digits = len(str(low))
    while present(10 ** digits):
        low, digits = 10 ** digits, digits + 1
    if digits <= _LISTED_DIGITS:
        while more and names:
            names, more = store.names_after(directory, names[-1], _PAGE)
            low = max([low, *(int(m.group(1)) for m in map(SINK_LOG_NAME.fullmatch, names)
                              if m)])
        return low
    high = 10 ** digits  # low is there, high is not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if present(mid) else (low, mid)
    return low


def file_sink_metadata(output_path: str | os.PathLike[str], *, fs: Any = None) -> int | None:
    """Highest batch id logged in a file sink's ``_spark_metadata``, else None.

    The file sink skips any batch id at or below this one as already written, so a
    query on a NEW checkpoint (batch ids from 0 again) writing into the same output
    path silently drops its first batches.
    """
    store, root = open_store(output_path, fs)
    log_dir = store.join(root, "_spark_metadata")
    if store.ordered:
        store.kind(root)  # a missing bucket, or refused credentials, said in one line
        return _newest_log_id(store, log_dir)
    if store.kind(log_dir) != "dir":
        return None
    ids = []
    for name in store.files(log_dir):
        match = SINK_LOG_NAME.fullmatch(name)
        if match:
            ids.append(int(match.group(1)))
    return max(ids) if ids else None
