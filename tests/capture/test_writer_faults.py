"""An event is in the journal, in the spool, or counted and reported
as lost; never silently gone, and never blocking the events behind it."""

from __future__ import annotations

import json
import logging
import random
import string
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from offset_journal.capture.writer import Writer, WriterConfig
from offset_journal.journal.db import resolve_url
from offset_journal.records import PROGRESS, STARTED
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
    # Refused events are not in the journal, so flush says False.
    assert w.flush(timeout=30) is False
    assert w.close() is False
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
    from offset_journal.capture._spool import Spool

    _poison(journal_url)
    spool_dir = tmp_path / "spool"
    left = Spool(spool_dir)  # what a driver that ended in an outage left behind
    left.append(_events("run-p", "poison", 2) + _events("run-l", _long_name(), 2)
                + _events("run-a", "orders", 3) + _events("run-b", "payments", 2))
    left.close()
    w = Writer(WriterConfig(journal_url, str(spool_dir), retry_initial=0.05))
    w.start()
    assert w.flush(timeout=30) is False  # 5 refused: not in the journal
    w.close()
    assert _batches(journal_url, "run-a") == [0, 1, 2]
    assert _batches(journal_url, "run-b") == [0, 1]
    reasons = _rejected(journal_url)
    assert len(reasons) == 5, reasons
    assert sum("no_poison" in r for r in reasons) == 2
    assert sum("query name" in r for r in reasons) == 3
    assert not list(spool_dir.glob("spool-*.jsonl"))


def test_a_database_refusal_is_rejected_and_the_rest_flows(journal_url: str,
                                                           tmp_path: Path) -> None:
    _poison(journal_url)
    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), retry_initial=0.05))
    w.start()
    for ev in _events("run-p", "poison", 2) + _events("run-a", "orders", 2):
        w.submit(ev)
    assert w.flush(timeout=30) is False  # 2 refused: not in the journal
    w.close()
    assert _batches(journal_url, "run-a") == [0, 1]
    assert w.stats().rejected == 2 and w.stats().journaled == 2
    assert json.loads(sql_rows(journal_url, "select payload from offset_journal."
                                            "rejected_events limit 1")[0][0])["type"] == PROGRESS


def _fault_on_run(monkeypatch: pytest.MonkeyPatch, run: str) -> None:
    """Make offset-journal's own write path fail (a bug, not a database error) on the
    events of one run: the writer's handling of such a fault is what is tested."""
    import offset_journal.capture.writer as writer_module

    real = writer_module._journal_events

    def failing(journal, conn, records, bad):  # type: ignore[no-untyped-def]
        if any(getattr(r, "run_id", None) == run for r in records):
            raise RuntimeError(f"a bug on {run}")
        return real(journal, conn, records, bad)

    monkeypatch.setattr(writer_module, "_journal_events", failing)


def test_a_fault_of_our_own_keeps_the_event_as_ours_not_the_databases(
        journal_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    _fault_on_run(monkeypatch, "run-bug")
    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), retry_initial=0.05))
    w.start()
    for ev in _events("run-bug", "buggy", 1)[1:] + _events("run-a", "orders", 2):
        w.submit(ev)
    assert w.flush(timeout=30) is False
    w.close()
    assert _batches(journal_url, "run-a") == [0, 1]
    reasons = _rejected(journal_url)
    assert len(reasons) == 1 and reasons[0].startswith(
        "offset-journal failed on the event (RuntimeError: a bug on run-bug)"), reasons
    assert any(r.exc_info for r in caplog.records if r.levelno >= logging.ERROR)
    assert w.stats().lost == 0 and w.stats().rejected == 1


def test_a_fault_of_our_own_on_the_rejected_row_too_keeps_the_event_in_the_spool(
        journal_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from offset_journal.journal import Journal

    _fault_on_run(monkeypatch, "run-bug")

    def broken(self, reason, payload, conn=None):  # type: ignore[no-untyped-def]
        raise TypeError("a bug in record_rejected")

    with monkeypatch.context() as m:
        m.setattr(Journal, "record_rejected", broken)
        w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), retry_initial=0.05,
                                retry_max=0.1))
        w.start()
        for ev in _events("run-bug", "buggy", 2):
            w.submit(ev)
        assert w.flush(timeout=2) is False
        w.close()
        assert w.stats().lost == 0 and w.stats().spooled >= 1
    monkeypatch.undo()  # the fixed release: the next writer journals what was kept
    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), retry_initial=0.05))
    w.start()
    assert w.flush(timeout=30) is True
    w.close()
    assert _batches(journal_url, "run-bug") == [0, 1] and _rejected(journal_url) == []


