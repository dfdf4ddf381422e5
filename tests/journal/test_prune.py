"""Retention: pruning old batches keeps what a restart needs and removes the rest whole."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from offset_journal.audit import audit_query
from offset_journal.cli import main
from offset_journal.journal import Journal
from offset_journal.journal.db import ENV_URL
from offset_journal.records import batch_from_progress
from offset_journal.restart import plan_restart
from tests.payloads import kafka_source, progress, sql_rows

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _ts(seconds: int) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _journal(url: str) -> None:
    """'orders': batches 0-9 one second apart, plus one without a trigger time;
    'audit': batches 0-2, all older than orders' first."""
    with Journal(url) as j:
        for i in range(10):
            j.record_batch(batch_from_progress(progress(
                i, run_id="run-orders", query_id="q-orders", name="orders",
                timestamp=_ts(100 + i), sources=[kafka_source(
                    "o", {"o": {"0": i * 10, "1": i}} if i else None,
                    {"o": {"0": i * 10 + 10, "1": i + 1}})])))
        untimed = json.loads(progress(
            10, run_id="run-orders", query_id="q-orders", name="orders",
            sources=[kafka_source("o", {"o": {"0": 100}}, {"o": {"0": 101}})]))
        del untimed["timestamp"]
        j.record_batch(batch_from_progress(untimed))
        for i in range(3):
            j.record_batch(batch_from_progress(progress(
                i, run_id="run-audit", query_id="q-audit", name="audit", timestamp=_ts(i),
                sources=[kafka_source("a", None, {"a": {"0": i + 1}})])))


