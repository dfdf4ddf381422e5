"""Journal records: what the listener hands to the writer, as plain data.

Listener callbacks turn Spark events into small JSON-able *events* (dicts) as fast as
they can; the background writer turns those into the records below, which the journal
stores. Keeping events as plain dicts lets them go through a queue, a spool file on
disk and a pickle (Spark Connect) unchanged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .descriptions import is_kafka_description
from .errors import ProgressFormatError
from .offsets import (
    KAFKA_SHAPE_ERROR,
    KafkaOffsets,
    OffsetFormatError,
    PartitionOffset,
    as_kafka_offsets,
    pair_partitions,
    parse_offset_json,
    plain_kafka,
    plain_kafka_rows,
)
from .redaction import redact

_orjson: Any = None
try:  # the standard library's json does the same, slower (and decides what orjson refuses)
    import orjson

    _orjson = orjson
except ImportError:  # pragma: no cover - a dependency; parsing works without it
    pass

STARTED = "started"
PROGRESS = "progress"
TERMINATED = "terminated"
#: The Kafka cluster a run reads, looked up by the listener off the stream's path.
CLUSTER = "cluster"



def parse_timestamp(value: Any) -> datetime | None:
    """Parse Spark's ISO-8601 timestamps (``2024-01-01T00:00:00.000Z``) to aware UTC."""
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    text = str(value).strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


ASYNC_EXECUTION = "AsyncProgressTrackingMicroBatchExecution"
"""Spark's StreamExecution with asyncProgressTrackingEnabled: offset and commit logs
written asynchronously, at most once per asyncProgressTrackingCheckpointIntervalMs."""
REAL_TIME_TRIGGER = "RealTimeTrigger"
"""Real-time mode (``trigger(realTime="5 seconds")``): journaled as the execution's
class and this trigger, ``MicroBatchExecution:RealTimeTrigger`` (progress events do not
say). A batch stopped mid-way leaves no progress event, offsets entry or commit, though
its rows may already be in the sink."""


def is_real_time(execution: str | None) -> bool:
    """Whether a run's journaled execution (``query_runs.execution``) is real-time mode."""
    return bool(execution) and str(execution).endswith(":" + REAL_TIME_TRIGGER)


@dataclass(frozen=True)
class RunRecord:
    """A query run: one start of a query (one checkpoint may have many runs)."""

    query_id: str
    run_id: str
    query_name: str
    named: bool
    started_at: datetime | None = None
    terminated_at: datetime | None = None
    exception: str | None = None
    error_class: str | None = None
    host: str | None = None
    pid: int | None = None
    execution: str | None = None
    """Spark's StreamExecution class name (None: unknown)."""
    async_interval_ms: int | None = None
    """asyncProgressTrackingCheckpointIntervalMs, for an async progress tracking run."""
    kafka_cluster_id: str | None = None
    """The id of the Kafka cluster the run read (a ``cluster`` event; None: unknown)."""


@dataclass(frozen=True)
class SourceRecord:
    index: int
    description: str | None
    kind: str  # "kafka" or "other"
    start_offset: Any
    end_offset: Any
    latest_offset: Any
    num_input_rows: int | None
    partitions: tuple[PartitionOffset, ...] = ()
    problem: str | None = None
    metrics: dict[str, Any] | None = None  # e.g. the connector's offsets behind latest
    # start_offset and end_offset are exactly what offsets.offsets_json rebuilds from the
    # partitions (known while parsing, at no cost): the journal keeps neither then.
    offsets_rebuildable: bool = False


@dataclass(frozen=True)
class BatchRecord:
    query_id: str
    run_id: str
    query_name: str
    named: bool
    batch_id: int
    trigger_at: datetime | None
    batch_duration_ms: int | None
    durations_ms: dict[str, Any]
    num_input_rows: int | None
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    watermark: datetime | None
    event_time_min: datetime | None
    event_time_max: datetime | None
    event_time_avg: datetime | None
    state_operators: list[Any]
    sink_description: str | None
    num_output_rows: int | None
    sources: tuple[SourceRecord, ...] = field(default_factory=tuple)
    raw_progress: str | None = None  # kept verbatim when anything in it was malformed

    @property
    def problems(self) -> list[str]:
        return [f"source {s.index}: {s.problem}" for s in self.sources if s.problem]


def journal_name(query_name: Any, query_id: str) -> tuple[str, bool]:
    """The journal key: the query name, else the query id (flagged as unnamed)."""
    if isinstance(query_name, str) and query_name.strip():
        return query_name, True
    return query_id, False


_BIGINT = 2**63

