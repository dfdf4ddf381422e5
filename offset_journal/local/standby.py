"""A primary and its streaming standbys on loopback, from pgserver's PostgreSQL binaries
(or those in OFFSET_JOURNAL_PG_BIN), started as processes of this one (tests,
benchmarks): a journal's database that fails over for real.

:func:`init_cluster` makes a data directory once (initdb); :func:`start_primary` runs
a copy of it; :func:`start_standby` makes a standby of a running primary with
``pg_basebackup`` (asynchronous streaming replication, through ``upstream_port`` when
a proxy is to hold it behind); :meth:`LocalPostgres.kill` SIGKILLs a server's
processes all at once, as a machine that dies; :meth:`LocalPostgres.promote` is
``pg_ctl promote``. As root, the servers run as pgserver's system user.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from ..errors import ConfigError

ENV_BIN = "OFFSET_JOURNAL_PG_BIN"
_RUN_AS = "pgserver"  # the system user pgserver itself runs Postgres as, under root
_WAIT_S = 60.0

SETTINGS = {
    "listen_addresses": "'127.0.0.1'", "unix_socket_directories": "''",
    "shared_buffers": "'16MB'", "max_connections": "60", "wal_level": "replica",
    "max_wal_senders": "6", "wal_keep_size": "'128MB'", "logging_collector": "off",
    # a standby asks its primary again 100 ms after losing it (default 5 s), and a
    # promoted one answers writes at once
    "wal_retrieve_retry_interval": "'100ms'", "wal_receiver_status_interval": "'1s'",
    "hot_standby": "on", "fsync": "off", "full_page_writes": "off",
}
"""The servers' settings. ``fsync = off``: every failover here kills processes, never
the machine, and the page cache keeps what they wrote."""


def bin_dir() -> Path:
    given = os.environ.get(ENV_BIN)
    if given:
        return Path(given)
    try:
        from pgserver._commands import POSTGRES_BIN_PATH
    except ImportError:
        raise ConfigError("no PostgreSQL binaries: install pgserver (the 'embedded' extra) "
                          f"or set {ENV_BIN}") from None
    return Path(POSTGRES_BIN_PATH)


def _run_as() -> str | None:
    """Postgres refuses to run as root: then as pgserver's own user (made if missing)."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam(_RUN_AS)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/false", _RUN_AS], check=True,
                       capture_output=True)
    return _RUN_AS


