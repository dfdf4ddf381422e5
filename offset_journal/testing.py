"""A pytest plugin for suites that test streaming jobs with the journal.

Enable it with ``pytest_plugins = ["offset_journal.testing"]`` in a conftest.py.
Fixtures start what they need on the machine at hand (the starters themselves are in
:mod:`offset_journal.local.services`, which the demo uses too):

* ``journal_url``: a database of its own per test, journal schema migrated in, on the
  server named by OFFSET_JOURNAL_TEST_ADMIN_URL, else a throwaway embedded Postgres
  (pgserver); in container mode, a Postgres container from testcontainers.
* ``kafka_cluster``: the server named by OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS, else a
  real single-node Kafka broker started from Maven Central's jars
  (:mod:`offset_journal.local.kafka`), once per test session; in container mode, Kafka in
  a container started through testcontainers.

Container mode: ``pytest --services=docker`` (or OFFSET_JOURNAL_TEST_SERVICES=docker).
It needs a Docker engine (scripts/docker-engine.sh) and the images
(scripts/build-images.sh, or OFFSET_JOURNAL_IMAGES=official), and runs only the tests
marked ``containers`` (the end-to-end subset) and ``docker_only`` (docker compose).
The default mode is "embedded"; a Docker
engine that happens to answer does not change it.
* ``journal_pooler``: Debian's PgBouncer (transaction mode) in front of that Postgres,
  once per session; ``journal_pooler.url_for(journal_url)`` reaches a test's database
  through it.
* ``spark`` (one local SparkSession per test session, with Spark's own Kafka connector,
  Delta Lake and ``s3a://`` on ``spark.jars``) and ``journaled_spark``; ``delta_spark`` is
  the same session, failing the test with the reason when Delta Lake could not be set up.
* ``s3_server``: an S3 server on loopback (moto, credentials checked), once per test
  session (:mod:`offset_journal.local.s3`); ``s3a_spark`` is the shared session pointed
  at it (its Hadoop configuration), failing the test when ``s3a://`` could not be set up.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from .local import services
from .local.services import KafkaCluster, PostgresServer, docker_available

__all__ = ["KafkaCluster", "PostgresServer", "docker_available", "make_spark_session",
           "start_kafka", "start_postgres"]

ENV_ADMIN_URL = "OFFSET_JOURNAL_TEST_ADMIN_URL"
ENV_BOOTSTRAP = "OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS"
ENV_SERVICES = "OFFSET_JOURNAL_TEST_SERVICES"
CONTAINERS_MARKER = "containers"
DOCKER_ONLY_MARKER = "docker_only"

log = logging.getLogger(__name__)
_delta_unavailable: list[str] = []  # why the session has no Delta Lake, if it has none
_s3a_unavailable: list[str] = []  # why the session has no s3a://, if it has none
_kafka_unavailable: list[str] = []  # why the session has no Kafka connector, if it has none


_mode: list[str] = []  # the session's services mode, once configured


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--services", choices=("embedded", "docker"), default=None,
                     help="where the fixtures start Postgres and Kafka: embedded (pgserver, "
                          "a local broker; the default) or docker (containers through "
                          f"testcontainers; runs the tests marked {CONTAINERS_MARKER!r} only). "
                          f"Default: ${ENV_SERVICES}, else embedded.")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", f"{CONTAINERS_MARKER}: end-to-end tests that the "
                            "container mode (--services=docker) runs")
    config.addinivalue_line("markers", f"{DOCKER_ONLY_MARKER}: tests of the container "
                            "set-up itself (docker compose), run in container mode only")
    _mode[:] = [config.getoption("--services") or os.environ.get(ENV_SERVICES) or "embedded"]


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Container mode runs the ``containers`` and ``docker_only`` tests; the embedded
    mode all but the ``docker_only`` ones (they need a Docker engine)."""
    def wanted(item: Any) -> bool:
        if services_mode() == "docker":
            return any(item.get_closest_marker(m) for m in (CONTAINERS_MARKER,
                                                             DOCKER_ONLY_MARKER))
        return item.get_closest_marker(DOCKER_ONLY_MARKER) is None

    kept = [i for i in items if wanted(i)]
    dropped = [i for i in items if not wanted(i)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def services_mode() -> str:
    """"docker" or "embedded": where this session's fixtures start their services."""
    return _mode[0] if _mode else os.environ.get(ENV_SERVICES) or "embedded"


def start_postgres() -> PostgresServer:
    """Start (or find) a Postgres for tests; see the module docstring for the order."""
    if services_mode() == "docker":
        return services.start_postgres(docker=True)
    return services.start_postgres(os.environ.get(ENV_ADMIN_URL), docker=False)


@pytest.fixture(scope="session")
def journal_server() -> Iterator[PostgresServer]:
    """A Postgres server for the whole test session."""
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def journal_pooler(journal_server: PostgresServer) -> Iterator[Any]:
    """Debian's PgBouncer in transaction mode (pool of 3, its defaults otherwise) in
    front of the session's Postgres; ``journal_pooler.url_for(journal_url)`` goes
    through it. Started once per session, beside the Postgres."""
    from .local.pgbouncer import start_pgbouncer

    bouncer = start_pgbouncer(journal_server.admin_url, pool_size=3)
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture
def empty_database_url(journal_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database (no journal schema): for tests of the migrations."""
    url = journal_server.create_database()
    yield url
    journal_server.drop_database(url)


@pytest.fixture
def journal_url(empty_database_url: str) -> str:
    """A fresh database with the journal schema migrated to head."""
    from .journal.db import upgrade

    upgrade(empty_database_url)
    return empty_database_url


def make_spark_session(app_name: str = "offset-journal-tests",
                       master: str = "local[2]", delta: bool = False,
                       s3a: bool = False, kafka: bool = True) -> Any:
    """A small SparkSession for tests (Python workers on this interpreter), reading Kafka
    with Spark's own connector: its jars (and offset-journal's state-restore helper) go
    in through ``spark.jars``, which also ships them to executors on a multi-process
    master such as ``local-cluster[2,1,1024]``.
    ``delta``: Delta Lake's jars and session settings too (:data:`jars.DELTA_SPARK_CONF`);
    ``s3a``: hadoop-aws and the AWS SDK modules it calls, for ``s3a://`` paths;
    ``kafka=False``: without the connector. Raises JarsError when they cannot be had."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from .local.jars import (
        DELTA_SPARK_CONF,
        delta_spark_jars_value,
        installed_spark_version,
        s3a_spark_jars_value,
        spark_jars_value,
        state_restore_jar,
    )
    from .spark_version import available

    jar_paths = [spark_jars_value()] if kafka else []
    # The state-restore helper (savepoint restore, state repartition), on the Spark it
    # runs on: the jar the package ships for that minor.
    if available("state-restore", installed_spark_version()):
        jar_paths.append(str(state_restore_jar()))
    if s3a:
        jar_paths.append(s3a_spark_jars_value())
    builder = SparkSession.builder
    if delta:
        jar_paths.append(delta_spark_jars_value())
        for key, value in DELTA_SPARK_CONF.items():
            builder = builder.config(key, value)
        # Delta rebuilds a table's state in 50 partitions by default: 50 tasks per
        # snapshot on two cores, for logs of a few commits.
        builder = builder.config("spark.databricks.delta.snapshotPartitions", "2")
    return (
        builder.master(master)
        .appName(app_name)
        .config("spark.jars", ",".join(jar_paths))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "true")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the whole test session, with Delta Lake and s3a:// when
    their jars can be had (else without: only the tests that need them fail, saying why;
    once fetched, the jars come from the cache)."""
    from .local.jars import delta_spark_jars_value, s3a_spark_jars_value, spark_jars_value

    delta = _optional_jars("Delta Lake", delta_spark_jars_value, _delta_unavailable)
    s3a = _optional_jars("s3a://", s3a_spark_jars_value, _s3a_unavailable)
    # A Spark whose connector the registry lacks (4.3.0 here) still runs what reads no
    # Kafka; format("kafka") then fails naming the missing source.
    kafka = _optional_jars("Spark's Kafka connector", spark_jars_value, _kafka_unavailable)
    session = make_spark_session(delta=delta, s3a=s3a, kafka=kafka)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _optional_jars(what: str, fetch: Any, why: list[str]) -> bool:
    """Fetch (or find in the cache) an optional jar set; False, with the reason kept
    in ``why``, when it cannot be had."""
    from .errors import JarsError

    try:
        fetch()
    except JarsError as exc:
        log.warning("test SparkSession without %s: %s", what, exc)
        why.append(str(exc))
        return False
    return True


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """An S3 server on loopback for the whole test session (moto, IAM credentials
    checked): its ``endpoint``, the user's key, ``hadoop_conf()`` and ``environ()``."""
    from .local.s3 import start_s3

    server = start_s3()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3a_spark(spark: Any, s3_server: Any) -> Any:
    """The shared SparkSession with ``s3a://`` pointed at ``s3_server``: its settings
    in the session's Hadoop configuration (read by every later query and read)."""
    if _s3a_unavailable:
        pytest.fail(f"s3a:// is not available to the test session: {_s3a_unavailable[0]}")
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3_server.hadoop_conf().items():
        conf.set(key, value)
    return spark


@pytest.fixture
def delta_spark(spark: Any) -> Any:
    """The shared SparkSession, with Delta Lake (``format("delta")``) on it."""
    if _delta_unavailable:
        pytest.fail(f"Delta Lake is not available to the test session: {_delta_unavailable[0]}")
    return spark


@pytest.fixture
def journaled_spark(spark: Any, journal_url: str, tmp_path: Any) -> Iterator[tuple[Any, Any]]:
    """The shared SparkSession with a journal listener attached for this test only.

    Yields (spark, listener); the listener is removed and closed afterwards.
    """
    from .capture.listener import attach

    listener = attach(spark, database_url=journal_url, spool_dir=str(tmp_path / "spool"))
    try:
        yield spark, listener
    finally:
        spark.streams.removeListener(listener)
        listener.close()


def start_kafka() -> KafkaCluster:
    """Start (or find) a Kafka for tests; see the module docstring for the order."""
    if services_mode() == "docker":
        return services.start_kafka(docker=True)
    return services.start_kafka(os.environ.get(ENV_BOOTSTRAP), docker=False)


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
