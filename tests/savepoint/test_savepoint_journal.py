"""Savepoints against a real journal, without Spark: a savepoint named
by its directory must be the one the journal recorded, and the state a job reads must
come from the manifest its plan was checked with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.cli import main
from offset_journal.errors import SavepointError
from offset_journal.records import batch_from_progress
from offset_journal.restart import PlanRequest, plan_restart
from offset_journal.restart.record import plan_row
from offset_journal.savepoint import load_savepoint
from offset_journal.savepoint._files import write_manifest
from offset_journal.savepoint.model import Manifest, SourceEnd, digest_of
from tests.payloads import kafka_source, progress

QUERY = "totals"
RUN = "run-1"


def _journal_batches(url: str) -> None:
    with Journal(url) as j:
        for batch_id, end in ((4, 50), (5, 60)):
            assert j.record_batch(batch_from_progress(progress(
                batch_id, run_id=RUN, query_id="qid", name=QUERY,
                timestamp=f"2026-11-25T10:0{batch_id}:00Z",
                sources=[kafka_source("t", {"t": {"0": end - 10}}, {"t": {"0": end}})])))


def _manifest(batch_id: int, end: int) -> Manifest:
    return Manifest(query_name=QUERY, run_id=RUN, query_id="qid", batch_id=batch_id,
                    checkpoint="/chk/v1",
                    end_offsets=(SourceEnd(0, "KafkaV2[Subscribe[t]]", "kafka",
                                           {"t": {"0": end}}),),
                    operators=(), parts=(), created_at="2026-11-25T10:10:00.000+00:00")


def _recorded_savepoint(url: str, where: Path) -> int:
    """A savepoint of batch 4 written to ``where`` and recorded, as `savepoint create`
    does it (without Spark: the old query had no stateful operator)."""
    m = _manifest(4, 50)
    digest = write_manifest(str(where), m)
    with Journal(url) as j:
        return j.record_savepoint({
            "query_name": QUERY, "run_id": RUN, "query_id": "qid", "batch_id": 4,
            "checkpoint": "/chk/v1", "location": str(where), "manifest_sha256": digest,
            "manifest": m.to_dict(), "host": "h", "os_user": "u"})


def _resign(where: Path, batch_id: int, end: int) -> None:
    """The manifest changed to name another journaled batch, with its offsets, and its
    own checksum recomputed: consistent in itself, but not what was recorded."""
    doc = json.loads((where / "manifest.json").read_text())
    doc["manifest"] = _manifest(batch_id, end).to_dict()
    doc["sha256"] = digest_of(doc["manifest"])
    (where / "manifest.json").write_text(json.dumps(doc))


def test_a_savepoint_directory_the_journal_did_not_record_is_refused_unless_accepted(
        journal_url: str, tmp_path: Path, capsys: Any) -> None:
    _journal_batches(journal_url)
    sp = tmp_path / "sp"
    saved = _recorded_savepoint(journal_url, sp)
    with Journal(journal_url) as j:
        found = load_savepoint(str(sp), j, query_name=QUERY)
    assert found.id == saved and not found.warnings
    recorded = plan_restart(journal_url, QUERY, savepoint=str(sp), record=False)
    assert recorded.ok, recorded.errors
    assert recorded.savepoint_sha256 == found.digest

    _resign(sp, 5, 60)
    with Journal(journal_url) as j, pytest.raises(
            SavepointError, match="not recorded in this journal.*--unrecorded-savepoint"):
        load_savepoint(str(sp), j, query_name=QUERY)
    with pytest.raises(SavepointError, match="not recorded in this journal"):
        plan_restart(journal_url, QUERY, savepoint=str(sp), record=False)
    code = main(["--database-url", journal_url, "plan", QUERY, "--savepoint", str(sp)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "not recorded in this journal" in err[0], err

    # Accepted (a savepoint made with --no-record): a warning, and the decision recorded.
    request = PlanRequest(QUERY, savepoint=str(sp), unrecorded_savepoint=True).checked()
    accepted = plan_restart(journal_url, request, record=False)
    assert accepted.ok and accepted.anchor.batch_id == 5
    assert accepted.savepoint_id is None
    assert any("--unrecorded-savepoint, recorded with the plan" in w
               for w in accepted.warnings)
    row = plan_row(accepted, request, "plan")
    assert row["request"]["unrecorded_savepoint"] is True
    assert row["request"]["savepoint"]["sha256"] == accepted.savepoint_sha256


def test_the_state_read_must_come_from_the_manifest_the_plan_was_checked_with(
        journal_url: str, tmp_path: Path) -> None:
    _journal_batches(journal_url)
    sp = tmp_path / "sp"
    _recorded_savepoint(journal_url, sp)
    plan = plan_restart(journal_url, QUERY, savepoint=str(sp), record=False)
    assert plan.savepoint_sha256 is not None
    # What initial_state reads (no journal at hand): the plan's manifest passes ...
    load_savepoint(str(sp), expect_sha256=plan.savepoint_sha256)
    _resign(sp, 5, 60)  # ... another one, replaced after the plan, does not.
    with pytest.raises(SavepointError, match="not the one the plan was made from"):
        load_savepoint(str(sp), expect_sha256=plan.savepoint_sha256)


def test_savepoint_list_ignores_a_forged_manifest_with_a_note(
        journal_url: str, tmp_path: Path, capsys: Any) -> None:
    _journal_batches(journal_url)
    saved = _recorded_savepoint(journal_url, tmp_path / "sp")
    with Journal(journal_url) as j:  # a row no `savepoint create` wrote
        forged = j.record_savepoint({
            "query_name": QUERY, "run_id": RUN, "query_id": "qid", "batch_id": 5,
            "checkpoint": "/chk", "location": "/forged", "manifest_sha256": "b" * 64,
            "manifest": {"operators": 5, "query_name": QUERY, "run_id": RUN,
                         "query_id": "qid", "batch_id": 5, "checkpoint": "/chk"},
            "host": "h", "os_user": "u"})
    code = main(["--database-url", journal_url, "savepoint", "list", QUERY])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:] if line.strip()}
    assert rows[str(saved)][4] == "0" and rows[str(forged)][4] == "?"
    assert f"savepoint {forged}: its recorded manifest is ignored" in err
    assert "Traceback" not in err and "TypeError" not in err



def test_the_manifest_digest_is_shown_where_a_user_looks(
        journal_url: str, tmp_path: Path, capsys: Any) -> None:
    """A user's own v2 passes ``initial_state(..., expect_sha256=)``;
    `savepoint show` (text and JSON) and `starting-offsets` give it, not only
    `plan --format json`."""
    _journal_batches(journal_url)
    saved = _recorded_savepoint(journal_url, tmp_path / "sp")
    digest = _manifest(4, 50).digest
    url = ["--database-url", journal_url]

    assert main([*url, "savepoint", "show", str(saved)]) == 0
    out = capsys.readouterr().out
    assert f"manifest SHA-256 {digest}" in out and f"expect_sha256='{digest}'" in out
    assert main([*url, "savepoint", "show", str(saved), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["manifest_sha256"] == digest and shown["id"] == saved

    assert main([*url, "starting-offsets", QUERY, "--savepoint", str(saved),
                 "--no-record"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == '{"t":{"0":50}}'  # stdout: only what startingOffsets takes
    assert f"expect_sha256='{digest}'" in err and f"savepoint {saved}" in err
    assert main([*url, "starting-offsets", QUERY, "--savepoint", str(saved), "--no-record",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert json.loads(out["startingOffsets"]) == {"t": {"0": 50}}
    assert out["savepoint"] == {"id": saved, "location": str(tmp_path / "sp"),
                                "sha256": digest, "seeded": []}
    assert out["source"] == 0 and out["plan_id"] is None
    # Without a savepoint: the same object, the savepoint null.
    assert main([*url, "starting-offsets", QUERY, "--no-record", "--format", "json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["savepoint"] is None and json.loads(plain["startingOffsets"]) == {
        "t": {"0": 60}}
