"""Savepoints on a schedule under a running stream: real Spark 4.2 with its Kafka
connector on the test broker, real Postgres. A stateful aggregation runs with
``attach(..., savepoints=SavepointSchedule(...))``: a savepoint slower than the schedule
is skipped and said, never two at once; a savepoint holds, key by key, the state at its
batch; retention keeps the newest, the N newest and one a recorded plan starts from, and
deletes the rest; cron's form (`savepoint create --under --keep`) takes over on the
stopped query."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import offset_journal
from offset_journal import Journal
from offset_journal.errors import ConfigError
from offset_journal.journal.db import resolve_url
from offset_journal.savepoint import SavepointSchedule, state_frame
from tests import restore_support as rs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUERY = "scheduled_totals"
WAIT = 240.0  # seconds: a bound for what the stream does under load, never an assertion


def _wait_for(what: str, done: Callable[[], bool], each: Callable[[], None] = lambda: None,
              ) -> None:
    """Until ``done()`` (bounded by WAIT), calling ``each()`` at every look."""
    deadline = time.monotonic() + WAIT
    while not done():
        each()
        assert time.monotonic() < deadline, f"not within {WAIT:.0f} s: {what}"
        time.sleep(0.2)


WAITING = sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted "
                  "AND relation = 'offset_journal.savepoints'::regclass")
"""Statements waiting for the savepoints table: each savepoint in flight holds one."""


def _reference(produced: list[tuple[int, int, bytes, bytes]],
               ends: dict[str, dict[str, int]]) -> dict[str, tuple[int, int, int]]:
    """(n, max, sum) per group over the records before a batch's end offsets."""
    (ends_of_topic,) = ends.values()
    return rs.reference([r for r in produced if r[1] < ends_of_topic[str(r[0])]])


