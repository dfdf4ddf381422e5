"""Restarts journaled as decisions: every plan handed out is recorded (restart_plans),
opting out leaves nothing, a role that may not record still gets its plan (with a
warning), and a run is linked to the plan it started from (plan_runs)."""

from __future__ import annotations

import getpass
import json
import socket
import subprocess
import sys
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from offset_journal import Journal
from offset_journal.errors import JournalError
from offset_journal.journal.db import resolve_url
from offset_journal.journal.roles import grant
from offset_journal.restart import plan_restart
from tests import support
from tests.support import count_rows, journal_batches, kafka_progress, ts

cli = support.cli  # the fixture

RUN = "run-a"


@pytest.fixture
def journaled(journal_url: str) -> str:
    journal_batches(journal_url, [
        kafka_progress(0, None, {"orders": {"0": 4, "1": 2}}, minute=0),
        kafka_progress(1, {"orders": {"0": 4, "1": 2}}, {"orders": {"0": 9, "1": 5}}, minute=1),
        kafka_progress(2, {"orders": {"0": 9, "1": 5}}, {"orders": {"0": 12, "1": 5}}, minute=2,
                       event_time={"watermark": ts(0), "max": ts(1.5), "min": ts(1)}),
    ])
    return journal_url


def test_plan_restart_records_the_plan_it_hands_out(journaled: str, tmp_path: Any) -> None:
    plan = plan_restart(journaled, "orders", checkpoint=str(tmp_path / "ck-v2"))
    assert plan.plan_id is not None and plan.record_problem is None
    assert plan.to_dict()["plan_id"] == plan.plan_id
    assert f"as plan {plan.plan_id}" in plan.explain()
    with Journal(journaled) as j:
        (rec,) = j.recorded_plans("orders")
        assert rec.id == plan.plan_id and rec.position == "after" and not rec.deliberate
        assert rec.kafka_offsets == ((0, "orders", 0, 12), (0, "orders", 1, 5))
        assert json.loads(rec.options["0"]["startingOffsets"]) == {"orders": {"0": 12, "1": 5}}
        assert (rec.anchor_run_id, rec.anchor_batch_id) == (RUN, 2)
        assert rec.checkpoint == str(tmp_path / "ck-v2") and rec.command == "api" and rec.ok
        assert rec.host == socket.gethostname() and rec.os_user == getpass.getuser()
        now = j.engine.connect().execute(sa.select(sa.func.now())).scalar_one()
        assert abs((now - rec.created_at).total_seconds()) < 60  # the database's clock
        assert rec.run_ids == ()
        # A job links the run it started; once.
        assert j.link_plan(rec.id, "run-b") is True
        assert j.link_plan(rec.id, "run-b") is False
        assert j.recorded_plans("orders")[0].run_ids == ("run-b",)
        with pytest.raises(JournalError, match="no recorded restart plan 999"):
            j.link_plan(999, "run-c")
    assert plan_restart(journaled, "orders", record=False).plan_id is None
    assert count_rows(journaled, "restart_plans") == 1


def test_each_command_records_its_position_unless_told_not_to(journaled: str, cli: Any) -> None:
    url = ["--database-url", journaled]
    assert cli(*url, "starting-offsets", "orders")[0] == 0
    code, out, err = cli(*url, "starting-offsets", "orders", "--batch", f"{RUN}:1")
    assert code == 0 and json.loads(out) == {"orders": {"0": 4, "1": 2}}
    assert "not recorded" not in err
    assert cli(*url, "plan", "orders", "--as-of", "2024-01-01T00:01:30Z", "--record")[0] == 0
    assert cli(*url, "plan", "orders", "--state-aware", "--window", "1m", "--record")[0] == 0
    # A plan refused outright (no such batch) hands nothing out: nothing recorded.
    assert cli(*url, "plan", "orders", "--batch", f"{RUN}:77", "--record")[0] == 1
    before = count_rows(journaled, "restart_plans")
    assert cli(*url, "plan", "orders")[0] == 0  # a preview
    assert cli(*url, "plan", "orders", "--no-record")[0] == 0
    assert cli(*url, "starting-offsets", "orders", "--no-record")[0] == 0
    assert count_rows(journaled, "restart_plans") == before == 4
    with Journal(journaled) as j:
        plans = j.recorded_plans("orders")
    assert [(p.command, p.position) for p in plans] == [
        ("starting-offsets", "after"), ("starting-offsets", "at"), ("plan", "as-of"),
        ("plan", "rewind")]
    assert all(p.ok for p in plans)
    assert plans[1].kafka_offsets == ((0, "orders", 0, 4), (0, "orders", 1, 2))
    assert plans[2].kafka_offsets == ((0, "orders", 0, 9), (0, "orders", 1, 5))


