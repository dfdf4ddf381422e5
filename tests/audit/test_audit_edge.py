"""The audit's I/O edge and command on a real journal (Postgres), fed journaled
progress events: the same answer whatever the page size, plans matched and linked,
bad input as one line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.audit import audit_batches, audit_query, iter_audit_batches
from offset_journal.offsets import EARLIEST
from offset_journal.restart import plan_restart
from offset_journal.testing import KafkaCluster
from tests import support
from tests.payloads import kafka_source, progress
from tests.support import Cli, fill, journal_batches, one_error_line, ts


def _batch(batch_id: int, run: str, start: dict | None, end: dict, rows: int,
           minute: float, query_id: str | None = None) -> str:
    return progress(batch_id, name="orders", run_id=run, query_id=query_id or f"q-{run}",
                    timestamp=ts(minute), rows=rows,
                    sources=[kafka_source("orders", start, end, rows=rows)])


@pytest.fixture
def audited(journal_url: str) -> str:
    journal_batches(journal_url, [
        _batch(0, "run-a", None, {"orders": {"0": 4, "1": 2}}, 6, 0),
        _batch(1, "run-a", {"orders": {"0": 4, "1": 2}}, {"orders": {"0": 9, "1": 5}}, 8, 1),
    ])
    return journal_url


def test_runs_from_a_recorded_plan_matched_or_linked_and_one_from_nowhere(audited: str) -> None:
    plan = plan_restart(audited, "orders")
    assert plan.plan_id is not None
    # run-b: a new checkpoint, started from the plan (9 and 5): 3 + 1 records.
    journal_batches(audited, [
        _batch(0, "run-b", None, {"orders": {"0": 12, "1": 6}}, 4, 2),
        _batch(1, "run-b", {"orders": {"0": 12, "1": 6}}, {"orders": {"0": 14, "1": 6}}, 2, 3),
    ])
    with Journal(audited) as j:
        report = audit_query(j, "orders")
        assert report.ok and report.findings == []
        assert [(r.run_id, r.how, r.link) for r in report.runs] == [
            ("run-a", "origin", None), ("run-b", "plan", "matched")]
        # run-c: a new checkpoint from no recorded plan, records read on both partitions:
        # where it began cannot be known, so neither a gap nor an overlap is ruled out.
        journal_batches(audited, [_batch(0, "run-c", None, {"orders": {"0": 22, "1": 8}}, 4, 4)])
        report = audit_query(j, "orders")
        assert report.exit_code == 3
        assert {(f.kind, f.partition) for f in report.findings} == {
            ("unknown-start", 0), ("unknown-start", 1)}
        # A link recorded after run-b's first batch was journaled is not taken (a
        # writer's credentials can add one at any time): run-b stays matched on time and
        # offsets, and a note says so. The answer does not depend on the page size.
        assert j.link_plan(plan.plan_id, "run-b")
        linked = audit_query(j, "orders")
        assert linked.runs[1].link == "matched"
        assert any("run run-b is linked to plan" in n and "the link was recorded at" in n
                   for n in linked.notes)
        paged = audit_batches("orders", iter_audit_batches(j, "orders", page=1),
                              j.recorded_plans("orders"))
        assert paged.to_dict() == linked.to_dict()
        assert [b.pk for b in iter_audit_batches(j, "orders", page=2)] == sorted(
            b.pk for b in iter_audit_batches(j, "orders"))


def test_the_audit_command(audited: str, cli: Cli) -> None:
    code, out, err = cli("--database-url", audited, "audit", "orders")
    assert code == 0 and err == "" and out.startswith("Audit of query 'orders'")
    assert "OK: every partition contiguous" in out
    code, out, _ = cli("--database-url", audited, "audit", "orders", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["batches"] == 2 and data["partitions"] == 2
    journal_batches(audited, [_batch(2, "run-a", {"orders": {"0": 11, "1": 5}},
                                {"orders": {"0": 12, "1": 5}}, 1, 2)])
    code, out, _ = cli("--database-url", audited, "audit", "orders", "--format", "json")
    (gap,) = json.loads(out)["findings"]
    assert code == 3 and (gap["kind"], gap["first_offset"], gap["end_offset"]) == ("gap", 9, 11)

    line = one_error_line(*cli("--database-url", audited, "audit", "nosuch")[::2])
    assert "no journaled batches for query 'nosuch'" in line
    code, out, err = cli("--database-url", audited, "audit", "orders", "--since", "yesterday-ish")
    assert code == 2 and out == "" and one_error_line(code, err)
    code, out, err = cli("--database-url", audited, "audit", "orders", "--format", "xml")
    assert code == 2 and one_error_line(code, err)


def test_a_job_that_links_its_plan_before_its_first_batch_is_recorded(audited: str) -> None:
    plan = plan_restart(audited, "orders")
    assert plan.plan_id is not None
    with Journal(audited) as j:
        assert j.link_plan(plan.plan_id, "run-b")  # right after start(), as jobs/ do
        journal_batches(audited, [_batch(0, "run-b", None, {"orders": {"0": 12, "1": 6}}, 4, 2)])
        report = audit_query(j, "orders")
        assert report.ok and report.runs[1].link == "recorded"


def test_a_plan_and_link_forged_after_the_fact_by_the_writer_role_explain_nothing(
        granted: support.Secure) -> None:
    """On Postgres with the writer role's own credentials: an
    unexplained 20-record gap, then the writer inserts a plan that fits it and links it
    to the run. The database's clock says both came after the run began: still exit 3."""
    url = granted.writer_url
    journal_batches(url, [
        _batch(0, "run-a", None, {"orders": {"0": 20}}, 20, 0),
        _batch(0, "run-b", None, {"orders": {"0": 50}}, 10, 1),  # read 40..49
    ])
    with Journal(url) as j:
        before = audit_query(j, "orders")
        assert before.exit_code == 3
        (gap,) = before.findings
        assert (gap.kind, gap.first, gap.end) == ("gap", 20, 40)
        with j.engine.begin() as conn:
            forged = conn.exec_driver_sql(
                "INSERT INTO offset_journal.restart_plans (query_name, position, mode, "
                "command, ok, request, options, kafka_offsets) VALUES ('orders', 'at', "
                "'stateless', 'plan', true, '{}', '{}', '[[0, \"orders\", 0, 40]]') "
                "RETURNING id").scalar_one()
        assert j.link_plan(forged, "run-b")
        after = audit_query(j, "orders")
        assert after.exit_code == 3 and [(f.kind, f.first, f.end) for f in after.findings] \
            == [("gap", 20, 40)]
        assert any(f"linked to plan {forged}" in n and "after the run's first batch" in n
                   for n in after.notes)
        # Nor can the writer date the plan back: the database sets created_at.
    assert "permission denied" in support.denied(
        url, "INSERT INTO offset_journal.restart_plans (query_name, created_at, position, "
        "mode, command, ok, request, options, kafka_offsets) VALUES ('orders', "
        "'2000-01-01', 'at', 'stateless', 'plan', true, '{}', '{}', '[]')")


