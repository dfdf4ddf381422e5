"""Events the journal keeps aside in ``rejected_events``: list them, and journal them
again once what refused them is fixed (a schema upgraded, a grant given, a bug fixed).

A payload is what the writer kept: a listener event as JSON (``{"type": ...}``), or a
progress JSON as Spark reported it. A replayed event leaves ``rejected_events`` only in
the transaction that journals it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..journal import Journal
from ..records import (
    CLUSTER,
    PROGRESS,
    STARTED,
    TERMINATED,
    BatchRecord,
    RunRecord,
    batch_from_progress,
    journal_name,
    run_from_event,
)


@dataclass(frozen=True)
class RejectedEvent:
    id: int
    received_at: datetime
    reason: str
    query_name: str | None
    what: str  # "batch 3 of run R", "start of run R", "unreadable"
    payload: str


@dataclass(frozen=True)
class ReplayOutcome:
    id: int
    journaled: bool
    reason: str | None = None  # why it is still rejected


def event_of(payload: str) -> dict[str, Any] | None:
    """The listener event a rejected payload holds, None when it holds none."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("type") in (STARTED, PROGRESS, TERMINATED, CLUSTER):
        return data
    if "batchId" in data:
        return {"type": PROGRESS, "json": payload}
    return None


def query_of(payload: str) -> str | None:
    """The query name a rejected payload is about (None: it names none)."""
    return _describe(event_of(payload))[0]


def _describe(event: dict[str, Any] | None) -> tuple[str | None, str]:
    if event is None:
        return None, "unreadable"
    if event.get("type") == PROGRESS:
        try:
            data = json.loads(event.get("json") or "")
            name = journal_name(data.get("name"), str(data.get("id")))[0]
            return name, f"batch {data.get('batchId')} of run {data.get('runId')}"
        except (ValueError, TypeError, AttributeError, RecursionError):
            return None, "unreadable progress"
    name = journal_name(event.get("name"), str(event.get("query_id")))[0]
    kind = {STARTED: "start", CLUSTER: "Kafka cluster"}.get(str(event.get("type")), "end")
    return name, f"{kind} of run {event.get('run_id')}"


def list_rejected(journal: Journal, query_name: str | None = None,
                  ids: list[int] | None = None) -> list[RejectedEvent]:
    """Rejected events, oldest first; of one query name, or with the given ids."""
    rows = journal.rejected_rows(ids)
    out = []
    for r in rows:
        name, what = _describe(event_of(r["payload"]))
        if query_name is not None and name != query_name:
            continue
        out.append(RejectedEvent(r["id"], r["received_at"], r["reason"], name, what,
                                 r["payload"]))
    return out


def _record(event: dict[str, Any]) -> RunRecord | BatchRecord:
    if event.get("type") == PROGRESS:
        return batch_from_progress(event.get("json") or "")
    return run_from_event(event)


def replay_rejected(journal: Journal, events: list[RejectedEvent]) -> list[ReplayOutcome]:
    """Journal each event again, removing it from rejected_events in the same
    transaction; an event still refused stays, with the reason. Raises when the
    database is not there (nothing changes then)."""
    from .writer import Fault, classify_error

    outcomes = []
    for ev in events:
        event = event_of(ev.payload)
        if event is None:
            outcomes.append(ReplayOutcome(ev.id, False, "the payload holds no listener event"))
            continue
        try:
            record = _record(event)
        except (ValueError, KeyError, TypeError) as exc:
            outcomes.append(ReplayOutcome(ev.id, False, str(exc)))
            continue
        try:
            journal.replay_rejected(ev.id, record)
        except Exception as exc:
            if classify_error(exc) is not Fault.REFUSED:
                raise
            outcomes.append(ReplayOutcome(ev.id, False, str(exc) or repr(exc)))
            continue
        outcomes.append(ReplayOutcome(ev.id, True))
    return outcomes
