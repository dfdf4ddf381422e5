"""`offset-journal report`: one self-contained HTML file from a real journal, gathered in
SQL, drawn by its own script in a real (headless) Chromium with no console message."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from offset_journal import Journal
from offset_journal.audit import audit_query
from offset_journal.records import batch_from_progress
from offset_journal.report import ReportData, ReportFinding, build_report, gather, render
from tests.payloads import kafka_source, progress, sql_rows
from tests.support import Cli, count_rows, journal_report_runs, one_error_line

CHROMIUM = os.environ.get("OFFSET_JOURNAL_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PARTS = 6  # partitions 0..2 of 'orders', 0..2 of 'refunds'



@pytest.fixture
def reported(journal_url: str) -> str:
    journal_report_runs(journal_url)
    return journal_url


def test_gather_aggregates_in_buckets_and_keeps_the_top_partitions(reported: str) -> None:
    with Journal(reported) as j:
        data = gather(j, "orders", buckets=200, top=2)  # about one batch per bucket
    assert data.total_batches == 9 + 17 + 17 and data.total_runs == 3 and data.partitions == 6
    assert sum(b.batches for b in data.batch_buckets) == data.total_batches
    assert max(b.max_duration_ms or 0 for b in data.batch_buckets) == 1000 + 10 * 49
    assert len(data.batch_buckets) == data.total_batches  # 43 batches, 200 buckets
    assert max(b.max_behind or 0 for b in data.batch_buckets) == 700
    assert sum(b.input_rows for b in data.batch_buckets) == sum(
        60 + m for m in [*range(1, 10), *range(13, 30), *range(33, 50)])
    # the furthest behind first: orders-2 (lag up to 17 * 40 = 680, then 700), then p=2 of
    # refunds (lag 2 in every batch)
    assert [(p.topic, p.partition, p.max_lag) for p in data.top_partitions] == [
        ("orders", 2, 700), ("refunds", 2, 2)]
    assert data.others is not None and data.others.partitions == 4
    assert {(lo, hi) for _, lo, hi in data.others.points} == {(0, 1)}
    assert data.current_lag == 0 + 1 + 0 + 0 + 1 + 2  # orders-2 caught up in b1
    assert data.current_freshness_s == 30.0
    assert [(r.run_id, r.failed, r.batches) for r in data.runs] == [
        ("a1", False, 9), ("a2", False, 17), ("b1", True, 17)]
    assert [(m.run_id, m.label) for m in data.restarts] == [
        ("a1", "first start"), ("a2", "restart on the same checkpoint"),
        ("b1", "new checkpoint")]
    assert [f.kind for f in data.findings] == ["flagged"]
    assert "a1:4" in data.findings[0].batches and "gap" in data.findings[0].message
    assert max(b.max_freshness_s or 0 for b in data.batch_buckets) == 30.0


def test_partition_rows_are_read_at_each_buckets_last_batch(reported: str) -> None:
    """Few buckets: each holds several batches; per partition the lag drawn is the one at
    the bucket's last batch, the batch figures count every batch."""
    with Journal(reported) as j:
        data = gather(j, "orders", buckets=4, top=1)
    lag = {(r[0], r[1]): r[2] for r in sql_rows(
        reported, "SELECT run_id, batch_id, lag FROM offset_journal.partition_lag "
        "WHERE topic = 'orders' AND partition = 2")}
    batches = sql_rows(reported, "SELECT run_id, batch_id, trigger_at FROM "
                       "offset_journal.batches ORDER BY trigger_at")
    lo, width = batches[0][2], data.bucket_seconds
    last: dict[int, tuple[str, int]] = {}
    for run, batch, when in batches:
        last[min(3, int((when - lo).total_seconds() // width))] = (run, batch)
    [series] = data.top_partitions
    assert (series.topic, series.partition) == ("orders", 2)
    assert [(b, lag_) for b, lag_, _, _ in series.points] == [
        (b, lag[last[b]]) for b in sorted(last)]
    assert sum(b.batches for b in data.batch_buckets) == 43
    assert data.top_partitions[0].max_lag < 700 < max(b.max_behind or 0
                                                      for b in data.batch_buckets) + 1


def test_the_page_is_self_contained_and_hostile_names_stay_text(journal_url: str) -> None:
    name = "</script><script>alert(1)</script>"
    with Journal(journal_url) as j:
        j.record_batch(batch_from_progress(progress(
            0, name=name, sources=[kafka_source(name, None, {name: {"0": 5}},
                                                {name: {"0": 9}})])))
        data = gather(j, name, findings=[ReportFinding(kind="gap", message=f"<b>{name}</b>",
                                                 topic=name, partition=0, offset_from=5,
                                                 offset_to=9, records=4)])
    page = render(data)
    assert "alert(1)</script>" not in page and "<b></script>" not in page
    assert "&lt;b&gt;&lt;/script&gt;" in page  # the finding's message, as text
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page  # in the title and the table
    script = re.search(r'<script type="application/json" id="report-data">(.*?)</script>',
                       page, re.S)
    assert script and json.loads(script.group(1))["query"] == name
    # nothing is fetched: no URL to load, and a policy that forbids any
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "default-src 'none'" in page


def test_cli_writes_the_report_and_refuses_bad_input(cli: Cli, reported: str,
                                                     tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code, stdout, err = cli("--database-url", reported, "report", "orders", "-o", str(out))
    assert code == 0, err
    assert stdout.strip() == str(out) and out.read_text().startswith("<!DOCTYPE html>")
    before = (count_rows(reported, "batches"), count_rows(reported, "kafka_partitions"))
    for argv, status in ((["report", "nope", "-o", str(tmp_path / "x.html")], 1),
                         (["report", "orders", "-o", str(tmp_path / "no" / "x.html")], 1),
                         (["report", "orders", "-o", str(out), "--top", "0"], 2),
                         (["report", "orders", "-o", str(out), "--since", "someday"], 2),
                         (["report", "orders", "-o", str(out), "--since", "2099-01-01"], 1)):
        code, stdout, err = cli("--database-url", reported, *argv)
        line = one_error_line(code, err)
        assert code == status, (argv, err)
        assert "Traceback" not in err and line.startswith("offset-journal: error: ")
    code, _, err = cli("--database-url", reported, "report", "nope", "-o", str(out))
    assert "no journaled batches for query 'nope'" in one_error_line(code, err)
    assert not (tmp_path / "x.html").exists()
    assert (count_rows(reported, "batches"), count_rows(reported, "kafka_partitions")) == before


def _chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess[str]:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.fail(f"{CHROMIUM} not found: the report's rendering test needs Debian's "
                    "`chromium` package (apt-get install -y chromium; .ci/run installs it)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={user_data}", "--enable-logging=stderr", "--v=0",
             "--window-size=1100,2600", "--virtual-time-budget=5000"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.chromium
def test_chromium_renders_the_report_with_no_console_message(reported: str,
                                                             tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    with Journal(reported) as j:
        page.write_text(build_report(j, "orders", top=3), encoding="utf-8")
        audited = audit_query(j, "orders")
    url = page.as_uri()
    dom = _chromium("--dump-dom", url, user_data=tmp_path / "chromium")
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []  # no error, no CSP refusal, no log at all
    html = dom.stdout
    assert 'data-rendered="yes"' in html  # the script ran to its end
    for chart in ("timeline", "lag", "offsets-chart", "rows", "durations", "freshness"):
        assert f'data-chart="{chart}"' in html, chart
    assert html.count('class="run') == 3 and html.count('class="restart"') == 3
    # the journal's own flag, and the audit's unexplained findings, one mark per group
    # (kind, runs, plan) with its partitions folded in the table
    assert audited.unexplained and not audited.planned
    groups = {(f.kind, f.run_id, f.plan_id) for f in audited.unexplained}
    marks = len(re.findall(r'class="finding-mark defect"', html))
    assert marks == 1 + len(groups) < 1 + len(audited.unexplained)
    assert html.count('<details class="partitions">') >= 1
    assert html.count('class="series"') >= 3 + 2 + 2 + 1  # lag lines, offsets, durations...
    # drawn as lines, not as points only: each run's batches are joined (one batch a
    # minute, buckets of 12 s), and the lines break only between runs
    paths = re.findall(r'<path d="([^"]*)"[^>]*class="series"', html)
    assert paths and all(d.count("L") >= 10 for d in paths), paths[:1]
    assert all(d.count("M") <= 3 for d in paths)  # three runs: at most three pieces
    assert 'class="band"' in html  # the 3 other partitions
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "report.html").write_text(page.read_text(encoding="utf-8"), encoding="utf-8")
    shot = ARTIFACTS / "report.png"
    done = _chromium(f"--screenshot={shot}", url, user_data=tmp_path / "chromium")
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]
    print(f"\nreport screenshot: {shot}")


def test_the_audit_is_in_the_report_with_the_journals_own_findings(reported: str) -> None:
    """The report runs the continuity audit: the gap inside run a1 is highlighted as an
    unexplained audit finding (beside the journal's own flag of it), the new checkpoint
    whose start no plan explains is too, and --no-audit leaves only the journal's flags."""
    with Journal(reported) as j:
        audited = gather_audited(j)
        plain = gather(j, "orders")
        report = audit_query(j, "orders")
    kinds = [f.kind for f in audited.findings]
    assert [f.kind for f in plain.findings] == ["flagged"]
    # One row per (kind, status, runs, plan): the audit's 18 partition findings are 3.
    groups = {(f.kind, f.status, f.run_id, f.plan_id) for f in report.findings}
    assert kinds.count("flagged") == 1 and len(kinds) == 1 + len(groups) < len(report.findings)
    audit_gaps = [t for t in report.findings if t.kind == "gap"]
    (gap,) = [f for f in audited.findings if f.kind == "audit gap"]
    assert gap.defect and "a1" in gap.runs and gap.message.startswith("unexplained")
    assert gap.records == sum(t.records or 0 for t in audit_gaps)
    assert gap.partition_count == len(audit_gaps) == len(gap.partitions)
    assert {line.split("-")[0] for line in gap.partitions} == {t.topic for t in audit_gaps}


def gather_audited(j: Journal) -> ReportData:
    from offset_journal.audit import audit_query
    from offset_journal.report._audited import audit_findings, plan_markers
    from offset_journal.report._gather import journal_findings

    found = audit_query(j, "orders")
    return gather(j, "orders", findings=journal_findings(j, "orders") + audit_findings(found),
                  restarts=plan_markers(found))


def test_restart_markers_name_the_plan_each_run_started_from() -> None:
    """Pure: the audit's run starts (recorded or matched plans) become the timeline's
    restart markers; a run from no plan keeps its plain marker."""
    from datetime import datetime, timezone

    from offset_journal.audit.model import AuditReport, HistoryRef, RunStart
    from offset_journal.report._audited import plan_markers
    from offset_journal.report.model import RunBar

    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    spans = [RunBar(r, q, t0, t0, True, False, "h", 1, 0, 0)
             for r, q in (("r1", "q1"), ("r2", "q2"), ("r3", "q3"))]
    ref = HistoryRef(1, "r2", 0, t0)
    audit = AuditReport("orders", None, 3, 1, findings=[], runs=[
        RunStart("r2", "q2", ref, "plan", plan_id=7, link="recorded", position="as-of"),
        RunStart("r3", "q3", ref, "no-plan")])
    marks = plan_markers(audit)(spans)
    assert [(m.run_id, m.label, m.plan) for m in marks] == [
        ("r1", "first start", None),
        ("r2", "new checkpoint", "plan 7: as-of, recorded"),
        ("r3", "new checkpoint", None)]


def test_one_restart_across_a_thousand_partitions_is_one_folded_row() -> None:
    """Pure, from the audit's findings to the page: 1,000 partition
    findings of one restart are one row, their partitions folded in a <details>."""
    from datetime import datetime, timezone

    from offset_journal.audit.model import AuditReport, Finding, HistoryRef
    from offset_journal.report._audited import MAX_GROUP_LINES, audit_findings
    from offset_journal.report._render import _findings

    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    ref = HistoryRef(9, "r2", 0, t0)
    gaps = [Finding("gap", "unexplained", "orders", p, 10, 15, "r2", [ref],
                         reason=f"orders-{p}: records 10..14 never processed")
            for p in range(1000)]
    other = Finding("overlap", "planned", "orders", 0, 0, 5, "r3", [ref], plan_id=4,
                         reason="read again as plan 4 said")
    audit = AuditReport("orders", None, 3, 1000, runs=[], findings=[*gaps, other])
    rows = audit_findings(audit)
    assert [(f.kind, f.defect, f.records, f.partition_count) for f in rows] == [
        ("audit gap", True, 5000, 1000), ("audit overlap", False, 5, 0)]
    assert len(rows[0].partitions) == MAX_GROUP_LINES + 1
    assert rows[0].partitions[-1] == f"and {1000 - MAX_GROUP_LINES} more partitions"
    html = _findings(tuple(rows))
    assert html.count("<tr class=") == 2
    assert "<details class=\"partitions\"><summary>orders: 1,000 partitions</summary>" in html
    assert "<li>orders-999" not in html and "<li>orders-0 [10, 15): 5 records</li>" in html


def test_the_report_shows_the_recorded_retention_forecast(reported: str) -> None:
    from datetime import datetime, timedelta, timezone

    with Journal(reported) as j:
        assert "No retention forecast recorded" in render(gather(j, "orders"))
        soon = datetime.now(timezone.utc) + timedelta(hours=5)
        row = {"query_name": "orders", "source_index": 0, "unread": 400, "first_unread_at":
               None, "loss_latest": None, "next_offset": 100, "log_end": 500}
        j.record_forecasts(["orders"], [
            {**row, "topic": "<i>orders</i>", "partition": 3, "status": "at-risk",
             "log_start": 0, "lost": 0, "loss_earliest": soon, "basis": "time",
             "loss_latest": soon},
            {**row, "topic": "orders", "partition": 1, "status": "lost", "log_start": 160,
             "lost": 60, "loss_earliest": None, "basis": None}])
        data = gather(j, "orders")
    assert [(r.topic, r.partition, r.status) for r in data.retention] == [
        ("orders", 1, "lost"), ("<i>orders</i>", 3, "at-risk")]
    page = render(data)
    section = page[page.index("<h2>Retention</h2>"):page.index("<h2>Runs and checkpoints")]
    assert '<tr class="defect"><td>0</td><td>orders-1</td>' in section
    assert "DATA LOSS: 60" in section and "&lt;i&gt;orders&lt;/i&gt;-3" in section
    assert "<i>" not in section
