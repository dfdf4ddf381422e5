"""The Spark edge: take a savepoint of an old checkpoint (:func:`create_savepoint`), and
read one back as a new query's initial state (:func:`initial_state`,
:func:`state_frame`).

The state is read with Spark's State Data Source (``format("state-metadata")`` for the
operators, ``format("statestore")`` at the savepoint's batch for each part), which reads
HDFS-backed and RocksDB stores, RocksDB's checkpoint format v2 included, on any file
system Spark reads the checkpoint from. Two things Spark asks of the session: a session
that has not run a streaming query cannot read state until ``spark.streams`` is touched
(its StateStoreCoordinator), done here; and a ``transformWithState`` query runs only on
the RocksDB provider (:data:`ROCKSDB_PROVIDER`), which the NEW query's session sets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..checkpoint.commits import FORMAT_CONF as FORMAT_CONF
from ..checkpoint.commits import PROVIDER_CONF as PROVIDER_CONF
from ..checkpoint.commits import ROCKSDB_PROVIDER as ROCKSDB_PROVIDER
from ..errors import ConfigError, JournalError, OffsetJournalError, SavepointError
from ..formatting import first_line
from ..origin import host_name, os_user
from ..spark_version import require
from ._files import check_parts, remove_partial, require_empty, sums, write_manifest
from ._load import load_planned_savepoint
from ._verified import read_part
from .core import (
    ReadSpec,
    choose_batch,
    choose_parts,
    committed_after,
    export_columns,
    operators_of,
    positional,
    read_specs,
    state_gone,
    windowed_key,
)
from .model import Column, Manifest, Operator, Part, Savepoint, SourceEnd

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint
    from ..journal import Batch, Journal

log = logging.getLogger(__name__)



def _join(location: str, path: str) -> str:
    return f"{location.rstrip('/')}/{path}"


# --------------------------------------------------------------------------- create


@dataclass(frozen=True)
class Prepared:
    """What a savepoint is taken of, checked before Spark starts: the checkpoint, the
    batch both it and the journal have (with notes on which was ahead), and where."""

    query_name: str
    checkpoint: str
    target: str
    batch: Batch
    notes: tuple[str, ...]
    provider: str | None
    committed_after: tuple[int, int] | None = None


def prepare_savepoint(journal: Journal, query_name: str, checkpoint: str,
                      target: str) -> Prepared:
    """The checks a savepoint makes before reading any state (no Spark): the checkpoint
    is one, of ``query_name`` (a query id the journal holds under that name), ``target``
    is new or empty, and the batch to take is the newest both the checkpoint committed
    and the journal holds, having read the same offsets in both. SavepointError or
    CheckpointError (one line) otherwise."""
    from ..checkpoint import read_checkpoint

    for what, value in (("the checkpoint", checkpoint), ("the savepoint's directory", target)):
        if not str(value).strip():  # not the current directory: a mistake, never meant
            raise SavepointError(f"{what} is empty: give a directory or URL")
    checkpoint, target = _absolute(checkpoint), _absolute(target)
    ckpt = read_checkpoint(checkpoint)
    if ckpt.query_id is None:
        raise SavepointError(f"{checkpoint} has no metadata file: not the checkpoint of a "
                             "started query")
    journaled = journal.journaled_batch_ids(query_name, ckpt.query_id)
    if not journaled:
        raise SavepointError(_not_this_query(journal, query_name, checkpoint, ckpt.query_id))
    require_empty(target)
    committed = [b.batch_id for b in ckpt.committed_batches()]
    batch_id, notes = choose_batch(committed, journaled)
    batch = journal.batch(query_name, journaled[batch_id], batch_id)
    if batch is None:
        raise SavepointError(f"batch {batch_id} of query {query_name!r} cannot be read "
                             "from the journal")
    _check_same_offsets(ckpt, batch)
    chosen = ckpt.batch(batch_id)
    conf = (chosen.conf if chosen is not None else None) or {}
    return Prepared(query_name, str(checkpoint), str(target), batch, tuple(notes),
                    conf.get(PROVIDER_CONF), committed_after(committed, batch_id))


def create_savepoint(spark: Any, journal: Journal, query_name: str, checkpoint: str,
                     target: str, *, record: bool = True) -> Savepoint:
    """Export the state of every stateful operator of ``checkpoint`` (a checkpoint of
    ``query_name``) at the newest batch both its ``commits/`` and the journal have, to
    Parquet under ``target`` (a new or empty directory) with a manifest, and record it in
    the journal's ``savepoints`` (unless ``record=False``; a journal that refuses it
    leaves the savepoint usable by its directory, and ``warnings`` says why).

    SavepointError or CheckpointError (one line) when the checkpoint is missing, not a
    checkpoint, another query's, its state at that batch is gone, or ``target`` is not
    empty; nothing is recorded then, and nothing is left in ``target``."""
    prepared = prepare_savepoint(journal, query_name, checkpoint, target)
    return export_savepoint(spark, journal, prepared, record=record)


def export_savepoint(spark: Any, journal: Journal, prepared: Prepared, *,
                     record: bool = True) -> Savepoint:
    """The second half of :func:`create_savepoint`: read and write the state, the
    manifest, and record it. SavepointError (one line) first, on a Spark without the
    State Data Source."""
    require("savepoint-create", str(spark.version), SavepointError)
    batch, target = prepared.batch, prepared.target
    try:
        operators, parts = export_state(spark, prepared.checkpoint, target, batch.batch_id)
        manifest = Manifest(
            query_name=prepared.query_name, run_id=batch.run_id, query_id=batch.query_id,
            batch_id=batch.batch_id, checkpoint=prepared.checkpoint,
            end_offsets=tuple(SourceEnd(s.source_index, s.description, s.kind, s.end_offset)
                              for s in batch.sources),
            operators=tuple(operators), parts=tuple(parts),
            created_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            spark_version=str(spark.version), provider=prepared.provider,
            notes=prepared.notes, committed_after=prepared.committed_after)
        digest = write_manifest(target, manifest)
    except BaseException:
        remove_partial(target)
        raise
    for note in prepared.notes:
        log.info("savepoint of %s: %s", prepared.query_name, note)
    if not record:
        return Savepoint(manifest, target, None, sha256=digest)
    return _recorded(journal, manifest, target, digest)


def _absolute(path: str) -> str:
    """A local path made absolute (a savepoint is found again from anywhere); a URL as
    it is."""
    import os

    text = str(path)
    return text if "://" in text else os.path.abspath(text)


def _not_this_query(journal: Journal, query_name: str, checkpoint: str, query_id: str) -> str:
    others = [n for n in journal.query_names_of(query_id) if n != query_name]
    if others:
        return (f"checkpoint {checkpoint} (query id {query_id}) is the checkpoint of query "
                f"{others[0]!r}, not of {query_name!r}")
    return (f"checkpoint {checkpoint} (query id {query_id}) has no batch journaled for "
            f"query {query_name!r}: another query's checkpoint, or one this journal never saw")


def _check_same_offsets(ckpt: Checkpoint, batch: Batch) -> None:
    """The journal's batch must have read what the checkpoint's batch read (Kafka). A
    check that cannot be made is a WARNING, never silent: the savepoint then rests on
    the query id and batch id alone."""
    from ..checkpoint import kafka_end_offsets

    mine = ckpt.batch(batch.batch_id)
    if mine is None or not mine.readable:
        log.warning("savepoint of %s: the checkpoint's offsets/%d cannot be read: not "
                    "checked that batch %d read the same offsets there as in the journal",
                    batch.query_name, batch.batch_id, batch.batch_id)
        return
    ends = kafka_end_offsets(mine)
    if not ends:
        log.warning("savepoint of %s: the checkpoint's offsets/%d has no Kafka source: not "
                    "checked that batch %d read the same offsets there as in the journal",
                    batch.query_name, batch.batch_id, batch.batch_id)
    for index, offsets in ends.items():
        try:
            source = batch.source(index)
        except KeyError:
            continue
        journaled: dict[str, dict[int, int]] = {}
        for p in source.partitions:
            if p.end is not None:
                journaled.setdefault(p.topic, {})[p.partition] = p.end
        if journaled and journaled != offsets:
            raise SavepointError(f"batch {batch.batch_id} read other offsets in the checkpoint "
                                 f"than in the journal (source {index}): not the checkpoint "
                                 f"of run {batch.run_id}'s query")


def _recorded(journal: Journal, manifest: Manifest, location: str, digest: str) -> Savepoint:
    row = {"query_name": manifest.query_name, "run_id": manifest.run_id,
           "query_id": manifest.query_id, "batch_id": manifest.batch_id,
           "checkpoint": manifest.checkpoint, "location": location,
           "manifest_sha256": digest, "manifest": manifest.to_dict(),
           "host": host_name(), "os_user": os_user()}
    try:
        return Savepoint(manifest, location, journal.record_savepoint(row), sha256=digest)
    except JournalError as exc:
        reason = str(exc)
        return Savepoint(manifest, location, None, (
            f"this savepoint was not recorded in the journal ({reason}): use it by its "
            "directory with --unrecorded-savepoint, or record savepoints as a role with "
            "INSERT on offset_journal.savepoints (`offset-journal db grant --planner "
            "ROLE`)",), sha256=digest)


def export_state(spark: Any, checkpoint: str, target: str, batch_id: int,
                 ) -> tuple[list[Operator], list[Part]]:
    """Every stateful operator's state at ``batch_id``, written under ``target``."""
    from ..checkpoint.commits import read_commit
    from ..checkpoint.store import open_store

    store, root = open_store(checkpoint, None)
    if store.kind(store.join(root, "state")) != "dir":
        return [], []  # a stateless query: nothing to carry
    spark.streams.active  # noqa: B018 - a session needs its StateStoreCoordinator
    commit = read_commit(checkpoint, batch_id)
    version = commit.version if commit is not None else 1
    with session_conf(spark, FORMAT_CONF, "2" if version >= 2 else None):
        try:
            rows = [r.asDict() for r in
                    spark.read.format("state-metadata").load(str(checkpoint)).collect()]
        except Exception as exc:
            raise SavepointError(f"cannot read the state metadata of {checkpoint}: "
                                 f"{first_line(exc)}") from None
        operators: list[Operator] = []
        parts: list[Part] = []
        for op in operators_of(rows):
            gone = state_gone(op, batch_id)
            if gone:
                raise SavepointError(gone)
            for spec in read_specs(op):
                part = _export_part(spark, checkpoint, target, batch_id, op, spec, len(parts))
                if spec.kind == "store" and op.kind == "aggregation":
                    op = replace(op, windowed=windowed_key(part.schema))
                parts.append(part)
            operators.append(op)
    return operators, parts


