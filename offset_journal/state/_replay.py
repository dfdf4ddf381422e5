"""The Spark side of a recovery (:mod:`offset_journal.restart.recovery`): an old batch
read again on a recovered checkpoint, the old checkpoint's batch metadata, and a new
checkpoint the recovery could not finish removed.

A replayed batch is the new checkpoint's ``offsets/N`` (written here, as
:func:`~.recover.offsets_file` makes it) with no ``commits/N``: Spark's
``MicroBatchExecution.populateStartOffsets`` takes such a batch as the one it had not
committed and runs it once more on exactly those offsets, with the file's batch
watermark and timestamp; ``Trigger.Once`` runs that batch and stops.

A file sink's log must hold every batch id from its first (Spark's reader of the
output lists ``_spark_metadata/0..N`` and fails on a gap), so each batch replayed into
``noop`` is added to the new query's file sink log as a batch that wrote no file, by
Spark's own ``FileStreamSinkLog`` (it compacts as the sink would).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..errors import OffsetJournalError, RestoreError
from ..formatting import first_line
from ._bootstrap import ran_once
from ._jvm import add_empty_sink_batch
from .recover import Replay, offsets_file

if TYPE_CHECKING:
    from ..checkpoint.model import CheckpointBatch
    from ..savepoint.model import Manifest
    from ._bootstrap import Bootstrap

log = logging.getLogger(__name__)

REPLAY_TIMEOUT_S = 600


def replay_batch(spark: Any, checkpoint: str, query: Callable[[], Any], replay: Replay,
                 reread_sink: bool, query_id: str, file_sink: str | None) -> Bootstrap:
    """``offsets/N`` written for one old batch and the new query run once on it: Spark
    re-executes it as the batch it had not committed (its sink ``noop`` unless
    ``reread_sink``; a ``file_sink``'s log then gains the batch, empty). The run, with
    its progress, for the journal."""
    from ..checkpoint.store import open_store
    from ._bootstrap import Bootstrap, built_writer, checkpoint_problem

    store, root = open_store(checkpoint, None)
    before = store.read(store.join(root, "offsets", str(replay.new_batch_id - 1)))
    store.write(store.join(root, "offsets", str(replay.new_batch_id)),
                offsets_file(before.decode("utf-8"), replay).encode("utf-8"))
    writer = built_writer(spark, query, checkpoint)
    problem = checkpoint_problem(spark, writer, checkpoint)
    if problem is not None:
        raise RestoreError(problem)
    if not reread_sink:
        writer = writer.format("noop")
    began = datetime.now(timezone.utc)
    started = writer.trigger(once=True).start()
    if str(started.id) != query_id:
        started.stop()
        raise RestoreError(f"the new query ran on another checkpoint than {checkpoint} "
                           "while replaying: its function must set checkpointLocation to it")
    ran_once(started, REPLAY_TIMEOUT_S, f"replaying old batch {replay.old_batch_id}")
    if store.kind(store.join(root, "commits", str(replay.new_batch_id))) != "file":
        raise RestoreError(f"replaying old batch {replay.old_batch_id} left no commit")
    if file_sink is not None and not reread_sink:
        add_empty_sink_batch(spark, file_sink, replay.new_batch_id)
    return Bootstrap(query_id, str(started.runId), started.name, began,
                     datetime.now(timezone.utc),
                     tuple(str(p.json) for p in started.recentProgress))


def old_batches(m: Manifest) -> dict[int, CheckpointBatch]:
    """Each old batch after the savepoint's, as the old checkpoint's ``offsets/N`` has it
    (watermark, timestamp, end offsets), while the checkpoint there is still the
    savepoint's query's (empty otherwise)."""
    from ..checkpoint import read_checkpoint
    from ._write import other_query

    if other_query(m) is not None:
        return {}
    try:
        old = read_checkpoint(m.checkpoint)
    except OffsetJournalError:
        return {}
    return {b.batch_id: b for b in old.batches if b.batch_id > m.batch_id and b.readable}


def discard_checkpoint(spark: Any, checkpoint: str) -> None:
    """The new checkpoint a recovery made and could not finish, removed (the error that
    stopped it is the one to show)."""
    from ._jvm import remove

    try:
        remove(spark, checkpoint)
    except Exception as exc:
        log.warning("the unfinished checkpoint %s was not removed: %s", checkpoint,
                    first_line(exc))


def writer_file_sink(spark: Any, query: Callable[[], Any], checkpoint: str) -> str | None:
    """The file sink the query ``query()`` builds would write (its path, else its
    format), read from the writer before it starts: known before a recovery writes or
    records anything. None for another sink, or one that cannot be read from the writer
    (Spark Connect: the bootstrap's progress names it)."""
    from ._bootstrap import built_writer
    from ._jvm import writer_file_format, writer_options

    writer = built_writer(spark, query, checkpoint)
    found = writer_file_format(spark, writer)
    if found is None:
        return None
    path = (writer_options(writer, ("path",)) or {}).get("path")
    return path or f"format {found}"
