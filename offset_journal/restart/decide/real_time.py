"""Plans after a run in real-time mode (pure): what a batch stopped mid-way leaves.

In real-time mode (``trigger(realTime="5 seconds")``) a batch's tasks run for the whole
batch duration and write each record to the sink as it arrives. A batch stopped or
killed mid-way leaves no progress event, no offsets entry and no commit, while its rows
may already be in the sink. A plan starting after the run's last journaled batch reads
those records again, so the new query writes them a second time. The plan says so, with
what bounds it: only records the partitions held before the run stopped can have been
written, so per partition at most those between the plan's start and the first offset
timestamped after the stop (asked of the cluster: offsetsForTimes). The audit sees no
overlap in the journal (the stopped batch was never journaled), and says why in a note.
That is for a sink that keeps no log (console, foreach, Kafka: what real-time mode
writes to). A sink that keeps one (a file sink's ``_spark_metadata``, a Delta table's
``txn``), once the plan has read it (``sink_log``), says exactly which batches it holds:
a batch stopped mid-way never reached its log, so its readers see none of its rows, and
the plan says so in a note instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...formatting import format_time
from ...offsets import EARLIEST
from ...rows import KIND_KAFKA, BatchRef
from ...wording import count, tp
from .._findings import Findings
from .._inputs import PlanInputs
from ..model import POSITION_AFTER, POSITION_SAVEPOINT, SourcePlan, Start


def real_time_findings(inp: PlanInputs, start: Start, sources: Sequence[SourcePlan],
                       ) -> tuple[Findings, dict[str, Any] | None]:
    """A warning (and what the plan records) when the plan starts after the last
    journaled batch of a run in real-time mode."""
    tail = inp.journal.real_time
    if tail is None or start.position not in (POSITION_AFTER, POSITION_SAVEPOINT):
        return Findings(), None
    if tail.run_id != inp.anchor.run_id or tail.last.batch_id != inp.anchor.batch_id:
        return Findings(), None  # the run went on past the anchor: journaled batches
    logged = inp.old_query.sink
    if logged is not None and logged.exists and logged.problem is None:
        return Findings(notes=[
            f"run {tail.run_id} ran in real-time mode (trigger realTime): a batch after "
            f"{BatchRef.of(inp.anchor).label()} stopped mid-way may have written rows, but "
            f"{logged.label()} keeps a commit log, read for this plan: a batch it does not "
            "hold never reached it for its readers, so nothing is written twice"]), None
    by_partition, counted = _rewritten_by_partition(inp, sources)
    bound = sum(by_partition.values()) if counted else None
    when = (f"stopped at {format_time(tail.stopped_by)}" if tail.terminated else
            f"was killed, no later than {format_time(tail.stopped_by)} (its last journaled "
            "batch's end plus one batch)") if tail.stopped_by else "stopped"
    label = BatchRef.of(inp.anchor).label()
    if bound is not None:
        worst = ", ".join(f"{k} {n}" for k, n in sorted(by_partition.items()) if n)[:300]
        limit = (f"at most {count(bound, 'record')}: those the partitions held between "
                 f"this plan's start and the first record timestamped after the run "
                 f"stopped ({worst or 'none'})")
    else:
        limit = ("at most the records the partitions held before the run stopped (give "
                 "--bootstrap-servers to count them from the record timestamps)")
    warning = (
        f"run {tail.run_id} ran in real-time mode (trigger realTime) and {when}: a batch "
        f"after {label} stopped mid-way leaves no progress event, offsets entry or "
        "commit, but its rows may already be in the sink, so the new query writes them "
        f"again: {limit}. An idempotent sink removes them; the audit shows no overlap "
        "for them (they were never journaled). That holds for a sink that keeps no "
        "log (console, foreach, Kafka); for one that does, give it (--sink) and the plan "
        "reads what it holds")
    record = {"run_id": tail.run_id, "after_batch": inp.anchor.batch_id,
              "stopped_by": format_time(tail.stopped_by), "bound": bound,
              "by_partition": by_partition if counted else None}
    return Findings(warnings=[warning]), record


def _rewritten_by_partition(inp: PlanInputs, sources: Sequence[SourcePlan],
                            ) -> tuple[dict[str, int], bool]:
    """Per ``topic-partition``, the records between the plan's start and the first record
    timestamped after the run stopped (else the log end): what a killed real-time batch
    may have written already. False when a partition could not be counted."""
    by_partition: dict[str, int] = {}
    counted = inp.kafka.real_time_ends is not None
    for source in sources:
        if source.kind != KIND_KAFKA or source.offsets is None:
            continue
        for topic, parts in source.offsets.items():
            ends = (inp.kafka.real_time_ends or {}).get(topic, {})
            logs = (inp.kafka.state or {}).get(topic, {})
            for part, first in parts.items():
                if first == EARLIEST or first < 0:
                    counted = False
                    continue
                end = ends.get(part)
                if end is None:  # no record after the stop: up to the log end
                    log_range = logs.get(part)
                    end = log_range[1] if log_range else None
                if end is None:
                    counted = False
                    continue
                by_partition[tp(topic, part)] = max(0, end - first)
    return by_partition, counted
