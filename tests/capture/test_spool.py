"""The spool under concurrency: two drivers (here: two threads, each with a Spool of its
own, which flock treats like two processes) sharing one spool directory."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from offset_journal.capture._spool import Spool


def test_a_file_removed_by_another_replayer_does_not_break_listing(tmp_path):
    # Another driver replays and removes spool files while this one looks at the
    # directory: pending()/size() (the writer thread's loop, flush()) must not raise.
    stop = threading.Event()

    def other_driver() -> None:
        i = 0
        while not stop.is_set():
            path = tmp_path / f"spool-other-{i}.jsonl"
            path.write_text("")
            path.unlink()
            i += 1

    t = threading.Thread(target=other_driver)
    t.start()
    spool = Spool(tmp_path)
    errors: list[BaseException] = []
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            try:
                spool.pending()
                spool.size()
            except FileNotFoundError as exc:
                errors.append(exc)
    finally:
        stop.set()
        t.join()
    assert errors == []


def test_a_new_spool_file_is_never_replayed_before_it_is_locked(tmp_path):
    # Driver A spills events to a new file while driver B replays the directory. B must
    # never take A's file between its creation and A's lock on it: B would find it empty
    # and delete it, and A's events (reported as spooled) would go to a deleted file.
    stop = threading.Event()
    replayed: list[dict] = []

    def driver_b() -> None:
        spool = Spool(tmp_path)
        while not stop.is_set():
            try:
                spool.replay(replayed.extend)
            except FileNotFoundError:
                pass

    t = threading.Thread(target=driver_b)
    t.start()
    spooled, raised, i = 0, 0, 0
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            a = Spool(tmp_path)  # each append opens a new file, as after a replay
            try:
                spooled += a.append([{"i": i}])
            except BlockingIOError:
                raised += 1
            i += 1
            a.close()
    finally:
        stop.set()
        t.join()
    Spool(tmp_path).replay(replayed.extend)
    assert raised == 0
    assert spooled == i
    assert sorted({e["i"] for e in replayed}) == list(range(i))


def test_pending_asked_from_two_threads_never_misses_a_file(tmp_path):
    """The writer thread and flush() both ask pending(). It probes each file with a
    non-blocking flock to skip files a live process holds, and flock cannot tell this
    process's own probe from another process: two threads probing at once saw each
    other's probe as a live owner, and flush() returned True with the events only in
    the spool (test_spool_is_replayed_by_the_next_start in CI). The probes, and a
    replay's naming and locking of a file, are now serialized by the spool's lock."""
    spool = Spool(tmp_path)
    spool.append([{"type": "progress", "n": 1}])
    spool.close()  # the file stays, unlocked and no longer named ours: as after an outage
    answers: list[bool] = []

    def ask() -> None:
        answers.extend(spool.pending() for _ in range(3000))

    askers = [threading.Thread(target=ask) for _ in range(2)]
    for t in askers:
        t.start()
    for t in askers:
        t.join()
    assert len(answers) == 6000
    assert answers.count(False) == 0, f"{answers.count(False)} of 6000 answers missed it"


def _progress_event(name: str, batch: int) -> dict:
    from tests.payloads import kafka_source, progress

    return {"type": "progress", "json": progress(
        batch, name=name, run_id=f"run-{name}", query_id=f"q-{name}",
        timestamp=f"2024-01-01T00:00:{batch:02d}Z",
        sources=[kafka_source("t", {"t": {"0": batch * 10}}, {"t": {"0": batch * 10 + 10}})])}


def test_make_room_drops_the_oldest_batches_never_a_querys_newest() -> None:
    from offset_journal.capture._spool import make_room, summarize_losses

    events = ([{"type": "started", "run_id": "run-a", "name": "a"}]
              + [_progress_event("a", i) for i in range(10)] + [_progress_event("b", 0)])
    kept, dropped = make_room(events, budget=1)  # nothing fits: keep only what must stay
    assert kept == [events[0], events[10], events[11]]
    assert dropped == events[1:10]
    kept, dropped = make_room(events, budget=10**9)
    assert kept == events and dropped == []
    size = sum(len(json.dumps(e, separators=(",", ":"))) + 1 for e in events)
    kept, dropped = make_room(events, budget=size - 1)  # one event too many: the oldest goes
    assert dropped == [events[1]]
    (loss,) = summarize_losses(events[1:10]).values()
    assert loss["query_name"] == "a" and loss["events"] == 9
    assert (loss["batch_id_min"], loss["batch_id_max"]) == (0, 8)
    assert loss["run_ids"] == ["run-a"]
    assert loss["partitions"] == {"0\tt\t0": [0, 90]}


def test_spool_files_are_for_the_owner_only(tmp_path) -> None:
    import stat

    spool = Spool(tmp_path / "spool")
    spool.append([{"type": "started", "run_id": "r"}])
    spool._record_losses({"a": {"loss_id": "x", "query_name": "a", "events": 1,
                                "run_ids": [], "batch_id_min": None, "batch_id_max": None,
                                "first_trigger_at": None, "last_trigger_at": None,
                                "partitions": {}, "host": None}})
    assert stat.S_IMODE((tmp_path / "spool").stat().st_mode) == 0o700
    files = list((tmp_path / "spool").iterdir())
    assert len(files) == 3  # the spool file, losses.json and its lock
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)


def test_the_default_spool_directory_name_does_not_depend_on_the_password(
        tmp_path, monkeypatch) -> None:
    import hashlib

    from offset_journal.capture._spool import default_spool_dir

    monkeypatch.setenv("OFFSET_JOURNAL_SPOOL_DIR", str(tmp_path))
    a = default_spool_dir("postgresql+psycopg://w:Secret1@db:5432/journal")
    b = default_spool_dir("postgresql+psycopg://w:other@db:5432/journal")
    c = default_spool_dir("postgresql+psycopg://w:Secret1@db:5432/other")
    assert a == b and a != c
    for pw in ("Secret1", "other"):  # a password guess cannot be checked against it
        url = f"postgresql+psycopg://w:{pw}@db:5432/journal"
        assert hashlib.sha256(url.encode()).hexdigest()[:16] != a.name
    # A spool named the old way (a hash of the whole URL) is taken over, not stranded.
    url = "postgresql+psycopg://w:Secret1@db:5432/legacy"
    legacy = tmp_path / hashlib.sha256(url.encode()).hexdigest()[:16]
    legacy.mkdir()
    (legacy / "spool-old.jsonl").write_text("{}\n")
    new = default_spool_dir(url)
    assert new != legacy and (new / "spool-old.jsonl").exists() and not legacy.exists()


def test_a_line_that_is_no_event_never_stops_the_spools_replay(journal_url, tmp_path, caplog):
    """What a failover window hands over, and every event the database could not take,
    goes through the spool: a line of a spool file that holds no event (not UTF-8,
    nested past the parser, not a JSON object) is skipped and named, never a replay
    that fails on every try while every new event queues up behind it."""
    from offset_journal.capture.writer import Writer, WriterConfig
    from tests.payloads import kafka_source, progress, sql_rows

    run = "run-spooled"
    events = [{"type": "started", "query_id": "q", "run_id": run, "name": "spooled",
               "timestamp": "2024-01-01T00:00:00.000Z"},
              *({"type": "progress", "json": progress(
                  i, run_id=run, query_id="q", name="spooled",
                  sources=[kafka_source("t", {"t": {"0": i}}, {"t": {"0": i + 1}})])}
                for i in range(3))]
    good = [json.dumps(ev).encode() + b"\n" for ev in events]
    bad = [b'{"type": "started", "name": "\xff"}\n', b"[" * 100_000 + b"]" * 100_000 + b"\n",
           b"5\n"]
    spool = tmp_path / "spool"
    spool.mkdir()
    path = spool / f"spool-deadhost-{time.time_ns()}-0badf00d.jsonl"  # a dead driver's
    path.write_bytes(b"".join(good[:2] + bad + good[2:]))
    w = Writer(WriterConfig(journal_url, str(spool), retry_initial=0.05, retry_max=0.2))
    w.start()
    assert w.flush(timeout=20)
    assert w.close()
    rows = sql_rows(journal_url, "select batch_id from offset_journal.batches "
                                 "where run_id = :r order by 1", r=run)
    assert [r[0] for r in rows] == [0, 1, 2] and not path.exists()
    for line in (3, 4, 5):
        assert any(path.name in r.getMessage() and f"line {line}" in r.getMessage()
                   for r in caplog.records), caplog.text
    assert sql_rows(journal_url, "select count(*) from offset_journal.rejected_events") == [(0,)]


# ------------------------------------------------------------ whose the spool is

OTHER_UID = 65534  # nobody
as_root = pytest.mark.skipif(os.geteuid() != 0,
                             reason="giving a file to another uid takes root (CI runs as root)")
DEAD_URL = "postgresql+psycopg://w@127.0.0.1:1/journal"


def _spooled(name: str, run: str, batches: range) -> list[dict[str, Any]]:
    from tests.payloads import kafka_source, progress

    return [{"type": "started", "query_id": f"q-{name}", "run_id": run, "name": name,
             "timestamp": "2024-01-01T00:00:00.000Z"},
            *({"type": "progress", "json": progress(
                i, run_id=run, query_id=f"q-{name}", name=name,
                sources=[kafka_source("t", {"t": {"0": i}}, {"t": {"0": i + 1}})])}
              for i in batches)]


def _lines(events: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def _shared(tmp_path: Path, mode: int) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    return shared


def _foreign_dir(tmp_path: Path) -> Path:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    return theirs


@pytest.mark.parametrize("make, said", [
    pytest.param(lambda p: _shared(p, 0o777), "writable by other users (mode 0777)",
                 id="world-writable"),
    pytest.param(lambda p: _shared(p, 0o1777), "writable by other users (mode 1777)",
                 id="sticky-like-tmp"),
    pytest.param(lambda p: _shared(p, 0o770), "writable by its group (mode 0770)",
                 id="group-writable"),
    pytest.param(_foreign_dir, f"belongs to uid {OTHER_UID}, not to this user",
                 id="another-users", marks=as_root),
])
def test_attach_refuses_a_spool_directory_another_user_may_write_in_one_line(
        tmp_path: Path, make: Callable[[Path], Path], said: str) -> None:
    """Whatever the spool directory holds is journaled with the writer's rights: one that
    exists and another user owns or may write to is refused where the listener is made
    (one line), and left as it was (never chmod'ed: it may be a shared path)."""
    from offset_journal import ConfigError, OffsetJournalListener, attach

    spool = make(tmp_path)
    before = spool.stat()
    for make_listener in (lambda: attach(object(), database_url=DEAD_URL, spool_dir=str(spool)),
                          lambda: OffsetJournalListener(DEAD_URL, spool_dir=str(spool))):
        with pytest.raises(ConfigError) as info:
            make_listener()
        message = str(info.value)
        assert said in message and str(spool) in message and "\n" not in message, message
    after = spool.stat()
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)
    assert list(spool.iterdir()) == []


