"""A batch on its way into the journal, as the arguments of one call to
``offset_journal.journal_batch`` (migration 0014): its source rows, each Kafka source's
offsets as arrays over a layout, the layouts the database may lack, and the problems
its continuity checks found. Plain data in and out (pure): _write.py sends it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..records import BatchRecord, SourceRecord
from ._arrays import Arrays, Layout, array_literal, encode, latest_json
from ._checks import partition_latests, stored_offsets
from .server import guarded

# The batch, its source rows, any Kafka layouts the database may not have yet, and its
# run row (in case the run's start event was lost) are written by one call to
# offset_journal.journal_batch (migration 0014): a function keeps its statements' plans
# in the server process, even behind a transaction pooler, where a statement of this
# size was parsed and planned anew for every batch. A batch already journaled inserts
# nothing and returns no id. So does a batch whose successor in the run is already
# journaled (replayed late from a spool), when ``check_next`` asks: that pair is checked
# first (``Writes._flag_successor``) and the batch written again. Every argument is
# cast, so that a value out of its column's range is refused as the table would refuse it;
# in parentheses, as psycopg writes a negative number bound in the client with its sign
# apart (-9223372036854775808::bigint would cast before negating, and overflow).
JOURNAL_BATCH = """SELECT new_batch_pk, next_journaled FROM offset_journal.journal_batch(
    p_run_id => (%(run_id)s)::text, p_query_id => (%(query_id)s)::text,
    p_query_name => (%(query_name)s)::text, p_named => (%(named)s)::boolean,
    p_batch_id => (%(batch_id)s)::bigint, p_trigger_at => (%(trigger_at)s)::timestamptz,
    p_batch_duration_ms => (%(batch_duration_ms)s)::bigint,
    p_durations_ms => (%(durations_ms)s)::jsonb, p_num_input_rows => (%(num_input_rows)s)::bigint,
    p_input_rows_per_second => (%(input_rows_per_second)s)::double precision,
    p_processed_rows_per_second => (%(processed_rows_per_second)s)::double precision,
    p_watermark => (%(watermark)s)::timestamptz,
    p_event_time_min => (%(event_time_min)s)::timestamptz,
    p_event_time_max => (%(event_time_max)s)::timestamptz,
    p_event_time_avg => (%(event_time_avg)s)::timestamptz,
    p_state_operators => (%(state_operators)s)::jsonb,
    p_sink_description => (%(sink_description)s)::text,
    p_num_output_rows => (%(num_output_rows)s)::bigint, p_raw_progress => (%(raw_progress)s)::text,
    p_sources => (%(sources)s)::jsonb, p_layouts => (%(layouts)s)::jsonb,
    p_check_next => (%(check_next)s)::boolean)"""


_CHECK_NEXT = "p_check_next => (%(check_next)s)::boolean"
JOURNAL_BATCH_GUARDED = JOURNAL_BATCH.replace(_CHECK_NEXT, "p_check_next => " + guarded(
    "(%(check_next)s)::boolean"))
"""``JOURNAL_BATCH`` that refuses to write on any server but the one expected
(server.guarded, in its last argument: evaluated before the function runs), so that
the writer's one-round-trip write needs no guard statement of its own."""

JSON_ARGUMENTS = frozenset({"durations_ms", "state_operators", "sources", "layouts"})
"""The arguments of ``JOURNAL_BATCH`` that go as jsonb."""


def source_row(source: SourceRecord) -> tuple[dict[str, Any], Arrays | None]:
    """A batch_sources row, as one element of the JSONB array ``JOURNAL_BATCH`` takes (a JSON
    null comes out of jsonb_to_recordset as SQL NULL), and a Kafka source's arrays (None:
    not a Kafka source with partitions, or one they cannot hold: its partitions are
    rows of kafka_partition_rows then)."""
    start, end = stored_offsets(source)
    row = {
        "source_index": source.index, "description": source.description, "kind": source.kind,
        "start_offset": start, "end_offset": end, "latest_offset": source.latest_offset,
        "num_input_rows": source.num_input_rows, "problem": source.problem,
        "metrics": source.metrics, "kafka_layout": None, "end_offsets": None,
        "read_spans": None, "latest_lags": None, "read_spans_wide": None,
        "latest_lags_wide": None,
    }
    if source.kind != "kafka" or not source.partitions:
        return row, None
    latests = partition_latests(source)
    arrays = encode(source.partitions, latests)
    if arrays is None:
        return row, None
    # As array literals: Postgres parses one in C, where a JSON array would go through
    # one conversion per element (a third of a 10,000-partition batch's write).
    row["end_offsets"] = array_literal(arrays.end_offsets)
    row["read_spans" if arrays.spans_narrow else "read_spans_wide"] = array_literal(
        arrays.read_spans)
    row["latest_lags" if arrays.lags_narrow else "latest_lags_wide"] = array_literal(
        arrays.latest_lags)
    if source.latest_offset is None or source.problem:
        return row, arrays
    # The source_offsets view rebuilds it from the partition values: then not kept. A
    # latest equal to the end (the query keeps up) is rebuilt when the end is.
    if (end is None and source.latest_offset == source.end_offset) or (
            source.latest_offset == latest_json(source.partitions, latests)):
        row["latest_offset"] = None
    return row, arrays


