"""A savepoint's deletion and a restart plan that names it, taken one at a time.

Retention decides from what it read, then records a deletion; a planner loads a
savepoint's files, then records its plan. Either may come between the other's read and
its write. Both therefore take, in the transaction that writes, the advisory lock that
migration 0022's guard takes (one per query name) and check again under it: a deletion
is not recorded when a plan names the savepoint or it is the query's newest, a plan is
not recorded from a savepoint recorded as deleted. The guard does the first for every
role but the owner; this does both for every role this code runs as.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from .schema import restart_plans, savepoint_deletions, savepoints

_LOCK = sa.text("SELECT pg_advisory_xact_lock(hashtext('offset_journal.savepoint_deletions'), "
                "hashtext(:q))")
_S, _P, _D = savepoints.c, restart_plans.c, savepoint_deletions.c


def _plan_naming(savepoint_id: int, sha256: str | None) -> Any:
    """The first recorded plan, of any query, that starts from the savepoint (by its id,
    or by its manifest's SHA-256 for a plan from its directory), as the guard reads it."""
    named = _P.request["savepoint"]
    return (sa.select(_P.id)
            .where(sa.func.jsonb_typeof(named) == "object",
                   sa.or_(named["id"].astext == str(savepoint_id),
                          sa.and_(sa.literal(sha256 is not None),
                                  named["sha256"].astext == (sha256 or ""))))
            .order_by(_P.id).limit(1))


def _has_newer(query_name: str, savepoint_id: int) -> Any:
    gone = sa.exists().where(_D.savepoint_id == _S.id)
    return sa.select(sa.exists().where(_S.query_name == query_name, _S.id > savepoint_id,
                                       ~gone))


def lock_query(conn: sa.Connection, query_name: str) -> None:
    """Wait for, then hold until the transaction ends, the query's savepoint lock."""
    conn.execute(_LOCK, {"q": query_name})


def deletion_kept(conn: sa.Connection, savepoint_id: int) -> str | None:
    """Under the query's lock: why the savepoint must stay (a recorded plan names it,
    or it is its query's newest not deleted), None when it may go. A savepoint that is
    not there is left to the foreign key to refuse."""
    found = conn.execute(sa.select(_S.query_name, _S.manifest_sha256)
                         .where(_S.id == savepoint_id)).first()
    if found is None:
        return None
    query_name, sha256 = found
    lock_query(conn, query_name)
    plan = conn.execute(_plan_naming(savepoint_id, sha256)).scalar()
    if plan is not None:
        return f"restart plan {plan} starts from it"
    if not conn.execute(_has_newer(query_name, savepoint_id)).scalar():
        return "the newest"
    return None


def plan_deleted_savepoint(conn: sa.Connection, row: dict[str, Any]) -> str | None:
    """Under the query's lock: when the plan ``row`` starts from a savepoint recorded as
    deleted, why it may not be recorded; None otherwise (and for a plan from none)."""
    request = row.get("request")
    named = request.get("savepoint") if isinstance(request, dict) else None
    if not isinstance(named, dict) or not isinstance(named.get("id"), int):
        return None
    savepoint_id = int(named["id"])
    query_name = conn.execute(sa.select(_S.query_name)
                              .where(_S.id == savepoint_id)).scalar()
    if query_name is None:
        return None
    lock_query(conn, query_name)  # the savepoint's query: the lock its deletion takes
    reason = conn.execute(sa.select(_D.reason)
                          .where(_D.savepoint_id == savepoint_id)).scalar()
    if reason is None:
        return None
    return (f"savepoint {savepoint_id} of query {query_name!r} was deleted by retention "
            f"while the plan was made ({reason}): its files are gone; plan again from a "
            f"newer one (`offset-journal savepoint list {query_name}`)")
