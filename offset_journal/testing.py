"""A pytest plugin for suites that test streaming jobs with the journal.

Enable it with ``pytest_plugins = ["offset_journal.testing"]`` in a conftest.py.
Fixtures start what they need on the machine at hand:

* ``journal_url``: a database of its own per test, journal schema migrated in, on a
  Postgres from testcontainers where a Docker engine answers, else the server named by
  OFFSET_JOURNAL_TEST_ADMIN_URL, else a throwaway embedded Postgres (pgserver).
* ``kafka_cluster``: testcontainers' Kafka where Docker answers, else the server named
  by OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS, else a real single-node Kafka broker started
  from Maven Central's jars (:mod:`offset_journal.local_kafka`), once per test session.
* ``spark`` (one local SparkSession per test session, with Spark's own Kafka connector
  on ``spark.jars``) and ``journaled_spark``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
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


def make_spark_session(app_name: str = "offset-journal-tests",
                       master: str = "local[2]") -> Any:
    """A small SparkSession for tests (Python workers on this interpreter), reading Kafka
    with Spark's own connector: its jars go in through ``spark.jars``, which also ships
    them to executors on a multi-process master such as ``local-cluster[2,1,1024]``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from .jars import spark_jars_value

    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", spark_jars_value())
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


@dataclass
class KafkaCluster:
    """A Kafka cluster for tests, with helpers to make topics hold known records."""

    bootstrap_servers: str
    kind: str  # "testcontainers", "external" or "local"
    broker: Any = None  # the LocalKafka, when this session started the broker
    _stop: Any = None
    _admin: Any = field(default=None, repr=False)

    def admin(self) -> Any:
        """One admin client, kept: its futures fail if it is garbage-collected first."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        return self._admin

    def producer(self) -> Any:
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5})

    def partitions(self, topic: str, timeout: float = 10) -> int:
        """How many partitions ``topic`` has (0 when it does not exist)."""
        md = self.admin().list_topics(topic, timeout=timeout).topics.get(topic)
        return len(md.partitions) if md is not None and md.error is None else 0

    def produce(self, topic: str, count: int, *, start: int = 0, partitions: int | None = None,
                key_prefix: str = "k", value: Any = None,
                timestamp_ms: Any = None) -> list[tuple[int, int, bytes, bytes]]:
        """Produce ``count`` keyed records round-robin across partitions and return
        (partition, offset, key, value) for each, as the broker acknowledged them.

        A topic that does not exist is created with 4 partitions. ``value(i)`` and
        ``timestamp_ms(i)`` may compute each record's value and event time; records are
        numbered from ``start``.
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

    def create_topic(self, topic: str, partitions: int = 4, *,
                     config: dict[str, str] | None = None) -> None:
        """Create ``topic``, and wait until its metadata shows every partition."""
        from confluent_kafka.admin import NewTopic

        futures = self.admin().create_topics(
            [NewTopic(topic, partitions, 1, config=config or {})], operation_timeout=30)
        for fut in futures.values():
            fut.result(30)
        self._wait_for(lambda: self.partitions(topic) == partitions,
                       f"topic {topic} with {partitions} partitions")

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions (the admin API's CreatePartitions)."""
        from confluent_kafka.admin import NewPartitions

        for fut in self.admin().create_partitions([NewPartitions(topic, total)]).values():
            fut.result(30)
        self._wait_for(lambda: self.partitions(topic) == total,
                       f"{topic} grown to {total} partitions")

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` and wait until the metadata no longer lists it."""
        for fut in self.admin().delete_topics([topic], operation_timeout=30).values():
            fut.result(30)
        self._wait_for(lambda: self.partitions(topic) == 0, f"{topic} deleted")

    def delete_records(self, topic: str, before: dict[int, int]) -> None:
        """Delete each partition's records below ``before[partition]`` (DeleteRecords,
        as retention would): the log start offset moves up to it."""
        from confluent_kafka import TopicPartition

        parts = [TopicPartition(topic, p, o) for p, o in sorted(before.items())]
        for fut in self.admin().delete_records(parts, operation_timeout=30).values():
            fut.result(30)

    def watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        """partition -> (log start offset, log end offset)."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "oj-probe",
                      "allow.auto.create.topics": False})
        try:
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                    for p in range(self.partitions(topic))}
        finally:
            c.close()

    @staticmethod
    def _wait_for(done: Any, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka: timed out waiting for {what}")
            time.sleep(0.1)

    def stop(self) -> None:
        self._admin = None
        if self._stop is not None:
            self._stop()


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
    from .local_kafka import start_local_kafka

    broker = start_local_kafka()
    return KafkaCluster(broker.bootstrap_servers, "local", broker=broker, _stop=broker.stop)


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
