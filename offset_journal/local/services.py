"""Start the services the journal works with, on the machine at hand: a Postgres and a
Kafka cluster. The pytest plugin (:mod:`offset_journal.testing`) and ``offset-journal
demo`` both start theirs here; this module imports neither pytest nor, until a service
is started, its client library.

* :func:`start_postgres`: a server named by URL, else a Postgres container
  (testcontainers) where asked or where a Docker engine answers, else a throwaway
  embedded Postgres (pgserver, the ``embedded`` extra).
* :func:`start_kafka`: a cluster named by its bootstrap servers, else Kafka in a
  container (the same rule), else a real single-node KRaft broker started from Maven
  Central's jars (:mod:`offset_journal.local.kafka`). :class:`KafkaCluster` has the
  helpers that make topics hold known records (confluent-kafka, the ``kafka`` extra).

Each returns an object with ``stop()``; a service found by URL is left running.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ..errors import KafkaAdminError, KafkaUnavailable


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
    """A Postgres server to create and drop databases in (a test's, the demo's)."""

    admin_url: str
    kind: str
    container: Any = None  # the testcontainers container, when this is one
    _stop: Callable[[], None] | None = None
    _counter: Any = field(default_factory=lambda: itertools.count(1))

    def _admin_engine(self) -> sa.Engine:
        from ..journal.db import resolve_url

        return sa.create_engine(resolve_url(self.admin_url), isolation_level="AUTOCOMMIT",
                                poolclass=sa.pool.NullPool)

    def url_for(self, database: str) -> str:
        url = sa.engine.make_url(self.admin_url).set(database=database)
        return url.render_as_string(hide_password=False)

    def create_database(self, prefix: str = "oj_test") -> str:
        from ..journal.roles import quote_ident

        name = f"{prefix}_{os.getpid()}_{next(self._counter)}"
        engine = self._admin_engine()
        with engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote_ident(name)}")
            conn.exec_driver_sql(f"CREATE DATABASE {quote_ident(name)}")
        engine.dispose()
        return self.url_for(name)

    def drop_database(self, url: str) -> None:
        from ..journal.roles import quote_ident

        name = str(sa.engine.make_url(url).database)
        engine = self._admin_engine()
        with engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
        engine.dispose()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()


def _use_docker(docker: bool | None) -> bool:
    return docker_available() if docker is None else docker


def start_postgres(admin_url: str | None = None, *, docker: bool | None = None,
                   datadir: str | Path | None = None) -> PostgresServer:
    """A Postgres to create databases in; the first that applies:

    * ``admin_url``: that server (``kind`` "external"; ``stop()`` leaves it running);
    * ``docker`` true, or None and a Docker engine answers: a Postgres container from
      testcontainers ("testcontainers"), image :func:`postgres_image`, host network;
    * an embedded Postgres from pgserver ("pgserver") with its data in ``datadir``,
      by default a temporary directory removed by ``stop()``.
    """
    if admin_url:
        return PostgresServer(admin_url, "external")
    if _use_docker(docker):
        return _postgres_container()
    import pgserver

    owned = datadir is None
    data = Path(datadir) if datadir is not None else Path(tempfile.mkdtemp(prefix="oj-pgserver-"))
    server = pgserver.get_server(str(data), cleanup_mode="stop")

    def stop() -> None:
        server.cleanup()
        if owned:
            shutil.rmtree(data, ignore_errors=True)

    return PostgresServer(server.get_uri(), "pgserver", _stop=stop)


@dataclass
class KafkaCluster:
    """A Kafka cluster, with helpers to make topics hold known records (tests, the demo)."""

    bootstrap_servers: str
    kind: str  # "testcontainers", "external" or "local"
    broker: Any = None  # the LocalKafka, when this session started the broker
    container: Any = None  # the testcontainers container, when this is one
    _stop: Callable[[], None] | None = None
    _admin: Any = field(default=None, repr=False)

    def admin(self) -> Any:
        """One admin client, kept: its futures fail if it is garbage-collected first.
        librdkafka's line per refused connect goes to the debug log."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            from .kafka import QuietLogger

            conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers,
                                    "logger": QuietLogger()}
            self._admin = AdminClient(conf)
        return self._admin

    def producer(self) -> Any:
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5})

    def partitions(self, topic: str, timeout: float = 10) -> int:
        """How many partitions ``topic`` has (0 when it does not exist; asking never
        creates it, also on a cluster that auto-creates topics)."""
        from ..kafka.admin import partition_count

        return partition_count(self.admin(), topic, timeout=timeout,
                               where=self.bootstrap_servers)

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
            raise KafkaAdminError(f"produce to {topic} failed: {errors[:3]} ({remaining} unsent)")
        return sorted(acked)

    def create_topic(self, topic: str, partitions: int = 4, *,
                     config: dict[str, str] | None = None) -> None:
        """Create ``topic`` (:func:`offset_journal.kafka.admin.create_topic`: one that
        exists with these partitions is taken as it is) and wait until it shows."""
        from ..kafka.admin import create_topic

        create_topic(self.admin(), topic, partitions, config=config,
                     where=self.bootstrap_servers)

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
                raise KafkaUnavailable(f"Kafka: timed out waiting for {what}")
            time.sleep(0.1)

    def stop(self) -> None:
        self._admin = None
        if self._stop is not None:
            self._stop()


