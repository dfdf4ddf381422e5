"""The I/O edge: gather a plan's inputs from the journal, the checkpoint location, the
output path and the Kafka cluster in one step (:func:`gather`, into one frozen
:class:`~._inputs.PlanInputs`), then let :func:`~._plan.decide` decide from it alone.

:func:`plan_from_journal` is handed an open :class:`~offset_journal.journal.Journal`;
:func:`plan_restart` is the thin wrapper that opens one from a database URL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..descriptions import described_sink, is_foreach_batch_sink
from ..errors import CheckpointError, JournalError, RestartError
from ..formatting import first_line, format_time
from ..journal import FLAGGED_PROBLEMS, Batch, Journal, SpoolLoss
from ..kafka.admin import TopicState, cluster_id, offsets_for_time, read_offset_syncs, topic_state
from ..kafka.mirror import index_syncs, offset_syncs_topic, replica_topic
from ..overlap import span_of
from ..rows import KIND_DELTA, RealTimeTail, order_key, source_kind
from ..wording import count
from ._delta_log import delta_table_id
from ._from_time import chosen_offsets, epoch_millis
from ._inputs import PlanInputs
from ._other_sources import delta_path
from ._plan import decide, refuse_used_checkpoint
from .kafka_offsets import kafka_topics
from .model import (
    MODE_STATE_AWARE,
    POSITION_AFTER,
    POSITION_AT,
    POSITION_SAVEPOINT,
    SINK_DELTA,
    SINK_FILE,
    CheckpointState,
    Position,
    RestartPlan,
    SinkFacts,
    SinkFoundBy,
    SinkKind,
    SinkState,
)
from .request import SINK_NONE, PlanRequest, sink_spec
from .translate import ClusterFacts, MirrorFacts

if TYPE_CHECKING:
    from ..checkpoint.model import Checkpoint
    from ..kafka.admin import TimeLookup
    from ..savepoint.model import Savepoint

log = logging.getLogger(__name__)

Locations = tuple[CheckpointState | None, SinkState | None]
"""What the new checkpoint location and the output path hold (None: not given)."""


# --------------------------------------------------------------------------- entry points


def plan_restart(database_url: str | None, query: str | PlanRequest, *,
                 journal: Journal | None = None, record: bool = True, command: str = "api",
                 **options: Any) -> RestartPlan:
    """Plan how a query starts on a new checkpoint; see the package docstring. ``query``
    is the query name with :class:`PlanRequest`'s other fields as keyword options, or a
    whole request (as :func:`offset_journal.cli.plan_args.request_from_args` builds one).
    Opens the journal at ``database_url`` unless ``journal`` is given.

    The plan handed out is recorded in the journal (``restart_plans``; its id in
    ``plan.plan_id``) unless ``record=False``; a journal that refuses it leaves the
    plan usable and says why in ``plan.record_problem``
    (:mod:`offset_journal.restart.record`). ``command``: who hands it out (``api``,
    ``plan``, ``starting-offsets``). Link the run started from it with
    ``Journal.link_plan(plan.plan_id, query.runId)``.
    Raises RestartError, CheckpointError, JournalError or KafkaAdminError (all OffsetJournalError).
    """
    from .record import record as recorded

    if isinstance(query, PlanRequest):
        if options:
            raise RestartError(f"give a PlanRequest or options, not both: {sorted(options)}")
        request = query.checked()
    else:
        request = PlanRequest(query, **options).checked()
    places = locations(request)  # before the journal is opened: refusing changes nothing
    with _opened(database_url, journal) as j:
        plan = plan_from_journal(j, request, places, command)
        # The write step, after the plan is made: gathering its facts wrote nothing.
        return recorded(j, plan, request, command).onto(plan) if record else plan


def plan_from_journal(journal: Journal, request: PlanRequest,
                      places: Locations | None = None, command: str = "api") -> RestartPlan:
    """The plan for a checked ``request``, from an open journal; ``places``: the
    request's :func:`locations` when already read; ``command``: who hands it out. Two
    steps: :func:`gather` reads every fact, :func:`~._plan.decide` decides from them
    alone."""
    plan = decide(gather(journal, request, places, command))
    for w in plan.warnings:
        log.info("restart plan for %s: %s", request.query_name, w)
    return plan


@contextmanager
def _opened(database_url: str | None, journal: Journal | None) -> Iterator[Journal]:
    """``journal`` as is, else a journal opened at ``database_url`` and closed after."""
    if journal is not None:
        yield journal
        return
    with Journal(database_url) as own:
        yield own


# --------------------------------------------------------------------------- gather


def gather(journal: Journal, request: PlanRequest,
           places: Locations | None = None, command: str = "api") -> PlanInputs:
    """Every fact a plan for ``request`` may need, read once (the I/O step), as one
    frozen :class:`~._inputs.PlanInputs`: the journal's rows, the old checkpoint and
    its sink, the new locations, the cluster and its mirror, the savepoint, the Delta
    tables. Raises what cannot be read (a batch not journaled, a used checkpoint)."""
    ckpt_state, sink = places if places is not None else locations(request)
    old_checkpoint = read_old_checkpoint(request)
    found = journal_anchor(journal, request)
    sink_log = sink_facts(request, found.anchor, old_checkpoint)
    return PlanInputs(
        request, found.anchor, position=found.position, chain=found.chain,
        before=found.before, checkpoint_state=ckpt_state, sink=sink,
        loaded_savepoint=found.savepoint, latest=found.latest,
        last_candidates=found.candidates,
        **journal_facts(journal, request, found.anchor),
        cluster=cluster_facts(journal, request, found),
        mirror=mirror_facts(request),
        sink_log=sink_log, sink_checkpoint=old_checkpoint,
        sink_batch=sink_batch(journal, request, found.anchor, sink_log),
        sink_run_id=sink_run_id(journal, request, old_checkpoint),
        **real_time_facts(journal, request, found),
        spool_losses=_spool_losses(journal, request.query_name),
        **kafka_facts(journal, request, found),
        delta_tables=delta_tables(found.anchor),
        command=command,
    )


@dataclass(frozen=True)
class Anchored:
    """Where the journal stands for a request: the anchor and the batches around it."""

    anchor: Batch
    position: Position = POSITION_AFTER
    before: Batch | None = None
    chain: Sequence[Batch] = ()
    candidates: Sequence[Batch] = ()
    savepoint: Savepoint | None = None
    latest: Batch | None = None


def journal_anchor(journal: Journal, request: PlanRequest) -> Anchored:
    """The anchor (the batch asked for, the last one at ``as_of``, or the last one),
    the batch before what is re-read, and a state-aware plan's chain."""
    name = request.query_name
    if request.savepoint is not None:
        return from_savepoint(journal, request)
    # The default plan needs every order's last batch (check_last_batch); the
    # journal's own comes first.
    default = request.batch is None and request.as_of is None
    candidates = journal.last_batch_candidates(name) if default else []
    last = candidates[0] if candidates else journal.last_batch(name)
    if last is None:
        raise RestartError(f"no journaled batches for query {name!r}")
    if request.batch is not None:
        run_id, batch_id = request.batch
        anchor = journal.batch(name, run_id, batch_id)
        if anchor is None:
            raise RestartError(
                f"no journaled batch {batch_id} of run {run_id} for query {name!r}")
        found = Anchored(anchor, POSITION_AT, batch_before(journal, name, anchor))
    elif request.as_of is not None:
        at = journal.batch_as_of(name, request.as_of)
        if at is None:
            raise RestartError(f"no journaled batch of query {name!r} triggered at or before "
                               f"{format_time(request.as_of)}")
        found = Anchored(at)
    else:  # after it, or from a record time
        found = Anchored(last, request.position, candidates=candidates)
    if request.mode == MODE_STATE_AWARE:
        chain = journal.state_chain(found.anchor, request.window)
        found = replace(found, chain=chain, before=batch_before(journal, name, chain[0]))
    return found


