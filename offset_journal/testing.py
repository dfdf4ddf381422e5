"""A pytest plugin for suites that test streaming jobs with the journal.

Enable it with ``pytest_plugins = ["offset_journal.testing"]`` in a conftest.py.
Fixtures start what they need on the machine at hand:

* ``journal_url``: a database of its own per test, journal schema migrated in, on a
  Postgres from testcontainers where a Docker engine answers, else the server named by
  OFFSET_JOURNAL_TEST_ADMIN_URL, else a throwaway embedded Postgres (pgserver).
* ``kafka_cluster``: testcontainers' Kafka where Docker answers, else the server named
  by OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS, else librdkafka's mock cluster (a real
  Kafka protocol peer for librdkafka clients) kept alive for the session.
* ``spark`` (one local SparkSession per test session) and ``journaled_spark``.
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
ENV_BOOTSTRAP = "OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS"


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
        from .roles import quote_ident

        name = f"{prefix}_{os.getpid()}_{next(self._counter)}"
        engine = self._admin_engine()
        with engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote_ident(name)}")
            conn.exec_driver_sql(f"CREATE DATABASE {quote_ident(name)}")
        engine.dispose()
        return self.url_for(name)

    def drop_database(self, url: str) -> None:
        from .roles import quote_ident

        name = str(sa.engine.make_url(url).database)
        engine = self._admin_engine()
        with engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
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


class UnsupportedByPeer(RuntimeError):
    """The Kafka peer at hand cannot do this (librdkafka's mock cluster cannot create
    partitions or topics through the admin API)."""


@dataclass
class KafkaCluster:
    """A Kafka cluster for tests, with helpers to make topics hold known records."""

    bootstrap_servers: str
    kind: str  # "testcontainers", "external" or "mock"
    _keepalive: Any = None
    _stop: Any = None

    @property
    def supports_add_partitions(self) -> bool:
        return self.kind != "mock"

    def producer(self) -> Any:
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5})

    def partitions(self, topic: str, timeout: float = 10) -> int:
        """How many partitions ``topic`` has (0 when it does not exist)."""
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "oj-probe",
                      "allow.auto.create.topics": False})
        try:
            md = c.list_topics(topic, timeout=timeout).topics.get(topic)
            return len(md.partitions) if md is not None and md.error is None else 0
        finally:
            c.close()

    def produce(self, topic: str, count: int, *, start: int = 0, partitions: int | None = None,
                key_prefix: str = "k", value: Any = None,
                timestamp_ms: Any = None) -> list[tuple[int, int, bytes, bytes]]:
        """Produce ``count`` keyed records round-robin across partitions and return
        (partition, offset, key, value) for each, as the broker acknowledged them.

        ``value(i)`` and ``timestamp_ms(i)`` may compute each record's value and event
        time; records are numbered from ``start``.
        """
        n_parts = partitions or self.partitions(topic)
        if not n_parts:
            self.create_topic(topic)
            n_parts = self.partitions(topic) or 1
        producer = self.producer()
        acked: list[tuple[int, int, bytes, bytes]] = []
        errors: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

        for i in range(start, start + count):
            key = f"{key_prefix}{i}".encode()
            val = (value(i) if callable(value) else value) or f"v{i}"
            kwargs: dict[str, Any] = {}
            if timestamp_ms is not None:
                ts = timestamp_ms(i) if callable(timestamp_ms) else timestamp_ms
                kwargs["timestamp"] = int(ts)
            producer.produce(topic, key=key, value=val.encode() if isinstance(val, str) else val,
                             partition=i % n_parts, on_delivery=on_delivery, **kwargs)
            producer.poll(0)
        remaining = producer.flush(30)
        if errors or remaining:
            raise RuntimeError(f"produce to {topic} failed: {errors[:3]} ({remaining} unsent)")
        return sorted(acked)

    def create_topic(self, topic: str, partitions: int = 4) -> None:
        """Make ``topic`` exist. On the mock cluster topics are auto-created with 4
        partitions on first metadata request, so ``partitions`` must be 4 there."""
        if self.kind == "mock":
            if partitions != 4:
                raise UnsupportedByPeer("librdkafka's mock cluster creates topics with 4 "
                                        "partitions only (CreateTopics hangs on it)")
            from confluent_kafka import Consumer

            c = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "oj-probe",
                          "allow.auto.create.topics": True})
            try:
                c.list_topics(topic, timeout=10)
            finally:
                c.close()
            return
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            fut.result(30)

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions, where the peer supports it."""
        if not self.supports_add_partitions:
            raise UnsupportedByPeer("librdkafka's mock cluster does not support "
                                    "CreatePartitions; run with Docker or a real Kafka "
                                    f"({ENV_BOOTSTRAP}) to test added partitions")
        from confluent_kafka.admin import AdminClient, NewPartitions

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        for fut in admin.create_partitions([NewPartitions(topic, total)]).values():
            fut.result(30)

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
        self._keepalive = None


def start_kafka() -> KafkaCluster:
    """Start (or find) a Kafka for tests; see the module docstring for the order."""
    if docker_available():
        from testcontainers.kafka import KafkaContainer

        container = KafkaContainer().with_kraft()
        container.start()
        return KafkaCluster(container.get_bootstrap_server(), "testcontainers",
                            _stop=container.stop)
    external = os.environ.get(ENV_BOOTSTRAP)
    if external:
        return KafkaCluster(external, "external")
    from confluent_kafka import Producer

    # The mock cluster lives as long as the client that created it.
    holder = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = holder.list_topics(timeout=10).brokers
    broker = next(iter(brokers.values()))
    return KafkaCluster(f"{broker.host}:{broker.port}", "mock", _keepalive=holder)


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """A Kafka cluster for the whole test session."""
    cluster = start_kafka()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kafka_topic(kafka_cluster: KafkaCluster, request: Any) -> str:
    """A fresh topic name for this test (created on first use)."""
    name = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:80]
    return f"t-{name}-{os.getpid()}-{next(_topics)}"


_topics = itertools.count(1)