def _forge_plan(conn: Any, name: str, request: str, options: str, offsets: str) -> int:
    """A restart_plans row as the writer role can insert it (no plan command wrote it)."""
    return int(conn.exec_driver_sql(
        "INSERT INTO offset_journal.restart_plans (query_name, position, mode, command, ok, "
        "request, options, kafka_offsets) VALUES (%(n)s, 'at', 'stateless', 'plan', true, "
        "%(r)s, %(o)s, %(k)s) RETURNING id",
        {"n": name, "r": request, "o": options, "k": offsets}).scalar_one())


def test_malformed_plan_fields_are_ignored_with_a_note_and_never_crash_a_reader(
        granted: support.Secure, cli: Cli, tmp_path: Any) -> None:
    """With the writer role's own credentials: a plan row whose request
    holds {"recreated_topics": 5}, linked to the run that started from it (a new log at
    earliest), made `audit` and `report` exit 1 ("unexpected TypeError"). Every JSON
    field no plan command writes is left out, named in a note, and the rest is read."""
    url, name = granted.writer_url, "forged_fields"
    first = progress(0, name=name, run_id="ff-a", query_id="q-ff-a", timestamp=ts(0), rows=20,
                     sources=[kafka_source("orders", None, {"orders": {"0": 20}}, rows=20)])
    journal_batches(url, [first])
    with Journal(url) as j:
        with j.engine.begin() as conn:
            bad = _forge_plan(conn, name, '{"recreated_topics": 5, "warnings": 7, '
                                          '"allow_data_loss": "no"}', "{}",
                              '[[0, "orders", 0, -2]]')
            worse = _forge_plan(conn, name, "5", '"x"',
                                '[[0, "orders", 0, "40"], [0, "orders", 1, true], 7]')
        assert j.link_plan(bad, "ff-b")  # before the run's first batch, as jobs do
        journal_batches(url, [progress(
            0, name=name, run_id="ff-b", query_id="q-ff-b", timestamp=ts(1), rows=5,
            sources=[kafka_source("orders", None, {"orders": {"0": 5}}, rows=5)])])
    code, out, err = cli("--database-url", url, "audit", name, "--format", "json")
    assert (code, err) == (0, ""), err
    data = json.loads(out)
    assert [(r["run_id"], r["plan_id"], r["link"]) for r in data["runs"]] == [
        ("ff-a", None, None), ("ff-b", bad, "recorded")]
    ignored = " ".join(data["ignored"])
    for field in ("recreated_topics", "warnings", "allow_data_loss"):
        assert f"plan {bad}: request field {field}" in ignored, (field, ignored)
    for field in ("request", "options", "kafka_offsets"):
        assert f"plan {worse}: {field}" in ignored, (field, ignored)
    code, out, err = cli("--database-url", url, "audit", name)
    assert code == 0 and "unexpected" not in err and "ignored" in out
    page = tmp_path / "report.html"
    code, _out, err = cli("--database-url", url, "report", name, "-o", str(page))
    assert (code, err) == (0, ""), err
    assert f"plan {bad}: request field recreated_topics" in page.read_text(encoding="utf-8")
    with Journal(url) as j:
        plans = {p.id: p for p in j.recorded_plans(name)}
    assert set(plans) == {bad, worse}
    assert plans[bad].request == {} and plans[bad].kafka_offsets == ((0, "orders", 0, -2),)
    assert plans[worse].request == {} and plans[worse].options == {}
    assert plans[worse].kafka_offsets == ()