def from_savepoint(journal: Journal, request: PlanRequest) -> Anchored:
    """A plan from a savepoint: the savepoint found and checked (its manifest and every
    file against the checksums, of this query), its batch as the anchor, and the
    journal's last batch (what the plan reads again)."""
    from ..savepoint import load_savepoint

    assert request.savepoint is not None
    name = request.query_name
    savepoint = load_savepoint(request.savepoint, journal, query_name=name,
                               unrecorded=request.unrecorded_savepoint)
    m = savepoint.manifest
    anchor = journal.batch(name, m.run_id, m.batch_id)
    if anchor is None:
        raise RestartError(f"batch {m.batch_id} of run {m.run_id}, the batch of "
                           f"{savepoint.label()}, is no longer in the journal (pruned?): "
                           "its end offsets cannot be checked")
    return Anchored(anchor, POSITION_SAVEPOINT, batch_before(journal, name, anchor),
                    savepoint=savepoint, latest=journal.last_batch(name))


def journal_facts(journal: Journal, request: PlanRequest, anchor: Batch) -> dict[str, Any]:
    """The journal's facts around the anchor: the runs started by its time (later ones
    do not matter to it), the database's clock, the problems flagged (the most recent
    FLAGGED_PROBLEMS) and the anchor's run's async tail."""
    name = request.query_name
    problems = journal.flagged_problems(name)
    return {
        "runs": [span_of(b) for b in journal.run_bounds(name, started_until=anchor.trigger_at)],
        "database_now": journal.database_now(),
        "problems": problems[:FLAGGED_PROBLEMS],
        "problems_cut": len(problems) > FLAGGED_PROBLEMS,
        "async_tail": journal.async_tail(anchor),
    }