def start_kafka(bootstrap_servers: str | None = None, *,
                docker: bool | None = None) -> KafkaCluster:
    """A Kafka cluster; the first that applies:

    * ``bootstrap_servers``: that cluster (``kind`` "external"; left running);
    * ``docker`` true, or None and a Docker engine answers: Kafka (KRaft) in a container
      from testcontainers ("testcontainers"), image :func:`kafka_image`, host network;
    * a real single-node KRaft broker from Maven Central's jars ("local"), see
      :func:`offset_journal.local.kafka.start_local_kafka`.
    """
    if bootstrap_servers:
        return KafkaCluster(bootstrap_servers, "external")
    if _use_docker(docker):
        return _kafka_container()
    from .kafka import start_local_kafka

    broker = start_local_kafka()
    return KafkaCluster(broker.bootstrap_servers, "local", broker=broker, _stop=broker.stop)


# --------------------------------------------------------------------------- containers
# Containers run on the host network (the engine has no bridge: scripts/docker-engine.sh)
# and are told to listen on 127.0.0.1 ports chosen here, whatever their image's default;
# nothing is published. The images are the
# ones scripts/build-images.sh builds from Debian packages and Maven Central when they
# are there, else Docker Hub's; OFFSET_JOURNAL_IMAGES=local or =official forces one, and
# OFFSET_JOURNAL_POSTGRES_IMAGE / OFFSET_JOURNAL_KAFKA_IMAGE name an image outright.

LOOPBACK = "127.0.0.1"
"""The one address every container the harness starts listens on."""
OFFICIAL_IMAGES = {"postgres": "postgres:16", "kafka": "apache/kafka:3.8.0"}
LOCAL_IMAGES = {"postgres": "offset-journal/postgres:local", "kafka": "offset-journal/kafka:local"}
_CONTAINER_START_TIMEOUT_S = 120.0


def _image(service: str) -> str:
    named = os.environ.get(f"OFFSET_JOURNAL_{service.upper()}_IMAGE")
    if named:
        return named
    which = os.environ.get("OFFSET_JOURNAL_IMAGES", "")
    if which == "official" or (which != "local" and not _have_image(LOCAL_IMAGES[service])):
        return OFFICIAL_IMAGES[service]
    return LOCAL_IMAGES[service]