@contextmanager
def session_conf(spark: Any, key: str, value: str | None) -> Iterator[None]:
    """``key`` set to ``value`` in the session while reading (None: left as it is), put
    back after: the caller's session is shared."""
    if value is None:
        yield
        return
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def _export_part(spark: Any, checkpoint: str, target: str, batch_id: int, op: Operator,
                 spec: ReadSpec, index: int) -> Part:
    path = f"operator={op.id}/part={index}"
    try:
        df = (spark.read.format("statestore").option("batchId", str(batch_id))
              .options(**spec.options).load(str(checkpoint)))
        schema = df.schema.jsonValue()
        columns, opaque, dropped = export_columns(spec.kind, op.kind, schema)
        df.select(*[_selected(c, schema) for c in columns]).write.parquet(
            _join(target, path))
        files = tuple(sums(target, path).values())
        part = Part(op.id, spec.name, spec.kind, path, dict(spec.options), schema,
                    tuple(columns), 0, 0, files, spec.ttl, tuple(opaque), tuple(dropped))
        written = read_part(spark, target, part, verify=False)  # what will be read back
        rows = written.count()
        keyed = [c.name for c in columns if c.key]
        unique = spec.kind in ("store", "value")
        keys = rows if unique or not keyed else written.select(*keyed).distinct().count()
    except OffsetJournalError:
        raise
    except Exception as exc:
        raise SavepointError(f"cannot export the state of {op.label()} ({spec.name}) at batch "
                             f"{batch_id}: {first_line(exc)}") from None
    return replace(part, rows=rows, keys=keys)


