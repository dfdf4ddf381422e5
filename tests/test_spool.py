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
