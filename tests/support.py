"""Helpers the test modules share (no test here): journal and checkpoint builders,
a Postgres of a test's own, the command line in-process, the secured server."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import sqlalchemy as sa
from psycopg import sql as psql

from offset_journal.cli import main as cli_main
from offset_journal.journal import Journal
from offset_journal.journal.db import ENV_URL, resolve_url, upgrade
from offset_journal.records import RunRecord, batch_from_progress
from offset_journal.testing import KafkaCluster
from tests.payloads import kafka_source, progress, sql_rows

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


# --------------------------------------------------------------------------- journal data


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def journal_batches(url: str, payloads: Sequence[str]) -> None:
    journal = Journal(url)
    try:
        for p in payloads:
            assert journal.record_batch(batch_from_progress(p))
    finally:
        journal.close()


def ts(minutes: float) -> str:
    return at(minutes).isoformat().replace("+00:00", "Z")


def kafka_progress(batch_id: int, start: dict | None, end: dict, *, minute: float,
                   run_id: str = "run-a", query_id: str = "qid-a", topics: str = "orders",
                   event_time: dict | None = None, name: str = "orders") -> str:
    return progress(batch_id, sources=[kafka_source(topics, start, end)], name=name,
                    query_id=query_id, run_id=run_id, timestamp=ts(minute),
                    event_time=event_time)


def _offsets(base: int, step: int) -> dict:
    return {t: {str(p): base + step * (i * 3 + p + 1) for p in range(3)}
            for i, t in enumerate(("orders", "refunds"))}


def _event_time(minute: float) -> dict:
    return {"max": ts(minute - 0.5), "min": ts(minute - 2), "avg": ts(minute - 1),
            "watermark": ts(minute - 5)}


def journal_report_runs(url: str) -> None:
    """Query 'orders' for the report and dashboard tests, 2024-01-01 00:00 to 00:50 UTC.
    Two checkpoints: qid-a (runs a1, a2 with a gap inside a1) and qid-b (run b1, failed);
    lag grows on partition orders-2 in run a2 and drains in b1."""
    j = Journal(url)
    try:
        for run, qid, start, end, exc in (("a1", "qid-a", 0, 10, None),
                                          ("a2", "qid-a", 12, 30, None),
                                          ("b1", "qid-b", 32, 50, "boom")):
            j.record_run(RunRecord(qid, run, "orders", True, started_at=at(start),
                                   terminated_at=at(end), exception=exc))
        pos, batch = 0, 0
        for run, qid, minutes in (("a1", "qid-a", range(1, 10)), ("a2", "qid-a", range(13, 30)),
                                  ("b1", "qid-b", range(33, 50))):
            first = True
            for m in minutes:
                start = None if first else _offsets(pos, 1)
                if run == "a1" and m == 5:
                    start = _offsets(pos + 3, 1)  # a gap: flagged when written
                pos += 10
                end = _offsets(pos, 1)
                behind = {"a1": 0, "a2": (m - 12) * 40, "b1": max(0, 700 - (m - 33) * 60)}[run]
                latest = {t: {p: v + (behind if (t, p) == ("orders", "2") else int(p))
                              for p, v in ps.items()} for t, ps in end.items()}
                payload = json.loads(progress(
                    batch, name="orders", run_id=run, query_id=qid, timestamp=ts(m),
                    event_time=_event_time(m), rows=60 + m,
                    sources=[kafka_source("orders,refunds", start, end, latest)]))
                payload["batchDuration"] = 1000 + 10 * m
                payload["sources"][0]["metrics"] = {  # as Spark's connector reports them
                    "maxOffsetsBehindLatest": str(max(behind, 2)),
                    "minOffsetsBehindLatest": "0",
                    "avgOffsetsBehindLatest": str((behind + 1 + 0 + 1 + 2) / 6)}
                j.record_batch(batch_from_progress(payload))
                batch, first = batch + 1, False
    finally:
        j.close()


# --------------------------------------------------------------------------- checkpoints


def write_checkpoint(root: Path, query_id: str | None,
                     batches: Sequence[tuple[Sequence[Any], bool]], *,
                     initial: dict[str, Any] | None = None, start_ms: int = 1_704_067_200_000,
                     ) -> Path:
    """A checkpoint directory as Spark writes it (v1 offsets log), by hand.

    ``batches``: (per-source offsets, committed) for batch 0, 1, ...
    """
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    if query_id is not None:
        (root / "metadata").write_text(json.dumps({"id": query_id}))
    for i, (offsets, committed) in enumerate(batches):
        ms = start_ms + i * 60_000
        meta = {"batchWatermarkMs": ms, "batchTimestampMs": ms,
                "conf": {"spark.sql.shuffle.partitions": "2"}}
        lines = ["v1", json.dumps(meta)] + [
            "-" if o is None else json.dumps(o, separators=(",", ":")) for o in offsets
        ]
        (root / "offsets" / str(i)).write_text("\n".join(lines))
        if committed:
            (root / "commits" / str(i)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    if initial is not None:
        for sid, offsets in initial.items():
            (root / "sources" / sid).mkdir(parents=True)
            (root / "sources" / sid / "0").write_bytes(
                b"\x00v1\n" + json.dumps(offsets).encode())
    return root


# --------------------------------------------------------------------------- Kafka


def fill(cluster: KafkaCluster, topic: str, per_partition: dict[int, int]) -> None:
    """Create ``topic`` with 4 partitions and write ``n`` records to each given one.

    (The plugin's ``produce`` spreads records round-robin; exact per-partition counts
    make the watermarks predictable.)
    """
    if cluster.partitions(topic, timeout=5) == 0:
        cluster.create_topic(topic, 4)
    producer = cluster.producer()
    for partition, n in per_partition.items():
        for i in range(n):
            producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(30) == 0


# --------------------------------------------------------------------------- Postgres


@dataclass
class OwnPostgres:
    """A throwaway embedded Postgres (pgserver) that a test may stop and start again."""

    datadir: Path
    server: Any

    @classmethod
    def create(cls) -> OwnPostgres:
        import pgserver

        datadir = Path(tempfile.mkdtemp(prefix="oj-own-pg-"))
        return cls(datadir, pgserver.get_server(datadir, cleanup_mode="stop"))

    @property
    def admin_url(self) -> str:
        return str(self.server.get_uri())

    def url_for(self, database: str) -> str:
        url = sa.engine.make_url(self.admin_url).set(database=database)
        return url.render_as_string(hide_password=False)

    def admin_engine(self, database: str = "postgres") -> sa.Engine:
        return sa.create_engine(resolve_url(self.url_for(database)), isolation_level="AUTOCOMMIT",
                                poolclass=sa.pool.NullPool)

    def create_journal(self, name: str) -> str:
        engine = self.admin_engine()
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        url = self.url_for(name)
        upgrade(url)
        return url

    def _pg_ctl(self, *args: str) -> None:
        from pgserver._commands import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(list(args), pgdata=self.server.pgdata, user=self.server.system_user, timeout=60)

    def stop(self) -> None:
        """Fast shutdown: open connections are cut, new ones refused (socket gone)."""
        self._socket_dir = self.server.get_postmaster_info().socket_dir
        self._pg_ctl("-w", "-m", "fast", "stop")

    def start(self) -> None:
        """Start again on the same socket directory, so URLs stay valid."""
        self._pg_ctl("-w", "-o", '-h ""', "-o", f"-k {self._socket_dir}",
                     "-l", str(self.server.pgdata / "log"), "start")

    def cleanup(self) -> None:
        try:
            self.server.cleanup()
        finally:
            shutil.rmtree(self.datadir, ignore_errors=True)


class ContainerPostgres(OwnPostgres):
    """A Postgres container (testcontainers, the container mode) that a test may stop
    and start again: ``docker stop``/``docker start`` of the same container, so its data
    and its port stay (the container is on the host network)."""

    container: Any = None

    @classmethod
    def create(cls) -> OwnPostgres:
        from offset_journal.local.services import start_postgres

        server = start_postgres(docker=True)
        pg = cls(Path(tempfile.mkdtemp(prefix="oj-own-pg-")), server)
        pg.container = server.container
        return pg

    @property
    def admin_url(self) -> str:
        return str(self.server.admin_url)

    def stop(self) -> None:
        """``docker stop``: SIGTERM (a fast shutdown), connections cut, new ones refused."""
        self.container.get_wrapped_container().stop(timeout=30)

    def start(self) -> None:
        """``docker start``, then wait (bounded) until it accepts a connection."""
        import time

        self.container.get_wrapped_container().start()
        deadline = time.monotonic() + 60
        while True:
            try:
                self.admin_engine().connect().close()
                return
            except sa.exc.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def cleanup(self) -> None:
        try:
            self.server.stop()
        finally:
            shutil.rmtree(self.datadir, ignore_errors=True)


def own_postgres_for_mode() -> OwnPostgres:
    """A Postgres of a test's own, to stop and start: a container in container mode,
    else an embedded one."""
    from offset_journal.testing import services_mode

    return ContainerPostgres.create() if services_mode() == "docker" else OwnPostgres.create()


# --------------------------------------------------------------------------- the command


def count_rows(url: str, table: str) -> int:
    return int(sql_rows(url, f"select count(*) from offset_journal.{table}")[0][0])  # noqa: S608


class Ran(NamedTuple):
    """One command run in-process: unpacks as ``code, out, err``."""

    code: int
    out: str
    err: str

    @property
    def error_line(self) -> str:
        """The single stderr line an error must be (no traceback, nothing else)."""
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        assert "Traceback" not in self.err
        assert lines[0].startswith("offset-journal: error: ")
        return lines[0]


class Cli:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *argv: str) -> Ran:
        code = cli_main(list(argv))
        out, err = self.capsys.readouterr()
        return Ran(code, out, err)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The command line in-process, with no journal URL from the environment (a test
    that wants one sets it after asking for this fixture)."""
    monkeypatch.delenv(ENV_URL, raising=False)
    return Cli(capsys)


