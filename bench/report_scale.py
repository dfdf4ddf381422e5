"""`offset-journal report` on a large journal: generation time and file size.

A journal of one query with ``--partitions`` Kafka partitions (topics of 100) and
``--batches`` batches over ``--runs`` runs (two checkpoints), one batch every 10 s, is
filled by SQL (generate_series, as the schema's owner: minutes instead of hours through
the writer), stored as the journal stores it since migration 0013 (each source's
offsets as arrays over a layout; the last batch is checked against what the journal's
own writer stores for it); some partitions fall behind. Then, ``--reps`` times: the report's SQL
(gather), its rendering (render) and the file's size. The issue's scale is 1,000
partitions and 10^5 batches (10^8 partition rows, about 10 GB of journal): the default is
small, as this machine is shared.

    .venv/bin/python bench/report_scale.py [--partitions 100 --batches 2000 --reps 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from _common import (
    check_stored_as_journaled,
    header,
    journal_database,
    postgres,
    progress_json,
    quantile,
    table,
)

FILL = """
INSERT INTO offset_journal.query_runs (run_id, query_id, query_name, named, started_at,
                                       terminated_at)
SELECT 'run-' || r, 'qid-' || (r % 2), 'big', true,
       timestamptz '2026-01-01' + (r * :per_run * 10) * interval '1 second',
       timestamptz '2026-01-01' + ((r + 1) * :per_run * 10 - 5) * interval '1 second'
FROM generate_series(0, :runs - 1) r;

INSERT INTO offset_journal.batches (run_id, query_id, query_name, batch_id, trigger_at,
                                    batch_duration_ms, num_input_rows, event_time_max)
SELECT 'run-' || (n / :per_run), 'qid-' || ((n / :per_run) % 2), 'big', n,
       timestamptz '2026-01-01' + n * 10 * interval '1 second', 800 + (n % 37) * 10,
       1000 + (n % 101), timestamptz '2026-01-01' + (n * 10 - 3 - n % 7) * interval '1 second'
FROM generate_series(0, :batches - 1) n;

INSERT INTO offset_journal.kafka_layouts (layout_id, topics, partitions)
SELECT offset_journal.kafka_layout_id(t, p), t, p
FROM (SELECT array_agg('topic-' || lpad((n / 100)::text, 3, '0') ORDER BY n) AS t,
             array_agg((n % 100)::int ORDER BY n) AS p
      FROM generate_series(0, :partitions - 1) n) l;

INSERT INTO offset_journal.batch_sources (batch_pk, source_index, description, kind,
    num_input_rows, kafka_layout, end_offsets, read_spans, latest_lags)
SELECT b.id, 0, :description, 'kafka', b.num_input_rows,
       (SELECT layout_id FROM offset_journal.kafka_layouts LIMIT 1),
       array_fill(b.batch_id * 10 + 10, ARRAY[:partitions]),
       array_fill(10::smallint, ARRAY[:partitions]),
       array(SELECT (CASE WHEN p % 97 = 0 THEN (b.batch_id * 7 + p) % 5000
                          ELSE (b.batch_id + p) % 3 END)::smallint
             FROM generate_series(0, :partitions - 1) p ORDER BY p)
FROM offset_journal.batches b
WHERE b.query_name = 'big';
ANALYZE;
"""


def progress(partitions: int, b: int) -> str:
    """Batch ``b``'s progress JSON as Spark would report what FILL journals for it (under
    a run of its own)."""
    def offsets(value: int, lag: bool = False) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for p in range(partitions):
            behind = ((b * 7 + p) % 5000 if p % 97 == 0 else (b + p) % 3) if lag else 0
            out.setdefault(f"topic-{p // 100:03d}", {})[str(p % 100)] = value + behind
        return out

    return progress_json(b, offsets(b * 10), offsets(b * 10 + 10),
                         offsets(b * 10 + 10, lag=True), rows=1000 + b % 101, lags=None,
                         name="big", run_id="probe-run", query_id="qid-probe",
                         timestamp="2026-01-01T00:00:00.000Z")


def main(args: argparse.Namespace) -> None:
    import sqlalchemy as sa

    from offset_journal import Journal
    from offset_journal.audit import audit_query
    from offset_journal.journal.db import resolve_url
    from offset_journal.report import gather, journal_findings, render
    from offset_journal.report._audited import audit_findings, plan_markers

    header("Report generation on a large journal", args)
    with postgres(args.admin_url) as server:
        url = journal_database(server)
        engine = sa.create_engine(resolve_url(url))
        t0 = time.perf_counter()
        last = progress(args.partitions, args.batches - 1)
        params = {"runs": args.runs, "per_run": -(-args.batches // args.runs),
                  "batches": args.batches, "partitions": args.partitions,
                  "description": json.loads(last)["sources"][0]["description"]}
        with engine.begin() as conn:
            for statement in FILL.split(";\n"):
                if statement.strip():
                    conn.execute(sa.text(statement), params)
            last_pk = conn.execute(sa.text(
                "SELECT id FROM offset_journal.batches WHERE query_name = 'big' "
                "AND batch_id = :b"), {"b": args.batches - 1}).scalar_one()
        engine.dispose()
        check_stored_as_journaled(url, last_pk, last)
        fill = time.perf_counter() - t0
        print(f"filled {args.batches:,} batches x {args.partitions:,} partitions in "
              f"{fill:.1f} s", file=sys.stderr, flush=True)
        gather_t, render_t, audit_t, sizes = [], [], [], []
        with Journal(url) as journal:
            for _ in range(args.reps):
                t0 = time.perf_counter()
                found = audit_query(journal, "big")  # what `report` runs unless --no-audit
                audit_t.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                data = gather(journal, "big", restarts=plan_markers(found),
                              findings=journal_findings(journal, "big") + audit_findings(found))
                gather_t.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                page = render(data)
                render_t.append(time.perf_counter() - t0)
                sizes.append(len(page.encode("utf-8")))
        if args.html:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(page)
    print(f"\n{args.reps} reps; journal filled in {fill:.1f} s.\n")
    print(table(["partitions", "batches", "partition rows", "gather s (median)",
                 "render s (median)", "audit s (median)", "file KB",
                 "target met (< 1 MB, < 60 s)"],
                [[f"{args.partitions:,}", f"{args.batches:,}",
                  f"{args.partitions * args.batches:,}", f"{quantile(gather_t, .5):.2f}",
                  f"{quantile(render_t, .5):.3f}", f"{quantile(audit_t, .5):.2f}",
                  f"{max(sizes) / 1024:.0f}",
                  "yes" if max(sizes) < 2**20
                  and quantile(gather_t, .5) + quantile(audit_t, .5) < 60 else "**no**"]]))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--batches", type=int, default=2000)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--html", help="also write the last report to this file")
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    main(p.parse_args())
