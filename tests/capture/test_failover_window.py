"""The failover window's segments on disk, against a real
Postgres. A dead driver's segment of another server holding something that is no event,
or a header nothing can read, never stops the journaling again of everything else, is
never silently kept nor silently retired, and flush() is not True while a segment of
another server waits; the window's bytes on disk stay within failover_window_max_bytes,
and what a full window drops is counted as unprotected."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from offset_journal.capture.writer import Writer, WriterConfig
from offset_journal.records import PROGRESS, STARTED
from tests.payloads import kafka_source, progress, sql_rows

OLD = "1700000000000000/00000001"
"""A server before the test's Postgres (a postmaster started in 2023, long gone)."""


def _started(run: str) -> dict[str, Any]:
    return {"type": STARTED, "query_id": f"q-{run}", "run_id": run, "name": run,
            "timestamp": "2024-01-01T00:00:00.000Z"}


def _batch(run: str, i: int) -> dict[str, Any]:
    return {"type": PROGRESS, "json": progress(
        i, run_id=run, query_id=f"q-{run}", name=run,
        timestamp=f"2024-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
        sources=[kafka_source("t", {"t": {"0": i}}, {"t": {"0": i + 1}})])}


def _e(event: dict[str, Any]) -> bytes:
    return b"E" + json.dumps(event).encode() + b"\n"


def _p(event: dict[str, Any]) -> bytes:
    return b"P" + event["json"].encode() + b"\n"


def _dead_segment(spool: Path, lines: list[bytes], header: bytes | None = None) -> Path:
    """A segment a dead driver left, as it wrote it: a header naming the server its
    events were journaled on (``OLD``), then one line per event."""
    spool.mkdir(parents=True, exist_ok=True)
    path = spool / f"recent-deadhost-4242-{time.time_ns()}-0badf00d.jsonl"
    head = header if header is not None else (
        json.dumps({"server": OLD, "at": time.time()}) + "\n").encode()
    path.write_bytes(head + b"".join(lines))
    return path


def _run(run: str, batches: int) -> list[dict[str, Any]]:
    return [_started(run), *(_batch(run, i) for i in range(batches))]


def _writer(url: str, spool: Path, **config: Any) -> Writer:
    return Writer(WriterConfig(url, str(spool), retry_initial=0.05, retry_max=0.2, **config))


def _batches(url: str, run: str) -> list[int]:
    return [r[0] for r in sql_rows(
        url, "select batch_id from offset_journal.batches where run_id = :r order by 1", r=run)]


def _said(caplog: pytest.LogCaptureFixture, *words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and all(w in r.getMessage() for w in words)]


# --------------------------------------------------------------------------- item 3

BAD_LINES = {
    "a number": b"E5\n",
    "a list": b"E[1, 2]\n",
    "null": b"Enull\n",
    "a string": b'E"started"\n',
    "not UTF-8": b'E{"type": "started", "name": "\xff"}\n',
    "nested past the parser": b"E" + b"[" * 100_000 + b"]" * 100_000 + b"\n",
}


@pytest.mark.parametrize("bad", BAD_LINES.values(), ids=BAD_LINES.keys())
def test_a_line_that_is_no_event_is_skipped_and_everything_else_journaled_again(
        journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: bytes) -> None:
    spool = tmp_path / "spool"
    dead = _run("run-dead", 3)
    path = _dead_segment(spool, [_e(dead[0]), *map(_p, dead[1:]), bad, _p(_batch("run-dead", 3))])
    w = _writer(journal_url, spool)
    # what this writer journaled on the server before, which this one never got
    w.window.append(_run("run-own", 2), OLD)
    w.start()
    for ev in _run("run-new", 1):  # a newer batch of another query, journaled here
        w.submit(ev)
    assert w.flush(timeout=20)
    assert _batches(journal_url, "run-dead") == [0, 1, 2, 3]
    assert _batches(journal_url, "run-own") == [0, 1]
    assert _batches(journal_url, "run-new") == [0]
    assert not path.exists()
    assert _said(caplog, path.name, "line 6"), caplog.text  # the header is line 1
    stats = w.stats()
    assert (stats.rejournaled, stats.unprotected, stats.rejected, stats.lost) == (6, 1, 0, 0)
    assert w.close()