def _selected(column: Column, schema: Any) -> Any:
    """The State Data Source's field ``column.source`` (a top-level column, then field
    positions), as a column named ``column.name``."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    head, *positions = column.source
    expr = F.col(f"`{head}`")
    if positions:
        top = {f["name"]: f["type"] for f in schema["fields"]}[head]
        expr = expr.cast(StructType.fromJson(positional(top)))
        for i in positions:
            expr = expr.getField(f"_{i}")
        if isinstance(column.type, dict):  # a struct kept whole: its own names back
            expr = expr.cast(StructType.fromJson(column.type))
    return expr.alias(column.name)


# --------------------------------------------------------------------------- read back


def state_frame(spark: Any, savepoint: Savepoint | str | int, *, operator: int | None = None,
                state_var: str | list[str] | tuple[str, ...] | None = None,
                journal: Journal | None = None, verify: bool = True,
                expect_sha256: str | None = None) -> Any:
    """One operator's state in a savepoint as a DataFrame: the key's columns first, then
    the state's (see :func:`~offset_journal.savepoint.core.export_columns`). Several
    parts (``state_var``: names, or None for all) are one frame with a ``state_var``
    column naming each row's. ``savepoint``: a loaded one, its directory, or its id in
    ``journal``. Only the files the manifest lists are
    read. ``verify`` checks them against their checksums now (a part's directory holding
    anything else Spark would read is refused too) and again at every read of the frame,
    where Spark parses them (:mod:`._verified`): a file replaced after this returns fails
    the read; ``verify=False`` reads them unchecked. ``expect_sha256`` (a plan's
    ``savepoint_sha256``) refuses a manifest other than the one the plan checked the
    offsets with. SavepointError for an operator or state variable that does not exist,
    files altered, or another manifest."""
    from pyspark.sql import functions as F

    found = load_planned_savepoint(savepoint, journal, expect_sha256)
    op, parts = choose_parts(found.manifest, operator, state_var)
    if verify:
        check_parts(found.location, parts)
    if not parts:
        raise SavepointError(f"{op.label()} has no state in {found.label()}")
    keys = {p.key_columns for p in parts}
    if len(keys) > 1:
        raise SavepointError(f"the parts of {op.label()} have different keys: read them "
                             "one by one (state_var=)")
    frames = [read_part(spark, found.location, p, verify=verify) for p in parts]
    if len(frames) == 1:
        return frames[0]
    out = None
    for part, frame in zip(parts, frames, strict=True):
        frame = frame.withColumn("state_var", F.lit(part.name))
        out = frame if out is None else out.unionByName(frame, allowMissingColumns=True)
    return out


def initial_state(spark: Any, savepoint: Savepoint | str | int, *, operator: int | None = None,
                  state_var: str | list[str] | tuple[str, ...] | None = None,
                  journal: Journal | None = None, verify: bool = True,
                  expect_sha256: str | None = None) -> Any:
    """What ``transformWithState(..., initialState=...)`` takes: :func:`state_frame`
    grouped by the key's columns. Group by the same columns as the new query (when the
    new query groups otherwise, shape :func:`state_frame` and group it yourself). Spark
    calls ``handleInitialState(key, row, timerValues)`` once per row: a list or map
    state's rows come one element at a time. Give ``expect_sha256=plan.savepoint_sha256``:
    the directory is read again here, and only that digest ties the state read to the
    manifest whose offsets the plan checked (SavepointError for another). The files are
    checked as :func:`state_frame` checks them, at every read. SavepointError (one line)
    first on a Spark whose PySpark has no ``initialState``."""
    require("initial-state", str(spark.version), SavepointError)
    found = load_planned_savepoint(savepoint, journal, expect_sha256)
    _op, parts = choose_parts(found.manifest, operator, state_var)
    frame = state_frame(spark, found, operator=operator, state_var=state_var, verify=verify)
    return frame.groupBy(*parts[0].key_columns)


def savepoint_session(master: str | None = None,
                      jars: Callable[[], str | None] | None = None) -> tuple[Any, bool]:
    """The running SparkSession (False: not ours to stop), else a local one for
    ``savepoint create`` (True), with what ``jars()`` gives on ``spark.jars`` (asked
    only then: hadoop-aws for ``s3a://``); SavepointError first, without starting one,
    when the installed PySpark has no State Data Source."""
    try:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigError("savepoint create reads the state with Spark: install PySpark "
                          "(pip install 'offset-journal[demo]')") from None
    if SparkContext._active_spark_context is not None:  # a notebook's, or a test's
        return SparkSession.builder.getOrCreate(), False
    from pyspark import __version__ as installed

    require("savepoint-create", installed, SavepointError)  # before a JVM starts for nothing
    builder = (SparkSession.builder.appName("offset-journal-savepoint")
               .master(master or "local[*]").config("spark.ui.enabled", "false"))
    extra = jars() if jars is not None else None
    if extra:
        builder = builder.config("spark.jars", extra)
    return builder.getOrCreate(), True
