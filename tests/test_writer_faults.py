"""Issue 11, items 1-6: an event is in the journal, in the spool, or counted and reported
as lost; never silently gone, and never blocking the events behind it."""

from __future__ import annotations

import json
import logging
import random
import string
from pathlib import Path

import pytest
import sqlalchemy as sa

from offset_journal.db import resolve_url
from offset_journal.records import PROGRESS, STARTED
from offset_journal.writer import Writer, WriterConfig
from tests.payloads import kafka_source, progress, sql_rows


def _events(run: str, name: str, n: int, *, first: int = 0) -> list[dict]:
    out = [{"type": STARTED, "query_id": f"q-{run}", "run_id": run, "name": name,
            "timestamp": "2024-01-01T00:00:00.000Z"}]
    for i in range(first, first + n):
        out.append({"type": PROGRESS, "json": progress(
            i, run_id=run, query_id=f"q-{run}", name=name,
            timestamp=f"2024-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
            sources=[kafka_source("t", {"t": {"0": i}}, {"t": {"0": i + 1}})])})
    return out


def _batches(url: str, run: str) -> list[int]:
    return [r[0] for r in sql_rows(
        url, "select batch_id from offset_journal.batches where run_id = :r order by 1", r=run)]


def _rejected(url: str) -> list[str]:
    return [r[0] for r in sql_rows(url, "select reason from offset_journal.rejected_events")]


def _long_name(n: int = 3000) -> str:
    rnd = random.Random(11)  # incompressible, so Postgres cannot squeeze it into an index row
    return "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(n))


def test_a_3000_character_query_name_does_not_block_the_queries_behind_it(
        journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spool = str(tmp_path / "spool")
    w = Writer(WriterConfig(journal_url, spool, retry_initial=0.05, retry_max=0.2))
    w.start()
    for ev in _events("run-long", _long_name(), 3) + _events("run-ok", "orders", 3):
        w.submit(ev)
    assert w.flush(timeout=30) is True
    w.close()
    assert _batches(journal_url, "run-ok") == [0, 1, 2]
    assert _batches(journal_url, "run-long") == []
    reasons = _rejected(journal_url)
    assert len(reasons) == 4 and all("query name" in r for r in reasons), reasons
    assert w.stats().rejected == 4 and w.stats().lost == 0
    assert not list(Path(spool).glob("spool-*.jsonl"))


def _poison(url: str) -> None:
    """Make the database itself refuse one query's batches (a CHECK constraint: SQLSTATE
    23514), as it refuses an oversized index row (54000) or an out-of-range value (22*)."""
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("alter table offset_journal.batches add constraint no_poison "
                             "check (query_name <> 'poison')"))
    engine.dispose()


def test_a_poison_line_in_the_spool_does_not_stop_its_replay(
        journal_url: str, tmp_path: Path) -> None:
    from offset_journal.spool import Spool

    _poison(journal_url)
    spool_dir = tmp_path / "spool"
    left = Spool(spool_dir)  # what a driver that ended in an outage left behind
    left.append(_events("run-p", "poison", 2) + _events("run-a", "orders", 3)
                + _events("run-b", "payments", 2))
    left.close()
    w = Writer(WriterConfig(journal_url, str(spool_dir), retry_initial=0.05))
    w.start()
    assert w.flush(timeout=30) is True
    w.close()
    assert _batches(journal_url, "run-a") == [0, 1, 2]
    assert _batches(journal_url, "run-b") == [0, 1]
    reasons = _rejected(journal_url)
    assert len(reasons) == 2 and all("no_poison" in r for r in reasons), reasons
    assert not list(spool_dir.glob("spool-*.jsonl"))


def test_a_database_refusal_is_rejected_and_the_rest_flows(journal_url: str,
                                                           tmp_path: Path) -> None:
    _poison(journal_url)
    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), retry_initial=0.05))
    w.start()
    for ev in _events("run-p", "poison", 2) + _events("run-a", "orders", 2):
        w.submit(ev)
    assert w.flush(timeout=30) is True
    w.close()
    assert _batches(journal_url, "run-a") == [0, 1]
    assert w.stats().rejected == 2 and w.stats().journaled == 2
    assert json.loads(sql_rows(journal_url, "select payload from offset_journal."
                                            "rejected_events limit 1")[0][0])["type"] == PROGRESS


_ = logging
