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

