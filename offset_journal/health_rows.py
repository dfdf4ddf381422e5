"""What the journal returns for the fleet's health and its data losses: a query's
retention forecast facts, the losses recorded and their acknowledgements, the facts
the health check weighs per query (plain data; the rest of the journal's rows are in
:mod:`offset_journal.rows`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from .formatting import format_time
from .rows import RecordedPlan


@dataclass(frozen=True)
class ForecastFacts:
    """A query's retention forecast, summed over its partitions.

    A recorded row whose partition the query has read past since still speaks while the
    query is behind what the recording saw unread: reading on moves the earliest loss
    later only by the age of the records read, so its time stays as an early bound
    (``read_on``), and a partition not forecast stays unknown. It speaks no more once
    the query has read all the recording saw (or caught up in a batch), and for a lost
    partition the loss is then a :class:`RecordedLoss`.

    ``made_at``: when it was made (recorded, or now when live); ``partitions``: the
    partitions it still speaks for; ``loss_at``/``loss_partition``: the earliest loss
    of an unread record (``read_on``: of a partition read past since, an early bound);
    ``lost``: records already deleted unread, in ``lost_partitions`` ((source index,
    topic, partition, next offset) each); ``beyond_end``, ``unknown``, ``gone``:
    partitions in those states; ``unknown_why``: when made live, the line saying which
    of its topics' configs the broker would not describe (an authorizer), if any."""

    made_at: datetime
    partitions: int = 0
    loss_at: datetime | None = None
    loss_partition: tuple[str, int] | None = None
    lost: int = 0
    beyond_end: int = 0
    unknown: int = 0
    gone: int = 0
    lost_partitions: tuple[tuple[int, str, int, int], ...] = ()
    read_on: bool = False
    unknown_why: str | None = None  # live: the topics' configs the broker would not describe


@dataclass(frozen=True)
class LossAcknowledgement:
    """A person's decision on a recorded loss (``loss_acknowledgements``, migration
    0019): its records up to ``end_offset`` (exclusive) were dealt with, and why."""

    id: int
    end_offset: int
    reason: str
    created_at: datetime
    host: str | None = None
    os_user: str | None = None

    def label(self) -> str:
        who = "@".join(x for x in (self.os_user, self.host) if x) or "someone"
        return f"acknowledged by {who} at {format_time(self.created_at)}: {self.reason}"


@dataclass(frozen=True)
class RecordedLoss:
    """Records retention deleted before the query read them, as ``retention --record``
    found them (``retention_losses``, migration 0019): offsets ``first_offset`` to
    ``end_offset`` (exclusive) of one partition of source ``source_index``. Kept when
    the query reads on past them (a job with ``failOnDataLoss=false``), until a person
    acknowledges them or a restart plan after the same batch (``anchor_run_id``,
    ``anchor_batch_id``) accepted data loss there (``--allow-data-loss``).

    ``acknowledged_end``: up to where acknowledgements cover it (None: none does);
    ``acknowledgements``: those decisions, oldest first, when read with them."""

    id: int
    query_name: str
    source_index: int
    topic: str
    partition: int
    first_offset: int
    end_offset: int
    first_recorded_at: datetime
    last_recorded_at: datetime | None = None
    anchor_run_id: str | None = None
    anchor_batch_id: int | None = None
    acknowledged_end: int | None = None
    acknowledgements: tuple[LossAcknowledgement, ...] = ()

    @property
    def open_from(self) -> int:
        """The first offset no acknowledgement covers (``end_offset``: none left)."""
        done = self.first_offset if self.acknowledged_end is None else self.acknowledged_end
        return min(max(done, self.first_offset), self.end_offset)

    @property
    def unacknowledged(self) -> int:
        """Records lost that no acknowledgement covers."""
        return self.end_offset - self.open_from

    def accepted_by(self, plans: Iterable[RecordedPlan]) -> RecordedPlan | None:
        """The restart plan that accepted this loss: one after the batch the query had
        reached when the loss was recorded, with --allow-data-loss, naming the
        partition (journal/_health.py asks the same in SQL)."""
        for plan in plans:
            if (plan.allow_data_loss and self.anchor_run_id is not None
                    and plan.query_name == self.query_name
                    and plan.anchor_run_id == self.anchor_run_id
                    and plan.anchor_batch_id == self.anchor_batch_id
                    and any((t, p) == (self.topic, self.partition)
                            for _i, t, p, _o in plan.kafka_offsets)):
                return plan
        return None


@dataclass(frozen=True)
class QueryFacts:
    """What the journal says of one query (all from indexed lookups)."""

    query_name: str
    last_trigger_at: datetime | None = None
    last_recorded_at: datetime | None = None
    total_lag: int | None = None
    worst: tuple[str, int, int] | None = None  # (topic, partition, lag) furthest behind
    flagged: int = 0  # batches' sources with a problem flagged since ``since``
    flagged_example: str | None = None
    spool_lost_events: int = 0
    # Batch ids journaled since ``since`` missing inside a query id's ids (Spark ran
    # them), and the first such span as ``query_id:first..last``.
    missing_batches: int = 0
    missing_example: str | None = None
    rejected: int = 0
    forecast: ForecastFacts | None = None  # None: none recorded (or live: not asked)
    reads_kafka: bool = True  # its last batch reads a Kafka source (so has a forecast)
    live: bool = False  # the forecast was made now, from the broker
    exists: bool = True
    # Recorded losses neither acknowledged nor accepted by a plan (their open part).
    losses: tuple[RecordedLoss, ...] = ()
    forecast_error: str | None = None  # the live forecast failed for this query: why
    stateful: bool = False  # its last batch has a stateful operator
    savepoint: NewestSavepoint | None = None  # its newest savepoint not deleted


@dataclass(frozen=True)
class NewestSavepoint:
    """A query's newest savepoint not deleted; a recovery from it reads again the batches after."""

    id: int
    created_at: datetime
    batch_id: int
    location: str
    batches_after: int
    records_after: int
