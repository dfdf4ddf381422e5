"""A pytest plugin for suites that test streaming jobs with the journal.

Enable it with ``pytest_plugins = ["offset_journal.testing"]`` in a conftest.py.
Fixtures start what they need on the machine at hand: a Postgres from testcontainers
where a Docker engine answers, else the server named by OFFSET_JOURNAL_TEST_ADMIN_URL,
else a throwaway embedded Postgres (pgserver); each test gets a database of its own
with the journal schema migrated in.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa

ENV_ADMIN_URL = "OFFSET_JOURNAL_TEST_ADMIN_URL"


def docker_available() -> bool:
    """True when a Docker engine answers (not merely a docker client on PATH)."""
    if os.environ.get("OFFSET_JOURNAL_NO_DOCKER") or not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@dataclass
class PostgresServer:
    """A Postgres server the tests may create and drop databases in."""

    admin_url: str
    kind: str
    _stop: Any = None
    _counter: Any = field(default_factory=lambda: itertools.count(1))

    def _admin_engine(self) -> sa.Engine:
        from .db import resolve_url

        return sa.create_engine(resolve_url(self.admin_url), isolation_level="AUTOCOMMIT",
                                poolclass=sa.pool.NullPool)

    def url_for(self, database: str) -> str:
        url = sa.engine.make_url(self.admin_url).set(database=database)
        return url.render_as_string(hide_password=False)

    def create_database(self, prefix: str = "oj_test") -> str:
        name = f"{prefix}_{os.getpid()}_{next(self._counter)}"
        engine = self._admin_engine()
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url_for(name)

    def drop_database(self, url: str) -> None:
        name = sa.engine.make_url(url).database
        engine = self._admin_engine()
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()


def start_postgres() -> PostgresServer:
    """Start (or find) a Postgres for tests; see the module docstring for the order."""
    if docker_available():
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16-alpine", driver="psycopg")
        container.start()
        return PostgresServer(container.get_connection_url(), "testcontainers", container.stop)
    admin = os.environ.get(ENV_ADMIN_URL)
    if admin:
        return PostgresServer(admin, "external")
    import pgserver

    datadir = tempfile.mkdtemp(prefix="oj-pgserver-")
    server = pgserver.get_server(datadir, cleanup_mode="stop")

    def stop() -> None:
        server.cleanup()
        shutil.rmtree(datadir, ignore_errors=True)

    return PostgresServer(server.get_uri(), "pgserver", stop)


@pytest.fixture(scope="session")
def journal_server() -> Iterator[PostgresServer]:
    """A Postgres server for the whole test session."""
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def empty_database_url(journal_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database (no journal schema): for tests of the migrations."""
    url = journal_server.create_database()
    yield url
    journal_server.drop_database(url)


@pytest.fixture
def journal_url(empty_database_url: str) -> str:
    """A fresh database with the journal schema migrated to head."""
    from .db import upgrade

    upgrade(empty_database_url)
    return empty_database_url


def make_spark_session(app_name: str = "offset-journal-tests") -> Any:
    """A small local SparkSession for tests (Python workers on this interpreter)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "true")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the whole test session."""
    session = make_spark_session()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def journaled_spark(spark: Any, journal_url: str, tmp_path: Any) -> Iterator[tuple[Any, Any]]:
    """The shared SparkSession with a journal listener attached for this test only.

    Yields (spark, listener); the listener is removed and closed afterwards.
    """
    from .listener import attach

    listener = attach(spark, database_url=journal_url, spool_dir=str(tmp_path / "spool"))
    try:
        yield spark, listener
    finally:
        spark.streams.removeListener(listener)
        listener.close()
