"""A report as one self-contained HTML file, from plain data (pure: no I/O but reading
the package's own script and style sheet).

The page holds its data as JSON and a small hand-written script (report.js) that draws
the charts as SVG; tables (summary, findings, runs) are HTML, readable without the
script. A Content-Security-Policy forbids every request: the file shows the same
offline, and nothing in it can fetch anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from html import escape
from importlib.resources import files
from typing import Any

from .model import ReportData, ReportFinding, RunBar

MAX_FINDING_ROWS = 500

_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
        "img-src data:")


def _ms(when: datetime | None) -> float | None:
    return when.timestamp() * 1000 if when is not None else None


def _iso(when: datetime | None) -> str:
    return when.isoformat(timespec="seconds").replace("+00:00", "Z") if when else "-"


def _num(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"


def payload(data: ReportData) -> dict[str, Any]:
    """What the script draws, as JSON-able data (times in epoch milliseconds)."""
    lo = _ms(data.first_trigger) or 0.0
    return {
        "query": data.query_name, "lo": lo, "hi": _ms(data.last_trigger) or lo,
        "bucketMs": data.bucket_seconds * 1000, "n": data.buckets,
        "batches": [[b.bucket, b.batches, b.input_rows, b.avg_duration_ms, b.max_duration_ms,
                     b.max_freshness_s, b.max_behind] for b in data.batch_buckets],
        "top": [{"topic": p.topic, "partition": p.partition, "maxLag": p.max_lag,
                 "points": [list(q) for q in p.points]} for p in data.top_partitions],
        "others": None if data.others is None else {
            "partitions": data.others.partitions,
            "points": [list(q) for q in data.others.points]},
        "runs": [{"id": r.run_id, "qid": r.query_id, "start": _ms(r.start), "end": _ms(r.end),
                  "terminated": r.terminated, "failed": r.failed, "host": r.host,
                  "batches": r.batches, "first": r.first_batch_id, "last": r.last_batch_id}
                 for r in data.runs],
        "restarts": [{"at": _ms(m.at), "run": m.run_id, "qid": m.query_id, "label": m.label,
                      "plan": m.plan} for m in data.restarts],
        "findings": [{"kind": f.kind, "at": _ms(f.at), "message": f.message,
                      "defect": f.defect} for f in data.findings[:MAX_FINDING_ROWS]],
    }


def _script_json(value: Any) -> str:
    """JSON safe inside <script>: no '<', '>' or '&' that could end the element."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _asset(name: str) -> str:
    return files("offset_journal.report").joinpath(name).read_text(encoding="utf-8")


def _cards(data: ReportData) -> str:
    defects = sum(1 for f in data.findings if f.defect)
    cards = [("batches", _num(data.total_batches), False),
             ("runs", _num(data.total_runs), False),
             ("partitions", _num(data.partitions), False),
             ("lag now (records)", _num(data.current_lag), bool(data.current_lag)),
             ("freshness now (s)", _num(data.current_freshness_s), False),
             ("findings", _num(defects), defects > 0)]
    return "".join(f'<div class="card{" bad" if bad else ""}"><b>{escape(v)}</b>'
                   f"{escape(k)}</div>" for k, v, bad in cards)


def _where(f: ReportFinding) -> str:
    if f.topic is None:
        return ""
    where = f"{f.topic}-{f.partition}" if f.partition is not None else f.topic
    if f.offset_from is not None or f.offset_to is not None:
        where += f" [{_num(f.offset_from)}, {_num(f.offset_to)})"
    return where


def _where_cell(f: ReportFinding) -> str:
    """Where a finding is: one partition, or a group's partitions folded (<details>,
    no script needed) so that one restart across 1,000 partitions is one row."""
    if not f.partitions:
        return escape(_where(f))
    lines = "".join(f"<li>{escape(line)}</li>" for line in f.partitions)
    return (f'<details class="partitions"><summary>{escape(f.topic or "several topics")}: '
            f"{f.partition_count:,} partitions</summary><ul>{lines}</ul></details>")


def _findings(findings: tuple[ReportFinding, ...]) -> str:
    if not findings:
        return ('<p class="clean">No findings: nothing flagged when batches were journaled, '
                "no spool losses.</p>")
    shown = sorted(findings, key=lambda f: (not f.defect, f.at is None, f.at or 0))
    rows = "".join(
        f'<tr class="{"defect" if f.defect else "ok"}"><td class="kind">{escape(f.kind)}</td>'
        f"<td>{escape(_iso(f.at))}</td><td>{_where_cell(f)}</td>"
        f"<td>{escape(_num(f.records))}</td>"
        f"<td>{escape(', '.join(f.batches or f.runs))}</td><td>{escape(f.message)}</td></tr>"
        for f in shown[:MAX_FINDING_ROWS])
    more = (f'<p class="note">{len(findings) - MAX_FINDING_ROWS:,} more not shown.</p>'
            if len(findings) > MAX_FINDING_ROWS else "")
    return ('<table id="findings-table"><tr><th>kind</th><th>when</th><th>where</th>'
            f"<th>records</th><th>batches / runs</th><th>what</th></tr>{rows}</table>{more}")


def _runs_table(runs: Iterable[RunBar]) -> str:
    rows = "".join(
        f"<tr><td>{escape(r.run_id)}</td><td>{escape(r.query_id)}</td>"
        f"<td>{escape(_iso(r.start))}</td><td>{escape(_iso(r.end))}</td>"
        f"<td>{r.batches:,}</td><td>{escape(_num(r.first_batch_id))}..."
        f"{escape(_num(r.last_batch_id))}</td>"
        f"<td>{'failed' if r.failed else 'terminated' if r.terminated else 'no end seen'}</td>"
        f"<td>{escape(r.host or '')}</td></tr>" for r in runs)
    return ("<table><tr><th>run</th><th>checkpoint (query id)</th><th>start</th><th>end</th>"
            f"<th>batches</th><th>batch ids</th><th>state</th><th>host</th></tr>{rows}</table>")


