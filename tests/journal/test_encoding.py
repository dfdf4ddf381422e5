"""Every value reaches the database as the text the listener saw, on any
server encoding that can hold it, and a value it cannot hold is refused, never stored
garbled.

The write path sends its JSON arguments as UTF-8 bytes. A connection left in the
database's own encoding (LATIN1 here) or in the one ``PGCLIENTENCODING`` names (SJIS,
BIG5, GBK) would have the server read those bytes in that encoding.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from offset_journal import Journal
from offset_journal.capture.writer import Writer, WriterConfig
from offset_journal.journal.db import make_engine, upgrade
from offset_journal.records import PROGRESS, batch_from_progress
from offset_journal.testing import PostgresServer
from tests.payloads import progress
from tests.support import ts

CAFE = "/lake/café/events"
NIHON = "/lake/日本/events"


def delta_progress(batch_id: int, path: str, *, name: str = "lake", run: str = "run-e") -> str:
    source = {"description": f"DeltaSource[file:{path}]",
              "startOffset": None if batch_id == 0 else _delta(batch_id - 1),
              "endOffset": _delta(batch_id), "latestOffset": None, "numInputRows": 3}
    return progress(batch_id, sources=[source], name=name, run_id=run, query_id="qid-e",
                    timestamp=ts(batch_id))


def _delta(version: int) -> dict:
    return {"sourceVersion": 1, "reservoirId": "5bd7a8b1-0000-4000-8000-000000000001",
            "reservoirVersion": version, "index": -1, "isStartingVersion": False}


@pytest.fixture
def latin1_url(journal_server: PostgresServer) -> Iterator[str]:
    url = journal_server.create_database(prefix="oj_latin1")
    name = sa.engine.make_url(url).database
    admin = journal_server._admin_engine()
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE "{name}"')
        conn.exec_driver_sql(f"CREATE DATABASE \"{name}\" ENCODING 'LATIN1' "
                             "LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    admin.dispose()
    upgrade(url)
    yield url
    journal_server.drop_database(url)


def stored(url: str, sql: str) -> list[str]:
    """Text as the server holds it: converted to UTF-8 by a connection that asks for it."""
    engine = make_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text(sql)).scalars())
    finally:
        engine.dispose()


def test_text_is_stored_as_the_listener_saw_it_on_a_latin1_journal(
        latin1_url: str, tmp_path) -> None:
    writer = Writer(WriterConfig(latin1_url, str(tmp_path / "spool")))
    writer.start()
    try:
        writer.submit({"type": PROGRESS, "json": delta_progress(0, CAFE)})  # alone: one query
        assert writer.flush(30)
        for batch_id in (1, 2):  # together: one transaction of statements
            writer.submit({"type": PROGRESS, "json": delta_progress(batch_id, CAFE)})
        assert writer.flush(30)
    finally:
        writer.close()
    assert stored(latin1_url, "SELECT description FROM offset_journal.batch_sources "
                              "ORDER BY batch_pk") == [f"DeltaSource[file:{CAFE}]"] * 3
    # And as the server itself sees it: one LATIN1 byte for the é, not the two of UTF-8.
    assert stored(latin1_url, "SELECT octet_length(description) FROM "
                              "offset_journal.batch_sources LIMIT 1") == [len(CAFE) + 18]
    journal = Journal(latin1_url)
    try:
        assert [b.sources[0].description for b in journal.history("lake")] == [
            f"DeltaSource[file:{CAFE}]"] * 3
        assert CAFE in journal.history("lake")[0].sources[0].description
    finally:
        journal.close()


def test_a_value_the_journal_cannot_hold_is_refused_in_one_line_never_garbled(
        latin1_url: str, tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    writer = Writer(WriterConfig(latin1_url, str(tmp_path / "spool")))
    writer.start()
    try:
        writer.submit({"type": PROGRESS, "json": delta_progress(0, NIHON)})
        assert writer.flush(30) is False
        assert writer.stats().rejected == 1 and writer.stats().lost == 0
    finally:
        writer.close()
    assert stored(latin1_url, "SELECT count(*) FROM offset_journal.batches") == [0]
    reasons = stored(latin1_url, "SELECT reason FROM offset_journal.rejected_events")
    assert len(reasons) == 1 and "LATIN1" in reasons[0] and "\n" not in reasons[0]
    [payload] = stored(latin1_url, "SELECT payload FROM offset_journal.rejected_events")
    assert NIHON in json.loads(json.loads(payload)["json"])["sources"][0]["description"]
    journal = Journal(latin1_url)
    try:
        with pytest.raises(Exception, match="LATIN1"):
            journal.record_batch(batch_from_progress(delta_progress(0, NIHON, run="run-f")))
    finally:
        journal.close()
    assert stored(latin1_url, "SELECT count(*) FROM offset_journal.batches") == [0]


@pytest.mark.parametrize("client_encoding", ["SJIS", "BIG5", "GBK", "LATIN1"])
def test_the_environments_client_encoding_does_not_garble_the_write(
        journal_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch,
        client_encoding: str) -> None:
    monkeypatch.setenv("PGCLIENTENCODING", client_encoding)
    path = f"{CAFE}/{NIHON}"
    writer = Writer(WriterConfig(journal_url, str(tmp_path / "spool")))
    writer.start()
    try:
        writer.submit({"type": PROGRESS, "json": delta_progress(0, path)})
        assert writer.flush(30)
    finally:
        writer.close()
    monkeypatch.delenv("PGCLIENTENCODING")
    assert stored(journal_url, "SELECT description FROM offset_journal.batch_sources") == [
        f"DeltaSource[file:{path}]"]