def batch_before(journal: Journal, query_name: str, batch: Batch) -> Batch | None:
    """The batch journaled just before ``batch`` (by trigger time; None without one)."""
    if batch.trigger_at is None:
        return None
    key = order_key(batch)
    earlier = [b for b in journal.history(query_name, until=batch.trigger_at, limit=8)
               if order_key(b) < key]
    return earlier[-1] if earlier else None


def _spool_losses(journal: Journal, query_name: str) -> list[SpoolLoss]:
    try:
        return journal.spool_losses(query_name)
    except JournalError:  # a journal not upgraded to spool_losses yet has none
        return []


# --------------------------------------------------------------------------- the sink


def read_old_checkpoint(request: PlanRequest) -> Checkpoint | None:
    """The old query's checkpoint, read (None: not given). CheckpointError when it is
    missing or not a checkpoint."""
    if request.old_checkpoint is None:
        return None
    from ..checkpoint import read_checkpoint

    return read_checkpoint(request.old_checkpoint)


def sink_facts(request: PlanRequest, anchor: Batch,
               old_checkpoint: Checkpoint | None = None) -> SinkFacts | None:
    """The OLD query's sink as its own log says: the one given (``--sink``), else the
    one the journal's sink description of the last batch names (``FileSink[...]``,
    ``DeltaSink[...]``), read wherever it lives (an object store with the credentials
    of the standard places, as a given one is: it is the only witness of a batch in
    flight); None when neither (or ``--sink none``). A Delta sink's txn appId is the
    old checkpoint's query id (the anchor's, without one)."""
    found_by: SinkFoundBy = "given"
    kind: SinkKind | None
    if request.old_sink == SINK_NONE:
        return None
    if request.old_sink is None:
        described = described_sink(anchor.sink_description)
        if described is None:
            return None
        kind, path = SINK_DELTA if described[0] == SINK_DELTA else SINK_FILE, described[1]
        found_by = "journaled"
    else:
        kind, path = sink_spec(request.old_sink)
    foreach = is_foreach_batch_sink(anchor.sink_description)
    query_id = (old_checkpoint.query_id if old_checkpoint is not None else None) \
        or anchor.query_id
    app_id = request.txn_app_id or (None if foreach else query_id)
    return read_sink(kind, path, found_by, app_id)


