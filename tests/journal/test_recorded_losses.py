"""Recorded losses: a DATA LOSS `retention --record` found stays
critical in `check` and unexplained in `audit` once the job reads on past it (a job
with failOnDataLoss=false: Spark skips the deleted records inside a batch that starts
where the last one ended, so no batch shows a gap), and after the next recording,
until a decision covers it: `losses acknowledge` (who, when, why), or a restart plan
after the same batch that accepted data loss there. Only the planner role (and the
owner) records or acknowledges one."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from offset_journal.errors import JournalError
from offset_journal.journal import Journal
from offset_journal.journal._losses import loss_rows, record_losses
from offset_journal.journal.db import resolve_url
from offset_journal.records import batch_from_progress
from offset_journal.testing import KafkaCluster
from tests import support
from tests.payloads import kafka_source, progress, sql_execute, sql_rows
from tests.support import Cli

NAME = "skipper"


def _batch(journal: Journal, batch_id: int, start: int | None, end: int, *,
           run: str = "run-1", name: str = NAME) -> None:
    payload = progress(batch_id, name=name, run_id=f"{name}-{run}", query_id=f"qid-{name}",
                       timestamp=f"2026-11-27T10:{batch_id:02d}:00.000Z", sources=[
                           kafka_source("orders", {"orders": {"0": start}} if start is not None
                                        else None, {"orders": {"0": end}},
                                        {"orders": {"0": end}})])
    assert journal.record_batch(batch_from_progress(payload))


def _forecast(status: str, next_offset: int, **kw: Any) -> dict[str, Any]:
    row = {"query_name": NAME, "source_index": 0, "topic": "orders", "partition": 0,
           "status": status, "next_offset": next_offset, "log_start": 0, "log_end": 500,
           "unread": 500 - next_offset, "lost": 0, "first_unread_at": None,
           "loss_earliest": None, "loss_latest": None, "basis": None}
    row.update(kw)
    return row


def _lost(next_offset: int, log_start: int) -> dict[str, Any]:
    return _forecast("lost", next_offset, log_start=log_start, lost=log_start - next_offset,
                     unread=500 - log_start)


def _batch_on(journal: Journal, topic: str, batch_id: int, start: int | None, end: int,
              latest: int) -> None:
    payload = progress(batch_id, name=NAME, run_id=f"{NAME}-run-1", query_id=f"qid-{NAME}",
                       timestamp=f"2026-11-27T10:{batch_id:02d}:00.000Z", sources=[
                           kafka_source(topic, {topic: {"0": start}} if start is not None
                                        else None, {topic: {"0": end}},
                                        {topic: {"0": latest}})])
    assert journal.record_batch(batch_from_progress(payload))


def test_a_recorded_loss_stays_critical_in_check_and_audit_until_acknowledged(
        kafka_cluster: KafkaCluster, journal_url: str, cli: Cli) -> None:
    """Once a failOnDataLoss=false job read on past records retention
    deleted, `check` and `audit` both exited 0. Recorded by the cron's `retention
    --record` on the real broker, the loss stays critical in both, after the next
    recording too, until `losses acknowledge` records who dealt with it and why."""
    from confluent_kafka import TopicPartition

    servers = kafka_cluster.bootstrap_servers
    topic = f"lost-{uuid.uuid4().hex[:8]}"
    kafka_cluster.create_topic(topic, 1)
    support.fill(kafka_cluster, topic, {0: 300})
    db = ["--database-url", journal_url]
    record = [*db, "retention", NAME, "--bootstrap-servers", servers, "--record"]
    with Journal(journal_url) as journal:
        _batch_on(journal, topic, 0, None, 100, 300)
    for fut in kafka_cluster.admin().delete_records([TopicPartition(topic, 0, 160)]).values():
        fut.result(30)  # retention deleted 100..159 before the job read them
    assert cli(*record)[0] == 1  # DATA LOSS, recorded
    code, out, _err = cli(*db, "check", NAME)
    assert code == 2 and f"CRITICAL: {NAME}: DATA LOSS: 60 records deleted" in out, out
    with Journal(journal_url) as journal:
        # failOnDataLoss=false: the job reads on, its batch starting where the last ended
        _batch_on(journal, topic, 1, 100, 300, 300)
    code, out, _err = cli(*db, "check", NAME)
    assert code == 2, out  # was 0, "OK: 1 query checked, no problem"
    assert (f"CRITICAL: {NAME}: DATA LOSS: 60 records deleted by retention before being "
            "read, recorded since ") in out
    assert "(orders-0 offsets 100..159) and not acknowledged; once dealt with: ".replace(
        "orders", topic) + f"`offset-journal losses acknowledge {NAME} --reason TEXT`" in out
    code, out, _err = cli(*db, "audit", NAME, "--format", "json")
    assert code == 3, out  # was 0
    [gap] = json.loads(out)["findings"]
    assert (gap["kind"], gap["status"], gap["topic"], gap["partition"], gap["first_offset"],
            gap["end_offset"], gap["run_id"]) == ("gap", "unexplained", topic, 0, 100, 160,
                                                  f"{NAME}-run-1")
    assert "no batch shows skipped (Spark read on past them: failOnDataLoss=false)" in \
        gap["reason"] and f"after batch {NAME}-run-1:0" in gap["reason"]
    # The next recording finds nothing lost any more: the loss is still recorded.
    assert cli(*record)[0] == 0
    assert cli(*db, "check", NAME)[0] == 2
    code, out, _err = cli(*db, "losses", "list", NAME)
    assert code == 0 and out.splitlines()[1].split() == [
        NAME, "0", f"{topic}-0", "100..159", "60", out.splitlines()[1].split()[5], "OPEN"], out

    code, out, err = cli(*db, "losses", "acknowledge", NAME, "--reason", "  ")
    assert code == 2 and "--reason must not be empty" in err, err
    code, out, err = cli(*db, "losses", "acknowledge", NAME, "--reason",
                         "replayed 100..159 from the source database (INC-42)")
    assert code == 0, err
    assert out.startswith(f"acknowledged 60 records lost from query '{NAME}' (1 recorded "
                          "loss), acknowledged by "), out
    assert out.splitlines()[0].endswith(": replayed 100..159 from the source database "
                                        "(INC-42)")
    assert cli(*db, "check", NAME)[0] == 0
    code, out, _err = cli(*db, "audit", NAME, "--format", "json")
    assert code == 0, out
    [gap] = json.loads(out)["findings"]
    assert gap["status"] == "planned" and "(INC-42)" in gap["reason"]
    code, out, err = cli(*db, "losses", "acknowledge", NAME, "--reason", "again")
    assert code == 1 and f"no open data loss recorded for query '{NAME}'" in err, err

    # Lost again further on (the job at 300, the log now starts at 350): critical again,
    # the acknowledged loss not counted, said once while the job is still there.
    support.fill(kafka_cluster, topic, {0: 100})
    for fut in kafka_cluster.admin().delete_records([TopicPartition(topic, 0, 350)]).values():
        fut.result(30)
    assert cli(*record)[0] == 1
    code, out, _err = cli(*db, "check", NAME)
    assert code == 2 and out.count("DATA LOSS") == 1 and "50 records" in out, out
    with Journal(journal_url) as journal:
        _batch_on(journal, topic, 2, 300, 400, 400)
    code, out, _err = cli(*db, "check", NAME)
    assert code == 2 and "DATA LOSS: 50 records" in out and "offsets 300..349" in out, out


def test_a_restart_plan_that_accepted_the_loss_covers_it_and_nothing_else(
        journal_url: str, cli: Cli, tmp_path: Path) -> None:
    """A plan after the batch the loss was recorded after, with --allow-data-loss, naming
    the partition, is the decision: check is OK and the audit says which plan. A plan
    without --allow-data-loss, or after another batch, covers nothing."""
    from offset_journal.restart import PlanRequest, plan_restart
    from offset_journal.restart.record import plan_row

    with Journal(journal_url) as journal:
        _batch(journal, 0, None, 100)
        _batch(journal, 1, 100, 120)
        journal.record_forecasts([NAME], [_lost(120, 160)], {NAME: (f"{NAME}-run-1", 1)})
    plan = plan_restart(journal_url, NAME, record=False)
    with Journal(journal_url) as journal:
        journal.record_plan(plan_row(plan, PlanRequest(NAME), "starting-offsets"))
        other = plan_row(plan, PlanRequest(NAME, allow_data_loss=True), "starting-offsets")
        journal.record_plan({**other, "anchor_batch_id": 0})
        _batch(journal, 2, 120, 300)  # read on past the lost records
    db = ["--database-url", journal_url]
    assert cli(*db, "check", NAME)[0] == 2
    with Journal(journal_url) as journal:
        accepted = journal.record_plan(other)
    code, out, _err = cli(*db, "check", NAME)
    assert code == 0, out
    code, out, _err = cli(*db, "audit", NAME, "--format", "json")
    assert code == 0, out
    [gap] = json.loads(out)["findings"]
    assert (gap["status"], gap["plan_id"], gap["first_offset"], gap["end_offset"]) == (
        "planned", accepted, 120, 160)
    assert f"data loss accepted by plan {accepted} (--allow-data-loss)" in gap["reason"]
    code, out, err = cli(*db, "losses", "acknowledge", NAME, "--reason", "x")
    assert code == 1, out
    page = tmp_path / "report.html"
    assert cli(*db, "report", NAME, "-o", str(page))[0] == 0  # the report's findings too
    assert f"data loss accepted by plan {accepted} (--allow-data-loss)" in page.read_text()


def test_only_the_planner_and_the_owner_record_or_acknowledge_a_loss(
        journal_url: str, cli: Cli) -> None:
    """A job's credentials (the writer) can neither hide a loss nor acknowledge one; the
    reader reads them (check, audit, losses list); the planner records and acknowledges."""
    writer, reader, planner = support.journal_roles(journal_url)

    def url(role: str) -> str:
        return support.role_url(journal_url, role)

    with Journal(url(writer)) as journal:
        _batch(journal, 0, None, 100)
    with Journal(url(planner)) as journal:
        journal.record_forecasts([NAME], [_lost(100, 160)], {NAME: (f"{NAME}-run-1", 0)})
        journal.record_forecasts([NAME], [_lost(100, 170)], {NAME: (f"{NAME}-run-1", 0)})
        [loss] = journal.recorded_losses(NAME)
    assert (loss.first_offset, loss.end_offset) == (100, 170)  # grown, not added
    with Journal(url(writer)) as journal:
        _batch(journal, 1, 100, 300)  # the job reads on past it
    for statement in (
            "DELETE FROM offset_journal.retention_losses",
            "UPDATE offset_journal.retention_losses SET end_offset = 101",
            "INSERT INTO offset_journal.loss_acknowledgements (loss_id, end_offset, reason) "
            "SELECT id, 170, 'hidden' FROM offset_journal.retention_losses"):
        assert "permission denied" in support.denied(url(writer), statement)
    assert "permission denied" in support.denied(
        url(planner), "DELETE FROM offset_journal.loss_acknowledgements")
    assert cli("--database-url", url(reader), "check", NAME)[0] == 2
    assert cli("--database-url", url(reader), "losses", "list")[0] == 0
    code, _out, err = cli("--database-url", url(reader), "losses", "acknowledge", NAME,
                          "--reason", "not mine to say")
    assert code == 1 and "permission denied" in err and len(err.splitlines()) == 1, err
    assert cli("--database-url", url(planner), "losses", "acknowledge", NAME, "--reason",
               "accepted: test data")[0] == 0
    assert cli("--database-url", url(reader), "check", NAME)[0] == 0
    # A planner role granted before migration 0019 is told what to do, in one line.
    engine = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'REVOKE INSERT ON offset_journal.retention_losses FROM "{planner}"')
    engine.dispose()
    with Journal(url(planner)) as journal, pytest.raises(JournalError,
                                                         match="granted before migration 0019"):
        journal.record_forecasts([NAME], [_lost(100, 180)], {NAME: (f"{NAME}-run-1", 0)})


def test_the_planner_grows_a_recorded_loss_and_cannot_shrink_or_backdate_it(
        journal_url: str, cli: Cli) -> None:
    """The planner's UPDATE of a loss (so that a later recording grows it) cannot take a
    loss back: a smaller end, an earlier or a future recording time, or another column
    is refused by the database, with the planner's own connection; a larger end is not,
    and the owner may still correct a row."""
    writer, _reader, planner = support.journal_roles(journal_url)
    planner_url = support.role_url(journal_url, planner)
    with Journal(support.role_url(journal_url, writer)) as journal:
        _batch(journal, 0, None, 100)
    with Journal(planner_url) as journal:
        journal.record_forecasts([NAME], [_lost(100, 150)], {NAME: (f"{NAME}-run-1", 0)})
    table = "offset_journal.retention_losses"
    (recorded,) = sql_rows(journal_url, f"SELECT last_recorded_at FROM {table}")  # noqa: S608
    for change in ("end_offset = first_offset + 1",
                   "last_recorded_at = last_recorded_at - interval '10 years'",
                   "last_recorded_at = now() + interval '10 years'",
                   "end_offset = end_offset + 10, "
                   "last_recorded_at = last_recorded_at - interval '1 second'"):
        refusal = support.denied(planner_url, f"UPDATE {table} SET {change}")  # noqa: S608
        assert "a recorded loss only grows" in refusal, refusal
    # Other columns are not granted at all.
    assert "permission denied" in support.denied(
        planner_url, f"UPDATE {table} SET first_offset = 149")  # noqa: S608
    assert sql_rows(journal_url, f"SELECT first_offset, end_offset, last_recorded_at "  # noqa: S608
                                 f"FROM {table}") == [(100, 150, recorded[0])]
    code, out, _err = cli("--database-url", planner_url, "losses", "list")
    assert code == 0 and "100..149" in out and "OPEN" in out, out
    assert cli("--database-url", planner_url, "check", NAME)[0] == 2
    # Growing is what the grant is for: by hand, and by a recording finding more.
    sql_execute(planner_url, f"UPDATE {table} SET end_offset = end_offset + 5, "  # noqa: S608
                             "last_recorded_at = now()")
    with Journal(planner_url) as journal:
        journal.record_forecasts([NAME], [_lost(100, 170)], {NAME: (f"{NAME}-run-1", 0)})
        journal.record_forecasts([NAME], [_lost(100, 160)], {NAME: (f"{NAME}-run-1", 0)})
        [loss] = journal.recorded_losses(NAME)
    assert (loss.first_offset, loss.end_offset) == (100, 170)
    assert loss.last_recorded_at is not None and loss.last_recorded_at > recorded[0]
    # The owner corrects what it must (it could drop the trigger anyway).
    sql_execute(journal_url, f"UPDATE {table} SET end_offset = 101, "  # noqa: S608
                             "last_recorded_at = last_recorded_at - interval '10 years'")
    assert sql_rows(journal_url, f"SELECT end_offset FROM {table}") == [(101,)]  # noqa: S608


def test_a_recording_that_began_before_another_committed_keeps_the_later_time(
        journal_url: str) -> None:
    """Two `retention --record` runs overlap: the one whose transaction began first
    records last. Its now() is earlier than the time already recorded; the loss keeps the
    later time instead of being refused as moved back."""
    _writer, _reader, planner = support.journal_roles(journal_url)
    planner_url = support.role_url(journal_url, planner)
    anchors = {NAME: (f"{NAME}-run-1", 0)}
    rows = loss_rows([_lost(100, 150)], anchors)
    with Journal(planner_url) as journal:
        with journal.engine.begin() as early:
            (began,) = early.execute(sa.text("SELECT now()")).one()
            with Journal(planner_url) as other:
                other.record_forecasts([NAME], [_lost(100, 160)], anchors)
            record_losses(early, rows)
        [loss] = journal.recorded_losses(NAME)
    assert loss.end_offset == 160
    assert loss.last_recorded_at is not None and loss.last_recorded_at > began
