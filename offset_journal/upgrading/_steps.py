"""The steps of an upgrade, each small and named, handed what it works on: stop v1
between batches, wait until the journal holds its last committed batch, take the
savepoint, make and record the plan, restore into v2's new checkpoint, start v2, watch
it, roll back, record the outcome.

Waits are bounded: every loop polls with a deadline and says what it gave up on.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, OffsetJournalError
from ..formatting import first_line
from ..redaction import redact
from .model import UPGRADE_COMMAND, Verification, planned_ends, start_problems

if TYPE_CHECKING:
    from ..journal import Journal
    from ..restart import PlanRequest, RestartPlan
    from ..savepoint import Savepoint
    from ..state import Restored, Rules

log = logging.getLogger(__name__)

Build = Callable[[Any, str, Sequence[str]], Any]
"""``build(spark, checkpoint, starting_offsets)``: a query's ``DataStreamWriter``, not
started, its ``checkpointLocation`` set to ``checkpoint`` (``starting_offsets``: each
source's ``startingOffsets`` in source order, which Spark ignores on an existing
checkpoint). The same function ``state restore --query FILE:FUNCTION`` takes."""
POLL_S = 0.2


@dataclass(frozen=True)
class Context:
    """What every step is handed: the session, the journal, the query's name, v1's
    checkpoint and v2's new one, and the bound on each wait (seconds)."""

    spark: Any
    journal: Journal
    query_name: str
    checkpoint: str
    new_checkpoint: str
    timeout_s: float
    listener: Any = None


def checkpoint_of(query: Any) -> str:
    """The checkpoint a running or stopped query ran on, as Spark resolved it (a local
    ``file:`` URI becomes its path). ConfigError where the session cannot say (Spark
    Connect): give ``checkpoint=`` then."""
    from urllib.parse import urlparse

    from ..state import checkpoint_root

    try:
        root = checkpoint_root(query)
    except Exception as exc:  # noqa: BLE001 - any failure means: cannot be read here
        raise ConfigError(f"cannot read the checkpoint of query {query.name!r} from Spark "
                          f"({first_line(exc)}): give checkpoint=") from None
    return urlparse(root).path if root.startswith("file:") else root


def preflight(ctx: Context, savepoint_to: str, batches: int) -> None:
    """The arguments checked before v1 is touched (ConfigError, SavepointError, or
    RestoreError for a session without the restore's helper jar; one line): a mistake
    in them is found here with v1 still running and nothing journaled, not after v1
    was stopped and a savepoint taken. v2's checkpoint must be new (a
    rolled-back v2's is not: remove it first), and no two of the three places one."""
    from ..savepoint import probe_writable, require_empty

    if batches < 1:
        raise ConfigError(f"batches={batches}: verify at least 1 batch")
    if not ctx.timeout_s > 0:
        raise ConfigError(f"timeout_s={ctx.timeout_s}: give the bound on each wait, in "
                          "seconds (> 0)")
    places = {"v1's checkpoint": ctx.checkpoint, "the new checkpoint": ctx.new_checkpoint,
              "savepoint_to": savepoint_to}
    for what, where in places.items():
        if not str(where).strip():
            raise ConfigError(f"{what} is empty: give a directory or URL")
    named = list(places.items())
    for i, (a, x) in enumerate(named):
        for b, y in named[i + 1:]:
            if _within(x, y) or _within(y, x):
                raise ConfigError(f"{a} ({x}) and {b} ({y}) are one place or one inside "
                                  "the other: give each its own")
    if _empty(ctx.checkpoint):
        raise ConfigError(f"v1's checkpoint {ctx.checkpoint} is missing or empty: not the "
                          "checkpoint of a started query")
    if not _empty(ctx.new_checkpoint):
        raise ConfigError(f"the new checkpoint {ctx.new_checkpoint} is not new (it holds "
                          "files; a rolled-back v2's checkpoint is of no further use): "
                          "remove it, or give another")
    require_empty(savepoint_to)
    probe_writable(savepoint_to)
    from ..state import helper

    helper(ctx.spark)  # the restore's JVM helper on this session: known before v1 stops


def _within(inner: str, outer: str) -> bool:
    """``inner`` is ``outer`` or under it (local paths resolved; URLs as written)."""
    import os

    if "://" in inner or "://" in outer:
        a, b = inner.rstrip("/"), outer.rstrip("/")
    else:
        a, b = os.path.realpath(inner), os.path.realpath(outer)
    return a == b or a.startswith(b.rstrip("/") + "/")


def _empty(location: str) -> bool:
    """A missing location or an empty directory."""
    from ..checkpoint.store import open_store

    store, root = open_store(location, None)
    kind = store.kind(root)
    if kind is None:
        return True
    return kind == "dir" and not (store.files(root) + store.dirs(root))


