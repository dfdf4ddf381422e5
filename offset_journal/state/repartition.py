"""A stopped query's state repartitioned in place, for a job that only scales
(``offset-journal state repartition --checkpoint CK --partitions N``).

Spark 4.2's offline repartition (``OfflineStateRepartitionRunner``, through the one edge
:mod:`._jvm`) adds a batch to the checkpoint that reads nothing: every store's state is
read at the last committed batch and written again into N partitions, hashed as the
shuffle hashes each key, and the query, started again on the same checkpoint, runs with
N shuffle partitions from its next batch. Its reader takes RocksDB stores only: an
HDFS-backed checkpoint is refused, with the way round (a savepoint restored into a new
checkpoint with N partitions).

Before it writes, the checks: the checkpoint's last batch committed, the query not
running. Only the journal can tell that: a run of the checkpoint's query id with no
termination journaled runs; a query id it has no run of may run (a query the listener
does not journal), so both are refused unless ``assume_stopped`` (a run killed before
its end was journaled; a query stopped that the journal does not know), recorded
with the decision when there is one. A query of this very Spark session is refused
even then. A repartition started on a running query makes it fail at its next batch
and may fail itself: the helper then deletes what it added, so the query's next start
does not run a stray repartition batch on state still in the old partitions. The
repartition is journaled as a decision (``restart_plans``: the query resumes after
its last batch, mode ``repartition``, the partitions before and after, the batch
written) by :func:`offset_journal.restart.record.record_repartition`, where every
decision's row is made, when the journal knows the query's name; ``record_problem``
says when it is not.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..checkpoint.commits import HDFS_PROVIDER, PROVIDER_CONF, ROCKSDB_PROVIDER
from ..errors import RestoreError
from ._jvm import helper, repartition

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint
    from ..journal import Journal

log = logging.getLogger(__name__)

PARTITIONS_CONF = "spark.sql.shuffle.partitions"
MODE = "repartition"


@dataclass(frozen=True)
class Repartitioned:
    """A repartition done: the checkpoint, its query (``query_name`` None: a query id
    the journal has no run of), the partitions before and after, the batch Spark wrote,
    and the decision recorded (``plan_id``; None: not recorded, ``record_problem`` says
    why when recording was asked)."""

    checkpoint: str
    query_name: str | None
    query_id: str
    partitions_before: int
    partitions: int
    batch_id: int
    assumed_stopped: bool = False
    plan_id: int | None = None
    record_problem: str | None = None


def check_repartition(ckpt: Checkpoint, partitions: int, runs: list[Any], *,
                      assume_stopped: bool = False, running_here: bool = False) -> int:
    """The checks before a repartition (pure): a committed last batch, RocksDB, another
    number of partitions, a query that does not run: ``runs`` (the journal's runs of the
    checkpoint's query id) none without its end journaled, and not empty, unless
    ``assume_stopped``; never ``running_here`` (active in the session that would
    repartition). Returns the partitions the checkpoint has; RestoreError (one line)
    otherwise."""
    if partitions < 1:
        raise RestoreError(f"--partitions {partitions}: give a number of partitions >= 1")
    last = ckpt.last_committed
    if last is None:
        raise RestoreError(f"{ckpt.path} has no committed batch: nothing to repartition")
    planned = ckpt.last_planned
    if planned is not None and planned.batch_id != last.batch_id:
        raise RestoreError(f"{ckpt.path}'s batch {planned.batch_id} did not commit: start the "
                           "query once to finish it, then repartition")
    provider = str(last.conf.get(PROVIDER_CONF) or HDFS_PROVIDER)
    if provider != ROCKSDB_PROVIDER:
        raise RestoreError(f"{ckpt.path} keeps its state on {provider.rsplit('.', 1)[-1]}: "
                           "Spark's repartition reads RocksDB stores only; restore a "
                           "savepoint into a new checkpoint with the partitions you want "
                           "instead (savepoint create, then restore)")
    before = int(last.conf.get(PARTITIONS_CONF) or 0)
    if before == partitions:
        raise RestoreError(f"{ckpt.path} runs with {partitions} partitions already")
    _check_stopped(ckpt, runs, assume_stopped=assume_stopped, running_here=running_here)
    return before


def _check_stopped(ckpt: Checkpoint, runs: list[Any], *, assume_stopped: bool,
                   running_here: bool) -> None:
    running = [r for r in runs if r.terminated_at is None]
    if running and not assume_stopped:
        run = running[-1]
        raise RestoreError(f"query {run.query_name!r} is running on {ckpt.path} as far as the "
                           f"journal knows (run {run.run_id}, no termination journaled): stop "
                           "it first, or, if it was killed before its end was journaled, "
                           "pass --assume-stopped")
    if not runs and not assume_stopped:
        raise RestoreError(f"the journal has no run of query id {ckpt.query_id} "
                           f"({ckpt.path}'s), so it cannot tell whether the query runs: stop "
                           "it, then pass --assume-stopped (the repartition cannot be "
                           "journaled: the journal knows no name for the query)")
    if running_here:  # whatever the journal or the caller says
        raise RestoreError(f"query id {ckpt.query_id} ({ckpt.path}) runs in this Spark "
                           "session: stop it first")


def preflight(checkpoint: str, partitions: int, journal: Journal | None, *,
              assume_stopped: bool = False) -> tuple[Checkpoint, list[str], list[Any]]:
    """Every check that needs no Spark, run before a session is started for the
    repartition (a refusal then costs no Spark start): the checkpoint read (an URL with
    credentials refused there), the journal's names and runs of its query id, and
    :func:`check_repartition` on them. Returns (the checkpoint, the query's names, its
    runs)."""
    from ..checkpoint import read_checkpoint

    ckpt = read_checkpoint(checkpoint)
    if ckpt.query_id is None:
        raise RestoreError(f"{checkpoint} has no query id (metadata): not a query's checkpoint")
    names = journal.query_names_of(ckpt.query_id) if journal is not None else []
    runs = [r for name in names for r in journal.runs(name)  # type: ignore[union-attr]
            if r.query_id == ckpt.query_id]
    check_repartition(ckpt, partitions, runs, assume_stopped=assume_stopped)
    return ckpt, names, runs


def repartition_state(spark: Any, checkpoint: str, partitions: int, *,
                      journal: Journal | None, assume_stopped: bool = False) -> Repartitioned:
    """Repartition the stopped query's state at ``checkpoint`` into ``partitions``
    shuffle partitions, in place (see the module). RestoreError (one line) when a check
    refuses (nothing is written then) or the repartition fails (what it wrote is
    removed, the error says so). The decision is journaled by the caller, through
    :func:`offset_journal.restart.record.record_repartition` (the journal's side of
    every decision)."""
    helper(spark, "state-repartition")
    ckpt, names, runs = preflight(checkpoint, partitions, journal,
                                  assume_stopped=assume_stopped)
    here = any(str(q.id) == ckpt.query_id for q in spark.streams.active)
    before = check_repartition(ckpt, partitions, runs, assume_stopped=assume_stopped,
                               running_here=here)
    batch_id = repartition(spark, checkpoint, partitions)
    done = Repartitioned(checkpoint, names[0] if names else None, str(ckpt.query_id), before,
                         partitions, batch_id, assume_stopped)
    log.info("repartitioned %s from %d to %d partitions (batch %d)", checkpoint, before,
             partitions, batch_id)
    return done

