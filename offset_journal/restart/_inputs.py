"""What a plan is decided from (pure): the request, and the facts gathered for it, in
one typed group per place they are read from (each group is what one module of
``gather/`` returns; ``decide`` reads them and nothing else)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..kafka.mirror import POLICY_DEFAULT, ReplicationPolicy, SyncIndex
from ..offsets import KafkaOffsets
from ..overlap import RunSpan
from ..rows import AsyncTail, Batch, FlaggedProblem, RealTimeTail, RereadRun, SpoolLoss
from .model import (
    MODE_STATELESS,
    POSITION_AFTER,
    CheckpointState,
    Mode,
    Position,
    SinkFacts,
    SinkState,
)
from .request import PlanRequest

if TYPE_CHECKING:
    from ..kafka.admin import TimeLookup, TopicState
    from ..savepoint.model import Savepoint


@dataclass(frozen=True)
class ClusterFacts:
    """Which cluster the anchor's run read (``journaled``: its id, None when not
    journaled), which one the plan's bootstrap servers answered as (``now``; None: the
    cluster does not say), and the clusters of the other runs whose batches the plan
    reads (``others``: (run id, cluster id), a state-aware chain or the batch before)."""

    journaled: str | None
    now: str | None
    servers: str
    run_id: str
    others: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True)
class MirrorFacts:
    """MM2's offset syncs on the replica for source cluster ``alias``, by (source
    topic, partition), and how MM2 names the replica's topics."""

    alias: str
    syncs: SyncIndex
    policy: ReplicationPolicy = POLICY_DEFAULT


@dataclass(frozen=True)
class JournalFacts:
    """What the journal says around the plan's batch (``gather/journal.py``).

    ``anchor`` is the batch the plan is relative to: the last durable one (position
    "after"), or the one to reprocess (position "at"). For state-aware plans ``chain``
    is the anchor's checkpoint's batches in journal order ending with the anchor.
    ``before`` is the journaled batch just before the first batch re-read (the batch
    before ``anchor`` for "at", before ``chain[0]`` for state-aware); it supplies start
    offsets Spark does not report for a checkpoint's first batch. ``last_candidates``:
    the batch each of the journal's orders calls last (default plans only). ``runs``:
    the runs started by the anchor's time; ``database_now``: the journal database's
    clock (a trigger time ahead of it is flagged). ``problems``: what the journal
    flagged on the query's batches when it wrote them (``problems_cut``: more were
    flagged than it holds). ``async_tail``: the anchor's run's last batches when Spark
    ran it with async progress tracking (their end offsets may not be final);
    ``real_time``: the anchor's run ran in real-time mode. ``spool_losses``: batch
    events a full listener spool dropped.
    """

    anchor: Batch
    position: Position = POSITION_AFTER
    chain: Sequence[Batch] = ()
    before: Batch | None = None
    last_candidates: Sequence[Batch] = ()
    runs: Sequence[RunSpan] = ()
    database_now: datetime | None = None
    problems: Sequence[FlaggedProblem] = ()
    problems_cut: bool = False
    async_tail: AsyncTail | None = None
    real_time: RealTimeTail | None = None
    spool_losses: Sequence[SpoolLoss] = ()


@dataclass(frozen=True)
class LocationFacts:
    """What the places on storage hold now (``gather/locations.py``): the NEW
    checkpoint location (``checkpoint``) and output path (``output``) (None: not
    given), and per Delta source path of the anchor, the table id there now
    (``delta_tables``; a path mapped to None: no table there; to an exception: it could
    not be read; the field None: not gathered, nothing checked)."""

    checkpoint: CheckpointState | None = None
    output: SinkState | None = None
    delta_tables: Mapping[str, str | None | Exception] | None = None


