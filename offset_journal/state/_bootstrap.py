"""The new query's bootstrap run (step 2 of :mod:`._write`), what is checked of the new
query around it, and the run journaled afterwards.

**Before it starts**, the function must return the query's writer, not start the query
itself (:func:`built_writer`: one it started is stopped at once), and the query must
run on the new checkpoint it was given. A function
that names another location (the old job's ``checkpointLocation``, copied) would resume
that checkpoint: a real batch over the records that arrived since, written to the old
query's sink and committed there, in a session that may journal nothing. Spark takes
the location from the writer's ``checkpointLocation``, else from
``spark.sql.streaming.checkpointLocation`` and the query's name (a random directory
under it for a query without one), else a temporary directory; the writer's options
are read before ``start()`` (:func:`._jvm.writer_options`). Once started, the query's
id must be the one written into the new checkpoint's ``metadata``: a second guard,
which stops the query at once.

**After its batch**, the query's sink, as its progress names it (``FileSink[path]``).
A file sink skips every batch id at or below the last one its ``_spark_metadata`` logs
(:mod:`offset_journal.checkpoint.sinks`): another query's output directory, whose log
holds batch 1 or later, would swallow the new query's first real batches, their records
never written. Refused then. The bootstrap batch reads nothing, so a log that holds
batch 0 only costs nothing.

**Journaled** (:func:`journal_bootstrap`): a session with the journal's listener
journals the bootstrap run as any other (a job's); ``state restore``'s own session has
none, so the command journals it from the run's progress, once the restore is done
and its plan recorded and linked to the run: the journal then shows the run that
started from the plan, and nothing when the restore is refused.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..checkpoint.sinks import SINK_LOG_DIR, described_sink, read_file_sink_log
from ..errors import RestoreError
from ..formatting import first_line
from ..origin import host_name
from ..records import RunRecord, batch_from_progress
from ._jvm import bootstrap_offsets, join_types, qualified_path, writer_options

if TYPE_CHECKING:
    from ..journal import Journal

log = logging.getLogger(__name__)

BOOTSTRAP_BATCH = 0
"""The batch the new query's bootstrap run makes and the restored state replaces (state
version 1): the new query's first real batch is the next one."""
BOOTSTRAP_TIMEOUT_S = 600
CHECKPOINT_ROOT_CONF = "spark.sql.streaming.checkpointLocation"
"""Where Spark puts the checkpoint of a query that sets none: ``<root>/<query name>``."""
PROGRESS_CONF = "spark.sql.streaming.numRecentProgressUpdates"
"""How many progresses a query keeps; Spark keeps one fewer (at 1, none): the
bootstrap's progress names its sink and is what the command journals."""


@dataclass(frozen=True)
class Bootstrap:
    """The bootstrap run done: the new query's id and run id, when it started and ended,
    Spark's progress of each batch it ran (JSON: one batch, the bootstrap), and its
    stream-stream joins' types by operator id (the operator metadata does not say)."""

    query_id: str
    run_id: str
    name: str | None
    started_at: datetime
    ended_at: datetime
    progress: tuple[str, ...]
    joins: dict[int, str] = field(default_factory=dict)


def run_bootstrap(spark: Any, checkpoint: str, offsets: Sequence[str], watermark_ms: int,
                  query: Callable[[], Any],
                  on_start: Callable[[str], None] | None = None,
                  on_claim: Callable[[str], None] | None = None) -> Bootstrap:
    """The new checkpoint's ``offsets/0`` and the new query's one bootstrap batch (it
    reads nothing): Spark writes its operator metadata, state schemas, empty state and
    commits/0. The new checkpoint is on RocksDB (the state writer's store): the setting
    goes into offsets/0, which the query's runs take it from. ``on_claim(query_id)``
    once the new checkpoint's ``metadata`` is this restore's (from then on, what is in
    the checkpoint is its own to remove). RestoreError when the query runs elsewhere
    than ``checkpoint`` or its sink would skip its batches."""
    from ..savepoint.spark import session_conf

    # Spark reads the retention each time it adds a progress: kept until the batch ends.
    with session_conf(spark, PROGRESS_CONF, _kept_progress(spark)):
        return _bootstrapped(spark, checkpoint, offsets, watermark_ms, query, on_start,
                             on_claim)