def read_sink(kind: SinkKind | None, path: str, found_by: SinkFoundBy,
              app_id: str | None) -> SinkFacts:
    """What the sink at ``path`` holds: a Delta table's ``txn`` of ``app_id`` (``kind``
    delta, or None with a ``_delta_log`` there), else a file sink's log. A log that
    cannot be read is said in ``problem``."""
    from ..checkpoint.sinks import read_delta_txns, read_file_sink_log

    try:
        if kind != SINK_FILE:
            txns = read_delta_txns(path)
            if txns is not None:
                last = txns.txns.get(app_id) if app_id is not None else None
                return SinkFacts(SINK_DELTA, path, found_by, True, last, app_id,
                                 tuple(sorted(txns.txns)), bytes_read=txns.bytes_read)
            if kind == SINK_DELTA:
                return SinkFacts(SINK_DELTA, path, found_by, exists=False, app_id=app_id)
        log = read_file_sink_log(path)
    except (CheckpointError, OSError, ValueError) as exc:
        return SinkFacts(kind or SINK_FILE, path, found_by, problem=first_line(exc),
                         app_id=None if kind == SINK_FILE else app_id)
    if log is None:
        return SinkFacts(SINK_FILE, path, found_by, exists=False)
    return SinkFacts(SINK_FILE, path, found_by, True, log.last_batch,
                     bytes_read=log.bytes_read)


def sink_batch(journal: Journal, request: PlanRequest, anchor: Batch,
               facts: SinkFacts | None) -> Batch | None:
    """The journaled batch the sink holds last, when that is before the journal's last
    (its end offsets count what the sink lacks); None otherwise."""
    if facts is None or facts.last_batch is None or facts.last_batch >= anchor.batch_id:
        return None
    return journal.batch(request.query_name, anchor.run_id, facts.last_batch)


def sink_run_id(journal: Journal, request: PlanRequest,
                old_checkpoint: Checkpoint | None) -> str | None:
    """The run the batches taken from the sink are journaled as: the newest journaled
    run of the old checkpoint's query id, else (a run the listener never journaled) the
    id `checkpoint import` gives that checkpoint; None without an old checkpoint."""
    if old_checkpoint is None or old_checkpoint.query_id is None:
        return None
    runs = [r for r in journal.runs(request.query_name)
            if r.query_id == old_checkpoint.query_id]
    if runs:
        newest = max(runs, key=lambda r: (r.started_at is not None, r.started_at or 0,
                                          r.last_trigger_at is not None))
        return newest.run_id
    from ..checkpoint.importing import checkpoint_run_id

    return checkpoint_run_id(old_checkpoint.query_id, old_checkpoint.path)


def journal_sink_batches(journal: Journal, plan: RestartPlan) -> None:
    """Journal the batches a plan took from the sink and the old checkpoint, before the
    plan is recorded (the journal is complete again: a plan made next starts where this
    one does). A journal that refuses them (a planner role, which may record plans only)
    costs a warning: the recorded plan keeps them, and the audit reads the run started
    from it as planned all the same."""
    import sqlalchemy as sa

    from ..checkpoint.importing import journal_batches
    from ..redaction import redact

    if not plan.sink_batches or not plan.ok:
        return
    first, last = plan.sink_batches[0], plan.sink_batches[-1]
    try:
        new = journal_batches(journal, plan.sink_batches)
    except (sa.exc.SQLAlchemyError, RestartError) as exc:
        reason = redact(first_line(getattr(exc, "orig", None) or exc))
        plan.plan_warnings.append(
            f"batches {first.batch_id}..{last.batch_id} of run {last.run_id}, taken from the "
            f"sink and the old checkpoint, were not journaled ({reason}): a plan made next "
            "does not know them; import the old checkpoint (`checkpoint import`) or plan "
            "as the writer")
        return
    plan.notes.append(f"Journaled {count(new, 'batch')} of run {last.run_id} taken from the "
                      f"sink and the old checkpoint (batches {first.batch_id}.."
                      f"{last.batch_id}; already there: {len(plan.sink_batches) - new}).")


