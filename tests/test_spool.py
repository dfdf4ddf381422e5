"""The spool under concurrency: two drivers (here: two threads, each with a Spool of its
own, which flock treats like two processes) sharing one spool directory."""

from __future__ import annotations

import json
import threading
import time

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
