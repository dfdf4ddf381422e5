"""A plan's savepoint, loaded and checked (I/O: the savepoint's files and the journal)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._inputs import SavepointFacts
from ..request import PlanRequest

if TYPE_CHECKING:
    from ...journal import Journal


def savepoint_facts(journal: Journal, request: PlanRequest) -> SavepointFacts:
    """The savepoint asked for, found and checked (its manifest and every file against
    the checksums, of this query), and the journal's last batch (what a plan from it
    reads again); nothing when no savepoint is asked."""
    if request.savepoint is None:
        return SavepointFacts()
    from ...savepoint import load_savepoint

    name = request.query_name
    savepoint = load_savepoint(request.savepoint, journal, query_name=name,
                               unrecorded=request.unrecorded_savepoint)
    return SavepointFacts(savepoint, journal.last_batch(name))


__all__ = ["savepoint_facts"]
