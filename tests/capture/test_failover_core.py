"""A failover of the journal's database, the parts that need no server: libpq's
multi-host URLs, the server's identity and its guard, the failover window on disk,
and spooling ahead of what waits."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from offset_journal import redact
from offset_journal.capture._recent import RecentWindow
from offset_journal.capture._spool import Spool, default_spool_dir
from offset_journal.capture.writer import Fault, _Standby, classify_error
from offset_journal.errors import ConfigError
from offset_journal.journal.db import make_engine, resolve_url, writable_url
from offset_journal.journal.server import ServerIdentity, server_changed

# --------------------------------------------------------------------------- URLs


def _connect_args(url: str) -> dict[str, object]:
    engine = make_engine(url)
    try:
        args = engine.dialect.create_connect_args(engine.url)[1]
    finally:
        engine.dispose()
    return {k: v for k, v in args.items() if k in ("host", "port", "dbname", "user",
                                                      "password", "target_session_attrs")}


@pytest.mark.parametrize(("url", "hosts", "ports"), [
    ("postgresql://u:s3cret@h1:5432,h2:5433/db?target_session_attrs=read-write",
     "h1,h2", "5432,5433"),
    ("postgres://u:s3cret@h1,h2:6432/db", "h1,h2", ",6432"),
    ("postgresql://u:s3cret@[::1]:5432,10.0.0.2:5432/db", "::1,10.0.0.2", "5432,5432"),
])
def test_libpq_multi_host_urls_reach_the_driver_as_libpq_lists(url, hosts, ports):
    args = _connect_args(url)
    assert (args["host"], args["port"], args["dbname"], args["user"], args["password"]) == (
        hosts, ports, "db", "u", "s3cret")
    assert "s3cret" not in redact(url) and hosts.split(",")[1] in redact(url)
    # the same database as the query-string spelling: the same spool directory
    query_form = "postgresql://u:s3cret@/db?host=h1:5432&host=h2:5433"
    if url.startswith("postgresql://u:s3cret@h1:5432,"):
        assert default_spool_dir(resolve_url(url.partition("?")[0])) == \
            default_spool_dir(resolve_url(query_form))


@pytest.mark.parametrize("url", [
    "postgresql://u@h1:5432,:5433/db", "postgresql://u@h1:x,h2/db",
    "postgresql://u@h1,h2/db?host=h3", "postgresql://u@[::1,h2/db",
    "postgresql://u@h1:99999,h2/db", "postgresql://u@h1,[::1]x/db",
])
def test_a_malformed_multi_host_url_is_one_clear_error(url):
    with pytest.raises(ConfigError, match="malformed database URL"):
        resolve_url(url)


@pytest.mark.parametrize("url", [
    "postgresql://u:p@h1,\nh2/db",          # was one host, h1
    "postgresql://u:p@h1\n,h2/db",          # was one host, h1
    "postgresql://u:p@h1:5432,h2\n:5433/db",
    "postgresql://u:p@h1\nh2/db",
    "postgresql://u:p@h1,h2/db?x=1\n",       # the hosts were lost behind the line break
    "postgresql://u:p@/db?host=h1%0Ah2&host=h3",
    "postgresql://u:p@h1,h2/db\t",
])
def test_a_line_break_in_a_url_is_refused_not_read_as_fewer_hosts(url):
    with pytest.raises(ConfigError, match="malformed database URL: a line break") as info:
        resolve_url(url)
    assert "\n" not in str(info.value) and ":p@" not in str(info.value)


@pytest.mark.parametrize("url", [
    "postgresql://u:p@/db?host=&host=h2",    # libpq reads '' as the local socket
    "postgresql://u:p@/db?host=h1&host=",
    "postgresql://u:p@/db?host=h1,,h2",
    "postgresql://u:p@/db?host=",
])
def test_an_empty_host_is_refused_not_dropped(url):
    with pytest.raises(ConfigError, match="malformed database URL: an empty host"):
        resolve_url(url)


def test_the_writer_asks_a_multi_host_url_for_the_host_that_takes_writes():
    assert "target_session_attrs=read-write" in writable_url("postgresql://u@h1,h2/db")
    assert "target_session_attrs=any" in writable_url(
        "postgresql://u@h1,h2/db?target_session_attrs=any")
    assert "target_session_attrs" not in writable_url("postgresql://u@h1:5432/db")


# --------------------------------------------------------------------------- the server


def test_the_server_and_the_guard_against_another():
    server = ServerIdentity("1795645938765603/00000002")  # started 2026-11-25 22:32:18
    assert not server.in_recovery and "timeline 2" in server.describe()
    assert "2026-11-25 22:32:18+00:00" in server.describe()
    assert server.started_at == "1795645938765603"
    assert ServerIdentity("1795645938000000/recovery").in_recovery
    refused = ('unrecognized configuration parameter "offset-journal: not the server '
               'written to before"')
    assert server_changed(RuntimeError(refused))
    assert not server_changed(RuntimeError('unrecognized configuration parameter "x"'))
    # an outage, never the event's fault (it would go to rejected_events)
    assert classify_error(RuntimeError(refused)) is Fault.OUTAGE
    assert classify_error(_Standby("a standby")) is Fault.OUTAGE


# --------------------------------------------------------------------------- the window


def _ev(i: int) -> dict[str, object]:
    return {"type": "progress", "json": f'{{"batchId": {i}}}'}


def test_the_window_lets_go_only_of_what_the_same_server_outlived(tmp_path):
    window = RecentWindow(tmp_path, seconds=10)
    kept: list[list[dict[str, object]]] = []
    window.append([_ev(0), _ev(1)], "A", now=100.0)
    window.append([_ev(2)], "A", now=104.0)
    assert window.check("A", kept.append, now=110.0) == 0
    assert window.holding() and window.due() == 114.0  # the newest is 6 s old
    window.append([_ev(3)], "A", now=106.0)  # a new segment (every seconds / 2)
    assert window.check("A", kept.append, now=114.5) == 0
    assert window.holding() and window.due() == 116.0  # the first segment went
    # Another server: what the window holds goes to keep(), oldest first, and only it.
    window.append([_ev(4)], "A", now=115.0)
    assert window.check("B", kept.append, now=115.5) == 2
    assert kept == [[_ev(3), _ev(4)]] and not window.holding()
    assert not list(tmp_path.glob("recent-*"))


def test_what_a_dead_process_left_is_journaled_again_on_another_server(tmp_path):
    dead = RecentWindow(tmp_path, seconds=10)
    dead.append([_ev(0), _ev(1)], "A")
    dead.close()  # its process is gone: the segment is no one's
    same = RecentWindow(tmp_path, seconds=10)
    kept: list[list[dict[str, object]]] = []
    assert same.check("A", kept.append) == 0 and len(list(tmp_path.glob("recent-*"))) == 1
    later = RecentWindow(tmp_path, seconds=10)  # a later start finds it safe
    os.utime(next(tmp_path.glob("recent-*")), (time.time() - 20, time.time() - 20))
    assert later.check("A", kept.append) == 0 and not list(tmp_path.glob("recent-*"))

    dead = RecentWindow(tmp_path, seconds=10)
    dead.append([_ev(2)], "A")
    dead.close()
    other = RecentWindow(tmp_path, seconds=10)
    assert other.check("B", kept.append) == 1 and kept == [[_ev(2)]]


def test_a_full_window_drops_its_oldest_segment_and_says_so(tmp_path, caplog):
    window = RecentWindow(tmp_path, seconds=10, max_bytes=80)
    window.append([_ev(i) for i in range(3)], "A", now=100.0)
    window.append([_ev(i) for i in range(3, 6)], "A", now=106.0)
    assert window.dropped == 3 and "failover window" in caplog.text
    kept: list[list[dict[str, object]]] = []
    window.check("B", kept.append, now=107.0)
    assert kept == [[_ev(i) for i in range(3, 6)]]


def test_events_put_first_are_replayed_before_what_was_spooled(tmp_path):
    spool = Spool(tmp_path)
    spool.append([_ev(10), _ev(11)])
    time.sleep(0.01)
    spool.append_first([_ev(1), _ev(2)])
    spool.append([_ev(12)])
    seen: list[dict[str, object]] = []
    spool.replay(seen.extend)
    assert seen == [_ev(1), _ev(2), _ev(10), _ev(11), _ev(12)]
    assert not spool.pending() and Path(tmp_path).is_dir()


def test_a_disk_error_in_the_window_never_raises_and_counts_what_it_cannot_keep(
        tmp_path, caplog):
    window = RecentWindow(tmp_path, seconds=10)
    window.append([_ev(0), _ev(1)], "A", now=100.0)
    (segment,) = window._own
    segment.file.close()
    segment.file = open("/dev/full", "a", encoding="utf-8")  # noqa: SIM115 - a full disk
    window.append([_ev(2)], "A", now=101.0)  # its segment is given up, and said so
    assert window.unprotected == 3 and not window.holding()
    assert not list(tmp_path.glob("recent-*")) and "failover window" in caplog.text
    window.append([_ev(3)], "A", now=102.0)  # a new segment: the disk is back
    assert window.unprotected == 3 and window.holding()
    window.close()

    caplog.clear()
    (tmp_path / "file").write_text("")
    nowhere = RecentWindow(tmp_path / "file" / "spool", seconds=10)  # no directory there
    for i in range(3):
        nowhere.append([_ev(i)], "A")
    assert nowhere.unprotected == 3 and not nowhere.holding()
    assert len([r for r in caplog.records if "failover window" in r.getMessage()]) == 1
    assert nowhere.check("B", lambda events: None) == 0
    nowhere.close()


def test_a_full_window_counts_what_it_drops_as_unprotected(tmp_path):
    window = RecentWindow(tmp_path, seconds=10, max_bytes=80)
    window.append([_ev(i) for i in range(3)], "A", now=100.0)
    window.append([_ev(i) for i in range(3, 6)], "A", now=106.0)
    assert window.unprotected == window.dropped == 3


def test_on_another_server_a_dead_process_segments_go_first_at_once(tmp_path):
    """Another server found: the segments a dead driver left are handed over with this
    process's own, oldest first, not up to seconds / 2 later after newer events."""
    now = time.time()
    dead = RecentWindow(tmp_path, seconds=60)
    dead.append([_ev(0), _ev(1)], "A", now=now - 2)
    dead.close()
    os.utime(next(tmp_path.glob("recent-*")), (now - 2, now - 2))
    window = RecentWindow(tmp_path, seconds=60)
    kept: list[list[dict[str, object]]] = []
    assert window.check("A", kept.append, now=now) == 0  # the same server: kept there
    window.append([_ev(2)], "A", now=now + 1)
    assert window.check("B", kept.append, now=now + 2) == 3
    assert kept == [[_ev(0), _ev(1), _ev(2)]] and not list(tmp_path.glob("recent-*"))


