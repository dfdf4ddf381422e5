"""An upgrade's outcome and the decisions about it (pure: plain data in, plain data out).

:func:`start_problems` is the first check of v2's verification: its first real batch
must start where the plan said (Spark's progress ``sources[i].startOffset`` against the
plan's offsets). :func:`result_row` is the ``restart_plans`` row that journals how the
upgrade ended (``command`` :data:`RESULT_COMMAND`): the verification's verdict and, for
a roll back, the offsets v1 resumes from, which the audit reads as the reason v1's run
reads again what v2 read (:mod:`offset_journal.audit`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Outcome = Literal["upgraded", "rolled-back", "refused"]
"""upgraded: v2 runs, verified. rolled-back: v2 failed its verification, was stopped, and
v1 runs again on its own checkpoint. refused: a step before v2 started refused (the
savepoint, the plan, the restore's layout check); v1 runs again as it was."""
OUTCOMES: tuple[Outcome, ...] = ("upgraded", "rolled-back", "refused")
UPGRADE_COMMAND = "upgrade"
"""The ``command`` of the plan v2 starts from (recorded as ``state restore`` records its
plan, linked to v2's bootstrap run)."""
RESULT_COMMAND = "upgrade-result"
"""The ``command`` of the row that journals how the upgrade ended."""

KafkaEnds = Mapping[int, Mapping[str, Mapping[int, int]]]
"""source index -> topic -> partition -> offset."""


@dataclass(frozen=True)
class Verification:
    """What v2 did while it was watched: the real batches it completed (ids), whether
    its first started at the planned offsets (the problems, if not), whether the query
    ended by itself (a trigger that stops: ``availableNow``) or sat idle (healthy,
    every record read, fewer batches than asked: nothing more arrived in time), and the
    failures (a query exception, a user check's False or exception, a timeout with
    records waiting). Passed: no failure."""

    batches: tuple[int, ...] = ()
    start_problems: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    ended: bool = False
    idle: bool = False

    @property
    def passed(self) -> bool:
        return not self.failures and not self.start_problems

    @property
    def reasons(self) -> tuple[str, ...]:
        return (*self.start_problems, *self.failures)

    def explain(self) -> str:
        done = (f"{len(self.batches)} batch(es) ({_ids(self.batches)})" if self.batches
                else "no batch")
        if self.passed:
            how = (", then ended by itself" if self.ended else
                   ", then idle: no more records arrived in time" if self.idle else "")
            first = ", the first at the planned offsets" if self.batches else ""
            return f"v2 verified: {done} completed{how}{first}"
        return f"v2 failed its verification after {done}: " + "; ".join(self.reasons)


@dataclass(frozen=True)
class Upgrade:
    """What :func:`offset_journal.upgrade` did. ``query``: the query running now (v2
    when upgraded, v1 started again otherwise; None when v1 could not be started
    again: ``reasons`` says why). ``plan_id``: the recorded plan v2 started from;
    ``result_id``: the recorded outcome (the roll back's plan, linked to v1's new
    run); ``savepoint``: the savepoint taken (a :class:`~offset_journal.savepoint.Savepoint`);
    ``verification``: v2's, when it ran; ``notes``: what is worth knowing besides;
    ``restart_failed``: v1 was to be started again and did not start (``reasons`` says
    why): nothing runs now."""

    outcome: Outcome
    query_name: str
    reasons: tuple[str, ...] = ()
    query: Any = None
    savepoint: Any = None
    plan_id: int | None = None
    result_id: int | None = None
    verification: Verification | None = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    restart_failed: bool = False

    @property
    def ok(self) -> bool:
        return self.outcome == "upgraded"

    def explain(self) -> str:
        """A line or two: what happened and why."""
        batch = (f" at batch {self.savepoint.manifest.batch_id}"
                 if self.savepoint is not None else "")
        head = {"upgraded": f"upgraded {self.query_name!r}: v2 runs with v1's state{batch}",
                "rolled-back": f"rolled back {self.query_name!r}: v1 runs again on its own "
                               f"checkpoint, after its savepoint{batch}",
                "refused": f"upgrade of {self.query_name!r} refused; v1 runs again as "
                           "it was"}[self.outcome]
        if self.outcome == "refused" and self.restart_failed:
            head = head.replace("runs again as it was", "was stopped and did NOT start "
                                "again: nothing runs")
        elif self.outcome == "refused" and self.query is None:
            head = head.replace("runs again as it was", "is left as it was, not running")
        elif self.outcome == "rolled-back" and self.query is None:
            head = head.replace("runs again", "was NOT started again")
        lines = [head + (f" (plan {self.plan_id})" if self.plan_id is not None else "")]
        said = self.verification.reasons if self.verification is not None else ()
        if self.verification is not None:
            lines.append("  " + self.verification.explain())
        rest = [r for r in self.reasons if r not in said]  # v1 not started again: why
        if rest:
            lines.append("  " + "; ".join(rest))
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _ids(ids: Sequence[int]) -> str:
    if not ids:
        return "none"
    return f"batch {ids[0]}" if len(ids) == 1 else f"batches {ids[0]}..{ids[-1]}"


def planned_ends(sources: Sequence[Any]) -> dict[int, dict[str, dict[int, int]]]:
    """A plan's Kafka start offsets (``index`` and ``offsets`` of each source plan) by
    source index; a partition planned at earliest (-2) is left out: its real start is
    the log start, which the progress reports."""
    out: dict[int, dict[str, dict[int, int]]] = {}
    for source in sources:
        for topic, parts in (source.offsets or {}).items():
            for partition, offset in parts.items():
                if int(offset) >= 0:
                    out.setdefault(source.index, {}).setdefault(topic, {})[
                        int(partition)] = int(offset)
    return out


def _progress_offsets(value: Any) -> dict[str, dict[int, int]] | None:
    """A progress's ``startOffset`` (JSON text or already parsed) as topic -> partition
    -> offset; None when it is not a Kafka source's."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    out: dict[str, dict[int, int]] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            return None
        out[str(topic)] = {int(p): int(o) for p, o in parts.items()}
    return out


def start_problems(planned: KafkaEnds, progress: Mapping[str, Any]) -> list[str]:
    """Why v2's first real batch (its progress, as JSON) did not start at the plan's
    offsets (empty: it did). Only the partitions the plan names are compared: one added
    since starts at its log start, as the plan said."""
    problems: list[str] = []
    sources = progress.get("sources") or []
    batch = progress.get("batchId")
    for index, topics in sorted(planned.items()):
        if index >= len(sources):
            problems.append(f"batch {batch} has no source {index}")
            continue
        started = _progress_offsets(sources[index].get("startOffset"))
        if started is None:
            problems.append(f"batch {batch} reports no start offsets for source {index}")
            continue
        for topic, parts in sorted(topics.items()):
            for partition, offset in sorted(parts.items()):
                got = started.get(topic, {}).get(partition)
                if got != offset:
                    problems.append(f"batch {batch} started {topic}-{partition} at {got}, "
                                    f"not at the planned {offset}")
    return problems


def result_row(query_name: str, outcome: Outcome, *, plan_id: int | None,
               savepoint: tuple[int | None, int] | None, checkpoint: str,
               new_checkpoint: str, reasons: Sequence[str],
               verification: Verification | None = None,
               resume: KafkaEnds | None = None,
               resumed_after: int | None = None) -> dict[str, Any]:
    """The ``restart_plans`` row journaling how an upgrade ended (every column but the
    id, created_at, host and os_user). ``savepoint``: (its id, its batch). ``resume``:
    for a roll back, the Kafka offsets v1 resumes from on its own checkpoint (where its
    last committed batch ended): the row's offsets, which the audit checks v1's run
    against; nothing else (no offsets: the row explains no run); ``resumed_after``: the
    batch of v1's those offsets end (the savepoint's, or newer when the journal was
    behind as it was taken)."""
    offsets = [[i, t, p, o] for i, topics in sorted((resume or {}).items())
               for t, parts in sorted(topics.items()) for p, o in sorted(parts.items())]
    detail: dict[str, Any] = {
        "outcome": outcome, "plan": plan_id, "reasons": list(reasons),
        "checkpoint": checkpoint, "new_checkpoint": new_checkpoint,
        "savepoint": savepoint[0] if savepoint else None,
        "after_batch": savepoint[1] if savepoint else None}
    if verification is not None:
        detail["batches"] = list(verification.batches)
    if resumed_after is not None:
        detail["resumed_after"] = resumed_after
    return {"query_name": query_name, "position": "savepoint", "mode": "stateless",
            "command": RESULT_COMMAND, "ok": outcome == "upgraded",
            "anchor_run_id": None, "anchor_batch_id": savepoint[1] if savepoint else None,
            "request": {"upgrade": detail}, "options": {}, "kafka_offsets": offsets,
            "checkpoint": checkpoint if outcome != "upgraded" else new_checkpoint}


def upgraded_to(plans: Sequence[Any], checkpoint: str) -> Any:
    """The journaled upgrade (a recorded ``upgrade-result`` row) that left v2 running on
    ``checkpoint``, if the newest outcome about that checkpoint is one (None: none is).
    A job submitted again with the same ``--upgrade-from`` (a driver restarted) resumes
    v2 there instead of refusing a checkpoint that is no longer new."""
    import os

    def same(a: Any) -> bool:
        if not isinstance(a, str) or not a:
            return False
        if "://" in a or "://" in checkpoint:
            return a.rstrip("/") == checkpoint.rstrip("/")
        return os.path.realpath(a) == os.path.realpath(checkpoint)

    about = [p for p in plans if p.command == RESULT_COMMAND and not p.ignored
             and p.upgrade is not None and same(p.upgrade.get("new_checkpoint"))]
    newest = max(about, key=lambda p: p.id, default=None)
    return newest if newest is not None and newest.upgrade.get("outcome") == "upgraded" \
        else None
