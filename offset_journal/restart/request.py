"""What a person asks a plan for (pure): :class:`PlanRequest`, checked once
(:meth:`PlanRequest.checked`). Its fields are the one list of a plan's options: the
keyword arguments of :func:`~offset_journal.restart.plan_restart` and
:func:`~offset_journal.restart.compute_plan` are checked against them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import RestartError
from ..formatting import format_time
from ..kafka.mirror import POLICY_DEFAULT, REPLICATION_POLICIES, ReplicationPolicy, check_alias
from ..values import parse_timeout
from .model import (
    MODE_STATE_AWARE,
    MODE_STATELESS,
    MODES,
    POSITION_AFTER,
    POSITION_AT,
    POSITION_FROM_TIME,
    POSITION_SAVEPOINT,
    SINK_DELTA,
    Mode,
    Position,
    SinkKind,
)

SEED_ALL = "all"
"""``--seed all``: the new query seeds every old operator's state."""
SINK_NONE = "none"
"""``--sink none``: no sink check, not even the one the journal's sink description allows."""
DELTA_PREFIX = "delta:"


def sink_spec(text: str) -> tuple[SinkKind | None, str]:
    """``--sink``'s value as (kind, path): ``delta:PATH`` a Delta table, a plain PATH a
    file sink's output path (or a Delta table, when a ``_delta_log`` is found there: the
    edge decides, None here)."""
    if text.startswith(DELTA_PREFIX):
        return SINK_DELTA, text[len(DELTA_PREFIX):]
    return None, text


def check_request(mode: str, position: str) -> None:
    """Raise RestartError for an unknown mode or position, or a state-aware plan asked
    to start AT a batch. The one check of a plan's request (library, CLI and jobs)."""
    if mode not in MODES:
        raise RestartError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if position not in (POSITION_AFTER, POSITION_AT, POSITION_FROM_TIME, POSITION_SAVEPOINT):
        raise RestartError(f"unknown position {position!r}")
    if mode == MODE_STATE_AWARE and position == POSITION_AT:
        raise RestartError("a state-aware plan starts after a batch: use as_of (--as-of), "
                           "not batch (--batch)")
    if mode == MODE_STATE_AWARE and position == POSITION_FROM_TIME:
        raise RestartError("a state-aware plan starts after a batch: use as_of (--as-of), "
                           "not from_time (--from-time): a record time does not say which "
                           "windows were emitted")