def test_flush_after_start_journals_a_dead_drivers_segment_of_another_server_first(
        journal_url: str, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    dead = _run("run-dead", 3)
    path = _dead_segment(spool, [_e(dead[0]), *map(_p, dead[1:])])
    w = _writer(journal_url, spool)
    w.start()
    assert w.flush(timeout=20)  # nothing submitted: the writer asks which server it is on
    assert _batches(journal_url, "run-dead") == [0, 1, 2] and not path.exists()
    assert w.stats().rejournaled == 3
    assert w.close()


BAD_HEADERS = {
    "not JSON": b"garbage\n",
    "not an object": b"[1]\n",
    "no server": b'{"at": 1700000000.0}\n',
    "not UTF-8": b'{"server": "\xff"}\n',
    "cut short": b'{"server": "17000',
}


@pytest.mark.parametrize("header", BAD_HEADERS.values(), ids=BAD_HEADERS.keys())
def test_a_segment_whose_header_cannot_be_read_is_set_aside_and_named(
        journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        header: bytes) -> None:
    spool = tmp_path / "spool"
    dead = _run("run-dead", 2)
    lines = [] if not header.endswith(b"\n") else [_e(dead[0]), *map(_p, dead[1:])]
    path = _dead_segment(spool, lines, header=header)
    content = path.read_bytes()
    w = _writer(journal_url, spool)
    w.start()
    for ev in _run("run-new", 1):
        w.submit(ev)
    assert w.flush(timeout=20) and w.alive
    assert not path.exists()
    (aside,) = spool.glob("rejected-*")  # kept for an operator to look at, as it was
    assert aside.name == f"rejected-{path.name}" and aside.read_bytes() == content
    assert _said(caplog, path.name, aside.name), caplog.text
    assert w.stats().unprotected == len(lines)
    assert w.close()
    assert _batches(journal_url, "run-dead") == []  # the server it was journaled on: unknown

    caplog.clear()  # the next writer on the directory leaves it alone, and says nothing
    again = _writer(journal_url, spool)
    again.start()
    assert again.flush(timeout=20) and again.close()
    assert aside.read_bytes() == content and not _said(caplog, path.name)
    if lines:  # an operator's way back (docs/operations.md): a header, and its name
        path.write_bytes(b'{"server": "unknown"}\n' + content.split(b"\n", 1)[1])
        aside.unlink()
        third = _writer(journal_url, spool)
        third.start()
        assert third.flush(timeout=20) and third.close()
        assert _batches(journal_url, "run-dead") == [0, 1] and not path.exists()


def test_flush_waits_while_a_dead_drivers_segment_cannot_go_to_the_spool(
        journal_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = tmp_path / "spool"
    dead = _run("run-dead", 2)
    path = _dead_segment(spool, [_e(dead[0]), *map(_p, dead[1:])])
    w = _writer(journal_url, spool)

    def unusable(events: list[dict[str, Any]]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(w, "_rejournal", unusable)  # the spool cannot take them
    w.start()
    for ev in _run("run-new", 1):
        w.submit(ev)
    assert w.flush(timeout=2) is False
    assert path.exists() and w.alive and _batches(journal_url, "run-new") == [0]
    monkeypatch.undo()
    assert w.flush(timeout=20)
    assert _batches(journal_url, "run-dead") == [0, 1] and not path.exists()
    assert w.close()


# --------------------------------------------------------------------------- item 10


def _on_disk(spool: Path) -> tuple[int, list[bytes]]:
    """The window's bytes on disk and its event lines (headers left out)."""
    size, lines = 0, []
    for path in spool.glob("recent-*.jsonl"):
        data = path.read_bytes()
        size += len(data)
        lines += data.splitlines()[1:]
    return size, lines


def test_the_window_stays_within_its_cap_on_disk_and_counts_what_it_drops(
        journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A window of an hour (a segment would last half an hour) and a cap of 32 KiB: 150
    batches of about 520 bytes pass it within seconds."""
    cap = 32 * 1024
    spool = tmp_path / "spool"
    w = _writer(journal_url, spool, failover_window=3600.0, failover_window_max_bytes=cap)
    w.start()
    events = _run("run-cap", 150)
    largest = 0
    for lo in range(0, len(events), 10):
        for ev in events[lo:lo + 10]:
            w.submit(ev)
        assert w.flush(timeout=20)
        largest = max(largest, _on_disk(spool)[0])
    assert largest <= cap
    stats = w.stats()
    assert stats.journaled == 150 and stats.unprotected > 0
    # every event is either kept or counted; the ones kept are the newest
    _size, lines = _on_disk(spool)
    assert len(lines) + stats.unprotected == len(events)
    newest = [_p(ev)[:-1] for ev in events[-len(lines):]]
    assert sorted(lines) == sorted(newest)
    assert _said(caplog, "failover window", "is full"), caplog.text
    assert w.close()