def stop_between_batches(query: Any, timeout_s: float) -> list[str]:
    """Stop ``query`` once no batch runs (its status says no trigger is active), so that
    its last batch is committed: a stop in the middle of a batch leaves it to run again
    when the query resumes, which a sink without a log (foreachBatch) writes again
    unless it is idempotent by batch id. Spark has no stop at a batch's end, so this is
    a narrowing, not a guarantee: a query whose batches run back to back (each longer
    than its trigger interval) is never seen between two; :func:`settle` then says which
    batch was cut. Bounded: after ``timeout_s`` it is stopped all the same."""
    notes = []
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status.get("isTriggerActive"):
        if time.monotonic() >= deadline:
            notes.append(f"v1 was still in a batch after {timeout_s:.0f} s and was stopped "
                         "in it")
            break
        time.sleep(0.01)
    query.stop()
    query.awaitTermination(timeout_s)
    return notes


def settle(ctx: Context, run_id: str | None) -> list[str]:
    """Wait (bounded) until the journal holds v1's last committed batch, so that the
    savepoint is taken there and not at an older batch; the notes say what is known of
    v1's end (a batch cut, the journal behind)."""
    from ..checkpoint import read_checkpoint

    if ctx.listener is not None and run_id is not None:
        ctx.listener.wait_terminated(run_id, ctx.timeout_s)
    ckpt = read_checkpoint(ctx.checkpoint)
    last = ckpt.last_committed
    notes = []
    planned = ckpt.last_planned
    if planned is not None and last is not None and planned.batch_id > last.batch_id:
        notes.append(f"v1's batch {planned.batch_id} was not committed: it runs again "
                     "if v1 resumes")
    if last is None or ckpt.query_id is None:
        return notes
    deadline = time.monotonic() + ctx.timeout_s
    while last.batch_id not in ctx.journal.journaled_batch_ids(ctx.query_name,
                                                               ckpt.query_id):
        if time.monotonic() >= deadline:
            notes.append(f"the journal did not hold v1's last committed batch "
                         f"{last.batch_id} after {ctx.timeout_s:.0f} s: the savepoint is "
                         "taken at the newest batch it holds")
            break
        time.sleep(POLL_S)
    return notes


def resume_offsets(checkpoint: str) -> tuple[dict[int, dict[str, dict[int, int]]], int | None]:
    """Where a query resumed on ``checkpoint`` starts reading: its last committed
    batch's Kafka end offsets (a batch planned but not committed is run again from
    there too), and that batch's id (newer than the savepoint's when the journal was
    behind)."""
    from ..checkpoint import kafka_end_offsets, read_checkpoint

    last = read_checkpoint(checkpoint).last_committed
    return (kafka_end_offsets(last), last.batch_id) if last is not None else ({}, None)


def take_savepoint(ctx: Context, target: str) -> Savepoint:
    from ..savepoint import create_savepoint

    return create_savepoint(ctx.spark, ctx.journal, ctx.query_name, ctx.checkpoint, target)


def plan_upgrade(ctx: Context, saved: Savepoint, rules: Rules | None,
                 bootstrap_servers: str | None) -> tuple[RestartPlan, PlanRequest]:
    """The plan from the savepoint (``restore``), as ``state restore`` makes it, recorded
    BEFORE v2's bootstrap run starts (the run is linked to it as it starts: a link
    recorded after its first batch was journaled is not one the audit takes)."""
    from ..errors import RestartError
    from ..restart import PlanRequest, plan_restart
    from ..restart.record import record

    ref: int | str = saved.id if saved.id is not None else saved.location
    request = PlanRequest(ctx.query_name, savepoint=ref, restore=True,
                          checkpoint=ctx.new_checkpoint, bootstrap_servers=bootstrap_servers,
                          unrecorded_savepoint=saved.id is None,
                          restore_rules=(rules.recorded() or None) if rules else None,
                          ).checked()
    plan = plan_restart(None, request, journal=ctx.journal, record=False,
                        command=UPGRADE_COMMAND)
    if not plan.ok:
        raise RestartError("the upgrade's plan has errors: " + "; ".join(plan.errors))
    return record(ctx.journal, plan, request, UPGRADE_COMMAND).onto(plan), request


def restore(ctx: Context, saved: Savepoint, plan: RestartPlan, build_v2: Build,
            rules: Rules | None) -> Restored:
    """The savepoint written into v2's new checkpoint (v2's bootstrap run, the layout
    checked, the state written: RestoreError refuses, the new checkpoint removed); the
    plan linked to the bootstrap run as it starts, and the run journaled (once: a
    session with the listener journaled it already), as every restore from a plan is
    (:func:`offset_journal.restart.restoring.restore_from_plan`)."""
    from ..restart.restoring import restore_from_plan

    starting = [plan.starting_offsets(s.index) for s in plan.sources]
    done = restore_from_plan(ctx.journal, ctx.spark, plan, ctx.new_checkpoint,
                             lambda: build_v2(ctx.spark, ctx.new_checkpoint, starting),
                             savepoint=saved, rules=rules, command=UPGRADE_COMMAND)
    for warning in done.warnings:
        log.warning("%s", warning)
    return done.restored