# ---------------------------------------------------------------------------


def _disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("recent-*.jsonl"))


def test_the_cap_holds_for_the_bytes_on_disk_and_the_newest_are_kept(tmp_path, caplog):
    """A window of an hour (a segment would last half an hour) capped at 32 KiB; events
    of about 430 bytes on disk, 2 bytes a character in their padding (UTF-8)."""
    cap = 32 * 1024
    window = RecentWindow(tmp_path, seconds=3600, max_bytes=cap)
    events = [{"type": "progress", "json": json.dumps({"batchId": i, "pad": "é" * 200},
                                                      ensure_ascii=False)} for i in range(300)]
    for i in range(200):
        window.append([events[i]], "A", now=100.0 + i)
        assert _disk(tmp_path) <= cap
    window.append(events[200:], "A", now=400.0)  # one transaction of 43 KB: past the cap
    assert _disk(tmp_path) <= cap
    assert window.unprotected == window.dropped > 0
    kept: list[list[dict[str, object]]] = []
    window.check("B", kept.append, now=401.0)
    handed = [e for some in kept for e in some]
    assert handed == events[-len(handed):] and len(handed) + window.dropped == 300
    assert len([r for r in caplog.records if "is full" in r.getMessage()]) == 1  # not a flood

    # an event alone past the cap is not kept, and costs the others nothing
    tiny = RecentWindow(tmp_path / "tiny", seconds=60, max_bytes=1000)
    tiny.append([_ev(0)], "A")
    tiny.append([{"type": "progress", "json": json.dumps({"pad": "x" * 2000})}], "A")
    assert 0 < _disk(tmp_path / "tiny") <= 1000 and tiny.unprotected == tiny.dropped == 1
    kept.clear()
    assert tiny.check("B", kept.append) == 1 and kept == [[_ev(0)]]


