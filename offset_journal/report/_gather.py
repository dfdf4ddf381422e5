"""The report's data, read from a journal: aggregated in SQL, so that its size follows
the number of time buckets and of partitions drawn, not the history's length.

Batches are put into ``buckets`` equal time buckets between the first and the last
trigger time (after ``since``); per bucket the SQL returns a few numbers. Lag is drawn
for the ``top`` partitions furthest behind, one line each, and the other partitions as
one band (their lowest and highest lag per bucket).

Batch figures (rows, durations, freshness, and Spark's own ``maxOffsetsBehindLatest``:
the highest lag of any partition) count every batch. Lag and offsets per partition are
read at each bucket's last batch: lag is a level, what it was at that time; reading every
batch's partition rows would read 10^8 rows for 10^5 batches of 1,000 partitions. So the
partition rows read follow the number of buckets, not the history's length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..errors import JournalError, OffsetJournalError
from .model import (
    OthersBand,
    PartitionSeries,
    Recovery,
    ReportData,
    ReportFinding,
    RestartMarker,
    RetentionRow,
    RunBar,
    TimeBucket,
)

if TYPE_CHECKING:
    from ..journal import Journal

DEFAULT_BUCKETS = 240
DEFAULT_TOP = 8
MAX_RUNS = 500
MAX_FLAGGED = 200


class NothingToReport(OffsetJournalError):
    """The journal holds no batch of the query (in the time asked for)."""


class ReportError(OffsetJournalError):
    """The report could not be written."""


def gather(journal: Journal, query_name: str, *, since: datetime | None = None,
           buckets: int = DEFAULT_BUCKETS, top: int = DEFAULT_TOP,
           findings: Sequence[ReportFinding] | None = None,
           restarts: Callable[[Sequence[RunBar]], list[RestartMarker]] | None = None,
           ) -> ReportData:
    """Read what a report of ``query_name`` shows. ``findings``: what to highlight
    (default: :func:`journal_findings`); ``restarts``: the timeline's restart markers
    from the runs (default: :func:`restart_markers`)."""
    rows = journal.report_rows(query_name, since, buckets=buckets, top=top,
                               max_runs=MAX_RUNS)
    if rows is None:
        when = f" since {since.isoformat()}" if since else ""
        raise NothingToReport(f"no journaled batches for query {query_name!r}{when}")
    lo, hi, total, width = rows.first, rows.last, rows.total, rows.width
    batch_rows, lag_rows, total_runs = rows.batch_rows, rows.lag_rows, rows.total_runs
    current_lag, freshness = rows.current_lag, rows.freshness
    runs = [RunBar(*r) for r in rows.run_rows]
    series, others, partitions = _lag_series(lag_rows)
    runs.reverse()  # oldest first
    return ReportData(
        query_name=query_name, generated_at=datetime.now(timezone.utc), first_trigger=lo,
        last_trigger=hi, bucket_seconds=width, buckets=buckets, total_batches=total,
        total_runs=total_runs, partitions=partitions, runs=tuple(runs),
        runs_shown_limit=MAX_RUNS, restarts=tuple((restarts or restart_markers)(runs)),
        batch_buckets=tuple(TimeBucket(r[0], r[1], int(r[2]),
                                        float(r[3]) if r[3] is not None else None, r[4], r[5],
                                        r[6]) for r in batch_rows),
        top_partitions=series, others=others,
        current_lag=int(current_lag) if current_lag is not None else None,
        current_freshness_s=freshness,
        findings=tuple(journal_findings(journal, query_name) if findings is None else findings),
        since=since, retention=tuple(retention_rows(journal, query_name)),
        recovery=recovery(journal, query_name),
    )


def recovery(journal: Journal, query_name: str) -> Recovery | None:
    """A stateful query's newest savepoint and what a recovery from it reads again
    today; None for a stateless query, or a journal from before migration 0022."""
    try:
        stateful, sp = journal.recovery_facts(query_name)
    except JournalError:
        return None
    if not stateful:
        return None
    if sp is None:
        return Recovery()
    return Recovery(sp.id, sp.created_at, sp.batch_id, sp.location, sp.batches_after,
                    sp.records_after)


def retention_rows(journal: Journal, query_name: str) -> list[RetentionRow]:
    """The query's retention forecast as last recorded (``retention --record``): none
    when never recorded, or on a journal from before migration 0017."""
    try:
        rows = journal.recorded_forecasts(query_name)
    except JournalError:
        return []
    return [RetentionRow(r["source_index"], r["topic"], r["partition"], r["status"],
                         r["next_offset"], r["log_start"], r["log_end"], r["unread"],
                         r["lost"], r["loss_earliest"], r["basis"], r["recorded_at"])
            for r in rows]


def _lag_series(rows: Sequence[Any]) -> tuple[tuple[PartitionSeries, ...], OthersBand | None,
                                               int]:
    tops: dict[tuple[str, int], list[Any]] = {}
    max_lag: dict[tuple[str, int], int | None] = {}
    band: list[tuple[int, int | None, int | None]] = []
    partitions = 0
    for part, bucket, topic, partition, lo, hi, end, latest, extra in rows:
        if part == "top":
            tops.setdefault((topic, partition), []).append((bucket, lo, end, latest))
            max_lag[(topic, partition)] = extra
        elif part == "others":
            band.append((bucket, lo, hi))
        else:
            partitions = int(extra)
    order = sorted(tops, key=lambda k: (max_lag[k] is None, -(max_lag[k] or 0), k))
    series = tuple(PartitionSeries(t, p, max_lag[(t, p)], tuple(sorted(tops[(t, p)])))
                   for t, p in order)
    others = (OthersBand(partitions - len(series), tuple(sorted(band)))
              if partitions > len(series) else None)
    return series, others, partitions


def restart_markers(runs: Sequence[RunBar]) -> list[RestartMarker]:
    """The timeline's restart markers. Today each run's start, named by its checkpoint
    (query id) and whether it continued on the same checkpoint or a new one; where the
    journal records restart plans, this is the place to add the plan each run started
    from."""
    out: list[RestartMarker] = []
    seen: set[str] = set()
    for run in runs:
        if run.start is None:
            continue
        new = run.query_id not in seen
        label = ("first start" if not seen else
                 "new checkpoint" if new else "restart on the same checkpoint")
        seen.add(run.query_id)
        out.append(RestartMarker(at=run.start, run_id=run.run_id, query_id=run.query_id,
                                 label=label))
    return out


def journal_findings(journal: Journal, query_name: str) -> list[ReportFinding]:
    """What the journal itself knows is wrong: problems flagged when batches were
    written (gaps and backwards offsets within a run, malformed payloads) and batch
    events a full listener spool dropped. A continuity audit adds its findings here."""
    out = [ReportFinding(kind="flagged", message=f"source {p.source_index}: {p.problem}",
                   runs=(p.run_id,), batches=(f"{p.run_id}:{p.batch_id}",), at=p.trigger_at)
           for p in journal.flagged_problems(query_name, limit=MAX_FLAGGED)]
    for loss in journal.spool_losses(query_name):
        records = sum(hi - lo for _, _, _, lo, hi in loss.partitions
                      if lo is not None and hi is not None)
        batches = (f"batches {loss.batch_id_min}..{loss.batch_id_max}"
                   if loss.batch_id_min is not None else "batches")
        out.append(ReportFinding(
            kind="spool-loss", records=records or None, runs=loss.run_ids,
            at=loss.first_trigger_at or loss.recorded_at,
            message=f"{loss.events} batch events dropped by a full listener spool on "
                    f"{loss.host or 'an unknown host'}: {batches} are not in the journal"))
    return out
