"""Import a checkpoint's committed batches into the journal, for jobs that ran without
the listener: :func:`import_checkpoint` (the I/O edge) over the pure
:func:`records_from_checkpoint`; and :func:`journal_batches`, the batches a restart plan
took from the old query's sink and checkpoint (journal rows built from ``offsets/N``).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import RestartError
from ..formatting import from_epoch_ms
from ..offsets import PartitionOffset, looks_like_kafka, partition_offsets
from ..records import BatchRecord, RunRecord, SourceRecord
from ..rows import KIND_KAFKA, KIND_OTHER, Batch
from ..values import url_scheme
from ..wording import tp

if TYPE_CHECKING:
    from ..journal import Journal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImportResult:
    """What :func:`import_checkpoint` did."""

    path: str
    query_name: str
    query_id: str
    run_id: str
    imported: int
    already: int
    skipped: list[str]


_RUN_NAMESPACE = uuid.UUID("6f1d2a5e-2f3b-5c7a-9d8e-0f1e2d3c4b5a")


def _normalized_path(path: str) -> str:
    text = os.fspath(path)
    if url_scheme(text) is not None:
        return text.rstrip("/")
    return os.path.abspath(text)


def checkpoint_run_id(query_id: str, path: str) -> str:
    """A run id for an imported checkpoint: the same checkpoint always gets the same
    one, so importing it twice leaves one row per batch."""
    return str(uuid.uuid5(_RUN_NAMESPACE, f"checkpoint:{query_id}:{_normalized_path(path)}"))


def records_from_checkpoint(ckpt: Any, query_name: str,
                            ) -> tuple[RunRecord, list[BatchRecord], list[str]]:
    """Journal records for a checkpoint's committed batches (pure).

    A batch's start offsets are the previous batch's end offsets (for batch 0: the
    source's initial offsets, when the checkpoint kept them); trigger time and
    watermark come from the offsets file's batchTimestampMs and batchWatermarkMs.
    Returns (run, batches, skipped-batch explanations).
    """
    query_id = ckpt.query_id or str(uuid.uuid5(_RUN_NAMESPACE,
                                               f"query:{_normalized_path(ckpt.path)}"))
    run_id = checkpoint_run_id(query_id, ckpt.path)
    skipped: list[str] = []
    records: list[BatchRecord] = []
    for b in ckpt.batches:
        if not b.committed:
            skipped.append(f"batch {b.batch_id}: not committed (unfinished)")
            continue
        if not b.readable:
            skipped.append(f"batch {b.batch_id}: {b.problem}")
            continue
        starts = ckpt.start_offsets_of(b.batch_id)
        sources = []
        for i, end in enumerate(b.offsets):
            start = starts[i] if starts is not None and i < len(starts) else None
            kafka = looks_like_kafka(end)
            parts: tuple[PartitionOffset, ...] = ()
            problem = None
            if kafka:
                try:
                    parts = tuple(partition_offsets(start if looks_like_kafka(start) else None,
                                                    end))
                except ValueError as exc:
                    problem = str(exc)
            sources.append(SourceRecord(
                index=i, description=None, kind=KIND_KAFKA if kafka else KIND_OTHER,
                start_offset=start, end_offset=end, latest_offset=None, num_input_rows=None,
                partitions=parts, problem=problem,
            ))
        records.append(BatchRecord(
            query_id=query_id, run_id=run_id, query_name=query_name, named=True,
            batch_id=b.batch_id, trigger_at=from_epoch_ms(b.batch_timestamp_ms),
            batch_duration_ms=None, durations_ms={}, num_input_rows=None,
            input_rows_per_second=None,
            processed_rows_per_second=None, watermark=from_epoch_ms(b.batch_watermark_ms),
            event_time_min=None, event_time_max=None, event_time_avg=None,
            state_operators=[], sink_description=None, num_output_rows=None,
            sources=tuple(sources),
        ))
    first = records[0].trigger_at if records else None
    run = RunRecord(query_id=query_id, run_id=run_id, query_name=query_name, named=True,
                    started_at=first)
    return run, records, skipped


def _refuse_negative_offsets(path: str, records: Sequence[BatchRecord]) -> None:
    """A checkpoint's offsets log holds positions in Kafka's logs, never below 0 (-1
    and -2 mean latest/earliest in startingOffsets only): such a file is not Spark's."""
    for rec in records:
        for source in rec.sources:
            for p in source.partitions:
                bad = [v for v in (p.start, p.end) if v is not None and v < 0]
                if bad:
                    raise RestartError(
                        f"checkpoint {path}: batch {rec.batch_id} has offset {bad[0]} for "
                        f"{tp(p.topic, p.partition)}, below 0: not a Kafka position; "
                        "nothing imported")


def import_checkpoint(journal: Journal, path: str, query_name: str) -> ImportResult:
    """Journal a checkpoint's committed batches, for a job that never had the listener,
    into an open journal (the command opens it from its URL).

    Idempotent: the synthetic run id depends only on the checkpoint's query id and
    path. Batches the listener already journaled for the same query id are left alone.
    Everything goes in one transaction; a malformed checkpoint changes nothing.
    """
    from ..values import check_name
    from . import read_checkpoint

    try:
        check_name(query_name, "the query name")
    except ValueError as exc:
        raise RestartError(str(exc)) from None
    ckpt = read_checkpoint(path)
    if not ckpt.batches:
        raise RestartError(f"checkpoint {path} holds no batches to import")
    run, records, skipped = records_from_checkpoint(ckpt, query_name)
    if not records:
        raise RestartError(f"checkpoint {path} holds no committed batch to import")
    _refuse_negative_offsets(path, records)
    listener_batches: set[int] = set()
    for r in journal.runs(query_name):
        if r.query_id == run.query_id and r.run_id != run.run_id and r.batches:
            listener_batches.update(b.batch_id for b in journal.history(query_name,
                                                                       run_id=r.run_id))
    todo = [r for r in records if r.batch_id not in listener_batches]
    if len(todo) < len(records):
        skipped.append(f"{len(records) - len(todo)} batches already journaled by the "
                       "listener for this query id")
    new, other = journal.record_import(run, todo)
    if other is not None:
        _refuse_other_name(run, path, *other)
    log.info("imported %d batches of %s as run %s", new, path, run.run_id)
    return ImportResult(str(path), query_name, run.query_id, run.run_id, new,
                        len(todo) - new, skipped)


def _refuse_other_name(run: RunRecord, path: str, run_id: str, name: str) -> None:
    """Raise RestartError: the checkpoint (its import run, or its query id through the
    listener) is already journaled under another query name. Importing it again would
    move the run row to the new name and leave its batches under the old one; the
    journal checked this in the import's transaction and wrote nothing."""
    what = (f"as run {run_id}" if run_id == run.run_id
            else f"by the listener (query id {run.query_id}, run {run_id})")
    raise RestartError(
        f"checkpoint {path} is already journaled {what} under query name {name!r}: "
        f"import it with --query-name {name}, or not at all; nothing was changed"
    )



def batch_record(batch: Batch) -> BatchRecord:
    """A journal row built from a checkpoint (a :class:`~offset_journal.rows.Batch`) as
    the journal takes it: its offsets, trigger time and watermark; nothing Spark reports
    only in progress events (durations, rows, event times)."""
    return BatchRecord(
        query_id=batch.query_id, run_id=batch.run_id, query_name=batch.query_name,
        named=True, batch_id=batch.batch_id, trigger_at=batch.trigger_at,
        batch_duration_ms=None, durations_ms={}, num_input_rows=None,
        input_rows_per_second=None, processed_rows_per_second=None,
        watermark=batch.watermark, event_time_min=None, event_time_max=None,
        event_time_avg=None, state_operators=[], sink_description=batch.sink_description,
        num_output_rows=None,
        sources=tuple(SourceRecord(
            index=s.source_index, description=s.description,
            kind=KIND_KAFKA if s.partitions else KIND_OTHER, start_offset=s.start_offset,
            end_offset=s.end_offset, latest_offset=None, num_input_rows=None,
            partitions=s.partitions) for s in batch.sources))


def journal_batches(journal: Journal, batches: Sequence[Batch]) -> int:
    """Journal batches built from a checkpoint under their own run (one transaction, as
    :func:`import_checkpoint` does); returns how many were new (a batch already journaled the
    same is kept once). RestartError when their run is journaled under another name."""
    if not batches:
        return 0
    first = batches[0]
    run = RunRecord(query_id=first.query_id, run_id=first.run_id,
                    query_name=first.query_name, named=True)
    new, other = journal.record_import(run, [batch_record(b) for b in batches])
    if other is not None:
        raise RestartError(f"run {other[0]} is journaled under query name {other[1]!r}, not "
                           f"{first.query_name!r}: its batches were not journaled")
    log.info("journaled %d batches of run %s taken from its sink and checkpoint", new,
             first.run_id)
    return new


__all__ = ["ImportResult", "batch_record", "checkpoint_run_id", "import_checkpoint",
           "journal_batches", "records_from_checkpoint"]