# --------------------------------------------------------------------------- elsewhere


def checkpoint_state(path: str) -> CheckpointState:
    """What a NEW checkpoint location holds (a missing directory holds nothing)."""
    from ..checkpoint import is_new_checkpoint, read_checkpoint

    if is_new_checkpoint(path):
        return CheckpointState(str(path), False)
    try:
        ckpt = read_checkpoint(path)
    except CheckpointError as exc:
        # Offsets files exist, readable or not: Spark would still resume from them.
        log.debug("checkpoint %s holds offsets but cannot be read: %s", path, exc)
        return CheckpointState(str(path), True)
    last = ckpt.batches[-1].batch_id if ckpt.batches else None
    return CheckpointState(str(path), True, ckpt.query_id, last)


def locations(request: PlanRequest) -> Locations:
    """What the new checkpoint location and the output path hold; RestartError when
    the checkpoint location is not new."""
    ckpt_state = checkpoint_state(request.checkpoint) if request.checkpoint else None
    if ckpt_state is not None:
        refuse_used_checkpoint(ckpt_state)
    if not request.output_path:
        return ckpt_state, None
    from ..checkpoint import file_sink_metadata

    return ckpt_state, SinkState(str(request.output_path),
                                 file_sink_metadata(request.output_path))


def cluster_facts(journal: Journal, request: PlanRequest, found: Anchored) -> ClusterFacts | None:
    """Which clusters the runs the plan reads batches of read, and which one the
    bootstrap servers are (None: no bootstrap servers given)."""
    if not request.bootstrap_servers:
        return None
    anchor = found.anchor.run_id
    runs = {b.run_id for b in [*found.chain, found.before] if b is not None} - {anchor}
    return clusters_of(journal, request.bootstrap_servers, anchor, runs,
                       timeout=request.kafka_timeout, config=request.kafka_config)


def clusters_of(journal: Journal, servers: str, run_id: str, others: Iterable[str] = (), *,
                timeout: float = 10, config: Mapping[str, Any] | None = None) -> ClusterFacts:
    """The cluster ``run_id`` (and the ``others``) journaled, and the one at ``servers``
    now: what :func:`~.translate.refuse_other_cluster` holds a plan (or commit-group)
    to."""
    now = cluster_id(servers, timeout=timeout, config=config)
    return ClusterFacts(journal.run_cluster_id(run_id), now, servers, run_id,
                        tuple((r, journal.run_cluster_id(r)) for r in sorted(set(others))))


def mirror_facts(request: PlanRequest) -> MirrorFacts | None:
    """MM2's offset syncs on the replica, for a translated plan (None: not asked).
    RestartError when the replica has no syncs topic for the alias."""
    alias = request.translate_from
    if alias is None or not request.bootstrap_servers:
        return None
    topic = offset_syncs_topic(alias)
    syncs = read_offset_syncs(request.bootstrap_servers, topic,
                              timeout=max(request.kafka_timeout, 30), config=request.kafka_config)
    if syncs is None:
        raise RestartError(
            f"--translate-from {alias}: the cluster at {request.bootstrap_servers} has no "
            f"topic {topic}: is {alias} MM2's alias of the journaled cluster, and does MM2 "
            "keep its offset syncs on the replica (offset-syncs.topic.location = target)?")
    return MirrorFacts(alias, index_syncs(syncs), request.policy)