# --------------------------------------------------------------------------- classification


def _PgError(sqlstate: str) -> BaseException:  # noqa: N802 - stands for the class
    """The driver's own error for ``sqlstate`` (psycopg's class for it)."""
    import psycopg

    return psycopg.errors.lookup(sqlstate)(f"sqlstate {sqlstate}")


def _wrapped(orig: BaseException, cls: type = sa.exc.DBAPIError) -> BaseException:
    return cls("INSERT ...", {}, orig)


@pytest.mark.parametrize(("state", "fault"), [
    ("08006", "outage"), ("08001", "outage"), ("57P01", "outage"), ("57P02", "outage"),
    ("57P03", "outage"), ("57014", "outage"), ("53300", "outage"), ("3D000", "outage"),
    ("40001", "outage"), ("25006", "outage"),
    ("42501", "misconfigured"), ("42P01", "misconfigured"), ("28P01", "misconfigured"),
    ("26000", "misconfigured"), ("42P05", "misconfigured"),  # a pooler lost a prepared one
    ("54000", "refused"), ("22003", "refused"), ("22P02", "refused"), ("23514", "refused"),
    ("23505", "refused"), ("XX000", "refused"),
])
def test_errors_are_classified_by_sqlstate(state: str, fault: str) -> None:
    from offset_journal.capture.writer import classify_error

    assert classify_error(_wrapped(_PgError(state))).value == fault
    assert classify_error(_PgError(state)).value == fault  # raw driver error (COPY)


def test_errors_without_sqlstate_are_outages_only_when_the_connection_failed() -> None:
    import psycopg

    from offset_journal.capture.writer import Fault, classify_error

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
    from offset_journal.capture.listener import OffsetJournalListener

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


