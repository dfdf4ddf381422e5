"""The writer loses nothing when the database is away, and never takes a bad event down."""

from __future__ import annotations

import socket

import sqlalchemy as sa

from offset_journal.capture.listener import OffsetJournalListener
from offset_journal.capture.writer import Writer, WriterConfig
from offset_journal.journal.db import resolve_url, upgrade
from offset_journal.records import PROGRESS, STARTED
from tests.payloads import kafka_source, progress

RUN = "11111111-2222-3333-4444-555555555555"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _events(n: int) -> list[dict]:
    out = [{"type": STARTED, "query_id": "q", "run_id": RUN, "name": "w",
            "timestamp": "2024-01-01T00:00:00.000Z"}]
    for i in range(n):
        out.append({"type": PROGRESS, "json": progress(
            i, run_id=RUN, query_id="q", name="w",
            timestamp=f"2024-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
            sources=[kafka_source("t", {"t": {"0": i}}, {"t": {"0": i + 1}})])})
    return out


def _count(url: str, sql: str = "select count(*) from offset_journal.batches") -> int:
    engine = sa.create_engine(resolve_url(url))
    with engine.connect() as conn:
        n = conn.execute(sa.text(sql)).scalar_one()
    engine.dispose()
    return n


def _dead_url() -> str:
    return f"postgresql://nobody:secret@127.0.0.1:{_free_port()}/none"


def test_spool_is_replayed_by_the_next_start(journal_url, tmp_path):
    spool = str(tmp_path / "spool")
    down = Writer(WriterConfig(_dead_url(), spool, retry_initial=0.05, connect_timeout=1))
    down.start()
    for ev in _events(30):
        down.submit(ev)
    assert down.flush(timeout=1.0) is False  # the database never answered
    assert down.flush(timeout=60, to_database=False)  # but every event is on disk
    down.close(timeout=0.5)
    assert down.spooled == 31
    assert list((tmp_path / "spool").glob("spool-*.jsonl"))

    # The next driver start replays what the last one left behind.
    up = Writer(WriterConfig(journal_url, spool))
    up.start()
    assert up.flush(timeout=30) is True
    up.close()
    assert _count(journal_url) == 30
    assert _count(journal_url, "select count(distinct batch_id) from offset_journal.batches") == 30
    assert not list((tmp_path / "spool").glob("spool-*.jsonl"))


def test_database_coming_back_drains_the_spool_in_process(journal_server, tmp_path):
    # The database does not exist yet: every write fails as an outage would.
    url = journal_server.url_for(f"oj_late_{_free_port()}")
    w = Writer(WriterConfig(url, str(tmp_path / "spool"), retry_initial=0.05, retry_max=0.2,
                            connect_timeout=1))
    w.start()
    events = _events(20)
    for ev in events[:11]:
        w.submit(ev)
    assert w.flush(timeout=0.5) is False
    assert w.spooled >= 11
    # The database comes back, whole: migrated under another name first, so that the
    # writer never writes into a half-migrated schema (a migration that alters two
    # tables and a writer's transaction that touches both can deadlock).
    ready = journal_server.create_database()
    upgrade(ready)
    admin = sa.create_engine(resolve_url(journal_server.admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{sa.engine.make_url(url).database}" '
                             f'TEMPLATE "{sa.engine.make_url(ready).database}"'))
    admin.dispose()
    journal_server.drop_database(ready)
    for ev in events[11:]:
        w.submit(ev)
    assert w.flush(timeout=30) is True
    w.close()
    assert _count(url) == 20
    journal_server.drop_database(url)


def test_full_queue_spills_to_the_spool(journal_url, tmp_path):
    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), queue_size=1))
    # Not started: nothing drains the queue, so all but one event must spill.
    for ev in _events(9):
        w.submit(ev)
    assert w.spooled == 9
    w.start()
    assert w.flush(timeout=30)
    w.close()
    assert _count(journal_url) == 9


def test_a_bad_event_is_kept_aside_and_the_rest_journaled(journal_url, tmp_path):
    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool")))
    w.start()
    good = _events(3)
    bad = [{"type": PROGRESS, "json": "{this is not json"},
           {"type": PROGRESS, "json": progress(7, run_id=RUN, query_id="q", name="w\x00nul")}]
    for ev in good[:2] + bad + good[2:]:
        w.submit(ev)
    assert w.flush(timeout=30) is False  # two are in rejected_events, not the journal
    assert w.stats().rejected == 2 and w.stats().journaled == 3
    w.close()
    assert _count(journal_url) == 3
    assert _count(journal_url, "select count(*) from offset_journal.rejected_events") == 2
    assert _count(journal_url, "select count(*) from offset_journal.rejected_events "
                               "where payload like '{this is not json%'") == 1