def cluster_state(request: PlanRequest, found: Anchored) -> TopicState | None:
    """The partitions and log ranges of the topics the plan names (None: not asked);
    on a replica (a translated plan), of the replica's topics."""
    if not request.bootstrap_servers:
        return None
    journaled = kafka_topics([*found.chain, found.anchor], request.source)
    if request.translate_from is not None:
        journaled = [replica_topic(t, request.translate_from, request.policy)
                     for t in journaled]
    topics = sorted(set(journaled) | set(request.subscribe or ()))
    if not topics:
        return None
    return topic_state(request.bootstrap_servers, topics, timeout=request.kafka_timeout,
                       config=request.kafka_config)


def real_time_ends(request: PlanRequest, found: Anchored, tail: RealTimeTail,
                   ) -> TimeLookup | None:
    """Per partition of the anchor's Kafka topics, the first offset timestamped after a
    real-time run stopped (None per partition: no such record); None when the cluster
    is not asked or the stop time is unknown."""
    if not request.bootstrap_servers or tail.stopped_by is None:
        return None
    topics = kafka_topics([found.anchor], request.source)
    if not topics:
        return None
    _state, lookup = offsets_for_time(request.bootstrap_servers, topics,
                                      epoch_millis(tail.stopped_by) + 1,
                                      timeout=request.kafka_timeout,
                                      config=request.kafka_config)
    return lookup


def time_facts(journal: Journal, request: PlanRequest, found: Anchored) -> dict[str, Any]:
    """A record-time plan's facts: the cluster's partitions, each one's first offset at
    or after ``request.from_time`` and the journaled batches that reads again.
    RestartError for a subscribed topic the cluster does not have."""
    assert request.from_time is not None and request.bootstrap_servers
    topics = sorted(set(kafka_topics([found.anchor], request.source))
                    | set(request.subscribe or ()))
    state, lookup = offsets_for_time(request.bootstrap_servers, topics,
                                     epoch_millis(request.from_time),
                                     timeout=request.kafka_timeout, config=request.kafka_config)
    unknown = sorted(set(request.subscribe or ()) - set(state))
    if unknown:
        raise RestartError(f"unknown topic {', '.join(unknown)}: not on the Kafka cluster at "
                           f"{request.bootstrap_servers}")
    if request.subscribe:
        lookup = {t: parts for t, parts in lookup.items() if t in request.subscribe}
    reread = journal.reread_runs(request.query_name, chosen_offsets(lookup, state),
                                 request.source)
    return {"kafka_state": state, "time_lookup": lookup, "reread": reread}


def kafka_facts(journal: Journal, request: PlanRequest, found: Anchored) -> dict[str, Any]:
    """The cluster's facts: a record-time plan's (:func:`time_facts`), else the topics'
    partitions and log ranges (:func:`cluster_state`)."""
    if request.from_time is not None:
        return time_facts(journal, request, found)
    return {"kafka_state": cluster_state(request, found)}


def real_time_facts(journal: Journal, request: PlanRequest, found: Anchored,
                    ) -> dict[str, Any]:
    """The anchor's run's real-time tail and, asked of the cluster, where each
    partition stood after it stopped (nothing when the run was not real-time)."""
    tail = journal.real_time_tail(found.anchor)
    if tail is None:
        return {}
    return {"real_time": tail, "real_time_ends": real_time_ends(request, found, tail)}


def delta_tables(anchor: Batch) -> dict[str, str | None | Exception]:
    """Per Delta source path of the anchor, the table id there now, from its
    transaction log (None: no table; the exception when it cannot be read)."""
    tables: dict[str, str | None | Exception] = {}
    for source in anchor.sources:
        path = delta_path(source.description) if source_kind(source) == KIND_DELTA else None
        if path is None or path in tables:
            continue
        try:
            tables[path] = delta_table_id(path)
        except (OSError, ValueError) as exc:
            tables[path] = exc
    return tables
