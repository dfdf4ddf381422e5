"""The continuity audit's walk (pure): every journaled batch, per (topic, partition),
in the journal's order (``batches.id``, which no driver's clock can skew), must start
where the partition's processing had got to (its *frontier*: the highest end offset
read before). Above it is a gap, below it an overlap; a run tied to a recorded plan
that said so is *planned*, anything else *unexplained*. The rules in full, with their
limits: docs/audit-and-report.md, "The rules".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from ..offsets import EARLIEST, PartitionOffset
from ..rows import AuditBatch, AuditSource, RecordedPlan
from ..wording import tp as tp_label
from ._missing import Claim, Hole
from ._plans import (
    link_problem,
    match_plan,
    plan_offsets,
    real_time_note,
    recovery_of,
    replay_reason,
    starts_a_checkpoint,
)
from ._sink import after_the_sink, after_the_sink_reason, rerun_reason, sink_held
from ._upgrade import rollback_problem, rollback_reason, upgrade_notes
from .model import (
    GAP,
    MAX_REFS,
    OVERLAP,
    PLANNED,
    UNEXPLAINED,
    UNEXPLAINED_START,
    UNKNOWN_START,
    AuditReport,
    Finding,
    FindingKind,
    HistoryRef,
    LinkKind,
    RunStart,
    StartKind,
)

TP = tuple[str, int]
StartHow = Literal["reported", "plan", "plan-earliest", "inferred", "earliest", "unknown"]
RECENT = 64
"""Batches remembered per partition to name those an overlap read again."""


# --------------------------------------------------------------------------- plans




def _translated(run: _Run, how: StartHow) -> bool:
    """A run's first read of a partition, where its plan translated the journal's
    offsets to a MirrorMaker 2 replica's: a new log on another cluster."""
    return how == "plan" and run.plan is not None and run.plan.translated_from is not None


def _translated_why(run: _Run) -> str:
    plan = run.plan
    assert plan is not None
    return (f"plan {plan.id} translated the journal's offsets on cluster alias "
            f"{plan.translated_from} to a MirrorMaker 2 replica's (--translate-from): a new "
            "log on another cluster, planned")














# --------------------------------------------------------------------------- the walk


@dataclass
class _Partition:
    frontier: int
    at: HistoryRef
    recent: deque[tuple[int, int, HistoryRef]] = field(
        default_factory=lambda: deque(maxlen=RECENT))


@dataclass
class _Run:
    start: RunStart
    plan: RecordedPlan | None
    offsets: dict[TP, int]
    first_pk: int


@dataclass(frozen=True)
class _At:
    """Where the walk is: one partition of a run's batch."""

    run: _Run
    ref: HistoryRef
    key: TP
    missing: tuple[int, int] | None = None
    """The run's batch ids (first, last) not journaled right before this batch."""


@dataclass
class _Open:
    """An overlap still growing: the run's next batch continues it at ``next``."""

    finding: Finding
    next: int


