"""The id of the Delta table at a path now, read from its transaction log (an edge of the
planner: it reads files). A table deleted and created again at the same path has a new
id, and the journal's offsets (``reservoirId``) name the old one."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..errors import CheckpointError


def local_path(path: str) -> Path | None:
    """A ``file:`` URL or a plain path as a local path; None for other file systems."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path) if parsed.scheme else path)
    return None


def same_path(path: str) -> str:
    """A table path to compare: ``file:/t``, ``file:///t`` and ``/t`` are one table."""
    local = local_path(path)
    return str(local.resolve()) if local is not None else path.rstrip("/")


def delta_table_id(path: str) -> str | None:
    """The table id (the ``metaData`` action's ``id``) of the Delta table at ``path``;
    None when no table is there. OSError or ValueError when it cannot be read.

    Every commit that changes the metadata repeats the id, and version 0 always has it;
    when old commits were cleaned up after a checkpoint, the earliest commit left that
    carries metadata is read, else the checkpoint (which holds the metadata), with
    pyarrow."""
    local = local_path(path)
    if local is None:
        raise OSError(f"only local tables are read here, not {path}")
    log = local / "_delta_log"
    if not log.is_dir():
        return None
    commits = sorted(log.glob("[0-9]" * 20 + ".json"))
    for commit in commits:
        found = _metadata_id(commit.read_text(encoding="utf-8").splitlines())
        if found is not None:
            return found
    for checkpoint in sorted(log.glob("*.checkpoint*.parquet"), reverse=True):
        return _checkpoint_metadata_id(checkpoint)
    if not commits:
        return None
    raise CheckpointError(f"no metaData action in {log}")


def _metadata_id(lines: list[str]) -> str | None:
    for line in lines:
        if '"metaData"' not in line:
            continue
        meta = json.loads(line).get("metaData") or {}
        if isinstance(meta.get("id"), str):
            return str(meta["id"])
    return None


def _checkpoint_metadata_id(checkpoint: Path) -> str:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # the core install has no parquet reader
        raise OSError(f"reading {checkpoint.name} needs pyarrow") from exc
    table = pq.read_table(checkpoint, columns=["metaData"])
    for row in table.column("metaData").to_pylist():
        if row and isinstance(row.get("id"), str):
            return str(row["id"])
    raise CheckpointError(f"no metaData action in {checkpoint}")
