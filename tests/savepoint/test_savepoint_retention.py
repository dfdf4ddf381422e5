"""A savepoint schedule's retention against a real journal, without Spark: which
savepoints go, their files removed and their deletion recorded (migration 0022, guarded
for every role but the owner), what a deleted savepoint is then to a plan, `prune` and
`savepoint list`, and what `check` and the report say a recovery reads again.

Savepoints here are written as `savepoint create` writes them for a query with no
stateful operator (a manifest, no parts), and recorded, as tests/savepoint/test_savepoint_journal.py
does: what retention reads is the journal and the manifest, never the state."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from offset_journal import Journal
from offset_journal.errors import SavepointError
from offset_journal.journal.db import resolve_url
from offset_journal.journal.schema import restart_plans
from offset_journal.records import batch_from_progress
from offset_journal.report._gather import gather
from offset_journal.restart import PlanRequest, plan_restart
from offset_journal.restart.record import plan_row
from offset_journal.savepoint import load_savepoint
from offset_journal.savepoint._files import write_manifest
from offset_journal.savepoint.core import pinning
from offset_journal.savepoint.model import Manifest, SourceEnd, digest_of
from offset_journal.savepoint.periodic import prune_savepoints
from offset_journal.savepoint.policy import Retention
from tests import s3_support, support
from tests.payloads import kafka_source, progress, sql_execute, sql_rows
from tests.s3_support import upload
from tests.support import Cli, denied, journal_roles, one_error_line, role_url, write_checkpoint

bucket, cli = s3_support.bucket, support.cli  # the fixtures

QUERY, RUN, QID = "totals", "run-1", "qid"


def _journal(url: str, batches: range = range(10), *, stateful: bool = True,
             name: str = QUERY, run: str = RUN, qid: str = QID) -> None:
    """Batches 0..9 of a stateful query reading topic t: batch b ends at 10 (b + 1) and
    read 10 + b records."""
    with Journal(url) as j:
        for b in batches:
            body = json.loads(progress(
                b, run_id=run, query_id=qid, name=name, rows=10 + b,
                timestamp=f"2026-11-25T10:{b:02d}:00Z",
                sources=[kafka_source("t", {"t": {"0": 10 * b}} if b else None,
                                      {"t": {"0": 10 * (b + 1)}})]))
            if stateful:
                body["stateOperators"] = [{"operatorName": "stateStoreSave",
                                           "numRowsTotal": 7, "numRowsUpdated": 2}]
            assert j.record_batch(batch_from_progress(json.dumps(body)))


def _manifest(batch_id: int) -> Manifest:
    return Manifest(query_name=QUERY, run_id=RUN, query_id=QID, batch_id=batch_id,
                    checkpoint="/chk/v1",
                    end_offsets=(SourceEnd(0, "KafkaV2[Subscribe[t]]", "kafka",
                                           {"t": {"0": 10 * (batch_id + 1)}}),),
                    operators=(), parts=(), created_at="2026-11-25T10:10:00.000+00:00")


def _savepoint(url: str, where: Path, batch_id: int) -> int:
    m = _manifest(batch_id)
    digest = write_manifest(str(where), m)
    with Journal(url) as j:
        return j.record_savepoint({
            "query_name": QUERY, "run_id": RUN, "query_id": QID, "batch_id": batch_id,
            "checkpoint": "/chk/v1", "location": str(where), "manifest_sha256": digest,
            "manifest": m.to_dict(), "host": "h", "os_user": "u"})


def _deleted(url: str) -> dict[int, str]:
    return {int(i): str(r) for i, r in sql_rows(
        url, "select savepoint_id, reason from offset_journal.savepoint_deletions")}


def test_retention_deletes_old_savepoints_files_and_records_why(journal_url: str,
                                                                tmp_path: Path, cli: Cli):
    """Kept: the newest, the one a recorded plan starts from, one made by hand in
    another directory. Deleted: the others beyond --keep, their directories removed and
    each deletion recorded; the driver's writer role may do all of it."""
    _journal(journal_url)
    sp = tmp_path / "sp"
    by_hand = _savepoint(journal_url, tmp_path / "by-hand", 1)
    ids = {b: _savepoint(journal_url, sp / f"totals-batch{b}", b) for b in (2, 4, 6, 8)}
    planned = plan_restart(journal_url, QUERY, savepoint=str(ids[4]),
                           checkpoint=str(tmp_path / "ck-v2"))
    assert planned.ok and planned.plan_id is not None, planned.errors

    writer, _reader, _planner = journal_roles(journal_url)
    with Journal(role_url(journal_url, writer)) as j:
        pruned = prune_savepoints(j, QUERY, str(sp), Retention(keep=1))
    assert pruned.problems == ()
    assert [(v.savepoint.id, v.why) for v in pruned.deleted] == [
        (ids[2], "beyond the 1 newest kept"), (ids[6], "beyond the 1 newest kept")]
    assert [(v.savepoint.id, v.why) for v in pruned.kept] == [
        (ids[8], "the newest"), (ids[4], f"restart plan {planned.plan_id} starts from it")]
    assert not (sp / "totals-batch2").exists() and not (sp / "totals-batch6").exists()
    assert (sp / "totals-batch4" / "manifest.json").exists()
    assert (sp / "totals-batch8" / "manifest.json").exists()
    assert (tmp_path / "by-hand" / "manifest.json").exists()
    assert _deleted(journal_url) == {ids[2]: "beyond the 1 newest kept",
                                     ids[6]: "beyond the 1 newest kept"}
    with Journal(journal_url) as j:  # run again: nothing more to do
        assert prune_savepoints(j, QUERY, str(sp), Retention(keep=1)).deleted == ()

    # A deleted savepoint is gone for plans, for the reader and for prune.
    with Journal(journal_url) as j, pytest.raises(SavepointError,
                                                  match="was deleted by retention at"):
        load_savepoint(ids[2], j)
    code, _out, err = cli("--database-url", journal_url, "plan", QUERY, "--savepoint",
                          str(ids[6]), "--checkpoint", str(tmp_path / "ck-v3"))
    assert f"savepoint {ids[6]} of query 'totals' (batch 6) was deleted by retention" in \
        one_error_line(code, err)
    code, out, err = cli("--database-url", journal_url, "savepoint", "list", QUERY)
    assert code == 0, err
    listed = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert listed[str(ids[2])].rstrip().endswith(": beyond the 1 newest kept")
    assert listed[str(ids[8])].rstrip().endswith(str(sp / "totals-batch8"))
    with Journal(journal_url) as j:
        pins, _ignored = pinning(j.savepoints(QUERY))
        assert sorted(pins) == sorted([by_hand, ids[4], ids[8]])
        later = datetime(2100, 1, 1, tzinfo=timezone.utc)  # every batch old enough to go
        for given in (pins, None):  # the command's pins, and the SQL's own choice
            kept = j.prune(later, query_name=QUERY, dry_run=True, savepoints=given)
            assert {k.savepoint_id for k in kept.kept_for_savepoints} == {by_hand}, given