class _Walk:
    def __init__(self, plans: Sequence[RecordedPlan], standby: str | None = None,
                 query_name: str = "") -> None:
        self.plans = list(plans)
        self.query_name = query_name
        self.standby = standby
        self.linked = {run: plan for plan in self.plans for run in plan.run_ids}
        self.taken: set[int] = set()
        self.runs: dict[str, _Run] = {}
        self.parts: dict[TP, _Partition] = {}
        self.open: dict[tuple[TP, str], _Open] = {}
        self.findings: list[Finding] = []
        self.notes: list[tuple[HistoryRef, str]] = []
        self.claims: dict[tuple[str, int, int], Claim] = {}
        self.last_ids: dict[str, int] = {}
        """The highest batch id walked so far per query id (checkpoint)."""
        self.origin: str | None = None
        self.count = 0
        self.sink_held = sink_held(self.plans)

    # ---- runs

    def run_of(self, batch: AuditBatch) -> tuple[_Run, bool]:
        known = self.runs.get(batch.run_id)
        if known is not None:
            return known, False
        ref = HistoryRef.of(batch)
        plan: RecordedPlan | None = None
        link: LinkKind | None = None
        how: StartKind
        if not starts_a_checkpoint(batch):
            how = "checkpoint"
            plan, link = self.rollback_of(batch, ref)
        else:
            plan, link = self.plan_of(batch, ref)
            how = "plan" if plan is not None else ("origin" if not self.runs else "no-plan")
        if plan is not None:
            self.taken.add(plan.id)
            if plan.accepted_cluster is not None:
                self.notes.append((ref, (
                    f"run {batch.run_id} started from plan {plan.id}, which overruled the "
                    f"journal's cluster check (--accept-cluster {plan.accepted_cluster}): the "
                    "journal said the batches it continues were read on another Kafka "
                    "cluster; the audit compares their offsets as one cluster's")))
            if plan.real_time is not None:
                self.notes.append((ref, real_time_note(batch.run_id, plan)))
            recovered = recovery_of(plan)
            if recovered is not None:
                self.notes.append((ref, f"run {batch.run_id} started from plan {plan.id}: "
                                        f"{recovered[1]}"))
        if not self.runs:
            self.origin = batch.run_id
        start = RunStart(batch.run_id, batch.query_id, ref, how, plan.id if plan else None,
                         link, plan.position if plan else None)
        run = _Run(start, plan, plan_offsets(plan) if plan else {}, batch.pk)
        self.runs[batch.run_id] = run
        return run, True

    def rollback_of(self, batch: AuditBatch, ref: HistoryRef,
                    ) -> tuple[RecordedPlan | None, LinkKind | None]:
        """The roll back a run resuming v1's checkpoint was started by, when its link
        holds (:func:`rollback_problem`; a note says why not otherwise)."""
        linked = self.linked.get(batch.run_id)
        if linked is None or not linked.rolled_back:
            return None, None
        problem = rollback_problem(linked, batch)
        if problem is not None:
            self.notes.append((ref, problem + "; the link is not taken"))
            return None, None
        return linked, "recorded"

    def plan_of(self, batch: AuditBatch, ref: HistoryRef,
                ) -> tuple[RecordedPlan | None, LinkKind | None]:
        """The plan a new checkpoint's run began from: its recorded link when that holds
        (:func:`link_problem`), else a plan matched on time and offsets; a link that does
        not hold is said in a note, and only the match can explain the run then."""
        linked = self.linked.get(batch.run_id)
        if linked is not None:
            problem = link_problem(linked, batch)
            if problem is None:
                return linked, "recorded"
            self.notes.append((ref, problem + "; the link is not taken"))
        plan = match_plan(batch, self.plans, self.taken)
        return plan, ("matched" if plan is not None else None)

    # ---- partitions

    def start_of(self, run: _Run, first: bool, source: AuditSource,
                 p: PartitionOffset) -> tuple[int | None, StartHow]:
        """Where this partition's read began in this batch, and how that is known."""
        if p.start is not None:
            return p.start, "reported"
        if not first or run.start.how == "checkpoint":
            return None, "earliest"  # new to a running query: Spark reads its log start
        planned = run.offsets.get((p.topic, p.partition))
        if planned is not None:
            return (None, "plan-earliest") if planned == EARLIEST else (planned, "plan")
        rows = source.num_input_rows
        if rows == 0 and p.end is not None:
            return p.end, "inferred"
        if rows is not None and len(source.partitions) == 1 and p.end is not None:
            return p.end - rows, "inferred"
        return None, "unknown"

    def step(self, batch: AuditBatch) -> None:
        self.count += 1
        claim = next((c for c in self.claims.values() if c.holds(batch)), None)
        if claim is not None:
            claim.seen.add(batch.batch_id)
            if claim.fill(batch):  # a batch journaled late: it moves no frontier
                return
        run, first = self.run_of(batch)
        ref = HistoryRef.of(batch)
        # Batch ids follow one another per checkpoint (query id), across the runs that
        # resume it: Spark starts one only after it committed the one before.
        last = self.last_ids.get(batch.query_id)
        missing = (None if last is None or batch.batch_id <= last + 1
                   else (last + 1, batch.batch_id - 1))
        self.last_ids[batch.query_id] = max(batch.batch_id, -1 if last is None else last)
        for source in batch.sources:
            for p in source.partitions:
                if p.end is None:
                    continue
                start, how = self.start_of(run, first, source, p)
                self.partition(_At(run, ref, (p.topic, p.partition), missing), start, p.end,
                               how, source)

    def partition(self, at: _At, start: int | None, end: int, how: StartHow,
                  source: AuditSource) -> None:
        state = self.parts.get(at.key)
        if state is None or how == "plan-earliest" or _translated(at.run, how):
            if _translated(at.run, how):
                self.not_replicated(at)
            if state is None:
                self.first_appearance(at, start, end, how)
            else:
                self.new_log(at, state)
            self.parts[at.key] = _Partition(end, at.ref)
            self.parts[at.key].recent.append((start if start is not None else end, end, at.ref))
            return
        if start is None:
            self.unknown(at, state, end, how, source)
        elif not self.continued(at, start, end, state):
            if start > state.frontier:
                self.gap(at, start, state, how)
            elif start < min(end, state.frontier):  # an empty batch re-read nothing
                self.overlap(at, start, end, state, how)
        if end >= state.frontier:
            state.frontier, state.at = end, at.ref
        state.recent.append((start if start is not None else end, end, at.ref))

    def first_appearance(self, at: _At, start: int | None, end: int, how: StartHow) -> None:
        run, key, ref = at.run, at.key, at.ref
        if how in ("plan-earliest", "earliest") or run.start.run_id == self.origin:
            return
        if _translated(run, how):
            self.notes.append((ref, f"{tp_label(*key)} starts at offset {start} in run "
                                    f"{run.start.run_id}: {_translated_why(run)}"))
            return
        if start is None:
            self.add(Finding(UNKNOWN_START, UNEXPLAINED, key[0], key[1], None, end,
                             run.start.run_id, [ref], plan_id=run.start.plan_id,
                             reason=f"{tp_label(*key)} first appears in run "
                                    f"{run.start.run_id}, whose start cannot be known "
                                    "(a new checkpoint, no recorded plan)"))
        elif start > 0:
            planned = how == "plan"
            self.add(Finding(
                UNEXPLAINED_START, PLANNED if planned else UNEXPLAINED, key[0], key[1], 0,
                start, run.start.run_id, [ref], plan_id=run.start.plan_id,
                reason=f"{tp_label(*key)} first appears at offset {start}, not at its "
                       "log start" + (f", as plan {run.start.plan_id} said" if planned else
                                      ": unless retention had deleted offsets 0.."
                                      f"{start - 1}, they were never processed")))

    def new_log(self, at: _At, state: _Partition) -> None:
        """A run began a partition already processed at its log start, as its plan said
        (-2, earliest: a topic deleted and created again, --restart-recreated-topic).
        Its offsets begin again there: the partition is audited afresh from this
        batch, and the restart is a note (planned), not an overlap with the old log."""
        for growing in [k for k in self.open if k[0] == at.key]:
            del self.open[growing]
        plan = at.run.plan
        plan_id = plan.id if plan is not None else at.run.start.plan_id
        if _translated(at.run, "plan"):
            why = _translated_why(at.run)
        elif plan is not None and at.key[0] in plan.recreated_topics:
            why = (f"topic {at.key[0]} was deleted and created again, read from its start "
                   f"as plan {plan_id} said (--restart-recreated-topic)")
        else:
            why = f"plan {plan_id} started it at its log start (earliest)"
        self.notes.append((at.ref, (
            f"{tp_label(*at.key)} starts a new log in run {at.run.start.run_id} "
            f"({at.ref.label()}): {why}; the old log had been processed up to "
            f"{state.frontier} ({state.at.label()}), and the partition is audited afresh "
            "from here")))

    def not_replicated(self, at: _At) -> None:
        """A gap of the journaled partition where the run's translated plan found records
        MirrorMaker 2 never copied to the replica: planned when the plan accepted the
        loss (--allow-data-loss), as for records retention deleted."""
        plan = at.run.plan
        lost = plan.not_replicated.get(at.key) if plan is not None else None
        if plan is None or lost is None:
            return
        topic, part, first, records = lost
        before = self.parts.get((topic, part))
        end = first + records
        why = (f"data loss accepted by plan {plan.id} (--allow-data-loss)"
               if plan.allow_data_loss else
               f"plan {plan.id} refused it as DATA LOSS, and the run started from it anyway")
        self.add(Finding(
            GAP, PLANNED if plan.allow_data_loss else UNEXPLAINED, topic, part, first, end,
            at.run.start.run_id, [at.ref], [before.at] if before is not None else [], plan.id,
            f"offsets {first}..{end - 1} of {tp_label(topic, part)} were never processed: "
            f"they never reached the MirrorMaker 2 replica (MM2 began copying "
            f"{tp_label(topic, part)} at {end}), where run {at.run.start.run_id} started "
            f"from plan {plan.id}'s translation; {why}"))

    def continued(self, at: _At, start: int, end: int, state: _Partition) -> bool:
        """A run still re-reading: its open overlap grows. True when handled."""
        mine = (at.key, at.run.start.run_id)
        growing = self.open.get(mine)
        if growing is None or growing.next != start:
            self.open.pop(mine, None)
            return False
        if start >= state.frontier:
            del self.open[mine]
            return start == state.frontier
        growing.finding.end = min(end, state.frontier)
        growing.finding.add_batch(at.ref)
        growing.next = end
        if end >= state.frontier:
            del self.open[mine]
        return True

    def gap(self, at: _At, start: int, state: _Partition, how: StartHow) -> None:
        key, ref = at.key, at.ref
        context = f"{state.at.label()} ended at {state.frontier}, {ref.label()} started at {start}"
        claim = self.claim(at)
        status, why = self.verdict(at, start, how, GAP)
        finding = Finding(GAP, status, key[0], key[1], state.frontier, start,
                          at.run.start.run_id, [ref], [state.at], at.run.start.plan_id, why)
        hole = Hole(finding, context)
        finding.reason = hole.text(state.frontier, start) + why
        self.add(finding)
        if claim is not None:  # its reason is said once the walk is over (settle)
            claim.holes[key] = hole

    def claim(self, at: _At) -> Claim | None:
        """The claim of the ids missing before ``at``'s batch, if any."""
        if at.missing is None:
            return None
        key = (at.run.start.query_id, *at.missing)
        found = self.claims.get(key)
        if found is None:
            found = self.claims[key] = Claim(at.run.start.run_id, at.run.start.query_id,
                                             *at.missing, at.ref)
        return found

    def settle(self) -> None:
        """The walk is over: each claim's gaps say whether its ids came late or never;
        those later batches filled are dropped (on a standby, every claim's gap is:
        a note says the ids that never came)."""
        dropped: list[Finding] = []
        for claim in self.claims.values():
            drop, notes = claim.settle(self.query_name, self.standby)
            dropped += drop
            self.notes += [(claim.ref, note) for note in notes]
        if dropped:
            gone = {id(f) for f in dropped}
            self.findings = [f for f in self.findings if id(f) not in gone]

    def overlap(self, at: _At, start: int, end: int, state: _Partition,
                how: StartHow) -> None:
        status, why = self.sink_rerun(at, start, end) or self.verdict(at, start, how, OVERLAP)
        key, ref = at.key, at.ref
        upto = min(end, state.frontier)
        earlier = [r for s, e, r in state.recent if s < upto and e > start][-MAX_REFS:]
        finding = Finding(OVERLAP, status, key[0], key[1], start, upto, at.run.start.run_id,
                          [ref], earlier, at.run.start.plan_id,
                          f"offsets {start}..{upto - 1} of {tp_label(*key)} were processed "
                          f"again from {ref.label()} (already processed up to "
                          f"{state.frontier} by {state.at.label()}); {why}")
        self.add(finding)
        if end < state.frontier:
            self.open[(key, at.run.start.run_id)] = _Open(finding, end)

    def unknown(self, at: _At, state: _Partition, end: int, how: StartHow,
                source: AuditSource) -> None:
        rows = source.num_input_rows
        cause = ("a new checkpoint and no recorded plan" if how == "unknown"
                 else "a partition new to the run")
        self.add(Finding(
            UNKNOWN_START, UNEXPLAINED, at.key[0], at.key[1], None, end, at.run.start.run_id,
            [at.ref], [state.at], at.run.start.plan_id,
            f"{at.ref.label()} read {tp_label(*at.key)} up to {end} from a start Spark did "
            f"not report ({cause}; {rows if rows is not None else 'an unknown number of'} "
            "records over "
            f"{len(source.partitions)} partitions); it had been processed up to "
            f"{state.frontier}: a gap or an overlap cannot be ruled out"))

    def sink_rerun(self, at: _At, start: int, end: int,
                   ) -> tuple[Literal["planned", "unexplained"], str] | None:
        """A batch a plan took from the sink's log, run again by Spark on its old
        checkpoint with the same offsets: the sink skipped it (None: not such a batch)."""
        if at.run.start.how != "checkpoint":
            return None
        why = rerun_reason(self.sink_held, at.run.start, at.ref.batch_id, at.key, start, end)
        return (PLANNED, why) if why is not None else None

    def verdict(self, at: _At, start: int, how: StartHow, kind: FindingKind,
                ) -> tuple[Literal["planned", "unexplained"], str]:
        start_info, plan = at.run.start, at.run.plan
        if kind == GAP and at.missing is not None:
            return UNEXPLAINED, "batch ids are missing before it (see settle)"
        if how == "plan" and plan is not None:
            as_planned = at.run.offsets.get(at.key) == start
            if as_planned and kind == GAP and after_the_sink(plan, at.key, start):
                return PLANNED, after_the_sink_reason(plan, start_info.run_id)
            if as_planned and kind == GAP and plan.allow_data_loss:
                return PLANNED, (f"data loss accepted by plan {plan.id} (--allow-data-loss): "
                                 f"run {start_info.run_id} started at the log start, the "
                                 "records before it were deleted (retention or "
                                 "DeleteRecords) before being read")
            if as_planned and plan.deliberate:
                return PLANNED, (f"planned: run {start_info.run_id} started from plan "
                                 f"{plan.id} ({plan.position})")
            return UNEXPLAINED, (f"run {start_info.run_id} started from plan {plan.id} "
                                 f"({plan.position}), made before other batches were "
                                 "journaled: the plan was out of date")
        if start_info.how == "checkpoint" and plan is not None and plan.rolled_back \
                and kind == OVERLAP and at.run.offsets.get(at.key) == start:
            return PLANNED, rollback_reason(plan, start_info.run_id)
        if start_info.how == "checkpoint":
            replayed = self.replayed(start_info, at.ref.batch_id)
            if replayed is not None:
                return PLANNED, replayed
            return UNEXPLAINED, (f"run {start_info.run_id} resumed a checkpoint (query id "
                                 f"{start_info.query_id}) that is not where the journal is "
                                 "(an older copy, or another job's)")
        if how == "inferred":
            return UNEXPLAINED, (f"run {start_info.run_id} started on a new checkpoint "
                                 "from offsets no recorded plan handed out")
        return UNEXPLAINED, f"the offsets of run {start_info.run_id} went there by themselves"

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def replayed(self, start: RunStart, batch_id: int) -> str | None:
        """A recovery's replay of an old batch (:func:`replay_reason`)."""
        starts = [(r.start.plan_id, r.start.query_id) for r in self.runs.values()]
        return replay_reason(self.plans, starts, start.run_id, start.query_id, batch_id)


