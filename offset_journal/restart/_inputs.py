"""What a plan is decided from (pure): the request, and the facts gathered for it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

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
from .translate import ClusterFacts, MirrorFacts

if TYPE_CHECKING:
    from ..checkpoint.model import Checkpoint
    from ..kafka.admin import TimeLookup, TopicState
    from ..savepoint.model import Savepoint


@dataclass(frozen=True)
class PlanInputs:
    """Everything a plan is decided from: the ``request`` (what the person asked; see
    :class:`~.request.PlanRequest`) and what was gathered for it (journal data, the
    cluster, the new checkpoint location; no I/O here).

    ``anchor`` is the batch the plan is relative to: the last durable one (position
    "after"), or the one to reprocess (position "at"). For state-aware plans ``chain``
    is the anchor's checkpoint's batches in journal order ending with the anchor.
    ``before`` is the journaled batch just before the first batch re-read (the batch
    before ``anchor`` for "at", before ``chain[0]`` for state-aware); it supplies start
    offsets Spark does not report for a checkpoint's first batch. ``kafka_state`` is
    topic_state() of the cluster (None: not checked). ``checkpoint_state`` and ``sink``:
    what the new checkpoint location and the output path hold. ``database_now`` is the
    journal database's clock: a trigger time ahead of it is flagged. ``problems``: what
    the journal flagged on the query's batches when it wrote them
    (Journal.flagged_problems): an error on the batch whose end offsets the plan starts
    from, a warning on any other batch. ``time_lookup`` (position "from-time"): per
    partition the first offset at or after the request's ``from_time`` (None: no such
    record, so the log end); ``reread``: the journaled batches that reads again.
    ``async_tail``: the anchor's run's last batches when Spark ran it with async
    progress tracking (their end offsets may not be final). ``cluster``: the id of the
    cluster the anchor's run read and of the one asked now (None: no bootstrap
    servers); ``mirror``: MM2's offset syncs on a replica (a translated plan).
    ``loaded_savepoint``: the savepoint a plan starts from (loaded and checked; the anchor is
    its batch), and ``latest`` the journal's last batch, to say what is read again.
    ``real_time``: the anchor's run ran in real-time mode; ``real_time_ends``: per
    partition, the first offset the cluster timestamps after it stopped (None: none).
    ``sink_log``: the OLD query's sink as its own commit log says (None: not asked, or no
    sink the journal names); ``sink_checkpoint``: the old query's checkpoint, read
    (``offsets/N`` of the batches the sink holds beyond the journal); ``sink_batch``: the
    journaled batch whose id is the sink's last, when the sink is behind the journal
    (its end offsets count what the sink lacks); ``sink_run_id``: the journaled run of the
    old checkpoint's query id the batches taken from the sink are journaled as (None:
    the anchor's run). ``sink_taken`` is set by the plan: the
    batches it took from the sink and the old checkpoint (the anchor is the last).

    Read-only facts the plan only warns or errs about: ``last_candidates``, the batch
    each of the journal's orders calls last (default plans: ``check_last_batch``);
    ``problems_cut``, more batches were flagged than ``problems`` holds;
    ``spool_losses``, batch events a full listener spool dropped; ``delta_tables``, per
    Delta source path of the anchor, the table id there now (a path mapped to None: no
    table there; to an exception: it could not be read); the field None: not gathered,
    nothing checked.
    ``command``: who hands the plan out (:data:`~.record.COMMANDS`): its advice names
    that interface's way (a command's, or the Python API's).
    """

    request: PlanRequest
    anchor: Batch
    position: Position = POSITION_AFTER
    chain: Sequence[Batch] = ()
    before: Batch | None = None
    kafka_state: TopicState | None = None
    runs: Sequence[RunSpan] = ()
    checkpoint_state: CheckpointState | None = None
    sink: SinkState | None = None
    database_now: datetime | None = None
    problems: Sequence[FlaggedProblem] = ()
    time_lookup: TimeLookup | None = None
    reread: Sequence[RereadRun] = ()
    async_tail: AsyncTail | None = None
    cluster: ClusterFacts | None = None
    mirror: MirrorFacts | None = None
    loaded_savepoint: Savepoint | None = None
    latest: Batch | None = None
    real_time: RealTimeTail | None = None
    real_time_ends: TimeLookup | None = None
    sink_log: SinkFacts | None = None
    sink_checkpoint: Checkpoint | None = None
    sink_batch: Batch | None = None
    sink_run_id: str | None = None
    sink_taken: Sequence[Batch] = ()
    last_candidates: Sequence[Batch] = ()
    problems_cut: bool = False
    spool_losses: Sequence[SpoolLoss] = ()
    delta_tables: Mapping[str, str | None | Exception] | None = None
    command: str = "api"

    @property
    def mode(self) -> Mode:
        """The request's mode, stateless when it names none."""
        return self.request.mode or MODE_STATELESS
