"""A database that accepts the connection and then never answers (a
black-holed network, a stuck pooler) held `audit` and `report` until something outside
killed them. Every command has a client-side deadline (--timeout, $OFFSET_JOURNAL_TIMEOUT,
else 120 s) and says so in one line, exit 1.

The hung database here is real Postgres behind a proxy that forwards the connection's
start (TLS refusal, authentication, the first ReadyForQuery) and then nothing more, in
either direction; or a TCP endpoint that accepts and never says a word."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from offset_journal.cli._deadline import ENV_TIMEOUT
from offset_journal.journal.db import ENV_URL, upgrade
from offset_journal.local.services import PostgresServer
from tests.support import Cli, journal_report_runs, one_error_line

SCRIPT = Path(sys.executable).parent / "offset-journal"
READY_FOR_QUERY = b"Z\x00\x00\x00\x05"


class HangAfterConnect:
    """A TCP proxy to the test database's Unix socket: each connection is forwarded until
    the server has said ReadyForQuery once (the client is connected and authenticated),
    then nothing more is forwarded either way; the sockets stay open."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self.hung = threading.Event()  # set when a connection has been frozen
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
            frozen = threading.Event()
            threading.Thread(target=self._pump, args=(client, up, frozen, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(up, client, frozen, True),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, frozen: threading.Event,
              from_server: bool) -> None:
        try:
            while (data := src.recv(65536)) and not frozen.is_set():
                dst.sendall(data)
                if from_server and READY_FOR_QUERY in data:
                    frozen.set()
                    self.hung.set()
        except OSError:
            pass

    def close(self) -> None:
        self.server.close()
        for s in self._socks:
            s.close()


def _hung(proxy: HangAfterConnect, journal_url: str) -> str:
    """``journal_url`` through ``proxy``."""
    u = sa.engine.make_url(journal_url)
    return u.set(host="127.0.0.1", port=proxy.port, query={}).render_as_string(
        hide_password=False)


def _socket_of(journal_url: str) -> str:
    u = sa.engine.make_url(journal_url)
    host = u.query.get("host") or u.host
    assert isinstance(host, str) and host.startswith("/"), "expects a Unix-socket server"
    return os.path.join(host, f".s.PGSQL.{u.port or 5432}")


@pytest.fixture
def hung_url(journal_url: str) -> Iterator[tuple[HangAfterConnect, str]]:
    journal_report_runs(journal_url)
    proxy = HangAfterConnect(_socket_of(journal_url))
    try:
        yield proxy, _hung(proxy, journal_url)
    finally:
        proxy.close()


def _run(argv: list[str], **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """The console script, bounded: a command that ignores its deadline fails the test
    (TimeoutExpired) rather than hanging it."""
    full_env = {k: v for k, v in os.environ.items() if k not in (ENV_URL, ENV_TIMEOUT)}
    full_env.update(env)
    t0 = time.monotonic()
    done = subprocess.run([str(SCRIPT), *argv], capture_output=True, text=True, timeout=45,
                          env=full_env)
    return done, time.monotonic() - t0


DEADLINE = 4
"""Seconds: the hung commands' --timeout."""

COMMANDS = [
    ["runs"],
    ["history", "orders"],
    ["audit", "orders"],
    ["report", "orders", "--output", "{tmp}/r.html"],
    ["plan", "orders", "--no-record"],
    ["plan", "orders"],
    ["starting-offsets", "orders"],
    ["prune", "--before", "2024-01-01T00:20:00Z", "--dry-run"],
    ["rejected", "list"],
    ["db", "current"],
    ["db", "upgrade"],
    ["commit-group", "orders", "--group", "g", "--bootstrap-servers", "127.0.0.1:1",
     "--dry-run"],
]


@dataclass(frozen=True)
class GaveUp:
    """One command run against a database that hung after it connected."""

    done: subprocess.CompletedProcess[str]
    took: float
    connected_then_hung: bool
    wrote: bool


@pytest.fixture(scope="module")
def gave_up(journal_server: PostgresServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, GaveUp]]:
    """Every command of COMMANDS run once, four at a time, each through a hung proxy of
    its own: each waits out its deadline and the last resort's grace (about 9 s), and
    they wait together instead of one after the other. (The deadline counts from the
    command's start: :data:`DEADLINE` leaves room for four start-ups on two busy
    cores, where 2 s did not.)"""
    from concurrent.futures import ThreadPoolExecutor

    url = journal_server.create_database()
    upgrade(url)
    journal_report_runs(url)
    proxies = [HangAfterConnect(_socket_of(url)) for _ in COMMANDS]
    tmp = tmp_path_factory.mktemp("deadline")

    def one(i: int) -> GaveUp:
        args = [a.replace("{tmp}", str(tmp / str(i))) for a in COMMANDS[i]]
        (tmp / str(i)).mkdir()
        done, took = _run(["--database-url", _hung(proxies[i], url), "--timeout", str(DEADLINE),
                           *args])
        return GaveUp(done, took, proxies[i].hung.is_set(), any((tmp / str(i)).iterdir()))

    try:
        with ThreadPoolExecutor(4) as pool:
            yield dict(enumerate(pool.map(one, range(len(COMMANDS)))))
    finally:
        for proxy in proxies:
            proxy.close()
        journal_server.drop_database(url)


@pytest.mark.parametrize("index", range(len(COMMANDS)),
                         ids=[" ".join(a[:2]) for a in COMMANDS])
def test_every_command_gives_up_on_a_hung_database_in_one_line(
        gave_up: dict[int, GaveUp], index: int) -> None:
    run = gave_up[index]
    assert run.connected_then_hung  # it did connect, and then the database stopped answering
    line = one_error_line(run.done.returncode, run.done.stderr)
    assert run.done.returncode == 1 and f"no answer within {DEADLINE} s" in line \
        and "--timeout" in line
    assert run.took < DEADLINE + 10  # the deadline, the last resort's grace, and the start-up
    assert "password" not in run.done.stderr.lower()
    assert not run.wrote  # nothing half-written (the report's output)


def test_the_deadline_comes_from_the_environment_after_the_option(
        hung_url: tuple[HangAfterConnect, str]) -> None:
    _, url = hung_url
    done, took = _run(["--database-url", url, "audit", "orders"], **{ENV_TIMEOUT: "1.5"})
    assert "no answer within 1.5 s" in one_error_line(done.returncode, done.stderr)
    assert took < 1.5 + 10
    # the option after the subcommand wins over the environment
    done, _ = _run(["audit", "orders", "--database-url", url, "--timeout", "1"],
                   **{ENV_TIMEOUT: "30"})
    assert "no answer within 1 s" in one_error_line(done.returncode, done.stderr)


def test_an_endpoint_that_accepts_and_never_answers(tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        url = f"postgresql://u:secret@127.0.0.1:{server.getsockname()[1]}/d?connect_timeout=60"
        done, took = _run(["--database-url", url, "--timeout", "2", "report", "orders",
                           "--output", str(tmp_path / "r.html")])
        assert accepted  # the connection was open: only the deadline ended the wait
        assert "no answer within 2 s" in one_error_line(done.returncode, done.stderr)
        assert took < 2 + 10 and "secret" not in done.stderr
        assert not (tmp_path / "r.html").exists()
    finally:
        server.close()
        for s in accepted:
            s.close()


def test_a_bad_deadline_is_one_line(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    for argv in (["--timeout", "0", "runs"], ["runs", "--timeout", "nan"],
                 ["--timeout", "-1", "audit", "q"]):
        code, out, err = cli(*argv)
        assert code == 2 and out == "" and "timeout" in one_error_line(code, err)
    monkeypatch.setenv(ENV_TIMEOUT, "soon")
    code, _, err = cli("--database-url", "postgresql://u@127.0.0.1:1/d", "runs")
    assert code == 2 and ENV_TIMEOUT in one_error_line(code, err)


def test_a_command_that_answers_in_time_is_untouched(cli: Cli, journal_url: str) -> None:
    journal_report_runs(journal_url)
    code, out, err = cli("--database-url", journal_url, "--timeout", "30", "runs")
    assert code == 0 and "orders" in out and err == ""
    import signal

    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL  # the alarm is put back
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_state_commands_run_as_long_as_a_large_restore_needs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore or repartition writes a whole state through Spark (10^7 keys took about
    a minute here, before Spark's start): no default deadline, as for a savepoint; an
    asked one still holds."""
    from offset_journal.cli._deadline import DEFAULT_TIMEOUT, command_deadline

    monkeypatch.delenv(ENV_TIMEOUT, raising=False)
    assert command_deadline(None, "state") is None
    assert command_deadline(None, "savepoint") is None
    assert command_deadline(None, "audit") == DEFAULT_TIMEOUT
    assert command_deadline(30, "state") == 30.0
