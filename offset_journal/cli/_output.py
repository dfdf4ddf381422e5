"""``offset-journal history``'s output: a table, CSV or JSON of journaled batches,
written a page at a time so that a history of any length prints in the memory of one
page."""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal, TextIO

from ..formatting import format_time, table
from ..rows import Batch

HistoryFormat = Literal["table", "csv", "json"]


def _iso(value: datetime | None) -> str:
    return format_time(value, "milliseconds") or ""


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def _history_row(b: Batch) -> dict[str, Any]:
    return {"run_id": b.run_id, "query_id": b.query_id, "batch_id": b.batch_id,
            "trigger_at": _iso(b.trigger_at) or None, "num_input_rows": b.num_input_rows,
            "batch_duration_ms": b.batch_duration_ms, "watermark": _iso(b.watermark) or None,
            "sources": [{"index": s.source_index, "description": s.description,
                         "start_offset": s.start_offset, "end_offset": s.end_offset}
                        for s in b.sources]}


def write_history(out: TextIO, fmt: HistoryFormat, batches: Iterator[Batch]) -> None:
    """Write batches (oldest first, any number: a page at a time) as ``fmt``."""
    if fmt == "json":  # one JSON array, written a batch at a time
        out.write("[")
        for i, b in enumerate(batches):
            text = json.dumps(_history_row(b), indent=2, default=str)
            out.write(("," if i else "") + "\n  " + text.replace("\n", "\n  "))
        out.write("\n]\n")
        return
    # Pages of rows: the table is aligned per page, and the number of source columns is
    # the most any batch of the first page has (more go into the last column).
    page = list(itertools.islice(batches, HISTORY_TABLE_PAGE))
    n_sources = max(len(b.sources) for b in page)
    headers = ["run_id", "batch_id", "trigger_at", "num_input_rows", "batch_duration_ms"] + [
        f"source_{i}_end_offset" for i in range(n_sources)
    ]
    writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(headers)
    titles = (["RUN ID", "BATCH", "TRIGGER", "ROWS", "MS"]
              + [f"SOURCE {i} END" for i in range(n_sources)])
    first = True
    while page:
        rows = [_history_cells(b, n_sources) for b in page]
        if writer is not None:
            writer.writerows(["" if c is None else c for c in r] for r in rows)
        else:
            text = table(titles, rows)
            out.write((text if first else text.split("\n", 1)[1]) + "\n")
        first = False
        page = list(itertools.islice(batches, HISTORY_TABLE_PAGE))


HISTORY_TABLE_PAGE = 1000


def _history_cells(b: Batch, n_sources: int) -> list[Any]:
    ends = {s.source_index: _compact(s.end_offset) for s in b.sources}
    extra = [_compact(s.end_offset) for s in b.sources if s.source_index >= n_sources]
    cells = [ends.get(i, "") for i in range(n_sources)]
    if extra and cells:
        cells[-1] = " ".join([cells[-1], *extra]).strip()
    return [b.run_id, b.batch_id, _iso(b.trigger_at), b.num_input_rows,
            b.batch_duration_ms, *cells]


