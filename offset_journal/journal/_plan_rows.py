"""A ``restart_plans`` row read back as a :class:`~offset_journal.rows.RecordedPlan`
(pure).

The row's JSON columns (``request``, ``options``, ``kafka_offsets``) are not the plan
commands' alone: any role with INSERT on the table (the writer, the planner) can write
a row no plan command wrote. So each field is checked against what the plan commands
write, and a field that is not is left out of the plan and named in its ``ignored``
notes, for the audit and the report to say; the rest of the row is still read. Reading
a row never raises.

A request field the project reads gets its check in :data:`REQUEST_FIELDS`; fields
nothing reads are kept as they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..offsets import EARLIEST
from ..rows import RecordedPlan


def _is_int(value: Any, low: int = 0) -> bool:
    # JSON true/false come back as bool, which Python counts as int.
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _log_starts(value: Any) -> bool:
    """[[topic, partition, log start], ...] (restart.record.plan_row)."""
    return isinstance(value, list) and all(
        isinstance(v, list) and len(v) == 3 and isinstance(v[0], str) and _is_int(v[1])
        and _is_int(v[2]) for v in value)


def _translation(value: Any) -> bool:
    """[[source index, journaled topic, partition, journaled offset, replica topic,
    replica offset, read again at most(, records never replicated)], ...]
    (restart.record._translation; a plan recorded before the planner counted the records
    never replicated has seven elements)."""
    return isinstance(value, list) and all(
        isinstance(v, list) and len(v) in (7, 8) and _is_int(v[0]) and isinstance(v[1], str)
        and _is_int(v[2]) and _is_int(v[3], EARLIEST) and isinstance(v[4], str)
        and _is_int(v[5], EARLIEST)
        and (v[6] is None or _is_int(v[6]))  # None: no sync bounds the re-read
        and (len(v) == 7 or _is_int(v[7]))
        for v in value)


def _real_time(value: Any) -> bool:
    """{run_id, after_batch, stopped_by, bound, by_partition} (restart._real_time)."""
    return (isinstance(value, dict) and isinstance(value.get("run_id"), str)
            and _is_int(value.get("after_batch"))
            and (value.get("bound") is None or _is_int(value.get("bound"))))


def _sink_offsets(value: Any) -> bool:
    """[[batch id, source index, topic, partition, start, end], ...]."""
    return isinstance(value, list) and all(
        isinstance(v, list) and len(v) == 6 and _is_int(v[0]) and _is_int(v[1])
        and isinstance(v[2], str) and _is_int(v[3]) and _is_int(v[4]) and _is_int(v[5])
        for v in value)


def _sink(value: Any) -> bool:
    """{kind, path, last_batch, journal_batch, query_id, run_id, taken, offsets, ...}
    (restart._sink: the old query's sink as its log said, the batches taken from it)."""
    return (isinstance(value, dict) and value.get("kind") in ("file", "delta")
            and isinstance(value.get("path"), str)
            and (value.get("last_batch") is None or _is_int(value.get("last_batch")))
            and _is_int(value.get("journal_batch")) and isinstance(value.get("query_id"), str)
            and isinstance(value.get("run_id"), str) and isinstance(value.get("taken"), list)
            and all(_is_int(b) for b in value["taken"]) and _sink_offsets(value.get("offsets")))


def _upgrade(value: Any) -> bool:
    """{outcome, plan, reasons, checkpoint, new_checkpoint, savepoint, after_batch(,
    batches, resumed_after)} (upgrading.model.result_row: how an upgrade ended)."""
    return (isinstance(value, dict)
            and value.get("outcome") in ("upgraded", "rolled-back", "refused")
            and (value.get("plan") is None or _is_int(value.get("plan")))
            and _texts(value.get("reasons")) and isinstance(value.get("checkpoint"), str)
            and (value.get("after_batch") is None or _is_int(value.get("after_batch")))
            and (value.get("resumed_after") is None or _is_int(value.get("resumed_after")))
            and (value.get("batches") is None or (isinstance(value.get("batches"), list)
                                                   and all(_is_int(b) for b in value["batches"]))))


def _recovery(value: Any) -> bool:
    """{savepoint_id, savepoint_batch, old_batches, new_batches, note, ...}
    (restart.recovery: the old batches read again after a savepoint, and the new
    checkpoint's batches that ran them)."""
    return (isinstance(value, dict) and isinstance(value.get("note"), str)
            and _is_int(value.get("savepoint_batch"))
            and all(isinstance(value.get(k), list) and all(_is_int(b) for b in value[k])
                    for k in ("old_batches", "new_batches")))


REQUEST_FIELDS: dict[str, Callable[[Any], bool]] = {
    "allow_data_loss": lambda v: isinstance(v, bool),
    "recreated_topics": _texts,
    "warnings": _texts,
    "translate_from": lambda v: isinstance(v, str),
    "log_starts": _log_starts,
    "accept_cluster": lambda v: isinstance(v, str),
    "translation": _translation,
    "real_time": _real_time,
    "sink": _sink,
    "upgrade": _upgrade,
    "recovery": _recovery,
}
"""The request fields a reader of recorded plans uses, and what a plan command writes
there."""


def _offset_row(value: Any) -> bool:
    """[source index, topic, partition, offset (>= 0, or -2: earliest)]."""
    return (isinstance(value, list) and len(value) == 4 and _is_int(value[0])
            and isinstance(value[1], str) and _is_int(value[2])
            and _is_int(value[3], EARLIEST) and value[3] != -1)


def _options(value: Any) -> bool:
    """{source index: {option: value}}."""
    return isinstance(value, dict) and all(
        isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
        for v in value.values())


def _shown(value: Any) -> str:
    """A forged value, shown in a note: JSON, ASCII only (no control character reaches a
    terminal), and short."""
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def recorded_plan(m: Mapping[str, Any], links: dict[str, datetime]) -> RecordedPlan:
    """A ``restart_plans`` row (its columns by name) as a :class:`RecordedPlan`, the run
    ids a job linked to it in ``links`` (run id: when linked). Fields no plan command
    writes are left out and named in ``ignored``."""
    ignored: list[str] = []

    def bad(what: str, value: Any, why: str = "") -> None:
        ignored.append(f"plan {m['id']}: {what} is not what a plan command writes "
                       f"({_shown(value)}): ignored{why}")

    offsets = m["kafka_offsets"]
    if not (isinstance(offsets, list) and all(_offset_row(o) for o in offsets)):
        # Not one entry kept: a plan holding part of its offsets could fit a run it
        # never made.
        bad("kafka_offsets", offsets, ", and the plan explains no run")
        offsets = []
    options = m["options"]
    if not _options(options):
        bad("options", options)
        options = {}
    request = m["request"]
    if not isinstance(request, dict):
        bad("request", request)
        request = {}
    kept = {}
    for key, value in request.items():
        check = REQUEST_FIELDS.get(key)
        if check is None or check(value):
            kept[key] = value
        else:
            bad(f"request field {key}", value)
    return RecordedPlan(
        id=m["id"], query_name=m["query_name"], created_at=m["created_at"],
        position=m["position"], mode=m["mode"], command=m["command"], ok=m["ok"],
        kafka_offsets=tuple((i, t, n, o) for i, t, n, o in offsets),
        options=dict(options), checkpoint=m["checkpoint"], host=m["host"],
        os_user=m["os_user"], anchor_run_id=m["anchor_run_id"],
        anchor_batch_id=m["anchor_batch_id"], run_ids=tuple(links),
        request=kept, linked_at=links, ignored=tuple(ignored))
