"""The write path of migration 0014: a batch journaled by one call to
``offset_journal.journal_batch``, and a lone batch (what the listener's writer sends) in
one round trip, with the statement timeout, as a transaction of its own: prepared on
the writer's connection straight to Postgres, one query of the simple protocol
elsewhere."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import tempfile
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic import command
from psycopg import pq

from offset_journal.capture._watchdog import Watchdog
from offset_journal.capture.writer import Writer, WriterConfig, writer_journal
from offset_journal.errors import JournalConstraintError, JournalUnavailable
from offset_journal.journal import Journal
from offset_journal.journal.db import alembic_config, resolve_url, session_settled, upgrade
from offset_journal.journal.roles import writer_statements
from offset_journal.records import PROGRESS, BatchRecord, batch_from_progress
from tests.payloads import kafka_source, progress, sql_execute, sql_rows


def _batch(run: str, i: int, **change: Any) -> BatchRecord:
    """Batch ``i`` of a run reading 3 partitions of topic t, 10 records each."""
    start = None if i == 0 else {"t": {str(p): 10 * i + p for p in range(3)}}
    end = {"t": {str(p): 10 * (i + 1) + p for p in range(3)}}
    body = json.loads(progress(i, run_id=run, query_id="q-" + run, name="write_path_q",
                               timestamp=f"2026-11-01T00:00:{i:02d}.000Z",
                               sources=[kafka_source("t", start, end)]))
    body.update(change)
    return batch_from_progress(json.dumps(body))


def _traced(conn: sa.Connection, fn: Any) -> tuple[Any, list[str]]:
    """``fn()``'s result, and the protocol messages the client sent meanwhile (libpq's
    trace of ``conn``'s connection: 'Query', 'Parse', 'Bind', ...)."""
    pgconn = conn.connection.driver_connection.pgconn  # type: ignore[union-attr]
    with tempfile.TemporaryFile("w+") as f:
        pgconn.trace(f.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            result = fn()
        finally:
            pgconn.untrace()
        f.seek(0)
        sent = [line.split("\t")[2] for line in f.read().splitlines()
                if line.startswith("F\t")]
    return result, sent


def test_a_lone_batch_is_one_round_trip_with_its_statement_timeout(journal_url: str) -> None:
    """The writer's connection straight to Postgres holds its settings for the session
    and sends a lone batch as a prepared statement: prepared on first use, then one
    round trip (Bind, Execute, Sync) without the statement's text."""
    run = str(uuid.uuid4())
    journal = writer_journal(WriterConfig(journal_url, spool_dir="unused",
                                          statement_timeout_ms=7_000))
    try:
        with journal.engine.connect() as conn:
            driver = conn.connection.driver_connection
            assert isinstance(driver, psycopg.Connection) and session_settled(driver)
            # the session's own settings, outside any transaction (no SET LOCAL)
            assert [driver.pgconn.exec_(f"SHOW {name}".encode()).get_value(0, 0)
                    for name in ("statement_timeout", "search_path")] == [
                        b"7s", b"pg_catalog, pg_temp"]
            assert journal.write_batch(_batch(run, 0), conn)  # nothing remembered: read first
            ok, first = _traced(conn, lambda: journal.write_batch(_batch(run, 1), conn))
            assert ok and first[-4:] == ["Bind", "Describe", "Execute", "Sync"]
            ok, sent = _traced(conn, lambda: journal.write_batch(_batch(run, 2), conn))
            assert ok and sent == ["Bind", "Describe", "Execute", "Sync"]  # no Parse, no BEGIN
            # The same batch again (a spool replay): journaled once, nothing rejected.
            assert journal.write_batch(_batch(run, 2), conn) is False
            # The transactions that follow are transactions, with the timeout.
            with conn.begin():
                assert conn.exec_driver_sql("SHOW statement_timeout").scalar_one() == "7s"
                conn.exec_driver_sql("CREATE TEMP TABLE t (x int)")
                conn.rollback()
            assert conn.exec_driver_sql(
                "SELECT to_regclass('pg_temp.t') IS NULL").scalar_one() is True
            conn.rollback()
            # psycopg deallocates what it prepared on a rollback: prepared again, still
            # one transaction of its own
            assert journal.write_batch(_batch(run, 3), conn)
            assert driver.pgconn.transaction_status == pq.TransactionStatus.IDLE
    finally:
        journal.close()
    rows = sql_rows(journal_url, "SELECT b.batch_id, k.partition, k.start_offset, "
                                 "k.end_offset FROM offset_journal.kafka_partitions k JOIN "
                                 "offset_journal.batches b ON b.id = k.batch_pk "
                                 "WHERE b.run_id = :run ORDER BY 1, 2", run=run)
    assert rows == [(i, p, None if i == 0 else 10 * i + p, 10 * (i + 1) + p)
                    for i in range(4) for p in range(3)]
    assert sql_rows(journal_url, "SELECT count(*) FROM offset_journal.rejected_events") == [
        (0,)]


def test_a_lone_batch_elsewhere_is_one_query_with_its_settings(journal_url: str) -> None:
    """A connection not known to be straight to Postgres (a journal opened without
    reading which server it is on; behind a pooler: tests/capture/test_pgbouncer.py) prepares
    nothing: a lone batch is one query of the simple protocol, its settings first."""
    run = str(uuid.uuid4())
    with Journal(journal_url) as journal, journal.engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert not session_settled(driver) and driver.prepare_threshold is None
        assert journal.write_batch(_batch(run, 0), conn)
        ok, sent = _traced(conn, lambda: journal.write_batch(_batch(run, 1), conn))
        assert ok and sent == ["Query"]  # no BEGIN, no COMMIT, no Parse/Bind of its own


def test_the_statement_timeout_holds_in_the_one_query_write(journal_url: str) -> None:
    """A journal locked by someone else: the lone batch's query is cancelled by its
    statement timeout (an outage, retried later), never left waiting; the connection
    then journals it."""
    run = str(uuid.uuid4())
    journal = writer_journal(WriterConfig(journal_url, spool_dir="unused",
                                          statement_timeout_ms=300))
    blocker = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    try:
        with journal.engine.connect() as conn:
            assert journal.write_batch(_batch(run, 0), conn)
            with blocker.connect() as other:
                other.exec_driver_sql("LOCK TABLE offset_journal.batches IN ACCESS EXCLUSIVE "
                                      "MODE")
                with pytest.raises(JournalUnavailable) as caught:
                    journal.write_batch(_batch(run, 1), conn)
                assert caught.value.sqlstate == "57014"
                other.rollback()
            driver = conn.connection.driver_connection
            assert driver is not None and driver.autocommit is False
            assert journal.write_batch(_batch(run, 1), conn)
    finally:
        journal.close()
        blocker.dispose()
    assert sql_rows(journal_url, "SELECT batch_id FROM offset_journal.batches WHERE run_id = "
                                 ":run ORDER BY 1", run=run) == [(0,), (1,)]


def test_a_refused_lone_batch_leaves_nothing_behind(journal_url: str) -> None:
    """Everything the call wrote (the run row it adds when the start event was lost)
    goes with the refused batch: the query is one transaction."""
    run = str(uuid.uuid4())
    refused = _batch(run, 0, timestamp="1960-01-01T00:00:00.000Z")  # 0011's CHECK
    with Journal(journal_url) as journal:
        with pytest.raises(JournalConstraintError) as caught:
            journal.record_batch(refused)
        assert caught.value.sqlstate == "23514"
        assert sql_rows(journal_url, "SELECT count(*) FROM offset_journal.query_runs "
                                     "WHERE run_id = :run", run=run) == [(0,)]
        assert journal.record_batch(_batch(run, 0))
    assert sql_rows(journal_url, "SELECT query_name, named FROM offset_journal.query_runs "
                                 "WHERE run_id = :run", run=run) == [("write_path_q", True)]


def test_a_writer_granted_before_0014_journals_where_public_cannot_execute(
        empty_database_url: str) -> None:
    """A hardened database (no EXECUTE for PUBLIC on new functions): the upgrade gives
    the writers it had the new function, so they need no new `db grant`."""
    url = empty_database_url
    command.upgrade(alembic_config(url), "0013_offsets_as_arrays")
    writer, stranger = (f"oj_w14_{uuid.uuid4().hex[:8]}", f"oj_s14_{uuid.uuid4().hex[:8]}")
    for role in (writer, stranger):
        sql_execute(url, f'CREATE ROLE "{role}" LOGIN')
    later = ("offset_journal.retention_forecasts", "offset_journal.savepoints",  # 0017, 0018
             "offset_journal.retention_losses", "offset_journal.loss_acknowledgements",  # 0019
             "offset_journal.savepoint_deletions")  # 0022
    for statement in writer_statements(writer):
        for table in later:
            statement = statement.replace(f", {table}", "")
        if "EXECUTE" not in statement and not any(t in statement for t in later):
            sql_execute(url, statement)  # what `db grant` gave before 0014
    # Global (this database's): per-schema defaults cannot take back PUBLIC's EXECUTE.
    sql_execute(url, "ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC")
    upgrade(url)

    def as_role(role: str) -> str:
        return sa.engine.make_url(resolve_url(url)).set(username=role).render_as_string(
            hide_password=False)

    assert sql_rows(url, "SELECT has_function_privilege(:r, 'offset_journal.journal_batch("
                         "text, text, text, boolean, bigint, timestamptz, bigint, jsonb, "
                         "bigint, double precision, double precision, timestamptz, "
                         "timestamptz, timestamptz, timestamptz, jsonb, text, bigint, text, "
                         "jsonb, jsonb, boolean)', 'EXECUTE')", r=stranger) == [(False,)]
    run = str(uuid.uuid4())
    with Journal(as_role(writer)) as journal:
        assert journal.record_batch(_batch(run, 0))
        assert journal.record_batch(_batch(run, 1))
    assert sql_rows(url, "SELECT count(*) FROM offset_journal.batches WHERE run_id = :run",
                    run=run) == [(2,)]


def test_the_downgrade_from_0014_gives_0013_back_and_the_upgrade_returns(
        journal_url: str) -> None:
    run = str(uuid.uuid4())
    with Journal(journal_url) as journal:
        assert journal.record_batch(_batch(run, 0))
    command.downgrade(alembic_config(journal_url), "0013_offsets_as_arrays")
    assert sql_rows(journal_url, "SELECT to_regproc('offset_journal.journal_batch') IS NULL"
                    ) == [(True,)]
    # The history guard's helpers, as 0004 wrote them, answer as before.
    assert sql_rows(journal_url, "SELECT l.lanname FROM pg_proc p JOIN pg_language l ON "
                                 "l.oid = p.prolang WHERE p.proname IN "
                                 "('is_journal_owner', 'inserted_by_this_transaction')"
                    ) == [("sql",), ("sql",)]
    # A batch written without the function, as releases before 0014 write.
    sql_execute(journal_url, "INSERT INTO offset_journal.batches (run_id, query_id, "
                             "query_name, batch_id, trigger_at) VALUES (:run, 'q', "
                             "'write_path_q', 1, :at)", run=run,
                at=datetime(2026, 11, 1, tzinfo=timezone.utc))
    upgrade(journal_url)
    with Journal(journal_url) as journal:
        assert journal.record_batch(_batch(run, 2))


# --------------------------------------------------------------------------- watchdog


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.settimeout(30)
    b.settimeout(30)
    return a, b


def test_the_watchdog_cuts_a_transaction_past_its_deadline_and_no_other() -> None:
    dog = Watchdog()
    kept, kept_peer = _pair()
    hung, hung_peer = _pair()
    try:
        with dog.watch(kept.fileno(), 0.05):
            pass  # done in time: its socket is never touched
        cut = threading.Event()
        with dog.watch(hung.fileno(), 0.05):
            # The peer never answers; the cut ends the wait with end-of-file.
            assert hung.recv(1) == b""
            cut.set()
        assert cut.is_set()
        # The first deadline is long past (the second was later): still usable.
        kept_peer.sendall(b"x")
        assert kept.recv(1) == b"x"
        with dog.watch(None, 0.01):  # nothing to watch
            pass
    finally:
        dog.close()
        for s in (kept, kept_peer, hung, hung_peer):
            s.close()


def test_this_release_on_a_journal_not_upgraded_keeps_its_events_until_the_upgrade(
        empty_database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """No function yet (0013): the events wait in the spool, one ERROR says to run `db
    upgrade`, nothing goes to rejected_events; after the upgrade they are journaled."""
    url = empty_database_url
    command.upgrade(alembic_config(url), "0013_offsets_as_arrays")
    run = str(uuid.uuid4())
    events = [{"type": PROGRESS, "json": progress(
        i, run_id=run, query_id="q-" + run, name="write_path_q",
        timestamp=f"2026-11-01T00:00:{i:02d}.000Z",
        sources=[kafka_source("t", None if i == 0 else {"t": {"0": 10 * i}},
                              {"t": {"0": 10 * (i + 1)}})])} for i in range(2)]
    spool = str(tmp_path / "spool")
    w = Writer(WriterConfig(url, spool, retry_initial=0.05, retry_max=0.1))
    w.start()
    for ev in events:
        w.submit(ev)
    assert w.flush(timeout=30, to_database=False)  # each in the journal or the spool
    assert w.close(timeout=0.5) is False
    assert (w.stats().journaled, w.stats().rejected, w.stats().lost) == (0, 0, 0)
    assert w.stats().spooled == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors and all("offset-journal db upgrade" in e for e in errors), errors
    assert sql_rows(url, "SELECT count(*) FROM offset_journal.rejected_events") == [(0,)]

    upgrade(url)
    w = Writer(WriterConfig(url, spool, retry_initial=0.05))
    w.start()
    assert w.flush(timeout=30) is True
    w.close()
    assert sql_rows(url, "SELECT batch_id FROM offset_journal.batches WHERE run_id = :run "
                         "ORDER BY 1", run=run) == [(0,), (1,)]


def test_record_batch_on_a_connection_without_a_transaction_commits_with_it(
        journal_url: str) -> None:
    """SQLAlchemy 2.0's way: connect, write, commit. The write begins its transaction
    through SQLAlchemy (psycopg would open one SQLAlchemy never commits)."""
    run = str(uuid.uuid4())
    with Journal(journal_url) as journal, journal.engine.connect() as conn:
        assert journal.record_batch(_batch(run, 0), conn)
        assert conn.in_transaction()
        conn.commit()
    assert sql_rows(journal_url, "SELECT count(*) FROM offset_journal.batches WHERE run_id = "
                                 ":run", run=run) == [(1,)]


@pytest.mark.parametrize("opened", ["prepared", "bound in the client"])
def test_the_smallest_bigint_goes_through_the_one_query_write(journal_url: str,
                                                              opened: str) -> None:
    """Bound in the client, a negative number is written with its sign apart; a cast
    right after it would apply before the minus and overflow. Prepared, it is a
    parameter like any other."""
    run = str(uuid.uuid4())
    smallest = -(2 ** 63)
    journal = (writer_journal(WriterConfig(journal_url, spool_dir="unused"))
               if opened == "prepared" else Journal(journal_url))
    with journal, journal.engine.connect() as conn:
        assert journal.write_batch(_batch(run, 0), conn)
        one = dataclasses.replace(_batch(run, 1), batch_duration_ms=smallest)
        ok, sent = _traced(conn, lambda: journal.write_batch(one, conn))
        assert ok and ("Query" in sent) == (opened == "bound in the client")
    assert sql_rows(journal_url, "SELECT batch_duration_ms FROM offset_journal.batches WHERE "
                                 "run_id = :run AND batch_id = 1", run=run) == [(smallest,)]


def test_db_grant_on_a_journal_not_upgraded_says_so_and_grants_nothing(
        empty_database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from offset_journal.cli import main as cli_main

    url = empty_database_url
    command.upgrade(alembic_config(url), "0013_offsets_as_arrays")
    role = f"oj_g14_{uuid.uuid4().hex[:8]}"
    sql_execute(url, f'CREATE ROLE "{role}" LOGIN')
    assert cli_main(["--database-url", url, "db", "grant", "--writer", role]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "offset-journal db upgrade" in err[0], err
    assert sql_rows(url, "SELECT has_table_privilege(:r, 'offset_journal.batches', 'SELECT')",
                    r=role) == [(False,)]