def one_error_line(code: int, err: str) -> str:
    """The single line an error must be: non-zero status, no traceback, nothing else."""
    assert code != 0
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("offset-journal: error: "), err
    assert "unexpected" not in lines[0], err
    return lines[0]


# --------------------------------------------------------------------------- the secured server


WRITER_PW = "Wr1ter@S3cret/7f3a"  # '@' and '/' must be URL-encoded, and still never show
READER_PW = "R3ader-S3cret-91bc"


@dataclass
class Secure:
    pg: OwnPostgres
    admin_url: str  # the journal database, as its owner
    writer: str
    reader: str

    def url(self, role: str, password: str) -> str:
        u = sa.engine.make_url(self.admin_url).set(username=role, password=password)
        return u.render_as_string(hide_password=False)

    @property
    def writer_url(self) -> str:
        return self.url(self.writer, WRITER_PW)

    @property
    def reader_url(self) -> str:
        return self.url(self.reader, READER_PW)


@pytest.fixture(scope="module")
def secure() -> Iterator[Secure]:
    pg = OwnPostgres.create()
    try:
        hba = pg.server.pgdata / "pg_hba.conf"
        hba.write_text("local all postgres trust\nlocal all all scram-sha-256\n")
        admin = pg.admin_engine()
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_reload_conf()"))
            # A password is a literal in CREATE ROLE: psycopg composes it safely.
            raw = conn.connection.driver_connection
            assert raw is not None
            for role, pw in (("oj_sec_writer", WRITER_PW), ("oj_sec_reader", READER_PW)):
                raw.execute(psql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    psql.Identifier(role), psql.Literal(pw)))
        admin.dispose()
        url = pg.create_journal("journal")
        yield Secure(pg, url, "oj_sec_writer", "oj_sec_reader")
    finally:
        pg.cleanup()