def continued_sources(rec: BatchRecord) -> list[SourceRecord]:
    """The Kafka sources whose starts continue the run's previous batch (none when no
    partition has a start: a first batch)."""
    kafka = [s for s in rec.sources if s.kind == "kafka" and s.partitions]
    if all(p.start is None for s in kafka for p in s.partitions):
        return []
    return kafka


def flag_problems(rows: list[dict[str, Any]], problems: list[tuple[int, str | None]],
          ) -> list[tuple[int, str]]:
    """Add each (source index, problem) to that source row's problem; the ones added."""
    by_index = {row["source_index"]: row for row in rows}
    flagged = []
    for index, problem in problems:
        if problem:
            row = by_index[index]
            row["problem"] = "; ".join(x for x in (row["problem"], problem) if x)
            flagged.append((index, problem))
    return flagged


@dataclasses.dataclass
class BatchWrite:
    """A batch on its way in: its source rows (and each Kafka source's arrays), the
    layouts the database may lack, and the problems its checks found."""

    rec: BatchRecord
    encoded: list[tuple[dict[str, Any], Arrays | None]]
    layouts: dict[bytes, dict[str, Any]]
    flagged: list[tuple[int, str]] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, rec: BatchRecord, key_of: Callable[[Layout], bytes],
           stored: Callable[[bytes], bool]) -> BatchWrite:
        """Name each Kafka source row's layout; the layouts not known to be stored are
        sent (until a transaction that sent them commits: JournalBase remembers)."""
        encoded = [source_row(s) for s in rec.sources]
        layouts: dict[bytes, dict[str, Any]] = {}
        for row, arrays in encoded:
            if arrays is None:
                continue
            key = key_of(arrays.layout)
            row["kafka_layout"] = "\\x" + key.hex()
            if key not in layouts and not stored(key):
                layouts[key] = {"layout_id": row["kafka_layout"],
                                "topics": list(arrays.layout.topics),
                                "partitions": list(arrays.layout.partitions)}
        return cls(rec, encoded, layouts)

    @property
    def sources(self) -> list[dict[str, Any]]:
        return [row for row, _ in self.encoded]

    @property
    def rows_needed(self) -> bool:
        """Some source's partitions go in as rows (the arrays cannot hold them)."""
        return any(arrays is None and s.kind == "kafka" and s.partitions
                   for s, (_, arrays) in zip(self.rec.sources, self.encoded, strict=True))

    def arguments(self, *, check_next: bool) -> dict[str, Any]:
        """``JOURNAL_BATCH``'s arguments, as plain values (those named in
        :data:`JSON_ARGUMENTS` go as jsonb)."""
        rec = self.rec
        return {
            "run_id": rec.run_id, "query_id": rec.query_id, "query_name": rec.query_name,
            "named": rec.named, "batch_id": rec.batch_id, "trigger_at": rec.trigger_at,
            "batch_duration_ms": rec.batch_duration_ms, "durations_ms": rec.durations_ms,
            "num_input_rows": rec.num_input_rows,
            "input_rows_per_second": rec.input_rows_per_second,
            "processed_rows_per_second": rec.processed_rows_per_second,
            "watermark": rec.watermark, "event_time_min": rec.event_time_min,
            "event_time_max": rec.event_time_max, "event_time_avg": rec.event_time_avg,
            "state_operators": rec.state_operators,
            "sink_description": rec.sink_description,
            "num_output_rows": rec.num_output_rows, "raw_progress": rec.raw_progress,
            "sources": self.sources,
            "layouts": list(self.layouts.values()) if self.layouts else None,
            "check_next": check_next,
        }