def _left(url: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for name, batch_id in sql_rows(url, "select query_name, batch_id from offset_journal.batches "
                                        "order by query_name, batch_id"):
        out.setdefault(name, []).append(batch_id)
    return out


def _orphans(url: str) -> int:
    return sql_rows(url, """
        select (select count(*) from offset_journal.kafka_partitions k where not exists
                  (select 1 from offset_journal.batches b where b.id = k.batch_pk))
             + (select count(*) from offset_journal.batch_sources s where not exists
                  (select 1 from offset_journal.batches b where b.id = s.batch_pk))""")[0][0]


def test_prune_removes_old_batches_whole_and_keeps_each_querys_newest(journal_url):
    _journal(journal_url)
    with Journal(journal_url) as j:
        assert j.last_batch("orders").trigger_at is not None  # the untimed one is not "last"
        before = {q: plan_restart(journal_url, q).starting_offsets() for q in ("orders", "audit")}
        parts_before = sql_rows(journal_url,
                                "select count(*) from offset_journal.kafka_partitions")[0][0]

        preview = j.prune(T0 + timedelta(seconds=105), dry_run=True)
        assert _left(journal_url)["orders"] == list(range(11))  # a dry run deletes nothing

        result = j.prune(T0 + timedelta(seconds=105), chunk=2)
    assert result == preview
    # orders 0-4 went; its untimed batch 10 stays. audit's batches are all older than
    # the cut-off, but its newest (2) is where its next checkpoint starts: kept.
    assert _left(journal_url) == {"audit": [2], "orders": [5, 6, 7, 8, 9, 10]}
    assert (result.batches, result.kept_newest) == (5 + 2, 1)
    parts_after = sql_rows(journal_url,
                           "select count(*) from offset_journal.kafka_partitions")[0][0]
    assert result.partition_rows == parts_before - parts_after == 2 + 2 * 4 + 1 + 1
    assert _orphans(journal_url) == 0
    after = {q: plan_restart(journal_url, q).starting_offsets() for q in ("orders", "audit")}
    assert after == before


def test_prune_one_query_leaves_the_others(journal_url):
    _journal(journal_url)
    with Journal(journal_url) as j:
        result = j.prune(T0 + timedelta(seconds=1000), query_name="audit")
    assert result.batches == 2
    assert _left(journal_url) == {"audit": [2], "orders": list(range(11))}


@pytest.fixture
def prune_cli(cli, journal_url, monkeypatch):
    """The command line with the journal's URL in the environment."""
    monkeypatch.setenv(ENV_URL, journal_url)
    return cli


def test_prune_command(prune_cli, journal_url):
    _journal(journal_url)
    code, out, err = prune_cli("prune", "--before", _ts(105), "--dry-run")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == ("would prune 7 batches (12 Kafka partition rows) triggered "
                                   "before 2024-01-01T00:01:45.000Z")
    assert "kept the newest batch of 1 query" in out
    assert len(_left(journal_url)["orders"]) == 11

    code, out, _ = prune_cli("prune", "--before", _ts(105), "--query", "orders")
    assert code == 0 and out.startswith("pruned 5 batches of query 'orders' (10 Kafka")
    assert _left(journal_url)["orders"] == [5, 6, 7, 8, 9, 10]

    # Bad input: one line, exit 2, nothing changed.
    for argv, expect in ((["prune"], "--before"),
                         (["prune", "--before", "yesterday-ish"], "bad time"),
                         (["prune", "--before", "2999-01-01"], "in the future")):
        code, out, err = prune_cli(*argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and expect in lines[0], err
    assert _left(journal_url)["orders"] == [5, 6, 7, 8, 9, 10]


def test_prune_without_a_schema_is_one_line(capsys, empty_database_url, monkeypatch):
    monkeypatch.setenv(ENV_URL, empty_database_url)
    code = main(["prune", "--before=-30d"])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "db upgrade" in lines[0], err


def test_prune_takes_whole_prefixes_of_a_run_in_journal_order(journal_url):
    """The driver's clock stepped back 2 h in the middle of its run
    (batches 5-7). Pruning by trigger time alone deleted them from the middle of the run,
    and the audit then read the hole as 30 records never read (exit 3). Only the run's
    prefix before its first kept batch goes."""
    def at(i: int) -> str:
        return _ts(100 + i - (7200 if 5 <= i <= 7 else 0))

    with Journal(journal_url) as j:
        for i in range(10):
            j.record_batch(batch_from_progress(progress(
                i, run_id="run-slow", query_id="q-slow", name="slow", timestamp=at(i),
                sources=[kafka_source("s", {"s": {"0": i * 10}} if i else None,
                                      {"s": {"0": i * 10 + 10}})])))
        preview = j.prune(T0 + timedelta(seconds=102), dry_run=True)
        result = j.prune(T0 + timedelta(seconds=102), chunk=1)
        assert result == preview and result.batches == 2
        assert _left(journal_url) == {"slow": list(range(2, 10))}
        report = audit_query(j, "slow")
        assert report.exit_code == 0, [f.to_dict() for f in report.findings]


def test_prune_keeps_the_batch_a_recorded_savepoint_names(journal_url):
    """A plan from a savepoint starts at its batch's end offsets and checks them against
    the journal: that batch stays (and, whole prefixes only, what its run journaled
    after it); the rest of the old history goes."""
    _journal(journal_url)
    with Journal(journal_url) as j:
        saved = j.record_savepoint(_savepoint_row(3))
        preview = j.prune(T0 + timedelta(seconds=1000), dry_run=True)
        result = j.prune(T0 + timedelta(seconds=1000))
    assert result == preview and result.batches == 3 + 2
    assert _left(journal_url) == {"audit": [2], "orders": [3, 4, 5, 6, 7, 8, 9, 10]}
    # Which batches a savepoint keeps, and which savepoint.
    (kept,) = result.kept_for_savepoints
    assert (kept.savepoint_id, kept.query_name, kept.run_id, kept.batch_id) == (
        saved, "orders", "run-orders", 3)
    assert kept.batches == 6  # 3..8; 9 stays as the newest, 10 has no trigger time


def _manifest(batch_id: int) -> dict[str, Any]:
    from offset_journal.savepoint.model import Manifest, SourceEnd

    return Manifest(query_name="orders", run_id="run-orders", query_id="q-orders",
                    batch_id=batch_id, checkpoint="/chk",
                    end_offsets=(SourceEnd(0, None, "kafka", {"o": {"0": 40}}),),
                    operators=(), parts=(), created_at="2024-01-01T00:00:00.000Z").to_dict()


def _savepoint_row(batch_id: int, **changed: Any) -> dict[str, Any]:
    return {"query_name": "orders", "run_id": "run-orders", "query_id": "q-orders",
            "batch_id": batch_id, "checkpoint": "/chk", "location": "/sp",
            "manifest_sha256": "a" * 64, "manifest": _manifest(batch_id), "host": "h",
            "os_user": "u", **changed}


def test_a_row_whose_manifest_is_not_one_pins_nothing_and_prune_says_what_stays(
        prune_cli, journal_url):
    """One row at batch 0 of a run (a location that does not exist, a
    manifest that is not one) kept the whole run from prune, silently. It pins nothing
    now; a real savepoint keeps its batch, and prune names it."""
    _journal(journal_url)
    with Journal(journal_url) as j:
        fields = {k: v for k, v in _manifest(0).items()
                  if k in ("query_name", "run_id", "query_id", "batch_id", "checkpoint")}
        forged = j.record_savepoint(_savepoint_row(0, location="/nowhere", manifest=fields))
    code, out, err = prune_cli("prune", "--before", _ts(105), "--dry-run")
    assert code == 0 and out.startswith("would prune 7 batches"), out + err
    assert f"note: savepoint {forged} keeps no batch: its recorded manifest is ignored" in err
    assert "malformed" in err
    assert "for savepoint" not in out

    with Journal(journal_url) as j:
        saved = j.record_savepoint(_savepoint_row(2))
    code, out, err = prune_cli("prune", "--before", _ts(105), "--dry-run")
    assert code == 0 and out.startswith("would prune 4 batches"), out + err
    assert (f"kept batch 2 of run run-orders of query 'orders' and the 2 after it in that "
            f"run for savepoint {saved}") in out
    code, out, err = prune_cli("prune", "--before", _ts(105))
    assert code == 0 and out.startswith("pruned 4 batches"), out + err
    assert f"and the 2 after it in that run for savepoint {saved}" in out
    assert _left(journal_url)["orders"] == [2, 3, 4, 5, 6, 7, 8, 9, 10]