def _have_image(image: str) -> bool:
    try:
        return subprocess.run(["docker", "image", "inspect", image], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def postgres_image() -> str:
    """OFFSET_JOURNAL_POSTGRES_IMAGE, else the image built here (OFFSET_JOURNAL_IMAGES
    unset and the image present, or =local), else Docker Hub's ``postgres:16``."""
    return _image("postgres")


def kafka_image() -> str:
    """OFFSET_JOURNAL_KAFKA_IMAGE, else the image built here (as for
    :func:`postgres_image`), else Docker Hub's ``apache/kafka:3.8.0``."""
    return _image("kafka")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's choice)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _no_reaper() -> None:
    """testcontainers' reaper (Ryuk) is an image from Docker Hub and needs a bridge;
    containers here are stopped by the ``stop()`` of what started them."""
    from testcontainers.core.config import testcontainers_config

    testcontainers_config.ryuk_disabled = True


@dataclass(frozen=True)
class ContainerSpec:
    """What the harness asks the engine to run: an image, its environment and its
    command, on the host network. Plain data, so what each container is told to listen
    on can be checked without an engine."""

    image: str
    env: dict[str, str]
    command: tuple[str, ...] = ()
    network_mode: str = "host"


def postgres_container_spec(image: str, port: int) -> ContainerSpec:
    """The Postgres container: superuser journal/journal, database journal, on
    127.0.0.1:``port`` only (postgres:16 listens on ``'*'`` unless told; on the host
    network that is every interface the host has)."""
    return ContainerSpec(image, {"POSTGRES_USER": "journal", "POSTGRES_PASSWORD": "journal",
                                 "POSTGRES_DB": "journal", "PGPORT": str(port)},
                         ("postgres", "-c", f"listen_addresses={LOOPBACK}"))


def kafka_container_spec(image: str, port: int, controller: int, cluster: str) -> ContainerSpec:
    """The Kafka container (KRaft, one node), its broker on 127.0.0.1:``port`` and its
    controller on 127.0.0.1:``controller``, nothing else. The environment speaks both to
    the image built here (KAFKA_HOST) and to apache/kafka's (its listeners)."""
    return ContainerSpec(image, {
        "KAFKA_HOST": LOOPBACK, "KAFKA_PORT": str(port), "KAFKA_CONTROLLER_PORT": str(controller),
        "KAFKA_CLUSTER_ID": cluster, "CLUSTER_ID": cluster, "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller}",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{LOOPBACK}:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@{LOOPBACK}:{controller}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1", "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1", "KAFKA_LOG_RETENTION_MS": "-1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1", "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        # retention applied every second, as by the local broker (tests/test_retention.py)
        "KAFKA_LOG_RETENTION_CHECK_INTERVAL_MS": "1000",
        "KAFKA_LOG_INITIAL_TASK_DELAY_MS": "0",  # retention from the start (KAFKA-16552)
        "KAFKA_LOG_SEGMENT_DELETE_DELAY_MS": "0"})


def _postgres_container() -> PostgresServer:
    """testcontainers' PostgresContainer (its own readiness check: psql in the container,
    which reads PGPORT), on the host network and a free port."""
    _no_reaper()
    from testcontainers.postgres import PostgresContainer

    port = free_port()
    spec = postgres_container_spec(postgres_image(), port)
    container = PostgresContainer(spec.image, username=spec.env["POSTGRES_USER"],
                                  password=spec.env["POSTGRES_PASSWORD"],
                                  dbname=spec.env["POSTGRES_DB"], driver="psycopg")
    container.ports = {}  # host network: nothing to publish
    container.with_envs(**spec.env).with_kwargs(network_mode=spec.network_mode)
    if spec.command:
        container.with_command(list(spec.command))
    container.start()
    url = f"postgresql+psycopg://journal:journal@127.0.0.1:{port}/journal"
    return PostgresServer(url, "testcontainers", container=container, _stop=container.stop)


def _kafka_container() -> KafkaCluster:
    """A plain DockerContainer running :func:`kafka_container_spec` on the host network,
    ready when the admin API lists the broker (:mod:`offset_journal.local.kafka`'s check)."""
    _no_reaper()
    from testcontainers.core.container import DockerContainer

    from .kafka import cluster_id

    port = free_port()
    spec = kafka_container_spec(kafka_image(), port, free_port(), cluster_id())
    container = DockerContainer(spec.image).with_kwargs(network_mode=spec.network_mode)
    container.with_envs(**spec.env)
    if spec.command:
        container.with_command(list(spec.command))
    container.start()
    cluster = KafkaCluster(f"127.0.0.1:{port}", "testcontainers", container=container,
                           _stop=container.stop)
    try:
        wait_for_kafka(cluster)
    except BaseException:
        container.stop()
        raise
    return cluster


def wait_for_kafka(cluster: KafkaCluster, timeout: float = _CONTAINER_START_TIMEOUT_S) -> None:
    """Until the admin API lists a broker and a controller, or the container has exited,
    or time is up: BrokerStartError with the container's last log lines, or for a
    cluster that is no container of ours, KafkaUnavailable."""
    from confluent_kafka.admin import AdminClient

    from ..errors import BrokerStartError, KafkaUnavailable
    from .kafka import QuietLogger, broker_answers

    conf: dict[str, Any] = {"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0,
                            "logger": QuietLogger()}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if broker_answers(admin):
            return
        if cluster.container is not None:
            wrapped = cluster.container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status == "exited":
                break
        time.sleep(0.25)
    if cluster.container is None:
        raise KafkaUnavailable(f"Kafka at {cluster.bootstrap_servers} did not answer (a broker "
                               f"and a controller) within {timeout:g} s")
    out, err = cluster.container.get_logs()
    tail = "\n".join((out + err).decode(errors="replace").splitlines()[-25:])
    raise BrokerStartError(f"Kafka in its container was not ready within {timeout:.0f} s; "
                           f"its last lines:\n{tail}")