def test_retention_by_age_and_a_directory_that_is_not_the_recorded_savepoint(
        journal_url: str, tmp_path: Path):
    _journal(journal_url)
    sp = tmp_path / "sp"
    ids = {b: _savepoint(journal_url, sp / f"s{b}", b) for b in (3, 4, 5, 7)}
    sql_execute(journal_url, "update offset_journal.savepoints set created_at = now() - "
                "interval '10 days'")
    # s4's manifest is gone and something else is left there: not removed, and said.
    (sp / "s4" / "manifest.json").unlink()
    (sp / "s4" / "notes.txt").write_text("someone's")
    # s5's directory now holds another (self-consistent) manifest: not the one recorded.
    doc = json.loads((sp / "s5" / "manifest.json").read_text())
    doc["manifest"] = _manifest(6).to_dict()
    doc["sha256"] = digest_of(doc["manifest"])
    (sp / "s5" / "manifest.json").write_text(json.dumps(doc))
    with Journal(journal_url) as j:
        pruned = prune_savepoints(j, QUERY, str(sp), Retention(max_age=timedelta(days=7)))
    assert [v.savepoint.id for v in pruned.deleted] == [ids[3]]
    assert pruned.deleted[0].why.startswith("older than 7 days (made ")
    assert pruned.problems == (
        f"savepoint {ids[4]} (batch 4) at {sp / 's4'} is recorded as deleted; what is left "
        "at its location holds no manifest and was not removed: look at it, and remove it "
        "by hand",
        f"savepoint {ids[5]} (batch 5) at {sp / 's5'} was not deleted: the directory holds "
        "another manifest than the one the journal recorded")
    assert (sp / "s4" / "notes.txt").exists() and (sp / "s5").exists()
    assert (sp / "s7").exists() and not (sp / "s3").exists()
    assert set(_deleted(journal_url)) == {ids[3], ids[4]}