def _bootstrapped(spark: Any, checkpoint: str, offsets: Sequence[str], watermark_ms: int,
                  query: Callable[[], Any], on_start: Callable[[str], None] | None,
                  on_claim: Callable[[str], None] | None) -> Bootstrap:
    from ..checkpoint.commits import PROVIDER_CONF, ROCKSDB_PROVIDER
    from ..savepoint.spark import session_conf

    with session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER):
        writer = built_writer(spark, query, checkpoint, on_claim).trigger(once=True)
        problem = checkpoint_problem(spark, writer, checkpoint)
        if problem is not None:
            raise RestoreError(problem)
        query_id = bootstrap_offsets(spark, checkpoint, offsets, watermark_ms)
        if on_claim is not None:
            on_claim(query_id)
        began = datetime.now(timezone.utc)
        started = writer.start()
    if str(started.id) != query_id:
        started.stop()
        raise RestoreError(
            f"the new query started on another checkpoint than {checkpoint} (its query id "
            f"is {started.id}, the new checkpoint's {query_id}), and was stopped: its "
            "function must set checkpointLocation to the checkpoint it is given")
    if on_start is not None:
        on_start(str(started.runId))
    ran_once(started, BOOTSTRAP_TIMEOUT_S, "the new query's bootstrap batch")
    progress = tuple(str(p.json) for p in started.recentProgress)
    if not progress:
        raise RestoreError("the new query's bootstrap batch left no progress: its sink "
                           "cannot be checked")
    problem = sink_problem(progress)
    if problem is not None:
        raise RestoreError(problem)
    return Bootstrap(query_id, str(started.runId), started.name, began,
                     datetime.now(timezone.utc), progress, join_types(spark, started))


def ran_once(started: Any, timeout_s: int, what: str) -> None:
    """Wait for a one-batch run of the new query to end (the bootstrap, a replayed
    batch); RestoreError, the query stopped, when it did not end in time or failed."""
    started.awaitTermination(timeout_s)
    if started.isActive:
        started.stop()
        raise RestoreError(f"{what} did not end in {timeout_s} s")
    failed = started.exception()
    if failed is not None:
        raise RestoreError(f"{what} failed: {first_line(failed)}")


def _kept_progress(spark: Any) -> str | None:
    """The progress retention the bootstrap runs with (None: the session's keeps its
    batch's progress)."""
    try:
        kept = int(spark.conf.get(PROGRESS_CONF, "100"))
    except ValueError:
        kept = 0
    return None if kept >= 2 else "2"


def built_writer(spark: Any, query: Callable[[], Any], checkpoint: str,
                 on_claim: Callable[[str], None] | None = None) -> Any:
    """``query()``, checked to be a writer not yet started. A function that starts the
    query itself has it running before any check, on whatever checkpoint it names (the
    old job's: a batch of the records since, written to its sink): every query that
    became active while it ran is stopped at once and the restore refused; one that ran
    on ``checkpoint`` made it, so it is claimed (removed with the refusal). A query
    another thread of the session started in those few milliseconds would be stopped
    too: the price of stopping this one before its next batch."""
    before = {str(q.id) for q in spark.streams.active}
    built = query()
    started = [q for q in spark.streams.active if str(q.id) not in before]
    for q in started:
        q.stop()
    if started:
        names = ", ".join(sorted({str(q.name or q.id) for q in started}))
        made = _query_id_at(checkpoint)
        if made is not None and on_claim is not None and made in {str(q.id) for q in started}:
            on_claim(made)
        raise RestoreError(
            f"the new query's function started the query itself ({names}), before the "
            "restore could check where it runs; it was stopped (it may have run a batch "
            "on the checkpoint it names): the function must return the DataStreamWriter, "
            "not started")
    if not (callable(getattr(built, "trigger", None)) and callable(getattr(built, "start", None))):
        raise RestoreError(f"the new query's function returned {type(built).__name__}, not a "
                           "DataStreamWriter")
    return built