def test_plan_is_a_preview_and_the_plan_handed_out_is_the_one_recorded(
        journaled: str, cli: Any) -> None:
    """Every `plan` recorded a plan, so a person who looked at the plan
    before an upgrade and then started the job (which records its own) saw two numbers
    for one restart. `plan` is a preview, recorded only with --record; what
    starting-offsets prints, and what a job starts from, is recorded, once."""
    url = ["--database-url", journaled]
    code, out, err = cli(*url, "plan", "orders")
    assert code == 0 and "Not recorded in the journal: a preview." in " ".join(out.split())
    assert "Recorded in the journal" not in out and "recorded" not in err
    code, out, _ = cli(*url, "plan", "orders", "--format", "json")
    assert code == 0 and json.loads(out)["plan_id"] is None
    assert count_rows(journaled, "restart_plans") == 0
    code, out, _ = cli(*url, "starting-offsets", "orders")
    assert code == 0 and json.loads(out) == {"orders": {"0": 12, "1": 5}}
    code, out, _ = cli(*url, "plan", "orders", "--record")
    assert code == 0 and "Recorded in the journal as plan 2 (restart_plans)." in out
    with Journal(journaled) as j:
        assert [(p.id, p.command) for p in j.recorded_plans("orders")] == [
            (1, "starting-offsets"), (2, "plan")]
    code, _, err = cli(*url, "plan", "orders", "--record", "--no-record")
    assert code == 2 and err.strip() == (
        "offset-journal: error: --record and --no-record: give one or the other")
    assert count_rows(journaled, "restart_plans") == 2


def _role_url(admin_url: str, role: str) -> str:
    return sa.engine.make_url(admin_url).set(username=role).render_as_string(False)


