"""What a streaming query's sink holds, read from the sink's own commit log, without
Spark: which batch ids a file sink logged, and which batch a Delta table's transaction
log says each writer committed last.

**File sink** (``writeStream.format("parquet")`` and the other file formats): Spark's
FileStreamSinkLog, ``OUTPUT/_spark_metadata/N``. Each batch's file is a version line
(``v1``) and one JSON line per output file (``{"path":..., "size":..., "action":"add"}``),
written atomically (temp file, then rename) before the batch's ``commits/N``. Every
``compactInterval`` batches (``spark.sql.streaming.fileSink.log.compactInterval``, 10)
the batch's file is ``N.compact`` instead, holding every earlier batch's lines, and the
files before the previous compaction are deleted after
``spark.sql.streaming.fileSink.log.cleanupDelay`` (``...fileSink.log.deletion``). The
file sink skips a batch whose id is at or below the highest file name (N or N.compact)
as already committed: that is the batch the sink holds last, whatever was deleted or
compacted. The log does not say which query wrote it.

**Delta** (``writeStream.format("delta")``, and ``foreachBatch`` writes with the
``txnAppId`` / ``txnVersion`` options): ``TABLE/_delta_log/%020d.json`` commits of JSON
actions, a ``{"txn": {"appId": ..., "version": ..., "lastUpdated": ...}}`` action in
each streaming commit. Delta's streaming sink uses the query id (the checkpoint's, kept
across its runs) as ``appId`` and the batch id as ``version``, and skips a batch at or
below the version recorded for its query id. Every ``delta.checkpointInterval`` commits
(10) a checkpoint (``%020d.checkpoint.parquet``, or multi-part
``%020d.checkpoint.%010d.%010d.parquet``, or a V2 ``%020d.checkpoint.<uuid>.parquet|json``)
holds the table's state, the last ``txn`` of every appId included; ``_last_checkpoint``
names the newest. The state is that checkpoint plus the commits after it; old commits may
be cleaned up. Checkpoints are read with pyarrow (only their ``txn`` and ``metaData``
columns).

Both readers count the bytes they read (``bytes_read``): the cost a restart plan adds.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..descriptions import DELTA_SINK, FILE_SINK, described_sink
from ..errors import CheckpointError
from .model import Malformed
from .store import SINK_LOG_NAME, Store, decode, open_store, snippet

SINK_LOG_DIR = "_spark_metadata"
DELTA_LOG_DIR = "_delta_log"
_COMMIT = re.compile(r"([0-9]{20})\.json")
_CHECKPOINT = re.compile(
    r"([0-9]{20})\.checkpoint(?:\.([0-9]{10})\.([0-9]{10})|\.[0-9a-fA-F-]{36})?\.(parquet|json)")
_VERSION_LINE = re.compile(r"v[0-9]+")
_HEAD = 4096
"""Bytes read of a compacted sink log file: its version line is all the reader needs."""


@dataclass(frozen=True)
class FileSinkLog:
    """A file sink's ``_spark_metadata`` log: the batch ids whose log file is there
    (``N`` or ``N.compact``, sorted) and the highest of them, the batch the sink holds
    last (the file sink skips any batch at or below it)."""

    path: str
    batches: tuple[int, ...]
    compacted: tuple[int, ...] = ()
    bytes_read: int = 0

    @property
    def last_batch(self) -> int | None:
        return self.batches[-1] if self.batches else None


@dataclass(frozen=True)
class DeltaTxns:
    """A Delta table's transaction log as the ``txn`` actions say: per ``appId``, the
    last ``version`` (a batch id) committed; the table's id and latest version, and the
    checkpoint its state was read from (None: commits only)."""

    path: str
    table_id: str | None
    version: int | None
    txns: Mapping[str, int] = field(default_factory=dict)
    checkpoint: int | None = None
    bytes_read: int = 0


def read_file_sink_log(output_path: str | os.PathLike[str], *, fs: Any = None,
                       ) -> FileSinkLog | None:
    """The ``_spark_metadata`` log under ``output_path``; None when there is none.
    CheckpointError when the newest log file is not a sink log (a version line, then
    JSON lines each with a ``path``)."""
    store, root = open_store(output_path, fs)
    log_dir = store.join(root, SINK_LOG_DIR)
    if store.kind(log_dir) != "dir":
        return None
    found: list[tuple[int, bool]] = []
    for name in store.files(log_dir):
        match = SINK_LOG_NAME.fullmatch(name)
        if match:
            found.append((int(match.group(1)), name.endswith(".compact")))
    found.sort()
    read = 0
    if found:
        last, compact = found[-1]
        read = _check_sink_file(store, store.join(log_dir, f"{last}.compact" if compact
                                                  else str(last)), compact)
    return FileSinkLog(os.fspath(output_path), tuple(b for b, _c in found),
                       tuple(b for b, c in found if c), read)


def _check_sink_file(store: Store, path: str, compact: bool) -> int:
    """Bytes read to check that ``path`` is a sink log file; a compacted one (every
    batch's lines: megabytes) by its version line only."""
    try:
        if compact:
            with store.open_read(path) as f:
                data = f.read(_HEAD)
        else:
            data = store.read(path)
        lines = decode(data).split("\n")
    except (OSError, Malformed) as exc:
        raise CheckpointError(f"{path}: cannot read the file sink log: {exc}") from None
    if not _VERSION_LINE.fullmatch(lines[0].strip()):
        raise CheckpointError(f"{path} is not a file sink log: first line "
                              f"{snippet(lines[0])}, not a version like v1")
    for line in ([] if compact else lines[1:]):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            raise CheckpointError(f"{path} is not a file sink log: {snippet(line)} is not "
                                  "JSON") from None
        if not isinstance(entry, dict) or "path" not in entry:
            raise CheckpointError(f"{path} is not a file sink log: {snippet(line)} names "
                                  "no file")
    return len(data)


def read_delta_txns(table_path: str | os.PathLike[str], *, fs: Any = None,
                    ) -> DeltaTxns | None:
    """The ``txn`` actions of the Delta table at ``table_path`` (its newest checkpoint,
    then the commits after it); None when it has no ``_delta_log``. CheckpointError when
    the log cannot be read (a commit missing between the checkpoint and the newest, a
    malformed action, a checkpoint without pyarrow)."""
    store, root = open_store(table_path, fs)
    log_dir = store.join(root, DELTA_LOG_DIR)
    if store.kind(log_dir) != "dir":
        return None
    names = store.files(log_dir)
    commits = sorted(int(m.group(1)) for n in names if (m := _COMMIT.fullmatch(n)))
    state = _State()
    start = 0
    checkpoint = _newest_checkpoint(store, log_dir, names, commits)
    if checkpoint is not None:
        version, files = checkpoint
        for name in files:
            state.read_checkpoint(store, store.join(log_dir, name))
        start = version + 1
    todo = [v for v in commits if v >= start]
    expected = list(range(start, (todo[-1] + 1) if todo else start))
    if todo != expected:
        missing = sorted(set(expected) - set(todo))
        raise CheckpointError(
            f"{log_dir}: commit {missing[0]:020d}.json is missing (versions "
            f"{start}..{expected[-1]} are needed after "
            + (f"checkpoint {start - 1}" if checkpoint else "no checkpoint") + ")")
    for version in todo:
        state.read_commit(store, store.join(log_dir, f"{version:020d}.json"))
    latest = todo[-1] if todo else (checkpoint[0] if checkpoint else None)
    return DeltaTxns(os.fspath(table_path), state.table_id, latest, dict(state.txns),
                     checkpoint[0] if checkpoint else None, state.bytes_read)


def _newest_checkpoint(store: Store, log_dir: str, names: list[str], commits: list[int],
                       ) -> tuple[int, list[str]] | None:
    """The newest complete checkpoint (its version and files): the one
    ``_last_checkpoint`` names when its files are there, else the highest whose parts
    are all there."""
    by_version: dict[int, list[tuple[str, int | None]]] = {}
    for name in names:
        m = _CHECKPOINT.fullmatch(name)
        if m:
            parts = int(m.group(3)) if m.group(3) else None
            by_version.setdefault(int(m.group(1)), []).append((name, parts))
    complete: dict[int, list[str]] = {}
    for version, files in by_version.items():
        multi = [f for f in files if f[1] is not None]
        if multi and len(multi) == multi[0][1]:
            complete[version] = sorted(n for n, _p in multi)
        elif any(p is None for _n, p in files):
            complete[version] = [sorted(n for n, p in files if p is None)[0]]
    if not complete:
        return None
    hinted = _last_checkpoint_hint(store, log_dir)
    version = hinted if hinted in complete else max(complete)
    return version, complete[version]


def _last_checkpoint_hint(store: Store, log_dir: str) -> int | None:
    try:
        hint = json.loads(store.read(store.join(log_dir, "_last_checkpoint")))
    except (OSError, ValueError):
        return None
    version = hint.get("version") if isinstance(hint, dict) else None
    return version if isinstance(version, int) else None


class _State:
    """The table state the reader rebuilds: the table id and each appId's txn version."""

    def __init__(self) -> None:
        self.table_id: str | None = None
        self.txns: dict[str, int] = {}
        self.bytes_read = 0

    def action(self, action: Mapping[str, Any], where: str) -> None:
        txn = action.get("txn")
        if isinstance(txn, Mapping):
            app, version = txn.get("appId"), txn.get("version")
            if not isinstance(app, str) or not isinstance(version, int):
                raise CheckpointError(f"{where}: a txn action without appId and version: "
                                      f"{snippet(json.dumps(txn))}")
            self.txns[app] = version
        meta = action.get("metaData")
        if isinstance(meta, Mapping) and isinstance(meta.get("id"), str):
            self.table_id = str(meta["id"])

    def read_commit(self, store: Store, path: str) -> None:
        try:
            data = store.read(path)
            text = decode(data)
        except (OSError, Malformed) as exc:
            raise CheckpointError(f"{path}: cannot read: {exc}") from None
        self.bytes_read += len(data)
        self.lines(text, path)

    def lines(self, text: str, where: str) -> None:
        for line in text.splitlines():
            if '"txn"' not in line and '"metaData"' not in line:
                continue
            try:
                action = json.loads(line)
            except json.JSONDecodeError:
                raise CheckpointError(f"{where}: {snippet(line)} is not JSON") from None
            if isinstance(action, Mapping):
                self.action(action, where)

    def read_checkpoint(self, store: Store, path: str) -> None:
        if path.endswith(".json"):  # a V2 checkpoint's top-level file as JSON lines
            self.read_commit(store, path)
            return
        try:
            import pyarrow.parquet as pq
        except ImportError:  # the core install has no parquet reader
            raise CheckpointError(f"reading the Delta checkpoint {path} needs pyarrow "
                                  "(pip install pyarrow)") from None
        with store.open_read(path) as raw:
            counted = _Counted(raw)
            try:
                parquet = pq.ParquetFile(counted)
                wanted = [c for c in ("txn", "metaData") if c in parquet.schema_arrow.names]
                table = parquet.read(columns=wanted)
            except (OSError, ValueError) as exc:
                raise CheckpointError(f"{path}: cannot read the Delta checkpoint: "
                                      f"{exc}") from None
            self.bytes_read += counted.count
        for column in wanted:
            for row in table.column(column).to_pylist():
                if row is not None:
                    self.action({column: row}, path)


class _Counted:
    """A binary file that counts the bytes read through it (pyarrow reads a parquet
    file's footer and the wanted columns' chunks only)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.count = 0
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.count += len(data)
        return bytes(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.raw.seek(offset, whence))

    def tell(self) -> int:
        return int(self.raw.tell())

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


__all__ = ["DELTA_LOG_DIR", "DELTA_SINK", "FILE_SINK", "SINK_LOG_DIR", "DeltaTxns", "FileSinkLog",
           "described_sink", "read_delta_txns", "read_file_sink_log"]