_DEFECT = ' class="defect"'


def _retention(data: ReportData) -> str:
    """The recorded retention forecast: lost partitions, then the soonest loss first."""
    if not data.retention:
        return ('<p class="note">No retention forecast recorded: run <code>offset-journal '
                "retention QUERY --bootstrap-servers ... --record</code>.</p>")
    recorded = max(r.recorded_at for r in data.retention)
    rows = "".join(
        f'<tr{_DEFECT if r.status == "lost" else ""}><td>{r.source_index}</td>'
        f"<td>{escape(r.topic)}-{r.partition}</td><td>{r.next_offset:,}</td>"
        f"<td>{escape(_num(r.log_start))}</td><td>{escape(_num(r.log_end))}</td>"
        f"<td>{r.unread:,}</td><td>{'DATA LOSS: ' + format(r.lost, ',') if r.lost else ''}"
        f"</td><td>{escape(_iso(r.loss_earliest))}</td><td>{escape(r.basis or '')}</td>"
        f"<td>{escape(r.status)}</td></tr>" for r in data.retention)
    unknown = sum(r.status == "unknown" for r in data.retention)
    why = (f'<p class="note">{unknown:,} partition{"" if unknown == 1 else "s"} could not be '
           "forecast (the first unread record unreadable or without a timestamp, or the "
           "topic&#x27;s configs not described to the recording&#x27;s principal): "
           f"<code>offset-journal retention {escape(data.query_name)} --bootstrap-servers "
           "...</code> says why.</p>" if unknown else "")
    return (f'<p class="note">As recorded {escape(_iso(recorded))}: when Kafka&#x27;s retention '
            f"deletes the first record the query has not read, at the earliest.</p>{why}"
            "<table><tr><th>source</th><th>partition</th><th>next offset</th>"
            "<th>log start</th><th>log end</th><th>unread</th><th>lost</th>"
            "<th>loss at the earliest</th><th>by</th><th>status</th></tr>"
            f"{rows}</table>")


def _recovery(data: ReportData) -> str:
    """A stateful query's newest savepoint, and what a recovery from it reads again."""
    r = data.recovery
    if r is None:
        return ""
    if r.savepoint_id is None:
        body = ('<p class="note defect">No savepoint: a lost or broken checkpoint loses the '
                "query&#x27;s state. Take one with <code>offset-journal savepoint create</code>"
                ", or on a schedule (<code>attach(..., savepoints=...)</code>).</p>")
    else:
        body = (f'<p class="note">Newest savepoint: {r.savepoint_id} (batch '
                f"{escape(_num(r.batch_id))}, made {escape(_iso(r.made_at))}, at "
                f"<code>{escape(r.location or '')}</code>). A recovery from it today reads "
                f"<b>{r.batches_again:,}</b> batch{'' if r.batches_again == 1 else 'es'} "
                f"(<b>{r.records_again:,}</b> record{'' if r.records_again == 1 else 's'}) "
                "again.</p>")
    return f"<h2>Recovery</h2>\n{body}"


def render(data: ReportData) -> str:
    """The report's HTML."""
    q = escape(data.query_name)
    since = f", since {escape(_iso(data.since))}" if data.since else ""
    runs_note = (f'<p class="note">The {len(data.runs):,} most recent of {data.total_runs:,} '
                 "runs.</p>" if data.total_runs > len(data.runs) else "")
    lag_note = (f"The {len(data.top_partitions)} partitions furthest behind, one line each"
                + (f"; the other {data.others.partitions:,} as a band from their lowest to "
                   "highest lag" if data.others else "")
                + f", at the last batch of each time bucket of {data.bucket_seconds:,.1f} s. "
                "The dashed line: the highest lag of any partition in any batch of the "
                "bucket, as Spark reported it (maxOffsetsBehindLatest), where it did.")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>offset-journal report: {q}</title>
<style>{_asset("report.css")}</style></head>
<body>
<h1>Offset journal: {q}</h1>
<p class="sub">Batches triggered {escape(_iso(data.first_trigger))} to
{escape(_iso(data.last_trigger))}{since}; report generated {escape(_iso(data.generated_at))}.
</p>
<div class="cards">{_cards(data)}</div>
<noscript><p class="note">The charts need JavaScript; the tables below do not.</p></noscript>
<h2>Findings</h2>
{_findings(data.findings)}
<h2>Retention</h2>
{_retention(data)}
{_recovery(data)}
<h2>Runs and checkpoints</h2>
<p class="note">One lane per checkpoint (query id), a bar per run (red: failed; dashed: no
termination seen); triangles mark starts and restarts, diamonds the findings. Hover for
details.</p>
<div id="timeline"></div>
<details><summary>Runs as a table</summary>{runs_note}{_runs_table(data.runs)}</details>
<h2>Lag per partition</h2>
<p class="note">{escape(lag_note)} Lag = the latest offset Spark saw minus the batch's end
offset.</p>
<div id="lag"></div>
<h2>Offsets per partition</h2>
<div id="offsets"></div>
<h2>Batches</h2>
<p class="note">Input rows per time bucket, batch durations (mean and longest), and
freshness (trigger time minus the newest event time).</p>
<div id="rows"></div>
<div id="durations"></div>
<div id="freshness"></div>
<script type="application/json" id="report-data">{_script_json(payload(data))}</script>
<script>{_asset("report.js")}</script>
</body></html>
"""
