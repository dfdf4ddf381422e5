"""What a writer is given (:class:`WriterConfig`) and what it says became of the events
handed to it (:class:`WriterStats`): plain data, here so that the writer's modules share
them without importing the writer. Imported from :mod:`.writer`, where they always were.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ._recent import DEFAULT_MAX_BYTES, DEFAULT_SECONDS


@dataclass(frozen=True)
class WriterConfig:
    database_url: str
    spool_dir: str
    queue_size: int = 10_000
    max_batch: int = 200
    retry_initial: float = 0.5
    retry_max: float = 30.0
    connect_timeout: int = 5
    statement_timeout_ms: int = 30_000
    spool_max_bytes: int | None = None
    call_timeout: float | None = None
    """Longest a transaction may take before its connection is cut (a database that
    hangs with the connection open: statement_timeout cannot fire when nothing
    answers). None: the statement timeout plus the connect timeout plus 5 s."""
    failover_window: float = DEFAULT_SECONDS
    """Seconds what was journaled stays on disk (_recent.py) to be journaled again on a
    standby promoted after a failover: cover the standby's replication lag (0: keep
    nothing; with synchronous replication nothing is needed)."""
    failover_window_max_bytes: int = DEFAULT_MAX_BYTES
    """The most the window's segment files take on disk; past it, its oldest events are
    dropped and counted unprotected."""

    @property
    def transaction_timeout(self) -> float:
        if self.call_timeout is not None:
            return self.call_timeout
        return self.statement_timeout_ms / 1000 + self.connect_timeout + 5.0


@dataclass(frozen=True)
class WriterStats:
    """What became of the events handed to a writer.

    ``journaled``: batches newly in the journal; ``spooled``: events written to the
    on-disk spool (replayed later); ``rejected``: events the database refused, kept in
    ``rejected_events``; ``lost``: events neither journaled nor kept, by reason;
    ``rejournaled``: batches journaled again, once each time the journal's database
    turned out to be another server that lacked them (a failover; counted once in
    ``journaled``); ``unprotected``: events journaled but not kept in the failover
    window (a disk error there, dropped to keep within failover_window_max_bytes, or
    a line or segment there that nothing could read when it was to be journaled
    again): in the journal, but lost if its database fails over to a standby that
    lacks them; ``foreign``: files in the spool directory (spool, failover window,
    losses.json) that this user did not make, skipped and never journaled (each a
    writer of this listener found; a later writer finds the same ones again, so
    adding keeps the larger count).
    """

    journaled: int = 0
    spooled: int = 0
    rejected: int = 0
    lost: int = 0
    lost_reasons: dict[str, int] = field(default_factory=dict)
    rejournaled: int = 0
    unprotected: int = 0
    foreign: int = 0

    def __add__(self, other: WriterStats) -> WriterStats:
        reasons = Counter(self.lost_reasons)
        reasons.update(other.lost_reasons)
        return WriterStats(self.journaled + other.journaled, self.spooled + other.spooled,
                           self.rejected + other.rejected, self.lost + other.lost,
                           dict(reasons), self.rejournaled + other.rejournaled,
                           self.unprotected + other.unprotected,
                           max(self.foreign, other.foreign))
