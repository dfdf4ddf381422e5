"""An exported part read back as exactly the bytes its manifest lists (the Spark edge).

Spark reads lazily: a frame is read at every action, long after
:func:`~offset_journal.savepoint.state_frame` or
:func:`~offset_journal.savepoint.initial_state` returned (a streaming query reads its
``initialState`` when it starts; a cached frame is read again once a block is
evicted). Checking the files and then handing Spark their paths leaves a window in
which a file replaced is read unchecked. So the check is made where the bytes are
parsed: Spark reads each file the manifest lists, whole, by its path (``binaryFile``;
nothing else in the directory is read), and the executor that parses it checks its
path, size and SHA-256 and parses those same bytes as Parquet (pyarrow). Every read
checks what it reads, and a file replaced after the frame was returned fails the action
that reads it, in one line naming the file.

Not chosen: a copy of the checked files in a private place (it would have to be both
private and reachable by every executor, and a cluster's executors do not share the
driver's temporary directory), or caching the checked rows (the window stays open until
the cache is filled, and an evicted block is read again from the files).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

from .model import Column, Part


def _join(location: str, *path: str) -> str:
    return "/".join([location.rstrip("/"), *path])


def export_schema(columns: Any) -> Any:
    """The Parquet schema of an exported part (every column nullable)."""
    from pyspark.sql.types import StructType

    return StructType.fromJson({"type": "struct", "fields": [
        {"name": c.name, "type": c.type, "nullable": True, "metadata": {}} for c in columns]})


def path_key(path: str) -> str:
    """A file's path as Spark's ``binaryFile`` names it and as a manifest's location
    spells it, compared: the path alone (no scheme or authority: the listing starts at
    the location, on its file system), normalized; a local path made absolute."""
    if "://" not in path and not path.startswith("file:"):
        path = os.path.abspath(path)
    return posixpath.normpath(urlparse(path).path or path)


def read_part(spark: Any, location: str, part: Part, *, verify: bool = True) -> Any:
    """One part's rows: exactly the files the manifest lists; with ``verify``, each
    checked against its size and SHA-256 by the read that parses it."""
    columns: tuple[Column, ...] = part.columns
    schema = export_schema(columns)
    paths = [_join(location, part.path, f.name) for f in part.files]
    if not paths:
        return spark.createDataFrame([], schema)
    if not verify:
        return spark.read.schema(schema).parquet(*paths)
    expected = {path_key(p): (f.size, f.sha256) for p, f in zip(paths, part.files,
                                                                  strict=True)}
    raw = (spark.read.format("binaryFile").option("ignoreMissingFiles", "false")
           .option("ignoreCorruptFiles", "false").load(paths).select("path", "content"))
    checked = _checked_parquet(expected, _arrow_schema(schema), location)
    return raw.mapInArrow(checked, schema)


def _arrow_schema(schema: Any) -> Any:
    """``schema`` as Arrow's, timestamps in UTC: PySpark 4.2's ``to_arrow_schema`` takes
    ``timezone=``, 4.0's and 4.1's ``timestamp_utc=``."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    convert: Any = to_arrow_schema  # typed as the installed PySpark's
    if "timezone" in inspect.signature(convert).parameters:
        return convert(schema, timezone="UTC")
    return convert(schema, timestamp_utc=True)


def _checked_parquet(expected: dict[str, tuple[int, str]], target: Any,
                     where: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function each executor runs over ``binaryFile`` rows (path, content): it
    refuses a file the manifest does not list or whose bytes are not the listed ones,
    and parses the checked bytes. Defined in here so that it travels by value (stdlib
    and pyarrow only, no import of this package on the executors)."""

    def read(batches: Iterator[Any]) -> Iterator[Any]:
        import hashlib
        import posixpath
        from urllib.parse import urlparse

        import pyarrow as pa
        import pyarrow.parquet as pq

        for batch in batches:
            for path, content in zip(batch.column(0).to_pylist(), batch.column(1),
                                     strict=True):
                data = content.as_buffer()
                want = expected.get(posixpath.normpath(urlparse(path).path))
                if want is None:
                    raise ValueError(f"savepoint at {where}: {path} is not a file its "
                                     "manifest lists: the savepoint was altered")
                if len(data) != want[0] or hashlib.sha256(data).hexdigest() != want[1]:
                    raise ValueError(f"savepoint at {where}: {path} does not match its "
                                     "checksum in the manifest: the savepoint was altered "
                                     "after it was checked")
                table = pq.read_table(pa.BufferReader(data), coerce_int96_timestamp_unit="us")
                yield from table.select(target.names).cast(target).to_batches()

    return read