MAX_KEY_BYTES = 1000
"""The longest query name, query id or run id the journal takes (UTF-8 bytes). Postgres
indexes them, and an index row cannot exceed about 2,700 bytes: a longer key would be
refused by the database (SQLSTATE 54000); it is refused here, with the reason."""


def check_keys(query_id: str, run_id: str, name: str) -> None:
    """Refuse keys too long for the journal's indexes (ProgressFormatError)."""
    for what, value in (("query name", name), ("query id", query_id), ("run id", run_id)):
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_KEY_BYTES:
            raise ProgressFormatError(
                f"{what} is {size} bytes long; the journal takes at most {MAX_KEY_BYTES}")


def _int(value: Any) -> int | None:
    """An integer the journal's bigint columns take, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        value = int(value) if math.isfinite(value) else None
    elif isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return None
    if isinstance(value, int) and -_BIGINT <= value < _BIGINT:
        return value
    return None


def _unstorable(value: Any) -> str | None:
    """Why Postgres JSONB cannot take ``value`` (NaN, Infinity, NUL), else None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "holds NaN or Infinity, which Postgres JSON cannot store"
        if isinstance(item, str) and "\x00" in item:
            return "holds a NUL character, which Postgres cannot store"
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _backwards(parts: tuple[PartitionOffset, ...]) -> str | None:
    """Partitions whose end offset is below their start: the topic was recreated or its
    offsets reset, or the source misbehaves. Journaled, but flagged."""
    back = [p for p in parts if p.start is not None and p.end is not None and p.end < p.start]
    if not back:
        return None
    shown = ", ".join(f"{p.topic}-{p.partition} {p.start}->{p.end}" for p in back[:8])
    more = f" and {len(back) - 8} more" if len(back) > 8 else ""
    return f"offsets go backwards: {shown}{more}"


def _float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        f = float(value)
        return f if f == f and f not in (float("inf"), float("-inf")) else None
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


_OFFSET_KEYS = ("startOffset", "endOffset", "latestOffset")


def _str_or_none(value: Any) -> str | None:
    return str(value) if value is not None else None


def _plain_offset(value: Any, fast_json: bool) -> Any:
    """parse_offset_json, by orjson for offsets given as JSON text when ``fast_json``;
    _NOT_PLAIN when either refuses it."""
    try:
        if fast_json and isinstance(value, str) and value.strip():
            return _orjson.loads(value.strip())
        return parse_offset_json(value)
    except (OffsetFormatError, ValueError):  # orjson.JSONDecodeError is a ValueError
        return _NOT_PLAIN


_NOT_PLAIN = object()


def _plain_kafka_source(index: int, raw: dict[str, Any], description: str | None,
                        fast_json: bool = False) -> SourceRecord | None:
    """The usual Kafka source in one pass (whole-topic checks in C, see
    offsets.plain_kafka_rows): the same record as the general path in :func:`_source`,
    or None when anything is unusual and that path decides. Its offsets must be all
    integers, so orjson's floats for integers beyond 64 bits never pass."""
    start, end, latest = (_plain_offset(raw.get(key), fast_json) for key in _OFFSET_KEYS)
    if start is _NOT_PLAIN or end is _NOT_PLAIN or latest is _NOT_PLAIN:
        return None
    plain = plain_kafka_rows(start, end)
    # A latest equal to the (checked) end, as when the query keeps up, needs no check.
    if plain is None or not (latest is None or latest == end or plain_kafka(latest)):
        return None
    # In Kafka's shape only a topic name can hold what Postgres cannot store.
    if "\x00" in "".join(end) or (latest is not None and "\x00" in "".join(latest)):
        return None
    metrics, unstorable = _metrics(raw)
    if unstorable:
        return None
    return SourceRecord(index=index, description=description, kind="kafka",
                        start_offset=start, end_offset=end, latest_offset=latest,
                        num_input_rows=_int(raw.get("numInputRows")),
                        partitions=tuple(plain.rows), metrics=metrics,
                        offsets_rebuildable=plain.rebuildable)


