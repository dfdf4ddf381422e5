"""The audit for people (a table) and programs (JSON); pure."""

from __future__ import annotations

import json

from ..formatting import format_time, table
from ..wording import count, fill
from .model import AuditReport, Finding


def _range(f: Finding) -> str:
    if f.first is None:
        return f"?..{f.end - 1}" if f.end is not None else "?"
    return f"{f.first}..{f.end - 1}" if f.end is not None else f"{f.first}.."


def format_table(report: AuditReport) -> str:
    """The verdict first, then the findings (unexplained first) and why, the runs and
    notes."""
    verdict = ("OK: every partition contiguous, or discontinuous only where a recorded "
               "plan said so" if report.ok else
               f"NOT OK: {count(len(report.unexplained), 'unexplained finding')}")
    since = f" since {format_time(report.since)}" if report.since else ""
    batches = f"{report.batches} batch{'' if report.batches == 1 else 'es'}"
    from_plans = sum(1 for r in report.runs if r.plan_id is not None)
    # Runs a plan started are counted apart from planned findings (a rewind, skip or
    # loss a plan asked for): a clean restart from a plan is no finding at all.
    out = [f"Audit of query {report.query_name!r}{since}: {batches}, "
           f"{count(report.partitions, 'partition')}, {count(len(report.runs), 'run')} "
           f"({from_plans} started from a recorded plan); findings: "
           f"{len(report.unexplained)} unexplained, {len(report.planned)} planned (a "
           f"rewind, skip or loss a plan asked for)",
           verdict]
    findings = sorted(report.findings, key=lambda f: f.status != "unexplained")
    if findings:
        rows = [[f.status.upper(), f.kind, f"{f.topic}-{f.partition}", _range(f),
                 "" if f.records is None else f.records, f.run_id,
                 " ".join(b.label() for b in f.batches)
                 + (f" (+{f.batch_count - len(f.batches)})" if f.batch_count > len(f.batches)
                    else ""),
                 " ".join(b.label() for b in f.earlier), "" if f.plan_id is None else f.plan_id]
                for f in findings]
        out += ["", table(["STATUS", "KIND", "PARTITION", "OFFSETS", "RECORDS", "RUN",
                           "BATCHES", "EARLIER", "PLAN"], rows)]
        # Why, unexplained first: a planned finding (a rewind, data loss a plan
        # accepted) says which decision made it.
        out += [""] + [fill(f"{f.status}: {f.reason}", "  - ") for f in findings][:20]
    if report.runs:
        rows = [[r.run_id, r.query_id, r.first_batch.label(),
                 format_time(r.first_batch.trigger_at) or "", r.how,
                 "" if r.plan_id is None else f"{r.plan_id} ({r.position}, {r.link})"]
                for r in report.runs]
        out += ["", table(["RUN", "QUERY ID", "FIRST BATCH", "TRIGGERED", "STARTED", "PLAN"],
                          rows)]
    if report.notes or report.ignored:
        out += ["", "Notes:"] + [fill(n, "  * ") for n in [*report.notes, *report.ignored]]
    return "\n".join(out).rstrip() + "\n"


def format_json(report: AuditReport) -> str:
    return json.dumps(report.to_dict(), indent=2)
