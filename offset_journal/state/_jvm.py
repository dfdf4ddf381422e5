"""The one edge to Spark's internal state classes: everything the restore and the
repartition ask of them goes through here, to offset-journal's Java helper
(``jvm/state-restore``: ``io.offsetjournal.state.StateRestore``), which alone calls
Spark's ``StateRewriter``, ``StatePartitionAllColumnFamiliesWriter``,
``OfflineStateRepartitionRunner``, operator metadata and state schema readers and offset
and commit logs. What crosses is plain JSON and DataFrames.

These are internals that change between Spark minors: :mod:`offset_journal.spark_version`
says which minors run them (:data:`PROVEN_SPARK`, any patch, vendors' builds included;
the repartition 4.2 alone), and any other is refused in one line, here before the JVM is
asked and in the helper again (each minor has its own jar, compiled against it). The day Spark
makes them public, this module and the helper change, and nothing else.

The helper's jar must be on the session's class path (``spark.jars``, which also hands
it to the executors, where its ``EncodeRows`` runs in tasks): the package ships it for
each minor the restore runs on (:mod:`offset_journal.local.helper_jar`) and
``offset-journal jars state-restore`` prints its path; the jobs in ``jobs/`` and the
test session add it. Before the first call, a runtime whose Spark internals are its own
is refused: Databricks Runtime by name, any other by the first internal class the
helper names that its JVM cannot load (the helper's ``Probe``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

from ..errors import RestoreError
from ..spark_version import DATABRICKS_CONF, Feature, needs_text, problem, runtime_problem

PROVEN_SPARK = needs_text("state-restore")
"""The Spark the state restore is proven on, in words (``Spark 4.2 or 4.3 (any 4.2.x,
4.3.x)``)."""
HELPER = "io.offsetjournal.state.StateRestore"
PROBE = "io.offsetjournal.state.Probe"
ALL_COLUMN_FAMILIES = "_readAllColumnFamilies"
"""The State Data Source's internal option (Spark 4.2's ``StateSourceOptions``) that
reads a RocksDB store as the state writer's rows, every column family as bytes."""


def version_problem(running: str, feature: Feature = "state-restore") -> str | None:
    """Why ``feature`` refuses Spark ``running`` (None: it runs there)."""
    return problem(feature, running)


def check_version(spark: Any, feature: Feature = "state-restore") -> None:
    """RestoreError (one line) unless the session's Spark runs ``feature``: its version,
    and a vendor runtime whose internals are its own (Databricks Runtime)."""
    running = str(spark.version)
    found = version_problem(running, feature) or runtime_problem(
        feature, running, databricks_runtime(spark))
    if found is not None:
        raise RestoreError(found)


def databricks_runtime(spark: Any) -> str | None:
    """The Databricks Runtime the session runs on (its cluster's setting, else the
    driver's environment), None elsewhere."""
    found = spark.conf.get(DATABRICKS_CONF, None)
    return str(found) if found else os.environ.get("DATABRICKS_RUNTIME_VERSION") or None


def helper(spark: Any, feature: Feature = "state-restore") -> Any:
    """The helper class in the session's JVM, the Spark version checked first, then
    that this JVM has every Spark class the helper names."""
    check_version(spark, feature)
    found, probe = _java_class(spark, HELPER), _java_class(spark, PROBE)
    if found is None or probe is None:
        raise RestoreError("offset-journal's state-restore helper is not on this session's "
                           "class path: add the jar `offset-journal jars state-restore` "
                           "prints to spark.jars (the jobs in jobs/ do)")
    missing = probe.missing()
    if missing is not None:
        raise RestoreError(missing_class_problem(str(missing), str(spark.version), feature))
    return found


def missing_class_problem(name: str, running: str, feature: Feature = "state-restore") -> str:
    """The one line for a Spark whose JVM lacks an internal class the helper calls."""
    return (f"this Spark {running} has no {name}, which offset-journal's state-restore "
            f"helper calls: its internals are not Apache Spark's ({needs_text(feature)}); "
            "nothing was written")


def _java_class(spark: Any, name: str) -> Any:
    """The JVM class ``name`` (a py4j JavaClass), None when the session cannot load it."""
    from py4j.java_gateway import JavaClass

    found = spark._jvm
    for part in name.split("."):
        found = getattr(found, part)
    return found if isinstance(found, JavaClass) else None


def _call(what: str, fn: Any, *args: Any) -> Any:
    """A helper call, its Java error as one RestoreError line."""
    from py4j.protocol import Py4JJavaError

    try:
        return fn(*args)
    except Py4JJavaError as exc:
        cause = exc.java_exception
        text = str(cause.getMessage() or cause.toString()).strip()
        line = text.splitlines()[0] if text else str(cause.getClass().getName())
        raise RestoreError(f"{what}: {line}") from None


