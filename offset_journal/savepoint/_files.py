"""A savepoint's directory, without Spark: is the target empty, the manifest written and
read back (its own SHA-256 checked), each part's files against their checksums.

Local paths are read directly, URLs through fsspec (as checkpoints are:
:mod:`offset_journal.checkpoint.store`). The files Spark wrote as data are checksummed;
beside them, a part's directory may hold only what Spark's file index never reads
(Hadoop's ``.crc``, ``_SUCCESS``, ``_temporary``): anything else it would read (a ``_``
name holding ``=``, ``_metadata``, a sub-directory) is refused, even though the state is
read from the listed files alone (:mod:`._verified`), as the savepoint was altered.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from typing import Any

from ..checkpoint.store import open_store
from ..errors import OffsetJournalError, SavepointError
from .core import check_files, manifest_from_dict
from .model import MANIFEST_NAME, FileSum, Manifest, Part, digest_of

_CHUNK = 1 << 20


_SUMMARIES = ("_common_metadata", "_metadata")


def spark_reads(name: str) -> bool:
    """A name Spark's file index takes in a directory it reads (Hadoop's
    ``shouldFilterOutPathName``): all but ``.`` names, ``_`` names without ``=`` and
    ``._COPYING_`` ones; Parquet's summaries ``_metadata`` and ``_common_metadata``
    are taken too."""
    if name.startswith(_SUMMARIES):
        return True
    return not ((name.startswith("_") and "=" not in name) or name.startswith(".")
                or name.endswith("._COPYING_"))


def data_file(name: str) -> bool:
    """A file Spark reads as data (not ``.crc``, ``_SUCCESS``, ``_metadata``)."""
    return spark_reads(name) and not name.startswith(_SUMMARIES)


def require_empty(location: str) -> None:
    """SavepointError unless ``location`` is missing or an empty directory: a savepoint
    never mixes its files with others (nor overwrites another savepoint)."""
    store, root = open_store(location, None)
    kind = store.kind(root)
    if kind is None:
        return
    if kind != "dir":
        raise SavepointError(f"{location} is a file: give a new or empty directory (--to)")
    entries = store.files(root) + store.dirs(root)
    if entries:
        raise SavepointError(f"{location} is not empty ({len(entries)} entries, e.g. "
                             f"{sorted(entries)[0]}): give a new or empty directory (--to)")


def sums(location: str, part_path: str) -> dict[str, FileSum]:
    """The data files of one part's directory with their sizes and SHA-256."""
    store, root = open_store(location, None)
    directory = store.join(root, *part_path.split("/"))
    out = {}
    for name in sorted(store.files(directory)):
        if not data_file(name):
            continue
        digest = hashlib.sha256()
        size = 0
        with store.open_read(store.join(directory, name)) as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        out[name] = FileSum(name, size, digest.hexdigest())
    return out


def write_manifest(location: str, manifest: Manifest) -> str:
    """Write ``manifest.json`` (the manifest and its SHA-256); returns the SHA-256."""
    store, root = open_store(location, None)
    document = manifest.to_dict()
    digest = digest_of(document)
    text = json.dumps({"sha256": digest, "manifest": document}, indent=1, sort_keys=True)
    store.write(store.join(root, MANIFEST_NAME), text.encode("utf-8"))
    return digest


def read_manifest(location: str) -> tuple[Manifest, str]:
    """The manifest at ``location`` and its SHA-256, checked against the one written
    with it. SavepointError: no savepoint there, or its manifest altered."""
    store, root = open_store(location, None)
    if store.kind(root) != "dir":
        raise SavepointError(f"no savepoint at {location}: not a directory")
    path = store.join(root, MANIFEST_NAME)
    if store.kind(path) != "file":
        raise SavepointError(f"no savepoint at {location}: no {MANIFEST_NAME}")
    try:
        document: Any = json.loads(store.read(path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SavepointError(f"the savepoint manifest at {location} is not JSON: "
                             f"{exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("manifest"), dict):
        raise SavepointError(f"the savepoint manifest at {location} is malformed")
    digest = digest_of(document["manifest"])
    if document.get("sha256") != digest:
        raise SavepointError(f"the savepoint manifest at {location} does not match its "
                             "checksum: the savepoint was altered")
    return manifest_from_dict(document["manifest"]), digest


def check_parts(location: str, parts: Iterable[Part]) -> None:
    """Every file of ``parts`` as the manifest lists it, and nothing else Spark would
    read in their directories (SavepointError otherwise)."""
    store, root = open_store(location, None)
    for part in parts:
        directory = store.join(root, *part.path.split("/"))
        others = sorted(name for name in store.files(directory)
                        if spark_reads(name) and not data_file(name))
        others += sorted(name for name in store.dirs(directory) if spark_reads(name))
        if others:
            raise SavepointError(f"savepoint at {location}: {part.path}/{others[0]} is not in "
                                 "the manifest: Spark would read it; the savepoint was altered")
        check_files(part, sums(location, part.path), location)


def same_location(a: str, b: str) -> bool:
    """Two spellings of one local directory (URLs compared as written)."""
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)


def remove_partial(store_location: str) -> None:
    """Remove what a failed savepoint wrote to a directory (or an object store's
    prefix) it found empty."""
    import shutil

    store, root = open_store(store_location, None)
    if store.ordered:
        store.remove_tree(root)
        return
    if store.fs is None and os.path.isdir(root):
        for name in os.listdir(root):
            path = os.path.join(root, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


def probe_writable(location: str) -> None:
    """SavepointError (one line) unless a file can be written into ``location`` (made
    when missing) and removed again: a schedule learns at once, not at its first
    savepoint, that its location is not writable."""
    import uuid

    store, root = open_store(location, None)
    probe = store.join(root, f".offset-journal-probe-{uuid.uuid4().hex[:12]}")
    try:
        store.write(probe, b"")
        if store.fs is None:
            os.unlink(probe)
        else:
            store.remove_tree(probe)
    except (OSError, OffsetJournalError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SavepointError(f"the savepoint location {location} is not writable: "
                             f"{why}") from None


def remove_savepoint(location: str) -> bool:
    """Remove a savepoint's directory (or an object store's prefix) whole; False when
    nothing was there."""
    import shutil

    store, root = open_store(location, None)
    if store.kind(root) is None:
        return False
    if store.fs is None:
        shutil.rmtree(root)
    else:
        store.remove_tree(root)
    return True


__all__ = ["check_parts", "data_file", "probe_writable", "read_manifest", "remove_partial",
           "remove_savepoint", "require_empty", "same_location", "spark_reads", "sums",
           "write_manifest"]
