"""The OLD query's sink (I/O: reads the sink's own commit log; writes nothing): the
witness of batches the journal may lack; the old checkpoint is read by
:mod:`.old_checkpoint`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...descriptions import described_sink, is_foreach_batch_sink
from ...errors import CheckpointError
from ...formatting import first_line
from ...journal import Batch, Journal
from .._inputs import OldCheckpoint, OldQueryFacts
from ..model import SINK_DELTA, SINK_FILE, SinkFacts, SinkFoundBy, SinkKind
from ..request import SINK_NONE, PlanRequest, sink_spec

if TYPE_CHECKING:
    from ...checkpoint.model import Checkpoint


def old_query_facts(journal: Journal, request: PlanRequest, anchor: Batch,
                    old_checkpoint: Checkpoint | None,
                    digested: OldCheckpoint | None) -> OldQueryFacts:
    """The old query's sink as its log says, its checkpoint (read first, by
    :mod:`.old_checkpoint`: ``old_checkpoint`` and ``digested``), the journaled batch the
    sink holds last when it is behind, and the run the batches taken from it are
    journaled as."""
    log = sink_facts(request, anchor, old_checkpoint)
    return OldQueryFacts(log, digested, sink_batch(journal, request, anchor, log),
                         sink_run_id(journal, request, old_checkpoint))


def sink_facts(request: PlanRequest, anchor: Batch,
               old_checkpoint: Checkpoint | None = None) -> SinkFacts | None:
    """The OLD query's sink as its own log says: the one given (``--sink``), else the
    one the journal's sink description of the last batch names (``FileSink[...]``,
    ``DeltaSink[...]``), read wherever it lives (an object store with the credentials
    of the standard places, as a given one is: it is the only witness of a batch in
    flight); None when neither (or ``--sink none``). A Delta sink's txn appId is the
    old checkpoint's query id (the anchor's, without one)."""
    found_by: SinkFoundBy = "given"
    kind: SinkKind | None
    if request.old_sink == SINK_NONE:
        return None
    if request.old_sink is None:
        described = described_sink(anchor.sink_description)
        if described is None:
            return None
        kind, path = SINK_DELTA if described[0] == SINK_DELTA else SINK_FILE, described[1]
        found_by = "journaled"
    else:
        kind, path = sink_spec(request.old_sink)
    foreach = is_foreach_batch_sink(anchor.sink_description)
    query_id = (old_checkpoint.query_id if old_checkpoint is not None else None) \
        or anchor.query_id
    app_id = request.txn_app_id or (None if foreach else query_id)
    return read_sink(kind, path, found_by, app_id)


def read_sink(kind: SinkKind | None, path: str, found_by: SinkFoundBy,
              app_id: str | None) -> SinkFacts:
    """What the sink at ``path`` holds: a Delta table's ``txn`` of ``app_id`` (``kind``
    delta, or None with a ``_delta_log`` there), else a file sink's log. A log that
    cannot be read is said in ``problem``."""
    from ...checkpoint.sinks import read_delta_txns, read_file_sink_log

    try:
        if kind != SINK_FILE:
            txns = read_delta_txns(path)
            if txns is not None:
                last = txns.txns.get(app_id) if app_id is not None else None
                return SinkFacts(SINK_DELTA, path, found_by, True, last, app_id,
                                 tuple(sorted(txns.txns)), bytes_read=txns.bytes_read)
            if kind == SINK_DELTA:
                return SinkFacts(SINK_DELTA, path, found_by, exists=False, app_id=app_id)
        log = read_file_sink_log(path)
    except (CheckpointError, OSError, ValueError) as exc:
        return SinkFacts(kind or SINK_FILE, path, found_by, problem=first_line(exc),
                         app_id=None if kind == SINK_FILE else app_id)
    if log is None:
        return SinkFacts(SINK_FILE, path, found_by, exists=False)
    return SinkFacts(SINK_FILE, path, found_by, True, log.last_batch,
                     bytes_read=log.bytes_read)


def sink_batch(journal: Journal, request: PlanRequest, anchor: Batch,
               facts: SinkFacts | None) -> Batch | None:
    """The journaled batch the sink holds last, when that is before the journal's last
    (its end offsets count what the sink lacks); None otherwise."""
    if facts is None or facts.last_batch is None or facts.last_batch >= anchor.batch_id:
        return None
    return journal.batch(request.query_name, anchor.run_id, facts.last_batch)


def sink_run_id(journal: Journal, request: PlanRequest,
                old_checkpoint: Checkpoint | None) -> str | None:
    """The run the batches taken from the sink are journaled as: the newest journaled
    run of the old checkpoint's query id, else (a run the listener never journaled) the
    id `checkpoint import` gives that checkpoint; None without an old checkpoint."""
    if old_checkpoint is None or old_checkpoint.query_id is None:
        return None
    runs = [r for r in journal.runs(request.query_name)
            if r.query_id == old_checkpoint.query_id]
    if runs:
        newest = max(runs, key=lambda r: (r.started_at is not None, r.started_at or 0,
                                          r.last_trigger_at is not None))
        return newest.run_id
    from ...checkpoint.importing import checkpoint_run_id

    return checkpoint_run_id(old_checkpoint.query_id, old_checkpoint.path)



__all__ = ["old_query_facts", "read_sink",
           "sink_batch", "sink_facts", "sink_run_id"]