def describe(spark: Any, checkpoint: str, batch_id: int) -> list[dict[str, Any]]:
    """Every stateful operator of ``checkpoint`` at ``batch_id``: id, name, properties,
    stores with their column families (key and value schemas, key encoders)."""
    text = _call(f"cannot read the state metadata of {checkpoint} at batch {batch_id}",
                 helper(spark).describe, spark._jsparkSession, str(checkpoint), batch_id)
    found: list[dict[str, Any]] = json.loads(str(text))
    return found


def join_types(spark: Any, query: Any) -> dict[int, str]:
    """Each stream-stream join of a started query's last batch, operator id to its join
    type as Spark writes it in SQL (``INNER``, ``LEFT OUTER``...): the operator metadata
    does not say it."""
    text = _call("cannot read the new query's plan", helper(spark).joinTypes, query._jsq)
    return {int(k): str(v) for k, v in json.loads(str(text)).items()}


def bootstrap_offsets(spark: Any, checkpoint: str, ends: Sequence[str],
                      watermark_ms: int) -> str:
    """A new checkpoint's ``metadata`` (a new query id, returned) and ``offsets/0``
    ending where each source starts (``ends``: each source's offsets as JSON), with the
    batch watermark ``watermark_ms``."""
    return str(_call(f"cannot start the new checkpoint {checkpoint}",
                     helper(spark).bootstrapOffsets, spark._jsparkSession, str(checkpoint),
                     list(ends), int(watermark_ms), _now_ms()))


class StateWrite:
    """One rewrite of a checkpoint's state (the helper's ``StateWrite``): register what
    each store is written with, run it, commit the batch."""

    def __init__(self, spark: Any, checkpoint: str, read_batch: int, write_batch: int,
                 partitions: int) -> None:
        self.checkpoint = checkpoint
        self.write_batch = write_batch
        self._jw = _call(f"cannot read the state layout of {checkpoint}", helper(spark).write,
                         spark._jsparkSession, str(checkpoint), read_batch, write_batch,
                         partitions)

    def typed(self, operator_id: int, store: str, family: str, frame: Any) -> None:
        """``frame`` (columns ``key`` and ``value``, the column family's types) as the
        state of one column family."""
        _call(f"operator {operator_id}, column family {store}/{family}", self._jw.typed,
              operator_id, store, family, frame._jdf)

    def raw(self, operator_id: int, store: str, frame: Any) -> None:
        """``frame`` (the writer's own rows) as the state of one store."""
        _call(f"operator {operator_id}, store {store}", self._jw.raw, operator_id, store,
              frame._jdf)

    def run(self) -> Any:
        """Write every store; returns the state checkpoint ids (format v2), or None."""
        text = _call(f"cannot write the state of {self.checkpoint}", self._jw.run)
        return json.loads(str(text))

    def commit(self, next_watermark_ms: int, *, replace: bool = False) -> None:
        """``commits/write_batch``, with the watermark the next batch runs with;
        ``replace``: in place of the one the batch's own run wrote."""
        if not _call(f"cannot commit batch {self.write_batch} of {self.checkpoint}",
                     self._jw.commit, int(next_watermark_ms), bool(replace)):
            raise RestoreError(f"{self.checkpoint} has commits/{self.write_batch} already: "
                               "another restore or query wrote it")


def read_all_column_families(spark: Any, checkpoint: str, batch_id: int, operator_id: int,
                             store: str) -> Any:
    """A RocksDB store of ``checkpoint`` at ``batch_id`` as the state writer's rows
    (``partition_key``, ``key_bytes``, ``value_bytes``, ``column_family_name``): Spark's
    internal read, the one its offline repartition makes."""
    check_version(spark)
    return (spark.read.format("statestore").option("batchId", str(batch_id))
            .option("operatorId", str(operator_id)).option("storeName", store)
            .option(ALL_COLUMN_FAMILIES, "true").load(str(checkpoint)))


def repartition(spark: Any, checkpoint: str, partitions: int) -> int:
    """Spark's offline repartition of a stopped query's RocksDB state, in place; returns
    the batch it wrote."""
    return int(_call(f"cannot repartition the state of {checkpoint}",
                     helper(spark, "state-repartition").repartition, spark._jsparkSession,
                     str(checkpoint), int(partitions)))


def remove(spark: Any, checkpoint: str) -> None:
    """Delete a new checkpoint a restore could not finish (on any file system)."""
    _call(f"cannot remove the unfinished checkpoint {checkpoint}", helper(spark).remove,
          spark._jsparkSession, str(checkpoint))