def test_a_spool_directory_that_turned_shared_is_neither_written_nor_replayed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """After the listener was made (or on a Spark Connect server, where it is made from
    its pickle) the directory is checked again on every use: events are not written
    there (the spool is unusable: the writer counts them lost, with the reason) and
    nothing in it is replayed; said once at ERROR."""
    spool_dir = tmp_path / "spool"
    spool = Spool(spool_dir)
    spool.append(_spooled("mine", "run-1", range(2)))
    os.chmod(spool_dir, 0o777)
    spool.close()
    later = Spool(spool_dir)
    with pytest.raises(PermissionError, match="writable by other users"):
        later.append(_spooled("mine", "run-1", range(2, 3)))
    taken: list[dict[str, Any]] = []
    assert not later.pending() and later.replay(taken.extend) == 0 and taken == []
    assert later.size() == 0 and not later.has_losses()
    assert len(list(spool_dir.glob("spool-*.jsonl"))) == 1  # left for a person
    said = [r for r in caplog.records if r.levelname == "ERROR" and str(spool_dir) in
            r.getMessage() and "nothing in it is read" in r.getMessage()]
    assert len(said) == 1, caplog.text


@as_root
def test_files_another_user_put_in_the_spool_are_skipped_never_journaled(
        journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A spool file, a losses.json and a failover-window segment another uid made, and a
    symlink, in the job's own spool directory: the writer's replay and hand-over skip
    each (a WARNING naming it, counted in stats().foreign), journal none of them, and
    leave them for a person; this user's dead driver's events are journaled as before,
    and flush() is not held up by what it skipped."""
    from offset_journal.capture._recent import _header
    from offset_journal.capture._spool import new_loss_entry
    from offset_journal.capture.writer import Writer, WriterConfig
    from tests.payloads import sql_rows

    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    now = time.time_ns()
    ours = spool / f"spool-deadhost-1-{now}-0000000a.jsonl"
    ours.write_bytes(_lines(_spooled("mine", "run-mine", range(2))))
    planted = spool / f"spool-deadhost-1-{now - 1}-0000000b.jsonl"
    planted.write_bytes(_lines(_spooled("forged", "run-forged", range(5, 7))))
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(_lines(_spooled("forged", "run-linked", range(3))))
    linked = spool / f"spool-deadhost-1-{now - 2}-0000000c.jsonl"
    linked.symlink_to(outside)
    losses = spool / "losses.json"
    losses.write_text(json.dumps({"losses": {"forged": new_loss_entry("forged")}}))
    segment = spool / f"recent-deadhost-1-{now}-0000000d.jsonl"
    progress_line = _spooled("forged", "run-window", range(9, 10))[1]["json"]
    segment.write_text(_header("a-server-before", time.time()) + f"P{progress_line}\n")
    for path in (planted, losses, segment):
        os.chown(path, OTHER_UID, OTHER_UID)
        os.chmod(path, 0o600)
    w = Writer(WriterConfig(journal_url, str(spool), retry_initial=0.05, retry_max=0.2))
    w.start()
    try:
        assert w.flush(timeout=60)
    finally:
        assert w.close()
    journaled = sql_rows(journal_url, "SELECT query_name, run_id, batch_id FROM "
                                      "offset_journal.batches ORDER BY 1, 2, 3")
    assert journaled == [("mine", "run-mine", 0), ("mine", "run-mine", 1)]
    assert sql_rows(journal_url, "SELECT count(*) FROM offset_journal.query_runs "
                                 "WHERE query_name = 'forged'") == [(0,)]
    assert sql_rows(journal_url, "SELECT count(*) FROM offset_journal.spool_losses") == [(0,)]
    assert not ours.exists()
    assert all(p.exists() or p.is_symlink() for p in (planted, linked, losses, segment))
    assert w.stats().foreign == 4
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    for path in (planted, losses, segment):
        assert f"{path} (owned by uid {OTHER_UID}" in warned, warned
    assert f"{linked} (not a regular file" in warned, warned
