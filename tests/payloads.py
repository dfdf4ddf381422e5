"""Progress payloads shaped exactly as Spark reports them, for tests without Spark."""

from __future__ import annotations

import ast
import json
from typing import Any

QUERY_ID = "ce011fdc-8762-4dcb-84eb-a77333e28109"
RUN_ID = "88e2ff94-ede0-45a8-b687-6316fbef529a"


def kafka_source(topics: str, start: Any, end: Any, latest: Any = None, rows: int = 10) -> dict:
    return {
        "description": f"KafkaV2[Subscribe[{topics}]]",
        "startOffset": start,
        "endOffset": end,
        "latestOffset": latest if latest is not None else end,
        "numInputRows": rows,
        "inputRowsPerSecond": 15.5,
        "processedRowsPerSecond": 66.6,
    }


def progress(batch_id: int = 2, *, sources: list[dict] | None = None, name: str | None = "myQuery",
             query_id: str = QUERY_ID, run_id: str = RUN_ID,
             timestamp: str = "2016-12-14T18:45:24.873Z", event_time: dict | None = None,
             rows: int = 10) -> str:
    """The Structured Streaming guide's example progress, with what a test varies."""
    body: dict[str, Any] = {
        "id": query_id,
        "runId": run_id,
        "name": name,
        "timestamp": timestamp,
        "batchId": batch_id,
        "numInputRows": rows,
        "inputRowsPerSecond": 120.0,
        "processedRowsPerSecond": 200.0,
        "durationMs": {"triggerExecution": 3, "getOffset": 2},
        "stateOperators": [],
        "sources": sources
        if sources is not None
        else [kafka_source("topic-0", {"topic-0": {"2": 0, "4": 1, "1": 1, "3": 1, "0": 1}},
                           {"topic-0": {"2": 0, "4": 115, "1": 134, "3": 21, "0": 534}})],
        "sink": {"description": "MemorySink"},
    }
    if event_time is not None:
        body["eventTime"] = event_time
    return json.dumps(body)


def progress_offset(value: Any) -> Any:
    """A source's offset from PySpark's ``recentProgress``: JSON text in a classic session
    on 3.5 and 4.2, an object under Spark Connect; PySpark 4.0 and 4.1 build it from the
    parsed JSON with ``str()``, which gives Python's text (``{'t': {'0': 5}}``, ``None``
    for the first batch's start)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return ast.literal_eval(value)


def sql_execute(url: str, statement: str, **params: Any) -> None:
    """Run one parameterized statement against a journal database, in its own
    transaction (as the database owner the URL names)."""
    import sqlalchemy as sa

    from offset_journal.journal.db import resolve_url

    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement), params)
    finally:
        engine.dispose()


def sql_rows(url: str, query: str, **params: Any) -> list[tuple[Any, ...]]:
    """Run one parameterized query against a journal database, rows as tuples."""
    import sqlalchemy as sa

    from offset_journal.journal.db import resolve_url

    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(query), params)]
    finally:
        engine.dispose()