def test_a_reader_gets_its_plan_unrecorded_and_a_planner_records_it(journaled: str,
                                                                      cli: Any) -> None:
    suffix = uuid.uuid4().hex[:8]
    reader, planner = f"oj_read_{suffix}", f"oj_plan_{suffix}"
    engine = sa.create_engine(resolve_url(journaled), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        for role in (reader, planner):
            conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
    engine.dispose()
    grant(journaled, reader=reader, planner=planner)

    code, out, err = cli("--database-url", _role_url(journaled, reader), "starting-offsets",
                         "orders")
    assert code == 0 and json.loads(out) == {"orders": {"0": 12, "1": 5}}
    (line,) = [x for x in err.splitlines() if "recorded" in x]
    assert line.startswith("offset-journal: warning: this plan was not recorded")
    assert "permission denied" in line and "--planner" in line
    assert count_rows(journaled, "restart_plans") == 0
    # --no-record: no attempt, no warning.
    assert "recorded" not in cli("--database-url", _role_url(journaled, reader),
                                 "starting-offsets", "orders", "--no-record")[2]
    # As a person runs it (the console, logging set up by the command),
    # the warning is said once, not also as a logged WARNING.
    for command in (["plan", "--record"], ["starting-offsets"]):
        done = subprocess.run([sys.executable, "-m", "offset_journal.cli", "--database-url",
                               _role_url(journaled, reader), *command, "orders"],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        said = [x for x in done.stderr.splitlines() if "not recorded" in x]
        assert len(said) == 1 and said[0].startswith("offset-journal: warning: "), said

    code, out, err = cli("--database-url", _role_url(journaled, planner), "plan", "orders",
                         "--record")
    assert code == 0 and "recorded" not in err and "Recorded in the journal as plan" in out
    with Journal(_role_url(journaled, planner)) as j:
        (rec,) = j.recorded_plans("orders")
        assert j.link_plan(rec.id, "run-x")
        # The planner cannot rewrite what it recorded, nor write batches.
        for statement in ("UPDATE offset_journal.restart_plans SET position = 'at'",
                          "DELETE FROM offset_journal.restart_plans",
                          "INSERT INTO offset_journal.query_runs (run_id, query_id, "
                          "query_name, named) VALUES ('x', 'x', 'x', true)"):
            with pytest.raises(sa.exc.ProgrammingError, match="permission denied"), \
                    j.engine.begin() as conn:
                conn.exec_driver_sql(statement)


def test_the_recorded_position_of_each_kind_of_plan(journaled: str) -> None:
    """after, at, as-of and rewind come from the request and the plan; from-time (a
    request field of its own) is recorded as such whenever a request carries it."""
    from dataclasses import replace
    from datetime import datetime, timezone

    from offset_journal.restart import PlanRequest
    from offset_journal.restart.record import plan_row, recorded_position

    plan = plan_restart(journaled, "orders", record=False)
    request = PlanRequest("orders")
    assert recorded_position(plan, request) == "after"
    when = datetime(2024, 1, 1, 0, 1, tzinfo=timezone.utc)
    assert recorded_position(plan, replace(request, as_of=when)) == "as-of"
    from_time = replace(request, from_time=when, bootstrap_servers="broker:9092")
    assert recorded_position(plan, from_time) == "from-time"
    assert plan.warnings and "not checked against a Kafka cluster" in plan.warnings[0]
    assert plan_row(plan, from_time, "plan")["request"] == {
        "from_time": "2024-01-01T00:01:00Z", "bootstrap_servers_given": True,
        "warnings": plan.warnings}
    assert recorded_position(replace(plan, position="from-time"), request) == "from-time"
    assert recorded_position(replace(plan, mode="state-aware"), request) == "rewind"
    row = plan_row(plan, replace(request, as_of=when), "starting-offsets")
    assert row["request"] == {"as_of": "2024-01-01T00:01:00Z", "warnings": plan.warnings}
    assert row["command"] == "starting-offsets" and row["position"] == "as-of"
    assert plan_row(plan, request, "something else")["command"] == "api"


def test_a_plan_accepting_data_loss_or_a_recreated_topic_is_recorded_as_such(
        journaled: str) -> None:
    """What a person accepted when the plan was handed out (--allow-data-loss,
    --restart-recreated-topic) and the plan's warnings are in the recorded request, and
    come back with the recorded plan: the audit needs them to explain the gap or the
    new log such a plan makes."""
    from dataclasses import replace

    from offset_journal.restart import PlanRequest
    from offset_journal.restart.record import plan_row

    plan = plan_restart(journaled, "orders", record=False)
    plan.plan_warnings[:] = ["DATA LOSS accepted (--allow-data-loss): orders-0 ..."]
    request = replace(PlanRequest("orders"), allow_data_loss=True,
                      recreated_topics=("orders", "orders"), bootstrap_servers="b:9092")
    row = plan_row(plan, request, "plan")
    assert row["position"] == "after"
    assert row["request"] == {
        "allow_data_loss": True, "recreated_topics": ["orders"],
        "bootstrap_servers_given": True,
        "warnings": ["DATA LOSS accepted (--allow-data-loss): orders-0 ..."]}
    with Journal(journaled) as j:
        plan_id = j.record_plan(row)
        (rec,) = j.recorded_plans("orders")
    assert rec.id == plan_id and rec.request == row["request"]
    assert rec.allow_data_loss and rec.recreated_topics == ("orders",)
    assert rec.warnings == ("DATA LOSS accepted (--allow-data-loss): orders-0 ...",)
    # An ordinary plan records neither.
    plain = plan_row(plan, PlanRequest("orders"), "plan")["request"]
    assert "allow_data_loss" not in plain and "recreated_topics" not in plain


def test_a_journal_without_the_plan_tables_still_plans_and_audits(journaled: str,
                                                                  cli: Any) -> None:
    """Jobs and people on a journal not upgraded yet: the plan is handed out with one
    warning line saying to upgrade, and the audit works without plans."""
    engine = sa.create_engine(resolve_url(journaled), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE offset_journal.plan_runs, offset_journal.restart_plans")
    engine.dispose()
    code, out, err = cli("--database-url", journaled, "starting-offsets", "orders")
    assert code == 0 and json.loads(out) == {"orders": {"0": 12, "1": 5}}
    (line,) = [x for x in err.splitlines() if "recorded" in x]
    assert "does not exist" in line and "offset-journal db upgrade" in line
    code, out, err = cli("--database-url", journaled, "audit", "orders")
    assert code == 0 and "OK" in out and err == ""


def test_recording_returns_its_result_and_leaves_the_plan_as_it_was(journaled: str) -> None:
    """A plan is frozen: recording gives a new plan with its id; the plan recorded is
    not changed behind whoever holds it."""
    from dataclasses import FrozenInstanceError

    from offset_journal.restart import PlanRequest
    from offset_journal.restart.record import record

    request = PlanRequest("orders").checked()
    with Journal(journaled) as j:
        plan = plan_restart(None, request, journal=j, record=False)
        done = record(j, plan, request, "plan")
    assert done.plan_id is not None and done.problem is None
    assert plan.plan_id is None  # the plan handed to record is as it was
    assert done.onto(plan).plan_id == done.plan_id and done.onto(plan).sources == plan.sources
    with pytest.raises(FrozenInstanceError):
        plan.plan_id = 1  # type: ignore[misc]
    assert count_rows(journaled, "restart_plans") == 1