def test_an_unused_plan_at_earliest_does_not_hide_a_run_from_latest(journal_url: str,
                                                                      cli: Cli) -> None:
    """A plan at earliest (the first batch re-read: Spark reported no
    start for it), recorded before run-b and never linked, explained run-b, which
    started from latest and skipped offsets 30..99: exit 0. An unlinked plan explains a
    run only where its first batch starts exactly at the plan's offsets, earliest
    resolved to the log start the plan recorded (none here: no bootstrap servers)."""
    journal_batches(journal_url, [_batch(0, "run-a", None, {"orders": {"0": 30}}, 30, 0)])
    plan = plan_restart(journal_url, "orders", batch=("run-a", 0))
    assert plan.plan_id is not None and plan.starting_offsets() == '{"orders":{"0":-2}}'
    journal_batches(journal_url, [  # from latest: read 100..109
        _batch(0, "run-b", None, {"orders": {"0": 110}}, 10, 1),
        _batch(1, "run-b", {"orders": {"0": 110}}, {"orders": {"0": 120}}, 10, 2)])
    code, out, err = cli("--database-url", journal_url, "audit", "orders", "--format", "json")
    assert (code, err) == (3, "")
    data = json.loads(out)
    assert [(r["run_id"], r["how"], r["plan_id"]) for r in data["runs"]] == [
        ("run-a", "origin", None), ("run-b", "no-plan", None)]
    assert [(f["kind"], f["status"], f["first_offset"], f["end_offset"])
            for f in data["findings"]] == [("gap", "unexplained", 30, 100)]
    # Linked by the job before its first batch, the same plan explains the same run: a
    # link is the job's word, and the job did start from earliest.
    linked = plan_restart(journal_url, "orders", batch=("run-a", 0))
    assert linked.plan_id is not None
    with Journal(journal_url) as j:
        assert j.link_plan(linked.plan_id, "run-c")
    journal_batches(journal_url, [_batch(0, "run-c", None, {"orders": {"0": 130}}, 130, 3)])
    code, out, _ = cli("--database-url", journal_url, "audit", "orders", "--format", "json")
    runs = json.loads(out)["runs"]
    assert (runs[-1]["run_id"], runs[-1]["plan_id"], runs[-1]["link"]) == (
        "run-c", linked.plan_id, "recorded")


def test_a_plan_at_earliest_records_the_log_start_and_explains_a_run_from_there(
        journal_url: str, kafka_cluster: KafkaCluster, kafka_topic: str) -> None:
    """Retention deleted orders 0..39, the job read
    40..59 in its first batch (Spark reports no start), and a plan at that batch starts
    at earliest. It records the log start (40); unlinked, it explains the run that began
    there, and not one that began anywhere else."""
    fill(kafka_cluster, kafka_topic, {0: 100})
    kafka_cluster.delete_records(kafka_topic, {0: 40})

    def batch(batch_id: int, run: str, start: dict | None, end: int, rows: int,
              minute: float) -> str:
        return progress(batch_id, name="orders", run_id=run, query_id=f"q-{run}",
                        timestamp=ts(minute), rows=rows, sources=[kafka_source(
                            f"{kafka_topic}", start, {kafka_topic: {"0": end}}, rows=rows)])

    journal_batches(journal_url, [batch(0, "run-a", None, 60, 20, 0)])
    plan = plan_restart(journal_url, "orders", batch=("run-a", 0), subscribe=[kafka_topic],
                        bootstrap_servers=kafka_cluster.bootstrap_servers, kafka_timeout=5)
    assert plan.plan_id is not None and plan.source(0).offsets is not None
    assert plan.source(0).offsets[kafka_topic][0] == EARLIEST
    journal_batches(journal_url, [batch(0, "run-c", None, 110, 10, 1),  # from latest
                                  batch(0, "run-b", None, 70, 30, 2)])  # read 40..69
    with Journal(journal_url) as j:
        (rec,) = j.recorded_plans("orders")
        assert rec.log_starts[(kafka_topic, 0)] == 40 and rec.ignored == ()
        report = audit_query(j, "orders")
    assert [(r.run_id, r.how, r.plan_id, r.link) for r in report.runs] == [
        ("run-a", "origin", None, None), ("run-c", "no-plan", None, None),
        ("run-b", "plan", plan.plan_id, "matched")]
    assert [(f.kind, f.status, f.run_id, f.first, f.end) for f in report.findings] == [
        ("gap", "unexplained", "run-c", 60, 100)]