def _run(*args: str | Path, timeout: float = _WAIT_S) -> str:
    tool = bin_dir() / str(args[0])
    done = subprocess.run([str(tool), *map(str, args[1:])], user=_run_as(),
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise ConfigError(f"{args[0]} failed ({done.returncode}): "
                          f"{(done.stderr or done.stdout).strip()[-800:]}")
    return done.stdout


def _own(path: Path) -> None:
    user = _run_as()
    if user is not None:
        shutil.chown(path, user, user)
        for child in path.rglob("*"):
            with contextlib.suppress(FileNotFoundError):
                shutil.chown(child, user, user)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _configure(datadir: Path, settings: dict[str, str]) -> None:
    with open(datadir / "postgresql.conf", "a", encoding="utf-8") as conf:
        conf.write("".join(f"{k} = {v}\n" for k, v in settings.items()))


@dataclass
class LocalPostgres:
    """One server: its data directory, loopback port and processes."""

    name: str
    datadir: Path
    port: int
    pids: list[int] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.datadir.parent / f"{self.name}.log"

    def url(self, database: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def engine(self, database: str = "postgres") -> sa.Engine:
        from ..journal.db import resolve_url

        return sa.create_engine(resolve_url(self.url(database)), poolclass=sa.pool.NullPool,
                                isolation_level="AUTOCOMMIT")

    def sql(self, statement: str, database: str = "postgres",
            **params: object) -> list[tuple[object, ...]]:
        """``statement`` (``:name`` parameters) as the superuser, in autocommit."""
        engine = self.engine(database)
        try:
            with engine.connect() as conn:
                result = conn.execute(sa.text(statement), params)
                return [tuple(r) for r in result] if result.returns_rows else []
        finally:
            engine.dispose()

    def start(self) -> None:
        _run("pg_ctl", "-D", self.datadir, "-l", self.log_path, "-w", "-t",
             str(int(_WAIT_S)), "start")
        self.pids = [int(Path(self.datadir / "postmaster.pid").read_text().split()[0])]

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server (``fast``: cleanly, for a data directory to copy)."""
        if (self.datadir / "postmaster.pid").exists():
            with contextlib.suppress(ConfigError, subprocess.TimeoutExpired):
                _run("pg_ctl", "-D", self.datadir, "-m", mode, "-w", "stop")

    def kill(self) -> None:
        """SIGKILL the postmaster and every process of it at once (a machine lost):
        nothing it had not sent yet reaches a standby."""
        import psutil

        procs = []
        for pid in self.pids:
            with contextlib.suppress(psutil.NoSuchProcess):
                parent = psutil.Process(pid)
                procs += [parent, *parent.children(recursive=True)]
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(procs, timeout=10)
        (self.datadir / "postmaster.pid").unlink(missing_ok=True)

    def promote(self) -> float:
        """``pg_ctl promote``, waiting until it takes writes; returns time.monotonic()
        when it did."""
        _run("pg_ctl", "-D", self.datadir, "-w", "-t", str(int(_WAIT_S)), "promote")
        return time.monotonic()

    def in_recovery(self) -> bool:
        return bool(self.sql("SELECT pg_is_in_recovery()")[0][0])

    def wal_lsn(self) -> str:
        """Where a primary's WAL is written to (pg_current_wal_lsn)."""
        return str(self.sql("SELECT pg_current_wal_lsn()")[0][0])

    def wait_replayed(self, lsn: str, timeout: float = _WAIT_S) -> None:
        """Until this standby has replayed the primary's WAL up to ``lsn``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sql("SELECT pg_last_wal_replay_lsn() >= CAST(:lsn AS pg_lsn)",
                        lsn=lsn)[0][0]:
                return
            time.sleep(0.05)
        raise ConfigError(f"standby {self.name} did not replay up to {lsn} in {timeout:.0f} s")


def init_cluster(workdir: Path, name: str = "template") -> Path:
    """A fresh data directory (initdb, trust on loopback, replication allowed), to copy
    for each primary: initdb is the slow part of starting one."""
    datadir = workdir / name
    _own(workdir)
    _run("initdb", "-D", datadir, "--auth=trust", "-U", "postgres", "-E", "UTF8",
         "--no-sync")
    _configure(datadir, SETTINGS)
    return datadir


def workdir() -> Path:
    """A directory for servers' data, that their system user may write in."""
    path = Path(tempfile.mkdtemp(prefix="oj-standby-"))
    _own(path)
    return path


def start_primary(template: Path, datadir: Path, *,
                  settings: dict[str, str] | None = None) -> LocalPostgres:
    """A primary on a free port, its data in ``datadir``: a copy of ``template``
    (init_cluster's, or a stopped primary's). Its standbys' data go next to it."""
    shutil.copytree(template, datadir, symlinks=True)
    (datadir / "postmaster.pid").unlink(missing_ok=True)
    _own(datadir)
    server = LocalPostgres(datadir.name, datadir, free_port())
    _configure(datadir, {"port": str(server.port), **(settings or {})})
    server.start()
    return server


def start_standby(primary: LocalPostgres, name: str = "standby", *,
                  upstream_port: int | None = None) -> LocalPostgres:
    """A streaming standby of ``primary`` (asynchronous unless the primary names it in
    synchronous_standby_names: its application_name is ``name``), streaming from
    ``upstream_port`` (a proxy in front of the primary) or the primary itself."""
    datadir = primary.datadir.parent / name
    _run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
         "-D", datadir, "--no-sync", "-c", "fast", "-X", "stream")
    server = LocalPostgres(name, datadir, free_port())
    conninfo = (f"host=127.0.0.1 port={upstream_port or primary.port} user=postgres "
                f"application_name={name}")
    _configure(datadir, {"port": str(server.port), "primary_conninfo": f"'{conninfo}'",
                         "synchronous_standby_names": "''"})
    (datadir / "standby.signal").touch()
    _own(datadir)
    server.start()
    return server


def make_synchronous(primary: LocalPostgres, standby: LocalPostgres) -> None:
    """Commits on ``primary`` wait until ``standby`` has flushed them
    (synchronous_commit = on, the default, with it as the synchronous standby)."""
    _configure(primary.datadir, {"synchronous_standby_names": f"'\"{standby.name}\"'"})
    primary.sql("SELECT pg_reload_conf()")
    deadline = time.monotonic() + _WAIT_S
    while time.monotonic() < deadline:
        if primary.sql("SELECT count(*) FROM pg_stat_replication WHERE application_name "
                       "= :name AND sync_state = 'sync'", name=standby.name)[0][0]:
            return
        time.sleep(0.05)
    raise ConfigError(f"standby {standby.name} did not become synchronous")


def multi_host_url(servers: list[LocalPostgres], database: str, user: str,
                   **options: str) -> str:
    """A libpq multi-host URL over ``servers``, in their order."""
    hosts = ",".join(f"127.0.0.1:{s.port}" for s in servers)
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"postgresql://{user}@{hosts}/{database}" + (f"?{query}" if query else "")


def journal_template(base: Path, writer: str = "oj_writer", database: str = "journal") -> Path:
    """A stopped primary's data directory under ``base`` with database ``database``,
    the journal migrated to head in it, and ``writer`` granted the writer's privileges
    (``db grant --writer``): what :class:`ServerSet` copies for each primary."""
    from ..journal.db import upgrade
    from ..journal.roles import grant, quote_ident

    setup = start_primary(init_cluster(base), base / "setup")
    try:
        setup.sql(f"CREATE ROLE {quote_ident(writer)} LOGIN")
        setup.sql(f"CREATE DATABASE {quote_ident(database)}")
        upgrade(setup.url(database))
        grant(setup.url(database), writer)
    finally:
        setup.stop("fast")
    return setup.datadir


class ServerSet:
    """Primaries (copies of a template) and their standbys, with the delaying proxies
    between them; :meth:`close` stops them all and removes their data."""

    def __init__(self, template: Path) -> None:
        self.template = template
        self.dir = Path(tempfile.mkdtemp(prefix="set-", dir=template.parent))
        _own(self.dir)
        self.servers: list[LocalPostgres] = []
        self.proxies: list[subprocess.Popen[bytes]] = []

    def primary(self, name: str = "primary", **settings: str) -> LocalPostgres:
        server = start_primary(self.template, self.dir / name, settings=settings)
        self.servers.append(server)
        return server

    def standby(self, primary: LocalPostgres, name: str = "standby", *,
                held_ms: float = 0) -> LocalPostgres:
        """A standby of ``primary``; with ``held_ms``, it streams through a proxy that
        holds every chunk that long (offset_journal.local.delay_proxy), lost with the
        primary (:meth:`lose`): so it lags, and loses what the proxy held."""
        upstream = None
        if held_ms:
            upstream = free_port()
            proxy = subprocess.Popen(
                [sys.executable, "-m", "offset_journal.local.delay_proxy", "--listen",
                 str(upstream), "--target", f"127.0.0.1:{primary.port}", "--rtt-ms",
                 str(2 * held_ms)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert proxy.stdout is not None
            if not proxy.stdout.readline().startswith(b"listening"):
                raise ConfigError("the delay proxy did not start")
            self.proxies.append(proxy)
        server = start_standby(primary, name, upstream_port=upstream)
        self.servers.append(server)
        return server

    def lose(self, primary: LocalPostgres) -> None:
        """The primary's machine is gone: its processes, and what the proxies held."""
        for proxy in self.proxies:
            proxy.kill()
        primary.kill()

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.kill()
            proxy.wait()
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