def test_the_journal_keeps_the_newest_and_a_planned_savepoint_for_every_role_but_the_owner(
        journal_url: str, tmp_path: Path):
    _journal(journal_url)
    ids = [_savepoint(journal_url, tmp_path / f"s{b}", b) for b in (1, 2, 3, 4)]
    plan = plan_restart(journal_url, QUERY, savepoint=str(tmp_path / "s2"),
                        checkpoint=str(tmp_path / "ck-v2"))
    assert plan.ok and plan.plan_id is not None
    writer, _reader, planner = journal_roles(journal_url)

    def delete(sid: int) -> str:
        return ("insert into offset_journal.savepoint_deletions (savepoint_id, reason) "  # noqa: S608
                f"values ({sid}, 'test')")

    for role in (writer, planner):
        url = role_url(journal_url, role)
        assert f"savepoint {ids[3]} is the newest of query totals: it is kept" in denied(
            url, delete(ids[3]))
        assert (f"savepoint {ids[1]} of query totals is kept: restart plan {plan.plan_id} "
                "starts from it") in denied(url, delete(ids[1]))
    sql_execute(role_url(journal_url, writer), delete(ids[0]))  # an older one: taken
    # The newest not deleted is what counts: with s4 gone, s3 is the newest.
    sql_execute(journal_url, delete(ids[3]))  # the owner is not checked
    assert f"savepoint {ids[2]} is the newest" in denied(role_url(journal_url, planner),
                                                         delete(ids[2]))
    assert "already exists" in _refused(journal_url, delete(ids[0]))  # once only
    assert "reason_check" in _refused(
        journal_url, "insert into offset_journal.savepoint_deletions (savepoint_id, reason) "  # noqa: S608
        f"values ({ids[2]}, '  ')")


def _refused(url: str, statement: str) -> str:
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(statement)
    except sa.exc.IntegrityError as exc:
        return str(exc.orig)
    finally:
        engine.dispose()
    raise AssertionError(f"allowed: {statement}")


def test_check_and_the_report_say_what_a_recovery_reads_again(
        journal_url: str, tmp_path: Path, cli: Cli):
    _journal(journal_url)
    _journal(journal_url, range(3), stateful=False, name="plain", run="run-p", qid="qid-p")
    _journal(journal_url, range(2), name="unsaved", run="run-u", qid="qid-u")
    sid = _savepoint(journal_url, tmp_path / "s6", 6)
    sql_execute(journal_url, "update offset_journal.savepoints set created_at = now() - "
                "interval '2 hours' where id = :i", i=sid)
    code, out, err = cli("--database-url", journal_url, "check", "--all",
                         "--max-savepoint-age", "1h,6h")
    assert code == 2, out + err
    lines = out.splitlines()
    # Batches 7, 8 and 9 come after the savepoint's batch 6: 17 + 18 + 19 records.
    assert lines[0].startswith("CRITICAL: unsaved: a stateful query with no savepoint")
    assert lines[1].startswith(f"WARNING: totals: its newest savepoint, {sid} (batch 6), "
                               "is 2.0 h old (made ")
    assert lines[1].endswith("; over 60 min,6.0 h): a recovery today reads 3 batches "
                             "(54 records) again")
    assert not any("plain" in line for line in lines)  # stateless: no savepoint needed
    code, out, _err = cli("--database-url", journal_url, "check", "totals", "--format", "json")
    recovery = json.loads(out)["recovery"]
    assert code == 0 and [(r["savepoint"], r["batches_again"], r["records_again"])
                          for r in recovery] == [(sid, 3, 54)]
    with Journal(journal_url) as j:
        data = gather(j, QUERY)
        assert data.recovery is not None and (data.recovery.savepoint_id,
                                              data.recovery.batches_again,
                                              data.recovery.records_again) == (sid, 3, 54)
        assert gather(j, "plain").recovery is None
        unsaved = gather(j, "unsaved").recovery
        assert unsaved is not None and unsaved.savepoint_id is None