@dataclass(frozen=True)
class KafkaFacts:
    """What the Kafka cluster says (``gather/kafka.py``; all None: not asked).

    ``state``: the partitions and log ranges of the plan's topics. ``time_lookup``
    (position "from-time"): per partition the first offset at or after the request's
    ``from_time`` (None: no such record, so the log end); ``reread``: the journaled
    batches that reads again. ``cluster``: the id of the cluster the anchor's run read
    and of the one asked now; ``mirror``: MM2's offset syncs on a replica (a translated
    plan). ``real_time_ends``: per partition, the first offset the cluster timestamps
    after a real-time run stopped (None: none).
    """

    state: TopicState | None = None
    time_lookup: TimeLookup | None = None
    reread: Sequence[RereadRun] = ()
    cluster: ClusterFacts | None = None
    mirror: MirrorFacts | None = None
    real_time_ends: TimeLookup | None = None


@dataclass(frozen=True)
class OldBatch:
    """One ``offsets/N`` of the old checkpoint as plain data, read once: whether
    ``commits/N`` exists, why the file could not be read (``problem``; None: it was),
    each source's offset as parsed JSON (``offsets``) and, where it has Kafka's shape,
    as topic -> partition -> offset (``kafka``; None for another source), and its times."""

    batch_id: int
    committed: bool
    problem: str | None = None
    offsets: tuple[Any, ...] = ()
    kafka: tuple[KafkaOffsets | None, ...] = ()
    timestamp: datetime | None = None
    watermark: datetime | None = None


@dataclass(frozen=True)
class OldCheckpoint:
    """The old query's checkpoint as the sink step reads it (``gather/sink.py``): its
    batches by id, the Kafka offsets its batch 0 started from (``initial``, one per
    source, None for a source without any; None: no source known), and the highest
    batch it committed (``last_committed``)."""

    path: str
    query_id: str | None
    batches: tuple[OldBatch, ...] = ()
    initial: tuple[KafkaOffsets | None, ...] | None = None
    last_committed: int | None = None


@dataclass(frozen=True)
class OldQueryFacts:
    """The OLD query's sink and checkpoint (``gather/sink.py``). ``sink``: the sink as
    its own commit log says (None: not asked, or no sink the journal names);
    ``checkpoint``: the old query's checkpoint, read and digested into plain data (the
    ``offsets/N`` of the batches the sink holds beyond the journal); ``batch``: the
    journaled batch whose id is the sink's last, when the sink is behind the journal
    (its end offsets count what the sink lacks); ``run_id``: the journaled run of the
    old checkpoint's query id the batches taken from the sink are journaled as (None:
    the anchor's run)."""

    sink: SinkFacts | None = None
    checkpoint: OldCheckpoint | None = None
    batch: Batch | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class SavepointFacts:
    """A plan from a savepoint (``gather/savepoint.py``): the savepoint (``loaded``,
    checked; the anchor is its batch; None: no savepoint asked) and the journal's last
    batch (``latest``), to say what is read again."""

    loaded: Savepoint | None = None
    latest: Batch | None = None


@dataclass(frozen=True)
class PlanInputs:
    """Everything a plan is decided from: the ``request`` (what the person asked; see
    :class:`~.request.PlanRequest`) and one typed group per place the facts were read
    from (no I/O here; ``savepoint_facts``: the request's ``savepoint`` is the one
    asked for). ``sink_taken`` is set by the plan: the batches it took from the
    sink and the old checkpoint (the anchor is the last). ``command``: who hands the
    plan out (:data:`~.record.COMMANDS`): its advice names that interface's way (a
    command's, or the Python API's)."""

    request: PlanRequest
    journal: JournalFacts
    locations: LocationFacts = field(default_factory=LocationFacts)
    kafka: KafkaFacts = field(default_factory=KafkaFacts)
    old_query: OldQueryFacts = field(default_factory=OldQueryFacts)
    savepoint_facts: SavepointFacts = field(default_factory=SavepointFacts)
    sink_taken: Sequence[Batch] = ()
    command: str = "api"

    @property
    def anchor(self) -> Batch:
        """The batch the plan is relative to (:attr:`JournalFacts.anchor`)."""
        return self.journal.anchor

    @property
    def mode(self) -> Mode:
        """The request's mode, stateless when it names none."""
        return self.request.mode or MODE_STATELESS