def _query_id_at(checkpoint: str) -> str | None:
    """The query id of the checkpoint at ``checkpoint`` (None: none there, or unreadable)."""
    from ..checkpoint import read_checkpoint
    from ..errors import OffsetJournalError

    try:
        return read_checkpoint(checkpoint).query_id
    except OffsetJournalError:
        return None


def checkpoint_problem(spark: Any, writer: Any, checkpoint: str) -> str | None:
    """Why the query ``writer`` starts would not run on ``checkpoint`` (None: it would,
    or its options cannot be read: the started query's id is checked then)."""
    options = writer_options(writer, ("checkpointLocation", "queryName"))
    if options is None:
        return None
    given, name = options["checkpointLocation"], options["queryName"]
    root = spark.conf.get(CHECKPOINT_ROOT_CONF, None)
    shown = f"its checkpointLocation {given}"
    if given is None and root and name:
        given = f"{root.rstrip('/')}/{name}"
        shown = f"{given} ({CHECKPOINT_ROOT_CONF} and its queryName)"
    fix = "its function must set checkpointLocation to the checkpoint it is given"
    if given is None:
        runs_on = (f"a new directory under {root} (it has no queryName)" if root
                   else "a temporary checkpoint")
        return (f"the new query sets no checkpointLocation: it would run on {runs_on}, not "
                f"on the new checkpoint {checkpoint}: {fix}")
    if qualified_path(spark, given) != qualified_path(spark, checkpoint):
        return (f"the new query would run on {shown}, not on the new checkpoint "
                f"{checkpoint}: it would resume that checkpoint, a batch of the records "
                f"since written to its sink; {fix}")
    return None


def file_sink_of(progress: Sequence[str]) -> str | None:
    """The file sink's path a query's progress names (None: another sink)."""
    for text in progress:
        described = described_sink((json.loads(text).get("sink") or {}).get("description"))
        if described is not None and described[0] == "file":
            return described[1]
    return None


def sink_problem(progress: Sequence[str]) -> str | None:
    """Why the new query's sink, named by its progress, would lose its batches (None:
    it would not): a file sink whose log holds batch ids after the bootstrap's."""
    path = file_sink_of(progress)
    if path is None:
        return None
    held = read_file_sink_log(path)
    last = held.last_batch if held is not None else None
    if last is None or last <= BOOTSTRAP_BATCH:
        return None
    span = f"batch {last}" if last == BOOTSTRAP_BATCH + 1 else f"batches 1..{last}"
    return (f"the new query's file sink log {path.rstrip('/')}/{SINK_LOG_DIR} already holds "
            f"batches up to {last} (another query's output): the sink would skip the new "
            f"query's {span} as written, their records never in the output; give the new "
            "query an output directory of its own")


def journal_bootstrap(journal: Journal, done: Bootstrap, query_name: str) -> str | None:
    """Journal the bootstrap run and its batch from Spark's progress, as the listener
    would have (under the query's own name, else ``query_name``: the restored query's);
    a session with a listener attached journaled them already, and the journal keeps
    one copy. Why it could not (None: journaled)."""
    from ..errors import OffsetJournalError
    from ..redaction import redact

    name = done.name or query_name
    run = RunRecord(done.query_id, done.run_id, name, True, started_at=done.started_at,
                    terminated_at=done.ended_at, host=host_name(), pid=os.getpid())
    batches = [replace(batch_from_progress(p), query_name=name, named=True)
               for p in done.progress]
    try:
        _new, other = journal.record_import(run, batches)
    except OffsetJournalError as exc:  # JournalError's kinds among them
        return redact(first_line(exc))
    if other is not None:
        return f"run {other[0]} is journaled under query {other[1]!r}"
    log.info("journaled the bootstrap run %s of query %r", done.run_id, name)
    return None
