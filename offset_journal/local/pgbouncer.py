"""A real PgBouncer in front of a Postgres, on loopback: Debian's ``pgbouncer`` package,
started as a process of this one (tests, benchmarks).

The journal's fleet advice is "put PgBouncer in transaction mode in front"; this is how
the tests prove that the writer, the planner and every command work through one.
Transaction mode hands each transaction of a client to whichever server connection is
free, so nothing may live in a session: startup ``options``, ``SET``, server-side
prepared statements (see :func:`offset_journal.journal.db.make_engine`).

Only PgBouncer's own defaults apply unless ``settings`` says otherwise (its
``ignore_startup_parameters`` is empty, as on a fresh install): what works here works
on an untuned PgBouncer.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from ..errors import ConfigError

PGBOUNCER = os.environ.get("OFFSET_JOURNAL_PGBOUNCER", "/usr/sbin/pgbouncer")
_START_TIMEOUT_S = 30.0


def pgbouncer_binary() -> str | None:
    """Debian's pgbouncer (OFFSET_JOURNAL_PGBOUNCER, /usr/sbin, or PATH), if installed."""
    if os.access(PGBOUNCER, os.X_OK):
        return PGBOUNCER
    return shutil.which("pgbouncer")


@dataclass
class PgBouncer:
    """A running PgBouncer: ``url_for`` gives a database URL that goes through it."""

    port: int
    workdir: Path
    process: subprocess.Popen[bytes]
    pool_size: int
    pool_mode: str

    def url_for(self, url: str) -> str:
        """``url`` (a database on the server behind) as reached through this pooler."""
        parsed = sa.engine.make_url(url)
        query = {k: v for k, v in parsed.query.items() if k != "host"}
        return parsed.set(host="127.0.0.1", port=self.port, query=query) \
            .render_as_string(hide_password=False)

    def repoint(self, server_url: str) -> None:
        """Send new server connections to another Postgres (as after a failover, when
        the pooler's host name moves): the configuration rewritten, then reloaded
        (SIGHUP). Its clients stay connected."""
        ini = self.workdir / "pgbouncer.ini"
        backend, _user = _backend(server_url)
        ini.write_text("".join(f"* = {backend}\n" if line.startswith("* = ") else line
                               for line in ini.read_text().splitlines(keepends=True)))
        self.process.send_signal(signal.SIGHUP)

    def log(self) -> str:
        path = self.workdir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _backend(url: str) -> tuple[str, str]:
    """The [databases] fallback line's connection settings and the role that logs in."""
    parsed = sa.engine.make_url(url)
    host = parsed.query.get("host") or parsed.host or "127.0.0.1"
    if isinstance(host, tuple):
        host = host[0]
    parts = [f"host={host}", f"port={parsed.port or 5432}"]
    user = parsed.username or "postgres"
    parts.append(f"user={user}")
    if parsed.password:
        parts.append(f"password={parsed.password}")
    return " ".join(parts), user


def _run_as(host: str) -> str | None:
    """PgBouncer refuses to run as root: run it as the owner of the server's socket
    directory (which it must enter), or nobody."""
    if os.geteuid() != 0:
        return None
    if host.startswith("/"):
        import pwd

        return pwd.getpwuid(os.stat(host).st_uid).pw_name
    return "nobody"


def _config(backend: str, port: int, workdir: Path, user: str, pool_size: int,
            pool_mode: str, settings: dict[str, str]) -> str:
    lines = ["[databases]", f"* = {backend}", "", "[pgbouncer]",
             "listen_addr = 127.0.0.1", f"listen_port = {port}", "unix_socket_dir =",
             "auth_type = trust", f"auth_file = {workdir / 'users.txt'}",
             f"pool_mode = {pool_mode}", f"default_pool_size = {pool_size}",
             "max_client_conn = 1000", f"logfile = {workdir / 'pgbouncer.log'}",
             f"pidfile = {workdir / 'pgbouncer.pid'}"]
    lines += [f"{key} = {value}" for key, value in settings.items()]
    (workdir / "users.txt").write_text(f'"{user}" ""\n')
    return "\n".join(lines) + "\n"


def start_pgbouncer(server_url: str, *, pool_size: int = 3, pool_mode: str = "transaction",
                    settings: dict[str, str] | None = None) -> PgBouncer:
    """Start PgBouncer on a free loopback port in front of the server of ``server_url``
    (every database on it, as the URL's role), ``pool_size`` server connections per
    database and role. Raises ConfigError when pgbouncer is not installed."""
    binary = pgbouncer_binary()
    if binary is None:
        raise ConfigError("PgBouncer is not installed (Debian: apt-get install -y pgbouncer)")
    backend, user = _backend(server_url)
    host = backend.split()[0].removeprefix("host=")
    workdir = Path(tempfile.mkdtemp(prefix="oj-pgbouncer-"))
    port = _free_port()
    (workdir / "pgbouncer.ini").write_text(
        _config(backend, port, workdir, user, pool_size, pool_mode, settings or {}))
    run_as = _run_as(host)
    if run_as is not None:
        with open(workdir / "pgbouncer.ini", "a") as ini:
            ini.write(f"user = {run_as}\n")
        shutil.chown(workdir, run_as)
        for child in workdir.iterdir():
            shutil.chown(child, run_as)
    process = subprocess.Popen([binary, str(workdir / "pgbouncer.ini")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bouncer = PgBouncer(port, workdir, process, pool_size, pool_mode)
    _wait_listening(bouncer)
    return bouncer


def _wait_listening(bouncer: PgBouncer) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if bouncer.process.poll() is not None:
            log = bouncer.log()
            bouncer.stop()
            raise ConfigError(f"pgbouncer exited at start: {log.strip()[-500:]}")
        try:
            with socket.create_connection(("127.0.0.1", bouncer.port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    bouncer.stop()
    raise ConfigError(f"pgbouncer did not listen on 127.0.0.1:{bouncer.port} "
                      f"within {_START_TIMEOUT_S:.0f} s")