def test_a_segment_keep_refuses_is_set_aside_and_the_others_go_in_order(tmp_path, caplog):
    """keep() refusing the lot for something one segment holds (not a disk error): each
    segment alone, the refused one set aside and named, the rest replayed in order."""
    now = time.time()
    for events, age in (([_ev(0), _ev(1)], 3), ([_ev(99)], 2)):
        dead = RecentWindow(tmp_path, seconds=60)
        dead.append(events, "A", now=now - age)
        dead.close()
        for path in tmp_path.glob("recent-*"):
            if path.stat().st_mtime > now - 1:
                os.utime(path, (now - age, now - age))
    window = RecentWindow(tmp_path, seconds=60)
    window.append([_ev(2)], "A", now=now - 1)
    spool = Spool(tmp_path / "spool")

    def keep(events: list[dict[str, object]]) -> None:
        if _ev(99) in events:
            raise ValueError("cannot take this one")
        spool.append_first(events)

    assert window.check("B", keep, now=now) == 3
    (aside,) = tmp_path.glob("rejected-recent-*")
    assert aside.read_text().splitlines()[1:] == ['P{"batchId": 99}']
    assert aside.name.removeprefix("rejected-") in caplog.text and "ValueError" in caplog.text
    assert not list(tmp_path.glob("recent-*")) and window.unprotected == 1
    seen: list[dict[str, object]] = []
    spool.replay(seen.extend)
    assert seen == [_ev(0), _ev(1), _ev(2)]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "1MB", True])
def test_a_failover_window_max_bytes_that_is_no_byte_count_is_refused(bad):
    from offset_journal.capture.listener import OffsetJournalListener

    with pytest.raises(ConfigError, match="failover_window_max_bytes"):
        OffsetJournalListener("postgresql://u@h/db", failover_window_max_bytes=bad)


def test_a_dead_segment_with_no_header_is_set_aside_and_an_empty_one_deleted(tmp_path, caplog):
    """Found on the same server too (retiring, not handing over): neither kept to be
    looked at again nor deleted unsaid, but an empty file holds nothing to look at."""
    (tmp_path / "recent-dead-1-1-aaaaaaaa.jsonl").write_bytes(b"")
    (tmp_path / "recent-dead-1-2-bbbbbbbb.jsonl").write_bytes(b"\x00\x01\n" + b'P{"batchId": 0}\n')
    window = RecentWindow(tmp_path, seconds=10)
    assert window.check("A", lambda events: None) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rejected-recent-dead-1-2-bbbbbbbb.jsonl"]
    assert "recent-dead-1-2-bbbbbbbb.jsonl" in caplog.text and window.unprotected == 1
