"""Restart plans journaled as decisions: what a recorded plan holds (pure), and the
recording itself (the I/O edge, handed an open Journal).

Every plan :func:`~offset_journal.restart.plan_restart` hands out is recorded in
``restart_plans`` unless asked not to (``record=False``): the ``starting-offsets``
command's (``--no-record`` opts out) and a job's ``--from-journal`` (which links its run
to it). The ``plan`` command is a preview, recorded only with ``--record``: a person
reading it before an upgrade and the job starting from its own plan would otherwise
record two plans for one restart. A role that may not record (the reader) still
gets its plan: the plan says why it was not recorded (``record_problem``), the command
prints that as a warning, and the audit will show the run started from it as
*unexplained* until it is linked. Handing out a restart is never blocked by the
bookkeeping about it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from ..formatting import first_line, format_time
from ..origin import host_name, os_user
from .model import (
    MODE_STATE_AWARE,
    POSITION_AFTER,
    POSITION_AT,
    POSITION_FROM_TIME,
    POSITION_REWIND,
    POSITION_SAVEPOINT,
    RestartPlan,
)

if TYPE_CHECKING:
    from ..journal import Journal
    from ..state.repartition import Repartitioned
    from .request import PlanRequest

log = logging.getLogger(__name__)

COMMANDS = ("starting-offsets", "plan", "state-restore", "state-recover", "upgrade", "api")
"""Who handed the plan out: the four commands that plan, an upgrade in one call
(:func:`offset_journal.upgrade`), or the Python API (jobs)."""


RecordedPosition = Literal["after", "at", "as-of", "rewind", "from-time", "savepoint"]
"""A recorded plan's position: a plan's :data:`~.model.Position`, or ``as-of`` (after the
last batch at a time), which the audit tells from ``after``."""
RECORDED_AS_OF: RecordedPosition = "as-of"


def recorded_position(plan: RestartPlan, request: PlanRequest) -> RecordedPosition:
    """The position a recorded plan starts from: after (the last batch), at (a batch,
    reprocessing it), as-of (after the last batch at a time), rewind (state-aware) or
    from-time (the first record at a time) or savepoint (after a savepoint's batch, with
    its state). All but "after" read again on purpose."""
    if plan.position == POSITION_SAVEPOINT:
        return POSITION_SAVEPOINT
    if plan.mode == MODE_STATE_AWARE or plan.position == POSITION_REWIND:
        return POSITION_REWIND
    if plan.position == POSITION_AT:
        return POSITION_AT
    if plan.position == POSITION_FROM_TIME or request.from_time is not None:
        return POSITION_FROM_TIME
    if request.as_of is not None:
        return RECORDED_AS_OF
    return POSITION_AFTER


def plan_row(plan: RestartPlan, request: PlanRequest, command: str) -> dict[str, Any]:
    """The ``restart_plans`` row of a plan handed out (every column but the id and
    created_at, which the database sets). ``request`` holds what was asked, what the
    person accepted (allow_data_loss, recreated_topics: the audit explains the gap or
    new log such a plan makes by them; accept_cluster: a cluster check overruled), the
    warnings the plan was handed out with and the log starts its earliest offsets stood
    for; ``sink``: the old query's sink as its log said, and the batches the plan took
    from it (the audit reads a run started after them as planned)."""
    asked = {"as_of": format_time(request.as_of),
             "batch": list(request.batch) if request.batch else None,
             "from_time": format_time(request.from_time),
             "window_seconds": request.window.total_seconds() if request.window else None,
             "source": request.source,
             "subscribe": list(request.subscribe) if request.subscribe else None,
             "bootstrap_servers_given": bool(request.bootstrap_servers),
             "allow_data_loss": request.allow_data_loss,
             "recreated_topics": sorted(set(request.recreated_topics)) or None,
             "recreated_tables": sorted(set(request.recreated_tables)) or None,
             "warnings": list(plan.warnings) or None,
             "accept_cluster": request.accept_cluster,
             "log_starts": _log_starts(plan),
             "kafka_cluster_id": plan.kafka_cluster_id,
             "journaled_kafka_cluster_id": plan.journaled_cluster_id,
             "real_time": plan.real_time, "sink": plan.sink, "recovery": plan.recovery,
             **_translation(plan), **_state(plan, request)}
    return {
        "query_name": plan.query_name, "position": recorded_position(plan, request),
        "mode": plan.mode, "command": command if command in COMMANDS else "api",
        "ok": plan.ok, "anchor_run_id": plan.anchor.run_id,
        "anchor_batch_id": plan.anchor.batch_id,
        "request": {k: v for k, v in asked.items() if v not in (None, False)},
        "options": {str(s.index): dict(s.options) for s in plan.sources},
        "kafka_offsets": [list(o) for o in handed_out(plan)],
        "checkpoint": plan.checkpoint or request.checkpoint,
        "host": host_name(), "os_user": os_user(),
    }


def _log_starts(plan: RestartPlan) -> list[list[Any]] | None:
    """[[topic, partition, log start], ...] of the partitions the plan starts at -2
    (earliest), as the cluster had them: an unlinked run is explained by the plan only
    where its first batch starts exactly there (the audit's match)."""
    starts = {key: low for s in plan.sources for key, low in s.log_starts.items()}
    return [[t, p, low] for (t, p), low in sorted(starts.items())] or None


def handed_out(plan: RestartPlan) -> list[tuple[int, str, int, int]]:
    """The Kafka start offsets a plan hands out, as a recorded plan keeps them: (source
    index, topic, partition, offset; -2 = earliest), in that order."""
    return [(source.index, topic, int(p), int(o)) for source in plan.sources
            for topic, parts in sorted((source.offsets or {}).items())
            for p, o in sorted(parts.items())]


def _state(plan: RestartPlan, request: PlanRequest) -> dict[str, Any]:
    """A plan from a savepoint: which (id, location, manifest SHA-256), what was asked
    (seed, discard_state: a loss accepted is a decision; unrecorded_savepoint: a
    savepoint the journal never recorded accepted is one too; restore_rules: what the
    restore declares, a join's ``matched`` flags or a time zone among them) and each
    operator's state with what became of it: [[operator id, kind, keys, decision], ...]."""
    if plan.savepoint_location is None:
        return {}
    seed = request.seed if isinstance(request.seed, str) else list(request.seed)
    return {"savepoint": {"id": plan.savepoint_id, "location": plan.savepoint_location,
                          "sha256": plan.savepoint_sha256},
            "seed": seed or None, "discard_state": request.discard_state,
            "restore": request.restore,
            "restore_rules": dict(request.restore_rules or {}) or None,
            "unrecorded_savepoint": request.unrecorded_savepoint,
            "state": [[c.operator_id, c.kind, c.keys, c.decision] for c in plan.state]}


def _translation(plan: RestartPlan) -> dict[str, Any]:
    """A translated plan's alias, policy and per partition rows ([source index, journaled
    topic, partition, journaled offset, replica topic, replica offset, read again at
    most, records never replicated]): the audit reads its run as a new log on the
    replica, and the records never replicated as a gap."""
    done = [s for s in plan.sources if s.translation is not None]
    if not done:
        return {}
    first = done[0].translation
    assert first is not None
    rows = [[s.index, p.topic, p.partition, p.journaled, p.replica_topic, p.offset, p.reread,
             p.lost]
            for s in done if s.translation is not None for p in s.translation.partitions]
    return {"translate_from": first.alias, "replication_policy": first.policy,
            "translation": rows}


@dataclass(frozen=True)
class Recorded:
    """What recording a plan did: its id in ``restart_plans`` (None: not recorded) or
    why the journal refused it (``problem``, for the caller to show), and what
    journaling the batches the plan took from the sink said (``notes``, ``warnings``).
    :meth:`onto` gives the plan with it; the plan itself is not changed."""

    plan_id: int | None = None
    problem: str | None = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def onto(self, plan: RestartPlan) -> RestartPlan:
        """``plan`` as recorded: a new plan with the id, the problem and the notes."""
        return replace(plan, plan_id=self.plan_id, record_problem=self.problem,
                       notes=[*plan.notes, *self.notes],
                       plan_warnings=[*plan.plan_warnings, *self.warnings])


def record(journal: Journal, plan: RestartPlan, request: PlanRequest,
           command: str = "api") -> Recorded:
    """Journal the batches ``plan`` took from the sink (:func:`journal_sink_batches`),
    then record the plan in ``restart_plans``: the write step after the plan is made
    (gathering its facts writes nothing)."""
    notes, warnings = journal_sink_batches(journal, plan)
    plan_id, problem = record_row(journal, plan, request, command)
    return Recorded(plan_id, problem, notes, warnings)


def journal_sink_batches(journal: Journal, plan: RestartPlan,
                         ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Journal the batches a plan took from the sink and the old checkpoint, before the
    plan is recorded (the journal is complete again: a plan made next starts where this
    one does); (notes, warnings) to add to the plan. A journal that refuses them (a
    planner role, which may record plans only) costs a warning: the recorded plan keeps
    them, and the audit reads the run started from it as planned all the same."""
    from ..checkpoint.importing import journal_batches
    from ..errors import JournalError, RestartError
    from ..redaction import redact
    from ..wording import count

    if not plan.sink_batches or not plan.ok:
        return (), ()
    first, last = plan.sink_batches[0], plan.sink_batches[-1]
    try:
        new = journal_batches(journal, plan.sink_batches)
    except (JournalError, RestartError) as exc:
        reason = redact(first_line(exc))
        return (), (
            f"batches {first.batch_id}..{last.batch_id} of run {last.run_id}, taken from the "
            f"sink and the old checkpoint, were not journaled ({reason}): a plan made next "
            "does not know them; import the old checkpoint (`checkpoint import`) or plan "
            "as the writer",)
    return (f"Journaled {count(new, 'batch')} of run {last.run_id} taken from the "
            f"sink and the old checkpoint (batches {first.batch_id}.."
            f"{last.batch_id}; already there: {len(plan.sink_batches) - new}).",), ()


def record_row(journal: Journal, plan: RestartPlan, request: PlanRequest,
               command: str = "api") -> tuple[int | None, str | None]:
    """Record ``plan`` in the journal: (its id, None), or (None, why the journal refused
    it: no INSERT privilege, the reader role; a journal not upgraded to 0008_decisions;
    a read-only standby)."""
    from ..errors import JournalError, JournalReadOnly, JournalSchemaError

    try:
        return journal.record_plan(plan_row(plan, request, command)), None
    except JournalError as exc:  # one redacted line already
        reason = str(exc)
        if isinstance(exc, JournalReadOnly):
            problem = (
                "this plan was not recorded in the journal: its database is read-only here "
                "(a standby); recording needs the primary: plan against the primary's URL "
                "before starting the job from it, or pass --no-record")
            log.info("restart plan for %s: %s", plan.query_name, problem)
            return None, problem
        fix = ("upgrade the journal (`offset-journal db upgrade`)"
               if isinstance(exc, JournalSchemaError) or "does not exist" in reason
               else "record plans as a role with INSERT on offset_journal.restart_plans "
                    "(`offset-journal db grant --planner ROLE`)")
        problem = (
            f"this plan was not recorded in the journal ({reason}): the audit will show "
            f"the run started from it as unexplained; {fix}, or pass --no-record")
        # Said once, by whoever shows the plan (the command's warning line, a job's log):
        # a WARNING here too printed it twice on the command line.
        log.info("restart plan for %s: %s", plan.query_name, problem)
        return None, problem


def record_repartition(journal: Journal, done: Repartitioned) -> Repartitioned:
    """A state repartition journaled as a decision, as a plan is: the query resumes
    after its last batch (mode ``repartition``, anchored at its last run's last batch),
    with the partitions before and after and the batch Spark wrote. Returns ``done``
    with ``plan_id``, or ``record_problem`` when the journal knows no name for the query
    or refused the row."""
    from dataclasses import replace

    from ..errors import JournalError

    if done.query_name is None:
        return replace(done, record_problem="the repartition was not journaled (the journal "
                                            f"has no run of query id {done.query_id})")
    runs = [r for name in journal.query_names_of(done.query_id) for r in journal.runs(name)
            if r.query_id == done.query_id]
    last = runs[-1] if runs else None
    asked = {"repartition": {"from": done.partitions_before, "to": done.partitions,
                             "batch": done.batch_id},
             **({"assume_stopped": True} if done.assumed_stopped else {})}
    row = {"query_name": done.query_name, "position": POSITION_AFTER, "mode": "repartition",
           "command": "state-repartition", "ok": True,
           "anchor_run_id": last.run_id if last is not None else None,
           "anchor_batch_id": last.last_batch_id if last is not None else None,
           "request": asked, "options": {}, "kafka_offsets": [],
           "checkpoint": done.checkpoint, "host": host_name(), "os_user": os_user()}
    try:
        return replace(done, plan_id=journal.record_plan(row))
    except JournalError as exc:  # one redacted line already
        return replace(done, record_problem=f"the repartition was not journaled ({exc})")