def writer_options(writer: Any, keys: Sequence[str]) -> dict[str, str | None] | None:
    """The options ``keys`` a classic ``DataStreamWriter`` was given, read before it
    starts: Spark 4.2's ``org.apache.spark.sql.classic.DataStreamWriter`` keeps them in
    its private ``extraOptions`` (a case-insensitive map), whose ``checkpointLocation``
    and ``queryName`` its ``startQuery`` hands to the query. None when they cannot be
    read (no JVM writer: Spark Connect keeps them in the client's plan)."""
    from py4j.protocol import Py4JError

    jwrite = getattr(writer, "_jwrite", None)
    if jwrite is None:
        return None
    try:
        field = jwrite.getClass().getDeclaredField("extraOptions")
        field.setAccessible(True)
        options = field.get(jwrite)
        found = {key: options.get(key) for key in keys}
        return {key: str(v.get()) if v.isDefined() else None for key, v in found.items()}
    except Py4JError:
        return None


FILE_PROVIDERS = ("datasources.FileFormat", "datasources.v2.FileDataSourceV2")
"""Spark's classes (under ``org.apache.spark.sql.execution``) a format written by the
file sink implements."""


def writer_file_format(spark: Any, writer: Any) -> str | None:
    """The format of a classic ``DataStreamWriter`` not yet started when Spark would
    write it through its file sink (a ``FileFormat``: parquet, json, csv, orc, text;
    also the default format when none is set), read before it starts from its private
    ``source``. None for any other sink, or when it cannot be read (Spark Connect)."""
    jwrite = getattr(writer, "_jwrite", None)
    if jwrite is None:
        return None
    jvm = spark._jvm
    try:
        field = jwrite.getClass().getDeclaredField("source")
        field.setAccessible(True)
        source = str(field.get(jwrite))
        if source in ("foreachBatch", "foreach", "noop", "console", "memory"):
            return None
        provider = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            source, spark._jsparkSession.sessionState().conf())
        loader = provider.getClassLoader()
        # parquet, json, ... name their V2 provider, whose streaming sink is the V1
        # FileFormat's: a file sink either way
        files = (jvm.java.lang.Class.forName(f"org.apache.spark.sql.execution.{name}", False,
                                             loader) for name in FILE_PROVIDERS)
        return source if any(f.isAssignableFrom(provider) for f in files) else None
    except Exception:  # Py4JError, or a format Spark cannot find: the start would say
        return None


SINK_LOG_PACKAGES = ("org.apache.spark.sql.execution.streaming.sinks",
                     "org.apache.spark.sql.execution.streaming")
"""Where Spark keeps its file sink log (``FileStreamSinkLog``, ``SinkFileStatus``):
``sinks`` from 4.1, the package above before."""


def add_empty_sink_batch(spark: Any, path: str, batch_id: int) -> None:
    """Batch ``batch_id`` added to the file sink log at ``path``, with no file, by
    Spark's own ``FileStreamSinkLog`` (it compacts as the sink would)."""
    from ..checkpoint.sinks import SINK_LOG_DIR

    for package in SINK_LOG_PACKAGES:
        sink_log_class = _java_class(spark, f"{package}.FileStreamSinkLog")
        status = _java_class(spark, f"{package}.SinkFileStatus")
        if sink_log_class is not None and status is not None:
            break
    else:
        raise RestoreError("this Spark has no FileStreamSinkLog where it is looked for: the "
                           "file sink's log cannot be kept whole")
    log_path = f"{path.rstrip('/')}/{SINK_LOG_DIR}"
    sink_log = sink_log_class(sink_log_class.VERSION(), spark._jsparkSession, log_path,
                              spark._jvm.scala.Option.empty())
    if not sink_log.add(batch_id, spark.sparkContext._gateway.new_array(status, 0)):
        raise RestoreError(f"the file sink log {log_path} holds batch {batch_id} already: "
                           "another query writes there")


def checkpoint_root(query: Any) -> str:
    """The checkpoint a running or stopped query ran on, as Spark resolved it (a URI:
    ``file:/...`` for a local one). Raises whatever the session raises where it cannot
    say (Spark Connect has no JVM query handle)."""
    return str(query._jsq.streamingQuery().resolvedCheckpointRoot())


def qualified_path(spark: Any, path: str) -> str:
    """``path`` as Spark resolves a checkpoint location: a Hadoop path qualified by its
    file system (``/tmp/ck`` and ``ck`` run from ``/tmp`` are both ``file:/tmp/ck``)."""
    jvm = spark._jvm

    def qualify() -> Any:
        hadoop = jvm.org.apache.hadoop.fs.Path(str(path))
        fs = hadoop.getFileSystem(spark._jsc.hadoopConfiguration())
        return hadoop.makeQualified(fs.getUri(), fs.getWorkingDirectory()).toString()
    return str(_call(f"cannot resolve the path {path}", qualify))


def _now_ms() -> int:
    return int(time.time() * 1000)