@pytest.fixture(scope="module")
def granted(secure: Secure) -> Secure:
    """The roles with the grants `offset-journal db grant` gives them."""
    assert cli_main(["--database-url", secure.admin_url, "db", "grant",
                     "--writer", secure.writer, "--reader", secure.reader]) == 0
    return secure


def denied(url: str, statement: str) -> str:
    """Run one statement as the URL's role; return Postgres' refusal (it must refuse)."""
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(statement)
    except sa.exc.ProgrammingError as exc:
        assert getattr(exc.orig, "sqlstate", None) == "42501", exc  # insufficient_privilege
        return str(exc.orig)
    finally:
        engine.dispose()
    raise AssertionError(f"allowed: {statement}")


def journal_roles(journal_url: str) -> tuple[str, str, str]:
    """A writer, a reader and a planner role of this test's own, granted on the journal:
    their names (:func:`role_url` gives each one's URL)."""
    from offset_journal.journal.roles import grant

    suffix = uuid.uuid4().hex[:8]
    writer, reader, planner = (f"oj_w_{suffix}", f"oj_r_{suffix}", f"oj_p_{suffix}")
    engine = sa.create_engine(resolve_url(journal_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        for role in (writer, reader, planner):
            conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
    engine.dispose()
    grant(journal_url, writer, reader, planner)
    return writer, reader, planner


def role_url(journal_url: str, role: str) -> str:
    """The test's journal URL with another user."""
    return sa.engine.make_url(journal_url).set(username=role).render_as_string(False)