def test_a_scheduled_savepoint_that_cannot_be_taken_is_critical_in_one_line(
        journal_url: str, tmp_path: Path, cli: Cli):
    """Cron's form (--keep/--max-age) exits as `check`: 2 when no savepoint was taken (a
    location not writable, a journal that does not answer), 3 for bad arguments."""
    _journal(journal_url, range(3), stateful=False)
    ckpt = write_checkpoint(tmp_path / "ck", QID, [([{"t": {"0": 10 * (b + 1)}}], True)
                                                   for b in range(3)])
    (tmp_path / "a-file").write_text("x")
    base = ["savepoint", "create", QUERY, "--checkpoint", str(ckpt), "--keep", "2"]
    code, out, err = cli("--database-url", journal_url, *base, "--under",
                         str(tmp_path / "a-file" / "sp"))
    line = one_error_line(code, err)
    assert code == 2 and out == "", line
    assert f"the savepoint location {tmp_path / 'a-file' / 'sp'} is not writable" in line
    assert support.count_rows(journal_url, "savepoints") == 0
    code, out, err = cli("--database-url", "postgresql://nobody@127.0.0.1:1/none", *base,
                         "--under", str(tmp_path / "sp"))
    assert code == 2 and "cannot reach the journal database" in one_error_line(code, err)
    code, out, err = cli("--database-url", journal_url, *base[:-1], "-3", "--under",
                         str(tmp_path / "sp"))
    assert code == 3, err
    assert not (tmp_path / "sp").exists()


def test_a_downgrade_below_0022_is_refused_while_deletions_are_recorded(
        journal_url: str, tmp_path: Path):
    from alembic import command

    from offset_journal.journal.db import alembic_config, current_revision

    _journal(journal_url)
    first = _savepoint(journal_url, tmp_path / "s1", 1)
    _savepoint(journal_url, tmp_path / "s2", 2)
    sql_execute(journal_url, "insert into offset_journal.savepoint_deletions "
                "(savepoint_id, reason) values (:i, 'test')", i=first)
    with pytest.raises(sa.exc.DBAPIError, match="downgrade below 0022_savepoint_deletions "
                                                "refused: 1 savepoint"):
        command.downgrade(alembic_config(journal_url), "0021_losses_only_grow")
    sql_execute(journal_url, "delete from offset_journal.savepoint_deletions")
    command.downgrade(alembic_config(journal_url), "0021_losses_only_grow")
    assert current_revision(journal_url) == "0021_losses_only_grow"


ADVISORY_WAITING = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND NOT granted")
SAVEPOINT_LOCK = sa.text("SELECT pg_advisory_xact_lock(hashtext('offset_journal."
                         "savepoint_deletions'), hashtext(:q))")


def _while_locked(url: str, call: Any, then: Any) -> Any:
    """``call()`` on a thread while another transaction holds the query's savepoint
    lock; once Postgres shows it waiting for that lock (a bounded wait), that
    transaction runs ``then(connection)`` and commits. ``call``'s result, or what it
    raised."""
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["result"] = call()
        except Exception as exc:  # noqa: BLE001 - handed back to the test
            done["error"] = exc

    try:
        with engine.connect() as held:
            held.execute(SAVEPOINT_LOCK, {"q": QUERY})
            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            deadline = time.monotonic() + 60
            while int(sql_rows(url, ADVISORY_WAITING)[0][0]) == 0:
                assert thread.is_alive(), done  # it must wait for the lock, not pass it
                assert time.monotonic() < deadline, "never waited for the savepoint lock"
                time.sleep(0.05)
            then(held)
            held.commit()
        thread.join(60)
        assert not thread.is_alive()
    finally:
        engine.dispose()
    return done.get("error", done.get("result"))


def _plan_row(url: str, savepoint_id: int, tmp_path: Path) -> dict[str, Any]:
    request = PlanRequest(QUERY, savepoint=str(savepoint_id),
                          checkpoint=str(tmp_path / "ck-v2")).checked()
    plan = plan_restart(url, request, record=False)
    assert plan.ok, plan.errors
    return plan_row(plan, request, "api")


