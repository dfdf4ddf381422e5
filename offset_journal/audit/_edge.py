"""The audit's I/O edge: read a query's journaled Kafka offsets in the journal's order
(a page of batches at a time), its recorded plans and recorded losses, then audit them
(:func:`~offset_journal.audit._core.audit_batches`,
:func:`~offset_journal.audit._losses.add_recorded_losses`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from ..errors import JournalError
from ..health_rows import RecordedLoss
from ..overlap import concurrent_runs, span_of
from ..rows import AuditBatch, RecordedPlan
from ._core import audit_batches
from ._losses import add_recorded_losses
from .model import AuditReport

if TYPE_CHECKING:  # handed an open Journal: the storage layer is not imported here
    from ..journal import Journal

PAGE = 1000
"""Batches read per statement."""


def audit_query(journal: Journal, query_name: str, since: datetime | None = None,
                ) -> AuditReport:
    """Audit ``query_name`` in ``journal``: every batch walked in the journal's order
    (streamed, a page at a time), against the plans recorded for it. On a standby, the
    report says which and how far behind it is, and batch ids missing inside a run are
    notes (they may only not be replayed yet). JournalError when the query has no
    journaled batch."""
    server = journal.server_state()
    standby = server.describe() if server.in_recovery else None
    plans = _plans(journal, query_name)
    spans = [span_of(b) for b in journal.run_bounds(query_name, limit=None)]
    pairs = [(a.run_id, b.run_id) for a, b in concurrent_runs(spans)]
    report = audit_batches(query_name, iter_audit_batches(journal, query_name), plans,
                           since=since, concurrent=pairs, standby=standby)
    if report.batches == 0:
        raise JournalError(f"no journaled batches for query {query_name!r}")
    add_recorded_losses(report, _losses(journal, query_name), plans)
    if standby is not None:  # what it read may be behind what the primary holds
        report.notes.insert(0, f"read on {standby}: the primary may hold more")
    return report


def _plans(journal: Journal, query_name: str) -> list[RecordedPlan]:
    try:
        return journal.recorded_plans(query_name)
    except JournalError:  # a journal not upgraded to 0008_decisions has no plans
        return []


def _losses(journal: Journal, query_name: str) -> list[RecordedLoss]:
    try:
        return journal.recorded_losses(query_name)
    except JournalError:  # a journal not upgraded to 0019_recorded_losses has none
        return []


def iter_audit_batches(journal: Journal, query_name: str, page: int = PAGE,
                       ) -> Iterator[AuditBatch]:
    """Every batch of the query with its Kafka sources, in ``batches.id`` order."""
    after = 0
    while True:
        found = journal.audit_page(query_name, after, page)
        yield from found
        if len(found) < page:
            return
        after = found[-1].pk