def test_a_disk_error_in_the_failover_window_never_stops_nor_fails_the_writer(
        journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The window is a safeguard beside the write path: its file on a full disk (here
    /dev/full) costs its protection, counted as unprotected, and nothing else."""
    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), retry_initial=0.05,
                            retry_max=0.2))
    w.start()
    events = _events("run-w", "orders", 6)
    for ev in events[:3]:
        w.submit(ev)
    assert w.flush(timeout=30)
    (segment,) = w.window._own  # the writer is idle: nothing else touches it now
    segment.file.close()
    segment.file = open("/dev/full", "a", encoding="utf-8")  # noqa: SIM115
    for ev in events[3:]:
        w.submit(ev)
    assert w.flush(timeout=30)
    time.sleep(0.5)  # idle rounds of the writer
    assert w.alive
    stats = w.stats()
    assert (stats.journaled, stats.spooled, stats.lost, stats.rejected) == (6, 0, 0, 0)
    assert 4 <= stats.unprotected <= 7
    assert w.close() is True
    assert _batches(journal_url, "run-w") == list(range(6))
    assert "failover window" in caplog.text


def test_flush_waits_while_another_servers_events_cannot_go_to_the_spool(
        journal_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), retry_initial=0.05,
                            retry_max=0.2))
    w.start()
    for ev in _events("run-h", "orders", 3):
        w.submit(ev)
    assert w.flush(timeout=30)
    (segment,) = w.window._own  # the writer is idle: nothing else touches it now
    segment.server = "a server before"  # as if journaled there before a failover

    def unusable(events: list[dict]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(w, "_rejournal", unusable)  # the spool cannot take them
    assert w.flush(timeout=2) is False
    assert w.window.holding() and w.alive
    monkeypatch.undo()
    assert w.flush(timeout=30)
    assert all(s.server != "a server before" for s in w.window._own)
    assert w.close() is True
    assert _batches(journal_url, "run-h") == [0, 1, 2]


def test_the_servers_identity_does_not_depend_on_the_sessions_time_zone(
        journal_url: str) -> None:
    """``ALTER ROLE ... SET timezone`` (or DateStyle) between two connections must not
    look like another server, nor trip the guard behind a pooler."""
    import psycopg

    from offset_journal.journal.server import (
        GUARD_PARAMETER,
        SERVER_GUARD,
        SERVER_IDENTITY,
        ServerIdentity,
    )

    dsn = resolve_url(journal_url).replace("postgresql+psycopg://", "postgresql://")
    keys = []
    for zone, style in (("UTC", "ISO, MDY"), ("Asia/Kolkata", "SQL, DMY")):
        with psycopg.connect(dsn, options=f"-c timezone={zone} "
                                          f"-c datestyle={style.replace(' ', '')}") as conn:
            (key, _pid) = conn.execute(SERVER_IDENTITY).fetchone()
            keys.append(key)
            if len(keys) == 2:
                started = ServerIdentity(keys[0]).started_at
                assert conn.execute(SERVER_GUARD.replace(f"%({GUARD_PARAMETER})s", "%s"),
                                    (started,)).fetchone() == (True,)
    assert keys[0] == keys[1]


# --------------------------------------------------------------------------- close, then more


def test_events_after_close_are_said_kept_and_journaled_by_the_next_start(
        journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from offset_journal.capture.listener import OffsetJournalListener

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


# --------------------------------------------------------------------------- missing grants


def _admin(url: str, *statements: str) -> None:
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        for s in statements:
            conn.exec_driver_sql(s)
    engine.dispose()


@pytest.fixture
def writer_without_partition_grant(journal_url: str) -> tuple[str, str]:
    """(admin URL, writer URL): a writer role granted as `db grant` does, then the INSERT
    on kafka_layouts revoked (a grant missed after an upgrade, say)."""
    import uuid

    from offset_journal.journal.roles import grant_statements

    role = f"oj_w_{uuid.uuid4().hex[:8]}"
    _admin(journal_url, f'CREATE ROLE "{role}" LOGIN', *grant_statements(writer=role),
           f'REVOKE INSERT ON offset_journal.kafka_layouts FROM "{role}"')
    url = sa.engine.make_url(resolve_url(journal_url)).set(username=role)
    return journal_url, url.render_as_string(hide_password=False)


def test_a_missing_grant_keeps_the_events_retries_and_says_so(
        writer_without_partition_grant: tuple[str, str], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    admin_url, url = writer_without_partition_grant
    role = sa.engine.make_url(url).username
    caplog.set_level(logging.INFO)
    w = Writer(WriterConfig(url, str(tmp_path / "spool"), retry_initial=0.05, retry_max=0.2))
    w.start()
    for ev in _events("run-g", "orders", 3):
        w.submit(ev)
    assert w.flush(timeout=2) is False
    assert _batches(admin_url, "run-g") == [] and _rejected(admin_url) == []
    shouts = [r.getMessage() for r in caplog.records
              if r.levelno >= logging.ERROR and "kafka_layouts" in r.getMessage()]
    assert len(shouts) >= 2 and all("grant" in m for m in shouts), shouts
    assert w.stats().lost == 0 and w.stats().spooled >= 4
    _admin(admin_url, f'GRANT INSERT ON offset_journal.kafka_layouts TO "{role}"')
    assert w.flush(timeout=30) is True
    w.close()
    assert _batches(admin_url, "run-g") == [0, 1, 2]
    assert _rejected(admin_url) == []


# --------------------------------------------------------------------------- rejected list|replay


def test_rejected_events_are_listed_and_replayed_once_the_cause_is_fixed(
        journal_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from offset_journal.cli import main

    _poison(journal_url)
    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool")))
    w.start()
    for ev in _events("run-p", "poison", 2) + _events("run-a", "orders", 1):
        w.submit(ev)
    assert w.flush(timeout=30) is False  # two refused: not in the journal
    assert w.stats().rejected == 2 and not list((tmp_path / "spool").glob("spool-*.jsonl"))
    w.close()
    # What an earlier release kept: the progress JSON itself, refused for a missed grant.
    engine = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("insert into offset_journal.rejected_events (reason, payload) "
                             "values ('database refused the event: permission denied for "
                             "table kafka_partitions', :p)"),
                     {"p": _events("run-old", "orders", 1, first=7)[1]["json"]})
    engine.dispose()
    ids = [r[0] for r in sql_rows(journal_url, "select id from offset_journal.rejected_events "
                                               "order by id")]
    assert len(ids) == 3
    db = ["--database-url", journal_url]

    assert main([*db, "rejected", "list"]) == 0
    out = capsys.readouterr().out
    assert "batch 0 of run run-p" in out and "batch 7 of run run-old" in out
    assert "no_poison" in out and "permission denied" in out
    assert main([*db, "rejected", "list", "--query", "orders"]) == 0
    out = capsys.readouterr().out
    assert "run-old" in out and "run-p" not in out

    # Not fixed yet: still refused, nothing changes, exit 1 with one error line.
    assert main([*db, "rejected", "replay", "--id", str(ids[0])]) == 1
    captured = capsys.readouterr()
    assert "still rejected" in captured.out and "no_poison" in captured.out
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("offset-journal: error: ")
    assert len(_rejected(journal_url)) == 3
    # An id that is not there: refused before anything is replayed.
    assert main([*db, "rejected", "replay", "--id", str(ids[2]), "--id", "999999"]) == 1
    assert "999999" in capsys.readouterr().err
    assert _batches(journal_url, "run-old") == []

    _admin(journal_url, "alter table offset_journal.batches drop constraint no_poison")
    assert main([*db, "rejected", "replay"]) == 0
    assert "journaled 3 of 3" in capsys.readouterr().out
    assert _rejected(journal_url) == []
    assert _batches(journal_url, "run-p") == [0, 1]
    assert _batches(journal_url, "run-old") == [7]
    assert main([*db, "rejected", "list"]) == 0
    assert "no rejected events" in capsys.readouterr().out


# --------------------------------------------------------------------------- full spool


def test_a_full_spool_keeps_the_newest_offsets_and_the_plan_reports_the_gap(
        journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from offset_journal import Journal
    from offset_journal.restart import plan_restart

    spool = tmp_path / "spool"
    caplog.set_level(logging.INFO)
    down = Writer(WriterConfig(_dead_url(), str(spool), spool_max_bytes=8_000,
                               connect_timeout=1, retry_initial=0.05))
    down.start()
    events = _events("run-f", "orders", 40) + _events("run-g", "payments", 2)
    for ev in events:
        down.submit(ev)
    assert down.flush(timeout=30, to_database=False) is False  # some were dropped
    stats = down.stats()
    assert stats.lost > 0 and any("full" in r for r in stats.lost_reasons)
    assert any("LOST" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    assert down.close(timeout=0.5) is False
    assert sum(f.stat().st_size for f in spool.glob("spool-*.jsonl")) <= 8_000
    assert (spool / "losses.json").exists()

    up = Writer(WriterConfig(journal_url, str(spool)))
    up.start()
    assert up.flush(timeout=30) is True
    up.close()
    assert not (spool / "losses.json").exists()
    journaled = _batches(journal_url, "run-f")
    assert journaled[-1] == 39  # the newest batch, the one a restart needs, is kept
    assert _batches(journal_url, "run-g") == [0, 1]
    with Journal(journal_url) as j:
        (loss,) = j.spool_losses("orders")
        assert j.spool_losses("payments") == []
    assert loss.events == stats.lost == 40 - len(journaled)
    assert loss.run_ids == ("run-f",)
    missing = sorted(set(range(40)) - set(journaled))
    assert (loss.batch_id_min, loss.batch_id_max) == (missing[0], missing[-1])
    assert loss.partitions == ((0, "t", 0, missing[0], missing[-1] + 1),)
    plan = plan_restart(journal_url, "orders")
    assert plan.sources[0].offsets == {"t": {0: 40}}
    (warning,) = [w for w in plan.warnings if "full listener spool" in w]
    assert f"batch ids {missing[0]}..{missing[-1]}" in warning and "run-f" in warning
    assert not [w for w in plan_restart(journal_url, "payments").warnings if "spool" in w]


def test_the_spool_cap_holds_while_the_writer_retries_and_the_oldest_go_first(
        tmp_path: Path) -> None:
    """With the database down, each retry (a replay attempt) closes the
    spool file so that it can be replayed, and the next event starts a new file. The cap
    and the order must hold across all of them: at most spool_max_bytes on disk, the
    oldest batch events dropped, the newest kept, every drop recorded."""
    from offset_journal.capture._spool import Spool

    def down(_events: list[dict]) -> None:
        raise ConnectionError("the database is down")

    cap = 8_000
    spool = Spool(tmp_path / "spool", max_bytes=cap)
    events = _events("run-r", "orders", 60)
    for ev in events:
        spool.append([ev])
        try:  # what the writer's retry does between two events
            spool.replay(down)
        except ConnectionError:
            pass
        assert spool.size() <= cap, f"{spool.size()} bytes in {len(spool.files())} files"
    spool.close()
    kept = [json.loads(ev["json"])["batchId"] for path in spool.files()
            for ev in map(json.loads, path.read_text().splitlines()) if ev["type"] == PROGRESS]
    assert kept and kept[-1] == 59 and kept == sorted(kept)
    assert kept == list(range(kept[0], 60)), "only the oldest were dropped"
    assert spool.dropped == 60 - len(kept)
    (loss,) = json.loads((tmp_path / "spool" / "losses.json").read_text())["losses"].values()
    assert loss["events"] == spool.dropped
    assert (loss["batch_id_min"], loss["batch_id_max"]) == (0, kept[0] - 1)