def test_a_schedule_under_a_running_stream(spark: Any, journal_url: str, kafka_cluster: Any,
                                           kafka_topic: str, tmp_path: Path, capsys: Any,
                                           caplog: pytest.LogCaptureFixture) -> None:
    ck, sp = tmp_path / "ck", tmp_path / "sp"
    schedule = SavepointSchedule(QUERY, checkpoint=str(ck), under=str(sp), every_batches=2,
                                 keep=2)
    listener = offset_journal.attach(spark, journal_url, spool_dir=str(tmp_path / "spool"),
                                     savepoints=schedule)
    engine = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    caplog.set_level(logging.INFO, logger="offset_journal")
    produced = kafka_cluster.produce(kafka_topic, 120, value=rs.amounts)
    q = (rs.totals(rs.events(spark, kafka_cluster.bootstrap_servers, kafka_topic,
                             per_trigger=4))
         .writeStream.format("noop").outputMode("update").queryName(QUERY)
         .option("checkpointLocation", str(ck)).start())
    try:
        # 1. A savepoint slower than the schedule: the journal's savepoints table held
        # by another transaction, the first savepoint waits on it while the stream runs;
        # how many wait is seen from Postgres.
        most = 0
        with engine.connect() as held, engine.connect() as watch:
            held.execute(sa.text("LOCK TABLE offset_journal.savepoints IN ACCESS EXCLUSIVE "
                                 "MODE"))

            def look() -> None:
                nonlocal most
                most = max(most, int(watch.execute(WAITING).scalar_one()))
                watch.rollback()

            _wait_for("two due savepoints skipped", lambda: schedule.stats().skipped >= 2,
                      look)
            look()
            assert schedule.stats().taken == 0 and most == 1, most
            held.rollback()
            _wait_for("the held savepoint taken", lambda: schedule.stats().taken >= 1, look)
        skips = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
        assert skips and all(r.levelname == "WARNING" for r in caplog.records
                             if "skipped" in r.getMessage())
        assert "still runs" in skips[0] and "skipped so far" in skips[0], skips[0]

        # 2. A restart plan recorded from the first savepoint: retention keeps it.
        with Journal(journal_url) as j:
            first = j.savepoints(QUERY)[0]
        code, out, err = rs.cli(capsys, "--database-url", journal_url, "plan", QUERY,
                                "--savepoint", str(first.id), "--seed", "0", "--record",
                                "--checkpoint", str(tmp_path / "ck-v2"))
        assert code == 0, out + err

        # 3. The stream runs on; retention deletes what it may.
        produced += kafka_cluster.produce(kafka_topic, 60, start=120, value=rs.amounts)
        _wait_for("three more savepoints", lambda: schedule.stats().taken >= 4)
        q.processAllAvailable()
    finally:
        q.stop()
        assert listener.wait_terminated(q.runId, 60)
        spark.streams.removeListener(listener)
        listener.close()
        engine.dispose()
    assert most == 1, "never two savepoints at once"  # the held one, and no other
    stats = schedule.stats()
    spans = sorted((a.started, a.ended) for a in stats.attempts)
    assert all(end <= start for (_s, end), (start, _e) in zip(spans, spans[1:], strict=False))
    assert stats.failed == 0, [a.error for a in stats.attempts]

    with Journal(journal_url) as j:
        rows = j.savepoints(QUERY)
    present = [r for r in rows if r.deleted_at is None]
    gone = [r for r in rows if r.deleted_at is not None]
    newest = present[-1]
    assert [r.id for r in present] == sorted({first.id, *(r.id for r in rows[-2:])})
    assert gone and all(r.deleted_reason == "beyond the 2 newest kept" for r in gone)
    assert all(not Path(r.location).exists() for r in gone)
    assert all((Path(r.location) / "manifest.json").exists() for r in present)
    assert all(Path(r.location).parent == sp for r in rows)
    assert stats.deleted == len(gone)

    # A savepoint of the running query holds, key by key, the state at its batch.
    for saved in (first, newest):
        with Journal(journal_url) as j:
            ends = dict(j.batch(QUERY, saved.run_id, saved.batch_id).sources[0].end_offset)
            state = {r[0]: tuple(r[1:])
                     for r in state_frame(spark, saved.id, journal=j).collect()}
        assert state == _reference(produced, ends), saved.batch_id

    # 4. Cron's form on the stopped query: its last batch saved once, then nothing new.
    argv = ["--database-url", journal_url, "savepoint", "create", QUERY, "--checkpoint",
            str(ck), "--under", str(sp), "--keep", "1"]
    code, out, err = rs.cli(capsys, *argv)
    assert code == 0, out + err
    last = out.strip().splitlines()[-1]
    assert last.startswith("OK: ") and last.endswith(f"kept in {sp}"), out
    code, again, err = rs.cli(capsys, *argv)
    assert code == 0 and "nothing new to save" in again, again + err
    assert again.strip().splitlines()[-1].startswith("OK: nothing new at batch ")
    with Journal(journal_url) as j:
        left = [r for r in j.savepoints(QUERY) if r.deleted_at is None]
    assert [r.id for r in left] == sorted({first.id, left[-1].id})  # --keep 1, and the plan's


def test_a_schedule_whose_location_is_not_writable_is_refused_at_attach(
        spark: Any, journal_url: str, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    fine = SavepointSchedule("other", checkpoint=str(tmp_path / "ck2"),
                             under=str(tmp_path / "sp"), every="10m")
    schedule = SavepointSchedule(QUERY, checkpoint=str(tmp_path / "ck"),
                                 under=str(tmp_path / "a-file" / "sp"), every="10m")
    with pytest.raises(ConfigError) as refused:
        offset_journal.attach(spark, journal_url, spool_dir=str(tmp_path / "spool"),
                              savepoints=[fine, schedule])
    text = str(refused.value)
    assert "\n" not in text and text.startswith(f"savepoint schedule of {QUERY!r}: the "
                                                "savepoint location ")
    assert "is not writable" in text
    # Nothing attached: the schedule bound before the refusal runs no thread on.
    _wait_for("the bound schedule's threads ended", lambda: not any(
        t.name.endswith("-other") for t in threading.enumerate()))
    with pytest.raises(ConfigError, match="takes a SavepointSchedule"):
        offset_journal.attach(spark, journal_url, spool_dir=str(tmp_path / "spool"),
                              savepoints="every 10 batches")