def audit_batches(query_name: str, batches: Iterable[AuditBatch],
                  plans: Sequence[RecordedPlan] = (), *, since: datetime | None = None,
                  concurrent: Sequence[tuple[str, str]] = (),
                  standby: str | None = None) -> AuditReport:
    """Audit a query's journaled batches (in the journal's order) against the restart
    plans recorded for it; see the module docstring for the rules. ``since``: report
    only findings and runs whose first batch triggered at or after it (everything is
    still walked, to know where each partition stood). ``concurrent``: pairs of run
    ids that journaled batches at the same time (overlap.concurrent_runs).
    ``standby``: the journal was read on a standby, which this says how far behind
    it is (batch ids missing inside a run are then notes, not journal rows lost)."""
    walk = _Walk(plans, standby, query_name)
    for batch in batches:
        walk.step(batch)
    walk.settle()

    def kept(ref: HistoryRef) -> bool:
        return since is None or ref.trigger_at is None or ref.trigger_at >= since

    runs = [r.start for r in sorted(walk.runs.values(), key=lambda r: r.first_pk)]
    report = AuditReport(query_name, since, walk.count, len(walk.parts),
                         [r for r in runs if kept(r.first_batch)],
                         [f for f in walk.findings if kept(f.batches[0])],
                         concurrent=list(concurrent),
                         ignored=[note for plan in plans for note in plan.ignored])
    report.notes += _notes(runs, concurrent)
    report.notes += upgrade_notes(plans)
    report.notes += [note for ref, note in walk.notes if kept(ref)]
    return report


def _notes(runs: Sequence[RunStart], concurrent: Sequence[tuple[str, str]]) -> list[str]:
    notes = []
    if runs:
        notes.append(f"the journal begins with run {runs[0].run_id} "
                     f"({runs[0].first_batch.label()}): where it started is not checked")
    notes += [f"runs {a} and {b} journaled batches at the same time: two jobs under one "
              "name" for a, b in concurrent]
    return notes

