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


# --------------------------------------------------------------------------- classification


class _PgError(Exception):
    def __init__(self, sqlstate: str | None) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


def _wrapped(orig: BaseException, cls: type = sa.exc.DBAPIError) -> BaseException:
    return cls("INSERT ...", {}, orig)


@pytest.mark.parametrize(("state", "fault"), [
    ("08006", "outage"), ("08001", "outage"), ("57P01", "outage"), ("57P02", "outage"),
    ("57P03", "outage"), ("57014", "outage"), ("53300", "outage"), ("3D000", "outage"),
    ("40001", "outage"), ("25006", "outage"),
    ("42501", "misconfigured"), ("42P01", "misconfigured"), ("28P01", "misconfigured"),
    ("54000", "refused"), ("22003", "refused"), ("22P02", "refused"), ("23514", "refused"),
    ("23505", "refused"), ("XX000", "refused"),
])
def test_errors_are_classified_by_sqlstate(state: str, fault: str) -> None:
    from offset_journal.writer import classify_error

    assert classify_error(_wrapped(_PgError(state))).value == fault
    assert classify_error(_PgError(state)).value == fault  # raw driver error (COPY)


def test_errors_without_sqlstate_are_outages_only_when_the_connection_failed() -> None:
    import psycopg

    from offset_journal.writer import Fault, classify_error

    assert classify_error(_wrapped(psycopg.OperationalError("connection refused"),
                                   sa.exc.OperationalError)) is Fault.OUTAGE
    assert classify_error(psycopg.errors.ConnectionTimeout("timeout")) is Fault.OUTAGE
    assert classify_error(ConnectionResetError()) is Fault.OUTAGE
    assert classify_error(sa.exc.TimeoutError()) is Fault.OUTAGE
    invalidated = sa.exc.DBAPIError("x", {}, _PgError("54000"), connection_invalidated=True)
    assert classify_error(invalidated) is Fault.OUTAGE
    # The driver refusing a value (a NUL in a string) is about the event.
    assert classify_error(_wrapped(psycopg.DataError("NUL"), sa.exc.DataError)) \
        is Fault.REFUSED
    assert classify_error(ValueError("bad")) is Fault.REFUSED


# --------------------------------------------------------------------------- spool unusable


def _dead_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://nobody:secret@127.0.0.1:{port}/none"


@pytest.mark.parametrize("how", ["under a file", "is a file"])
def test_database_down_and_spool_unusable_counts_and_reports_the_loss(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str) -> None:
    from offset_journal.listener import OffsetJournalListener

    (tmp_path / "file").write_text("")
    spool = tmp_path / "file" / "spool" if how == "under a file" else tmp_path / "file"
    caplog.set_level(logging.INFO)
    listener = OffsetJournalListener(_dead_url(), spool_dir=str(spool), connect_timeout=1,
                                     retry_max=0.2)
    writer = listener.start()
    for ev in _events("run-x", "orders", 5):
        writer.submit(ev)
    assert writer.flush(timeout=20, to_database=False) is False
    assert listener.flush(timeout=1) is False
    stats = listener.stats()
    assert stats.lost == 6 and stats.spooled == 0 and stats.journaled == 0
    (reason,) = stats.lost_reasons
    assert "spool" in reason and "unusable" in reason
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors and all(r.exc_info is None for r in errors)  # no generic traceback
    assert any("LOST" in r.getMessage() and "6 lost so far" in r.getMessage()
               for r in errors)
    assert listener.close(timeout=1) is False
    assert listener.stats().lost == 6


# --------------------------------------------------------------------------- close, then more


def test_events_after_close_are_said_kept_and_journaled_by_the_next_start(
        journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from offset_journal.listener import OffsetJournalListener

    caplog.set_level(logging.INFO)
    listener = OffsetJournalListener(journal_url, spool_dir=str(tmp_path / "spool"))
    listener.start()
    events = _events("run-c", "orders", 4)
    listener.onQueryStarted(SimpleNamespace(runId="run-c", id="q-run-c", name="orders",
                                            timestamp="2024-01-01T00:00:00.000Z"))
    for ev in events[1:3]:
        listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=ev["json"])))
    assert listener.close(timeout=30) is True
    assert _batches(journal_url, "run-c") == [0, 1]
    for ev in events[3:]:  # after close()
        listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=ev["json"])))
    assert any("after close()" in r.getMessage() for r in caplog.records)
    assert listener.stats().spooled == 2
    assert listener.flush(timeout=1) is False  # in the spool, not in the journal
    assert listener.close() is False
    assert _batches(journal_url, "run-c") == [0, 1]
    listener.start()  # resumes journaling, the late events first
    assert listener.flush(timeout=30) is True
    assert _batches(journal_url, "run-c") == [0, 1, 2, 3]
    listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(
        json=_events("run-c", "orders", 1, first=4)[1]["json"])))
    assert listener.close(timeout=30) is True
    assert _batches(journal_url, "run-c") == [0, 1, 2, 3, 4]
    stats = listener.stats()
    assert stats.journaled == 5 and stats.lost == 0