def start(ctx: Context, build: Build, checkpoint: str, starting: Sequence[str]) -> Any:
    """``build``'s query started on ``checkpoint``, in a session set to the state store
    the checkpoint was written with (a restored one is on RocksDB, which a
    transformWithState checks for as it starts); the session is put back after."""
    from ..checkpoint import read_checkpoint
    from ..savepoint.spark import PROVIDER_CONF, session_conf

    last = read_checkpoint(checkpoint).last_planned
    provider = ((last.conf or {}).get(PROVIDER_CONF) if last is not None else None)
    with session_conf(ctx.spark, PROVIDER_CONF, provider):
        return build(ctx.spark, checkpoint, list(starting)).start()


def completed(query: Any) -> list[dict[str, Any]]:
    """The progress of each real batch the query completed, once per batch id: a batch
    that ran has ``addBatch`` timed (an idle trigger's progress has not), and a batch
    after the restore's bootstrap (batch 0, which reads nothing)."""
    seen: dict[int, dict[str, Any]] = {}
    for p in query.recentProgress:
        data = json.loads(p.json)
        if "addBatch" in (data.get("durationMs") or {}) and data.get("batchId", 0) > 0:
            seen.setdefault(int(data["batchId"]), data)
    return [seen[b] for b in sorted(seen)]


def verify(query: Any, plan: RestartPlan, batches: int, timeout_s: float,
           check: Callable[[Any], bool | None] | None) -> Verification:
    """Watch v2 (bounded by ``timeout_s``) until it completed ``batches`` real batches or
    ended by itself, or failed. A v2 that is healthy and has read everything there is
    when the time is up passes (idle: a quiet topic is no reason to roll back), one
    with records waiting fails. Then its first batch's start offsets against the plan's,
    and ``check(query)`` (False or an exception fails it; None passes)."""
    deadline = time.monotonic() + timeout_s
    done: list[dict[str, Any]] = []
    while True:
        done = completed(query)
        failed = query.exception()
        if failed is not None:
            return _verdict(done, plan, [f"v2 failed: {failure_text(failed)}"])
        if len(done) >= batches or not query.isActive:
            break
        if time.monotonic() >= deadline:
            if query.status.get("isDataAvailable"):
                return _verdict(done, plan, [f"v2 completed {len(done)} of {batches} "
                                             f"batches in {timeout_s:.0f} s, with records "
                                             "waiting"])
            break  # healthy and caught up: nothing more to verify it on
        time.sleep(POLL_S)
    failures = []
    if check is not None:
        try:
            if check(query) is False:
                failures.append("the check returned False")
        except Exception as exc:  # noqa: BLE001 - the user's check: its failure is v2's
            failures.append(f"the check raised {type(exc).__name__}: "
                            f"{redact(first_line(exc))}")
    # Looked at again after the check: v2 may have failed while it ran (or between the
    # two looks above), and a query that ended by failing did not end by itself.
    active = bool(query.isActive)
    failed = query.exception()
    if failed is not None:
        failures.append(f"v2 failed: {failure_text(failed)}")
    return _verdict(done, plan, failures, ended=not active and failed is None,
                    idle=active and len(done) < batches)


def failure_text(exc: Any) -> str:
    """A failed query's error in one line: the Python error a foreachBatch or a UDF
    raised (the last ``Name: message`` line of the traceback Spark wraps it in), else
    the first line."""
    import re

    text = str(exc)
    raised = [line.strip() for line in text.splitlines()
              if re.match(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(: |$)", line)]
    return redact(raised[-1] if "Traceback" in text and raised else first_line(exc))


def _verdict(done: list[dict[str, Any]], plan: RestartPlan, failures: list[str], *,
             ended: bool = False, idle: bool = False) -> Verification:
    problems = start_problems(planned_ends(plan.sources), done[0]) if done else []
    return Verification(tuple(int(p["batchId"]) for p in done), tuple(problems),
                        tuple(failures), ended, idle)


def stop_quietly(query: Any, ctx: Context) -> None:
    """Stop v2 (failed or not) and wait for its end to be journaled, bounded."""
    try:
        if query.isActive:
            query.stop()
    except Exception as exc:  # noqa: BLE001 - a failed query's stop may raise its error
        log.info("stopping v2: %s", first_line(exc))
    if ctx.listener is not None:
        ctx.listener.wait_terminated(query.runId, ctx.timeout_s)


def record_result(ctx: Context, row: dict[str, Any]) -> tuple[int | None, str | None]:
    """The outcome journaled (a ``restart_plans`` row); its id, or why it was not."""
    from ..origin import host_name, os_user

    try:
        return ctx.journal.record_plan({**row, "host": host_name(), "os_user": os_user()}), None
    except OffsetJournalError as exc:
        return None, f"the upgrade's outcome was not journaled: {redact(first_line(exc))}"


def link(ctx: Context, plan_id: int | None, query: Any) -> str | None:
    """``query``'s run linked to recorded plan ``plan_id``; why not (None: linked)."""
    if plan_id is None:
        return None
    try:
        ctx.journal.link_plan(plan_id, str(query.runId))
    except OffsetJournalError as exc:
        return f"run {query.runId} was not linked to plan {plan_id}: {redact(first_line(exc))}"
    return None