def test_listener_callbacks_never_raise(journal_url, tmp_path):
    listener = OffsetJournalListener(journal_url, spool_dir=str(tmp_path / "spool"))
    listener.onQueryStarted(object())
    listener.onQueryProgress(object())
    listener.onQueryTerminated(None)
    assert listener.close(timeout=5)


def test_listener_pickles_without_runtime_state(journal_url, tmp_path):
    import pickle

    listener = OffsetJournalListener(journal_url, spool_dir=str(tmp_path / "spool"))
    listener.start()
    clone = pickle.loads(pickle.dumps(listener))
    assert clone._writer is None and clone.spool_dir == listener.spool_dir
    listener.close()


def test_another_live_writers_spool_is_not_ours_to_wait_for(journal_url, tmp_path):
    from offset_journal.capture._spool import Spool

    spool_dir = tmp_path / "spool"
    other = Spool(spool_dir)  # another driver in an outage: its file is open and locked
    other.append(_events(2))
    w = Writer(WriterConfig(journal_url, str(spool_dir)))
    w.start()
    w.submit(_events(1)[1])
    assert w.flush(timeout=10) is True  # not held up by the other driver's file
    assert _count(journal_url) == 1
    other.close()  # that driver is gone: its file is now ours to replay
    assert w.spool.pending()
    assert w.flush(timeout=30) is True
    w.close()
    assert _count(journal_url) == 2  # batch 0 (ours) and batch 1 from the other spool


def test_termination_flush_does_not_wait_on_an_absent_database(tmp_path):
    import time

    w = Writer(WriterConfig(_dead_url(), str(tmp_path / "spool"), connect_timeout=1,
                            retry_initial=5))
    w.start()
    for ev in _events(3):
        w.submit(ev)
    t0 = time.monotonic()
    assert w.flush(timeout=20, to_database=False) is True  # durable: in the spool
    assert time.monotonic() - t0 < 10
    assert w.spooled == 4
    w.close(timeout=0.5)


def test_at_exit_whatever_is_still_queued_goes_to_the_spool(tmp_path):
    w = Writer(WriterConfig(_dead_url(), str(tmp_path / "spool")))  # never started: stuck
    for ev in _events(3):
        w.submit(ev)
    assert w.flush(timeout=0.2, to_database=False) is False
    assert w.spill_queue() == 4
    assert w.flush(timeout=0.2, to_database=False) is True
    lines = sum(len(p.read_text().splitlines()) for p in (tmp_path / "spool").glob("*.jsonl"))
    assert lines == 4


def test_writer_sessions_have_a_statement_timeout(journal_url, tmp_path):
    import sqlalchemy as sa

    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), statement_timeout_ms=1234))
    with w._get_journal().engine.connect() as conn:
        assert conn.execute(sa.text("show statement_timeout")).scalar_one() == "1234ms"
        assert conn.execute(sa.text("show tcp_keepalives_idle")).scalar_one() in ("10", "0")
    w.close(timeout=1)


def test_a_stale_connection_is_retried_not_spooled(journal_url, tmp_path):
    """The writer does not ping before each transaction: when its pooled connection has
    been cut (server restart, idle timeout), the next write fails on it, and one more
    attempt on a fresh connection journals the events without touching the spool."""
    w = Writer(WriterConfig(journal_url, str(tmp_path / "spool"), retry_initial=5.0))
    w.start()
    events = _events(6)
    for ev in events[:3]:
        w.submit(ev)
    assert w.flush(timeout=30)
    engine = sa.create_engine(resolve_url(journal_url))
    with engine.begin() as conn:
        killed = conn.execute(sa.text(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity "
            "where application_name = 'offset-journal' and pid <> pg_backend_pid() "
            "and datname = current_database()")).scalar_one()
    engine.dispose()
    assert killed == 1  # the writer's one pooled connection
    # A lone batch first (its one-query write meets the dead connection), then more.
    w.submit(events[3])
    assert w.flush(timeout=30)
    assert w.spooled == 0
    for ev in events[4:]:
        w.submit(ev)
    assert w.flush(timeout=30)  # with retry_initial=5 s, a spool round would take longer
    w.close()
    assert w.spooled == 0
    assert _count(journal_url) == 6
