"""The spool under concurrency: two drivers (here: two threads, each with a Spool of its
own, which flock treats like two processes) sharing one spool directory."""

from __future__ import annotations

import threading
import time

from offset_journal.spool import Spool


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


def test_a_file_being_replayed_counts_as_pending(tmp_path, monkeypatch):
    """flush() polls pending() from another thread while the writer replays. The instant
    replay has locked a file, pending() must still see it, or flush() reports
    everything journaled while the events are only in the spool. The real flock runs;
    the wrapper only asks pending() at that instant."""
    import fcntl as real_fcntl
    from types import SimpleNamespace

    from offset_journal import spool as spool_module

    spool = Spool(tmp_path)
    spool.append([{"type": "progress", "n": 1}])
    seen: list[bool] = []
    asking = False

    def flock(fd, op):
        nonlocal asking
        real_fcntl.flock(fd, op)
        if op == real_fcntl.LOCK_EX | real_fcntl.LOCK_NB and not asking:
            asking = True
            try:
                seen.append(spool.pending())
            finally:
                asking = False

    monkeypatch.setattr(spool_module, "fcntl", SimpleNamespace(
        flock=flock, LOCK_EX=real_fcntl.LOCK_EX, LOCK_NB=real_fcntl.LOCK_NB,
        LOCK_UN=real_fcntl.LOCK_UN))

    def database_down(events):
        raise OSError("database down")

    try:
        spool.replay(database_down)
    except OSError:
        pass
    assert seen == [True]
    assert spool.pending()  # and still there after the failed replay