def test_a_plan_recorded_while_retention_decides_keeps_its_savepoint(
        journal_url: str, tmp_path: Path):
    """Retention read no plan of s2; a plan from s2 is recorded before its deletion is:
    s2 stays, files and all, for the owner too (whom the table's guard does not check).
    And the newest stays though retention was told otherwise."""
    _journal(journal_url)
    sp = tmp_path / "sp"
    ids = {b: _savepoint(journal_url, sp / f"s{b}", b) for b in (2, 3)}
    row = _plan_row(journal_url, ids[2], tmp_path)

    with Journal(journal_url) as j:
        pruned = _while_locked(
            journal_url, lambda: prune_savepoints(j, QUERY, str(sp), Retention(keep=1)),
            lambda held: held.execute(sa.insert(restart_plans).values(row)))
        assert not isinstance(pruned, Exception), pruned
        (plan_id,) = [p.id for p in j.recorded_plans(QUERY)]
        assert pruned.deleted == () and pruned.problems == ()
        assert [(v.savepoint.id, v.why) for v in pruned.kept] == [
            (ids[3], "the newest"), (ids[2], f"restart plan {plan_id} starts from it")]
        assert j.record_savepoint_deletion(ids[3], "told to") == "the newest"
    assert (sp / "s2" / "manifest.json").exists() and _deleted(journal_url) == {}


def test_a_plan_from_a_savepoint_deleted_while_it_was_made_is_not_recorded(
        journal_url: str, tmp_path: Path):
    """The planner loaded s2's files; retention records s2's deletion before the plan
    is recorded: the plan is refused in one line, never recorded naming files that go."""
    _journal(journal_url)
    ids = {b: _savepoint(journal_url, tmp_path / f"s{b}", b) for b in (2, 3)}
    row = _plan_row(journal_url, ids[2], tmp_path)
    with Journal(journal_url) as j:
        refused = _while_locked(
            journal_url, lambda: j.record_plan(row),
            lambda held: held.execute(sa.text(
                "INSERT INTO offset_journal.savepoint_deletions (savepoint_id, reason) "
                "VALUES (:i, 'beyond the 1 newest kept')"), {"i": ids[2]}))
        assert isinstance(refused, SavepointError), refused
        assert str(refused) == (
            f"savepoint {ids[2]} of query 'totals' was deleted by retention while the plan "
            "was made (beyond the 1 newest kept): its files are gone; plan again from a "
            "newer one (`offset-journal savepoint list totals`)")
        assert j.recorded_plans(QUERY) == []
        # a plan from the newest is recorded as before
        assert j.record_plan(_plan_row(journal_url, ids[3], tmp_path)) > 0


def test_retention_on_s3a_removes_a_savepoints_prefix_whole(s3_server: Any, bucket: str,
                                                             journal_url: str,
                                                             tmp_path: Path):
    """Savepoints under an ``s3a://`` location (the S3 server): the location is probed
    writable, those beyond --keep lose every object under their prefix, the newest and
    a savepoint whose prefix only starts alike keep theirs."""
    from offset_journal.savepoint._files import probe_writable

    _journal(journal_url)
    scope = f"s3a://{bucket}/sp/totals"
    ids = {}
    for b in (2, 4, 6):
        where = tmp_path / f"totals-batch{b}"
        m = _manifest(b)
        digest = write_manifest(str(where), m)
        (where / "state").mkdir()
        (where / "state" / "part-0.parquet").write_bytes(b"a part, as a savepoint has")
        url = upload(s3_server, where, bucket, f"sp/totals/totals-batch{b}")
        with Journal(journal_url) as j:
            ids[b] = j.record_savepoint({
                "query_name": QUERY, "run_id": RUN, "query_id": QID, "batch_id": b,
                "checkpoint": "/chk/v1", "location": url, "manifest_sha256": digest,
                "manifest": m.to_dict(), "host": "h", "os_user": "u"})
    # not a savepoint of the schedule: its key starts as one's does
    s3_server.client().put_object(Bucket=bucket, Key="sp/totals/totals-batch2-notes.txt",
                                  Body=b"someone's")
    probe_writable(scope)
    with Journal(journal_url) as j:
        pruned = prune_savepoints(j, QUERY, scope, Retention(keep=1))
    assert pruned.problems == ()
    assert [v.savepoint.id for v in pruned.deleted] == [ids[2], ids[4]]
    listed = s3_server.client().list_objects_v2(Bucket=bucket, Prefix="sp/")
    assert sorted(o["Key"] for o in listed.get("Contents", [])) == [
        "sp/totals/totals-batch2-notes.txt", "sp/totals/totals-batch6/manifest.json",
        "sp/totals/totals-batch6/state/part-0.parquet"]
    assert set(_deleted(journal_url)) == {ids[2], ids[4]}