@dataclass(frozen=True)
class PlanRequest:
    """What a person asks a plan for.

    ``as_of`` starts after the last batch triggered at or before it; ``batch`` =
    (run id, batch id) starts AT that batch (reprocessing it). ``mode="state-aware"``
    makes the state-aware plan (``window``: the window length). ``subscribe``: the
    topics the new job subscribes to, when known; with ``bootstrap_servers``,
    partitions of those topics missing from the journal start at earliest.
    ``checkpoint`` is refused when it already holds offsets; ``output_path`` is
    checked for a file sink log. ``bootstrap_servers`` (with ``kafka_config`` and
    ``kafka_timeout`` in seconds) checks the plan against the Kafka cluster.
    ``allow_data_loss`` starts partitions whose planned offsets were deleted (retention)
    at their log start, with a warning, instead of refusing; ``recreated_topics`` names
    topics deleted and created again, read from earliest, with a warning, instead of
    from the old topic's offsets (see :class:`~._inputs.PlanInputs`); ``recreated_tables``
    names Delta table paths deleted and created again, read from their start.
    ``from_time`` starts each partition at its first record timestamped at or after it
    (looked up on the cluster, so it needs ``bootstrap_servers``); not with ``as_of``
    or ``batch``, and not in the future. ``translate_from``: the cluster at
    ``bootstrap_servers`` is a MirrorMaker 2 replica of the journaled one, which MM2
    calls this alias: the journal's offsets are translated through MM2's offset syncs
    (``replication_policy``: how MM2 names the replica's topics, default or identity;
    only with ``translate_from``, and default when not given: :attr:`policy`).
    ``accept_cluster``: the id of the cluster at ``bootstrap_servers``, accepted as the
    one the journal's runs read although the journal says another (a writer role can
    fill a run's empty cluster id with any value): the refusal is overruled, with a
    warning, and recorded as the plan's decision.
    ``savepoint``: a savepoint's id in the journal or its directory: the plan starts
    right after the savepoint's batch (the state's), not the journal's last; ``seed``:
    the old operators (ids, or ``"all"``) whose state the new query seeds a
    transformWithState with (``initial_state``); any other operator's state is lost,
    which the plan refuses unless ``discard_state`` (recorded as the plan's decision).
    ``restore``: every old operator's state is written straight into the new checkpoint
    before its first batch (:func:`offset_journal.state.restore_savepoint`,
    the JVM path, built-in operators too), not seeded in Python; not with ``seed``.
    ``restore_rules``: what the restore itself declares (``state restore``'s renamed
    fields, the ``matched`` flag of a join's rows, the time zone of a date; plain JSON),
    recorded with the plan as its decisions; only with ``restore``.
    ``unrecorded_savepoint``: accept a savepoint directory whose manifest the journal did
    not record (one made with ``--no-record``), which is otherwise refused: only its own
    checksum vouches for it (recorded as the plan's decision).
    ``old_sink``: the OLD query's sink, whose own commit log says which batches it holds
    (``PATH`` a file sink's output path, ``delta:PATH`` a Delta table; ``"none"``: no
    check; None: the sink the journal's sink description names, where it can); with
    ``txn_app_id`` the ``txnAppId`` a foreachBatch wrote Delta with. ``old_checkpoint``:
    the old query's checkpoint, whose ``offsets/N`` give the end offsets of batches the
    sink holds beyond the journal (see :mod:`~offset_journal.restart._sink`).
    """

    query_name: str
    source: int | None = None
    as_of: datetime | None = None
    batch: tuple[str, int] | None = None
    mode: Mode | None = None
    window: timedelta | None = None
    subscribe: Sequence[str] | None = None
    checkpoint: str | None = None
    output_path: str | None = None
    bootstrap_servers: str | None = None
    kafka_config: Mapping[str, Any] | None = None
    kafka_timeout: float = 10
    allow_data_loss: bool = False
    recreated_topics: Sequence[str] = ()
    recreated_tables: Sequence[str] = ()
    from_time: datetime | None = None
    translate_from: str | None = None
    replication_policy: ReplicationPolicy | None = None
    accept_cluster: str | None = None
    savepoint: str | int | None = None
    seed: Sequence[int] | str = ()
    discard_state: bool = False
    unrecorded_savepoint: bool = False
    old_sink: str | None = None
    txn_app_id: str | None = None
    old_checkpoint: str | None = None
    restore: bool = False
    restore_rules: Mapping[str, Any] | None = None

    @property
    def policy(self) -> ReplicationPolicy:
        """How MM2 named the replica's topics: the policy given, else its default."""
        return self.replication_policy or POLICY_DEFAULT

    @property
    def position(self) -> Position:
        if self.savepoint is not None:
            return POSITION_SAVEPOINT
        if self.from_time is not None:
            return POSITION_FROM_TIME
        return POSITION_AT if self.batch is not None else POSITION_AFTER

    def checked(self) -> PlanRequest:
        """This request with defaults filled in; RestartError when it makes no sense."""
        mode = self.mode or MODE_STATELESS
        check_request(mode, POSITION_AFTER)  # an unknown mode first
        if self.as_of is not None and self.batch is not None:
            raise RestartError("give as_of or batch, not both")
        if self.from_time is not None and (self.as_of is not None or self.batch is not None):
            raise RestartError("give from_time (a record time) or as_of/batch, not both")
        check_request(mode, self.position)
        from_time = _checked_from_time(self.from_time, self.bootstrap_servers)
        as_of = self.as_of
        if as_of is not None and as_of.tzinfo is None:
            as_of = as_of.replace(tzinfo=timezone.utc)
        if self.window is not None and self.window <= timedelta(0):
            raise RestartError("the window length must be positive")
        if self.window is not None and mode != MODE_STATE_AWARE:
            raise RestartError("a window length (--window) applies to state-aware plans "
                               "only (--state-aware)")
        try:
            timeout = parse_timeout(self.kafka_timeout)
        except ValueError as exc:  # a negative or NaN timeout would wait forever
            raise RestartError(str(exc)) from None
        recreated = ((self.recreated_topics,) if isinstance(self.recreated_topics, str)
                     else tuple(self.recreated_topics))
        if any(not isinstance(t, str) or not t.strip() for t in recreated):
            raise RestartError(f"bad recreated topic name in {list(recreated)!r}")
        tables = ((self.recreated_tables,) if isinstance(self.recreated_tables, str)
                  else tuple(self.recreated_tables))
        if any(not isinstance(t, str) or not t.strip() for t in tables):
            raise RestartError(f"bad recreated table path in {list(tables)!r}")
        if self.allow_data_loss and not self.bootstrap_servers:
            raise RestartError("accepting data loss (allow_data_loss, --allow-data-loss) starts "
                               "at the cluster's log starts: give bootstrap servers "
                               "(--bootstrap-servers)")
        self._check_translation()
        self._check_accepted_cluster()
        self._check_sink()
        seed = self._checked_savepoint(mode)
        return replace(self, mode=mode, as_of=as_of, kafka_timeout=timeout,
                       recreated_topics=recreated, recreated_tables=tables,
                       from_time=from_time, seed=seed)

    def _checked_savepoint(self, mode: Mode) -> tuple[int, ...] | str:
        """The operators to seed (``"all"`` or ids); RestartError for seeding without a
        savepoint, or a savepoint with another starting point."""
        seed = self.seed
        if isinstance(seed, str):
            if seed != SEED_ALL:
                raise RestartError(f"bad operator to seed {seed!r}: an operator id, or all")
            ids: tuple[int, ...] | str = SEED_ALL
        else:
            if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in seed):
                raise RestartError(f"bad operator to seed in {list(seed)!r}: operator ids "
                                   "are numbers >= 0")
            ids = tuple(sorted(set(seed)))
        if self.restore_rules is not None and (
                not self.restore or not isinstance(self.restore_rules, Mapping)):
            raise RestartError("restore rules (restore_rules) are what a restore declares: "
                               "they apply to a plan with restore (--restore) only")
        if self.savepoint is None:
            if ids or self.discard_state or self.unrecorded_savepoint or self.restore:
                what = ("--seed" if ids else "--discard-state" if self.discard_state
                        else "--restore" if self.restore else "--unrecorded-savepoint")
                raise RestartError(f"{what} applies to a plan from a savepoint: give "
                                   "--savepoint ID|DIR too")
            return ids
        if self.as_of is not None or self.batch is not None or self.from_time is not None:
            raise RestartError("a plan from a savepoint starts right after the savepoint's "
                               "batch: give --savepoint or --as-of/--batch/--from-time, not "
                               "both")
        if mode == MODE_STATE_AWARE:
            raise RestartError("give --savepoint (carry the state) or --state-aware (rebuild "
                               "a windowed aggregation's state by rewinding), not both")
        if self.restore and ids:
            raise RestartError("give --restore (the state written into the new checkpoint, "
                               "JVM) or --seed (a transformWithState seeded in Python), not "
                               "both")
        return ids

    def _check_sink(self) -> None:
        """RestartError for an empty sink or checkpoint path, or a txnAppId without the
        Delta table it names writes to."""
        for what, value in (("sink (--sink)", self.old_sink),
                            ("old checkpoint (--old-checkpoint)", self.old_checkpoint),
                            ("txnAppId (--txn-app-id)", self.txn_app_id)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise RestartError(f"bad {what}: {value!r}")
        if self.old_sink is not None and not sink_spec(self.old_sink)[1].strip():
            raise RestartError(f"bad sink (--sink) {self.old_sink!r}: give delta:PATH or "
                               "PATH")
        if self.txn_app_id is not None and (
                self.old_sink is None or sink_spec(self.old_sink)[0] != SINK_DELTA):
            raise RestartError("--txn-app-id (txn_app_id) names the txnAppId a foreachBatch "
                               "wrote a Delta table with: give the table too (--sink "
                               "delta:PATH)")
        if (self.old_checkpoint is not None and self.checkpoint is not None
                and self.old_checkpoint.rstrip("/") == self.checkpoint.rstrip("/")):
            raise RestartError(f"--old-checkpoint {self.old_checkpoint} is the NEW "
                               "checkpoint (--checkpoint): give the old query's")

    def _check_translation(self) -> None:
        """RestartError for a policy MM2 lacks, an alias it could not have, or a
        translation with no replica to read the syncs on or with a record time."""
        if self.replication_policy not in (None, *REPLICATION_POLICIES):
            raise RestartError(f"unknown replication policy {self.replication_policy!r}: use "
                               f"one of {', '.join(REPLICATION_POLICIES)}")
        if self.translate_from is None:
            if self.replication_policy is not None:
                raise RestartError(
                    f"--replication-policy {self.replication_policy} (replication_policy) says "
                    "how MM2 named the replica's topics: it applies to a translated plan "
                    "only; give --translate-from ALIAS too, or drop it")
            return
        try:
            check_alias(self.translate_from)
        except ValueError as exc:
            raise RestartError(str(exc)) from None
        if not self.bootstrap_servers:
            raise RestartError("a translated plan (--translate-from) reads MM2's offset syncs "
                               "on the replica: give its bootstrap servers "
                               "(--bootstrap-servers)")
        if self.from_time is not None:
            raise RestartError("give --from-time or --translate-from, not both: record times "
                               "are the same on the replica, so a record-time plan needs no "
                               "translation")

    def _check_accepted_cluster(self) -> None:
        """RestartError for an accepted cluster with no cluster to check, or with a
        translation (a replica is another cluster: its offsets are not the journal's)."""
        if self.accept_cluster is None:
            return
        if not isinstance(self.accept_cluster, str) or not self.accept_cluster.strip():
            raise RestartError(f"bad accepted cluster id {self.accept_cluster!r}")
        if not self.bootstrap_servers:
            raise RestartError("accepting a Kafka cluster (--accept-cluster) overrules the "
                               "check of the cluster at the bootstrap servers: give them "
                               "(--bootstrap-servers)")
        if self.translate_from is not None:
            raise RestartError("give --accept-cluster or --translate-from, not both: a "
                               "replica is another cluster, whose offsets are translated, "
                               "not accepted")


def _checked_from_time(when: datetime | None, servers: str | None) -> datetime | None:
    """A record time: UTC when naive; RestartError in the future or without a cluster."""
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    if when < datetime(1970, 1, 1, tzinfo=timezone.utc):
        # Kafka reads negative timestamps as its own markers (-1 latest, -2 earliest).
        raise RestartError(f"the record time {format_time(when)} is before 1970: Kafka "
                           "record timestamps start at the Unix epoch")
    now = datetime.now(timezone.utc)
    if when > now:
        raise RestartError(f"the record time {format_time(when)} is in the future (now "
                           f"{format_time(now)}): no record can be timestamped after it yet")
    if not servers:
        raise RestartError("a record-time plan (from_time, --from-time) looks the time up on "
                           "the Kafka cluster: give bootstrap servers (--bootstrap-servers)")
    return when


REQUEST_FIELDS = frozenset(f.name for f in fields(PlanRequest))
"""The names of :class:`PlanRequest`'s fields: the one list of a plan's options."""