def _metrics(raw: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """A source's metrics (the connector's offsets behind latest), or None; and why they
    cannot be stored, when they cannot (they stay in raw_progress then)."""
    metrics = raw.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        return None, None
    unstorable = _unstorable(metrics)
    return (None, unstorable) if unstorable else (metrics, None)


def _source(index: int, raw: Any) -> SourceRecord:
    if not isinstance(raw, dict):
        return SourceRecord(index, None, "other", None, None, None, None, (),
                            "source is not an object")
    description = raw.get("description")
    description = str(description) if description is not None else None
    plain = _plain_kafka_source(index, raw, description)
    if plain is not None:
        return plain
    problems: list[str] = []
    offsets: dict[str, Any] = {}
    kafka_shaped: dict[str, KafkaOffsets | None] = {}
    for key in ("startOffset", "endOffset", "latestOffset"):
        try:
            offsets[key] = parse_offset_json(raw.get(key))
        except OffsetFormatError as exc:
            offsets[key] = raw.get(key)
            problems.append(f"{key}: {exc}")
        # Kafka's shape is checked and converted once; in that shape only a topic name
        # can hold what Postgres cannot store, which saves walking 10,000 offsets again.
        kafka_shaped[key] = as_kafka_offsets(offsets[key])
        unstorable = (_unstorable(list(kafka_shaped[key] or ())) if kafka_shaped[key]
                      else _unstorable(offsets[key]))
        if unstorable:  # kept in raw_progress only
            offsets[key] = kafka_shaped[key] = None
            problems.append(f"{key}: {unstorable}")
    start, end = offsets["startOffset"], offsets["endOffset"]
    start_k, end_k = kafka_shaped["startOffset"], kafka_shaped["endOffset"]
    kafka = is_kafka_description(description) or (
        end_k is not None and (start is None or start_k is not None)
    )
    parts: tuple[PartitionOffset, ...] = ()
    if kafka and not problems:
        if (start is None or start_k is not None) and (end is None or end_k is not None):
            parts = tuple(pair_partitions(start_k or {}, end_k or {}))
        else:
            problems.append(KAFKA_SHAPE_ERROR)
        backwards = _backwards(parts)
        if backwards:
            problems.append(backwards)
    metrics, unstorable = _metrics(raw)
    if unstorable:  # kept in raw_progress only
        problems.append(f"metrics: {unstorable}")
    return SourceRecord(
        index=index,
        description=description,
        kind="kafka" if kafka else "other",
        start_offset=start,
        end_offset=end,
        latest_offset=offsets["latestOffset"],
        num_input_rows=_int(raw.get("numInputRows")),
        partitions=parts,
        problem="; ".join(problems) or None,
        metrics=metrics,
    )


def batch_from_progress(payload: str | dict[str, Any]) -> BatchRecord:
    """Turn a StreamingQueryProgress JSON (``event.progress.json``) into a BatchRecord.

    Raises ProgressFormatError only when the payload cannot be journaled at all (not
    JSON, or without query id, run id or batch id). Anything else malformed is kept
    in the record, with the raw payload, rather than dropped.
    """
    if not isinstance(payload, str):
        rec = _batch(payload, None, False)
        assert rec is not None
        return rec
    fast = _fast_loads(payload)
    if fast is not None:
        try:
            rec = _batch(fast, payload, True)
        except ProgressFormatError:  # said again below, from the exact parse
            rec = None
        if rec is not None:
            return rec
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise ProgressFormatError(f"progress is not JSON: {exc.msg}") from exc
    except RecursionError:
        raise ProgressFormatError("progress JSON is nested too deeply") from None
    rec = _batch(data, payload, False)
    assert rec is not None
    return rec


def _fast_loads(text: str) -> Any:
    """orjson's parse of ``text`` (about 3x the standard library's speed on progress
    JSON), or None (orjson not installed, or it refuses the text: NaN, lone surrogates,
    integers beyond 64 bits, which the standard library then decides)."""
    if _orjson is None:
        return None
    try:
        return _orjson.loads(text)
    except _orjson.JSONDecodeError:
        return None


def _big_float(value: Any) -> bool:
    """A float of 2^63 or more in magnitude: orjson reads integers beyond 64 bits as
    floats where the standard library keeps them exact."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)  # parsed JSON: exact types
        if kind is float and not abs(item) < _BIGINT:
            return True
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    return False


def _sources(data: dict[str, Any], listed: list[Any], fast_json: bool,
             ) -> tuple[SourceRecord, ...] | None:
    """The batch's source records; None when orjson parsed it and anything is unusual
    (then the standard library parses it again)."""
    if not fast_json:
        return tuple(_source(i, s) for i, s in enumerate(listed))
    plain = [_plain_kafka_source(i, s, _str_or_none(s.get("description")), True)
             if isinstance(s, dict) else None for i, s in enumerate(listed)]
    others = {k: v for k, v in data.items() if k != "sources"}
    rest = [{k: v for k, v in s.items() if k not in _OFFSET_KEYS} for s in listed
            if isinstance(s, dict)]
    if any(p is None for p in plain) or _big_float([others, rest]):
        return None
    return tuple(p for p in plain if p is not None)


def _batch_duration(data: dict[str, Any], durations: dict[str, Any]) -> int | None:
    """The batch's duration: ``batchDuration`` (Spark 4.0 and later put it in the
    progress JSON); Spark 3.5 leaves it out, and its ``durationMs.triggerExecution``
    (the same span, less the few milliseconds of reporting progress) stands in."""
    if "batchDuration" in data:
        return _int(data.get("batchDuration"))
    return _int(durations.get("triggerExecution"))


def _batch(data: Any, text: str | None, fast_json: bool) -> BatchRecord | None:
    """The record of parsed progress. With ``fast_json`` (parsed by orjson) only the
    usual batch is built, and None means: parse it again with the standard library,
    which decides everything unusual exactly as before."""
    if not isinstance(data, dict):
        raise ProgressFormatError("progress is not a JSON object")
    query_id, run_id = data.get("id"), data.get("runId")
    batch_id = _int(data.get("batchId"))
    if not isinstance(query_id, str) or not query_id or not isinstance(run_id, str) or not run_id:
        raise ProgressFormatError("progress has no query id or run id")
    if batch_id is None:
        raise ProgressFormatError("progress has no batch id")
    name, named = journal_name(data.get("name"), query_id)
    check_keys(query_id, run_id, name)
    raw_sources = data.get("sources")
    listed = raw_sources if isinstance(raw_sources, list) else []
    sources = _sources(data, listed, fast_json)
    if sources is None:
        return None
    event_time = _dict(data.get("eventTime"))
    durations = _dict(data.get("durationMs"))
    sink = _dict(data.get("sink"))
    state_ops = data.get("stateOperators")
    state_ops = state_ops if isinstance(state_ops, list) else []
    # Metrics Postgres cannot store are left out (the raw progress keeps them), rather
    # than have the database refuse the whole batch.
    unstorable = bool(_unstorable(durations) or _unstorable(state_ops))
    if unstorable:
        durations = durations if not _unstorable(durations) else {}
        state_ops = state_ops if not _unstorable(state_ops) else []
    malformed = (not isinstance(raw_sources, list) or unstorable
                 or any(s.problem for s in sources))
    if malformed and text is None:
        text = json.dumps(data, default=str)
    return BatchRecord(
        query_id=query_id,
        run_id=run_id,
        query_name=name,
        named=named,
        batch_id=batch_id,
        trigger_at=parse_timestamp(data.get("timestamp")),
        batch_duration_ms=_batch_duration(data, durations),
        durations_ms=durations,
        num_input_rows=_int(data.get("numInputRows")),
        input_rows_per_second=_float(data.get("inputRowsPerSecond")),
        processed_rows_per_second=_float(data.get("processedRowsPerSecond")),
        watermark=parse_timestamp(event_time.get("watermark")),
        event_time_min=parse_timestamp(event_time.get("min")),
        event_time_max=parse_timestamp(event_time.get("max")),
        event_time_avg=parse_timestamp(event_time.get("avg")),
        state_operators=state_ops,
        sink_description=str(sink["description"]) if sink.get("description") is not None else None,
        num_output_rows=_int(sink.get("numOutputRows")),
        sources=sources,
        raw_progress=text if malformed else None,
    )


def run_from_event(event: dict[str, Any]) -> RunRecord:
    """A RunRecord from a started/terminated event dict made by the listener."""
    query_id = event.get("query_id")
    run_id = event.get("run_id")
    if not isinstance(query_id, str) or not isinstance(run_id, str):
        raise ProgressFormatError("query event has no query id or run id")
    name, named = journal_name(event.get("name"), query_id)
    check_keys(query_id, run_id, name)
    return RunRecord(
        query_id=query_id,
        run_id=run_id,
        query_name=name,
        named=named,
        started_at=parse_timestamp(event.get("timestamp")) if event["type"] == STARTED else None,
        terminated_at=parse_timestamp(event.get("timestamp"))
        if event["type"] == TERMINATED
        else None,
        # The listener redacts it; an event spooled by an older release may not be.
        exception=None if event.get("exception") is None else redact(event["exception"]),
        error_class=event.get("error_class"),
        host=event.get("host"),
        pid=_int(event.get("pid")),
        execution=event.get("execution") if isinstance(event.get("execution"), str) else None,
        async_interval_ms=_int(event.get("async_interval_ms")),
        kafka_cluster_id=_cluster_id(event.get("kafka_cluster_id")),
    )


def _cluster_id(value: Any) -> str | None:
    """A Kafka cluster id as journaled: a short printable string (KRaft's are 22
    characters of base64), else None."""
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        return None
    return value if value.isprintable() else None
