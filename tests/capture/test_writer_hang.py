"""A journal database that hangs (the connection stays open, nothing
answers: a black-holed network, a stuck pooler) neither holds the writer for good nor
loses the batch it was writing when the interpreter exits."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from offset_journal.capture.writer import Writer, WriterConfig
from tests.payloads import kafka_source, progress, sql_rows

ROOT = Path(__file__).resolve().parents[2]


class FreezingProxy:
    """A TCP proxy to the test database's Unix socket that, once frozen, keeps every
    connection open and forwards nothing more, in either direction (new connections
    are accepted, and hang the same way)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.frozen = threading.Event()
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX)
            up.connect(self.upstream)
            self._socks += [client, up]
            for src, dst in ((client, up), (up, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                while self.frozen.is_set():
                    time.sleep(0.05)
                dst.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.server.close()
        for s in self._socks:
            s.close()


def _proxied_url(url: str, port: int) -> str:
    u = sa.engine.make_url(url)
    return u.set(host="127.0.0.1", port=port, query={}).render_as_string(hide_password=False)


@pytest.fixture
def proxy(journal_url: str) -> Iterator[tuple[FreezingProxy, str]]:
    u = sa.engine.make_url(journal_url)
    host = u.query.get("host") or u.host
    assert isinstance(host, str) and host.startswith("/"), "expects a Unix-socket server"
    p = FreezingProxy(os.path.join(host, f".s.PGSQL.{u.port or 5432}"))
    try:
        yield p, _proxied_url(journal_url, p.port)
    finally:
        p.frozen.clear()
        p.close()


def _events(run: str, first: int, n: int) -> list[dict]:
    return [{"type": "progress", "json": progress(
        i, run_id=run, query_id="q", name="hang",
        timestamp=f"2024-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
        sources=[kafka_source("t", {"t": {"0": i}}, {"t": {"0": i + 1}})])}
        for i in range(first, first + n)]


def _batches(url: str, run: str) -> list[int]:
    return [r[0] for r in sql_rows(
        url, "select batch_id from offset_journal.batches where run_id = :r order by 1", r=run)]


def test_a_hanging_database_turns_into_a_spooled_outage_in_bounded_time(
        journal_url: str, proxy: tuple[FreezingProxy, str], tmp_path: Path) -> None:
    p, url = proxy
    spool = str(tmp_path / "spool")
    w = Writer(WriterConfig(url, spool, connect_timeout=1, call_timeout=2.0,
                            retry_initial=0.2, retry_max=0.5))
    w.start()
    for ev in _events("run-h", 0, 3):
        w.submit(ev)
    assert w.flush(timeout=30) is True
    p.frozen.set()
    for ev in _events("run-h", 3, 5):
        w.submit(ev)
    t0 = time.monotonic()
    assert w.flush(timeout=30, to_database=False) is True  # durable: spooled
    assert time.monotonic() - t0 < 15
    assert w.stats().spooled >= 5 and w.stats().lost == 0
    w.close(timeout=1)
    w._thread.join(10)  # its last retry (on the frozen proxy) holds the spool file
    assert not w.alive
    replay = Writer(WriterConfig(journal_url, spool))
    replay.start()
    assert replay.flush(timeout=30) is True
    replay.close()
    assert _batches(journal_url, "run-h") == list(range(8))


_DRIVER = textwrap.dedent("""
    import json, os, sys, time
    from types import SimpleNamespace
    from offset_journal import OffsetJournalListener

    url, spool, ready, frozen = sys.argv[1:]
    listener = OffsetJournalListener(url, spool_dir=spool, exit_flush_timeout=2.0)
    listener.start()

    all_events = [json.loads(line) for line in open(os.environ["EVENTS"])]
    for ev in all_events[:3]:
        listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=ev["json"])))
    assert listener.flush(30)
    open(ready, "w").close()
    while not os.path.exists(frozen):
        time.sleep(0.05)
    for ev in all_events[3:]:
        listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=ev["json"])))
    time.sleep(1.0)  # the writer has taken a batch and waits on the database
    print(json.dumps(listener.stats().__dict__))
""")


def test_interpreter_exit_with_a_hanging_database_keeps_every_event(
        journal_url: str, proxy: tuple[FreezingProxy, str], tmp_path: Path) -> None:
    import json

    p, url = proxy
    spool = tmp_path / "spool"
    events = _events("run-x", 0, 150)
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    ready, frozen = tmp_path / "ready", tmp_path / "frozen"
    env = dict(os.environ, EVENTS=str(tmp_path / "events.jsonl"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, str(script), url, str(spool), str(ready),
                             str(frozen)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.communicate(timeout=10)
        p.frozen.set()
        frozen.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "in flight" in err  # said, not silent
    assert _batches(journal_url, "run-x") == [0, 1, 2]
    spooled = {json.loads(json.loads(line)["json"])["batchId"]
               for f in spool.glob("spool-*.jsonl") for line in f.read_text().splitlines()}
    assert spooled == set(range(3, 150))
    # The next driver journals them.
    replay = Writer(WriterConfig(journal_url, str(spool)))
    replay.start()
    assert replay.flush(timeout=60) is True
    replay.close()
    assert _batches(journal_url, "run-x") == list(range(150))


def test_close_while_the_database_hangs_leaves_every_event_on_disk(
        journal_url: str, proxy: tuple[FreezingProxy, str], tmp_path: Path) -> None:
    import json

    p, url = proxy
    spool = tmp_path / "spool"
    w = Writer(WriterConfig(url, str(spool), call_timeout=60.0))
    w.start()
    w.submit(_events("run-c", 0, 1)[0])
    assert w.flush(timeout=30) is True
    p.frozen.set()
    for ev in _events("run-c", 1, 5):
        w.submit(ev)
    time.sleep(0.5)  # the writer has taken them and waits on the database
    assert w.close(timeout=1) is False
    spooled = {json.loads(json.loads(line)["json"])["batchId"]
               for f in spool.glob("spool-*.jsonl") for line in f.read_text().splitlines()}
    assert spooled == {1, 2, 3, 4, 5}
    assert w.stats().lost == 0
