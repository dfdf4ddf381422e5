"""Files of a checkpoint on the local disk or through fsspec; whether a location is
new, and whether an output path holds a file sink's log."""

from __future__ import annotations

import logging
import os
import posixpath
import re
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import CheckpointError
from ..values import url_scheme
from .model import Malformed

log = logging.getLogger(__name__)

# Only names made of digits are log files (crc and temp files are skipped); a file
# sink's log also has compacted N.compact files.
BATCH_NAME = re.compile(r"[0-9]+")
SINK_LOG_NAME = re.compile(r"([0-9]+)(?:\.compact)?")


class Store:
    """The few file operations the reader needs, over the local disk or fsspec."""

    def __init__(self, fs: Any = None) -> None:
        self.fs = fs

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
        if self.fs.isdir(path):
            return "dir"
        return "file" if self.fs.exists(path) else None

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
        return int(self.fs.size(path))

    def read(self, path: str) -> bytes:
        if self.fs is None:
            with open(path, "rb") as f:
                return f.read()
        return bytes(self.fs.cat_file(path))

    def open_read(self, path: str) -> Any:
        """A binary file object for reading ``path`` in pieces (a large file)."""
        if self.fs is None:
            return open(path, "rb")  # noqa: SIM115 - the caller closes it
        return self.fs.open(path, "rb")

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` (its directory made first); a savepoint's manifest."""
        if self.fs is None:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            return
        self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        with self.fs.open(path, "wb") as f:
            f.write(data)


def open_store(path: str | os.PathLike[str], fs: Any) -> tuple[Store, str]:
    """Pick local or fsspec access for ``path``; fsspec is optional, so import lazily."""
    text = os.fspath(path)
    if fs is not None:
        return Store(fs), text
    scheme = url_scheme(text)
    if scheme is None:
        return Store(), text
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
    return not batch_ids(store, store.join(root, "offsets"))


def file_sink_metadata(output_path: str | os.PathLike[str], *, fs: Any = None) -> int | None:
    """Highest batch id logged in a file sink's ``_spark_metadata``, else None.

    The file sink skips any batch id at or below this one as already written, so a
    query on a NEW checkpoint (batch ids from 0 again) writing into the same output
    path silently drops its first batches.
    """
    store, root = open_store(output_path, fs)
    log_dir = store.join(root, "_spark_metadata")
    if store.kind(log_dir) != "dir":
        return None
    ids = []
    for name in store.files(log_dir):
        match = SINK_LOG_NAME.fullmatch(name)
        if match:
            ids.append(int(match.group(1)))
    return max(ids) if ids else None
