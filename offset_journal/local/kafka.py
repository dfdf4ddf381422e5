"""A real single-node Kafka broker on loopback, for tests and the demo.

It is Apache Kafka itself (``kafka.Kafka`` from ``kafka_2.13``, fetched by
:mod:`offset_journal.local.jars`), in KRaft mode with one process acting as broker and
controller, on free loopback ports and a data directory of its own. Readiness is checked
through the admin API (a broker in the cluster metadata), not by a port opening, because
the port opens before the controller has elected itself and topics can be created.

Settings are for speed, not durability: no group rebalance delay, retention checked every
second (records are kept unless a topic sets ``retention.ms``: Kafka applies retention by
record timestamp, and tests produce records with event times years back), topics never
auto-created (a test asks for the partitions it wants).

Started with ``users``, it takes SASL/PLAIN only and KRaft's StandardAuthorizer decides:
a user may do what an ACL allows it and nothing else, the super user (which sets the
ACLs up) everything: how a secured production cluster answers a job's principal.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import BrokerStartError

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 20.0
_LOG_TAIL_LINES = 25
_STACK_FRAME = re.compile(r"\s+(at \S|\.\.\. \d+ more)")

def log4j2_config(loggers: Mapping[str, str]) -> str:
    """A log4j2 configuration for a JVM process of ours: WARN to stdout (its log file),
    and ``loggers`` (name -> level) besides."""
    named = "".join(f'    <Logger name="{name}" level="{level}"/>\n'
                    for name, level in loggers.items())
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Configuration status="WARN">\n'
            '  <Appenders>\n    <Console name="out" target="SYSTEM_OUT">\n'
            '      <PatternLayout pattern="[%d] %p %m (%c)%n"/>\n    </Console>\n'
            '  </Appenders>\n  <Loggers>\n'
            '    <Root level="WARN"><AppenderRef ref="out"/></Root>\n'
            f"{named}  </Loggers>\n</Configuration>\n")


_LOG4J2 = log4j2_config({"kafka.server.KafkaRaftServer": "INFO",
                         "kafka.server.BrokerServer": "INFO"})


def log_tail(path: Path, missing: str, lines: int = _LOG_TAIL_LINES) -> str:
    """A process's last log lines (for an error message), without Java stack frames,
    which would otherwise push the error and its causes out of view; ``missing`` when
    there is no log to read."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return missing
    kept = [ln for ln in text.splitlines() if not _STACK_FRAME.match(ln)]
    return "\n".join(kept[-lines:])


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM ``process`` and wait; SIGKILL it when it has not ended in time."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(_STOP_TIMEOUT_S)


@dataclass
class LocalKafka:
    """A running broker: ``bootstrap_servers``, its ``data_dir``, and ``stop()``."""

    bootstrap_servers: str
    controller_port: int
    data_dir: Path
    classpath: str
    heap: str = "512m"
    # SASL/PLAIN users (name: password), SUPER_USER among them: with any, clients
    # authenticate and the broker's authorizer enforces ACLs (see _secured_config).
    users: Mapping[str, str] = field(default_factory=dict, repr=False)
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return int(self.bootstrap_servers.rsplit(":", 1)[1])

    @property
    def log_path(self) -> Path:
        return self.data_dir / "broker.log"

    def client_config(self, user: str = "") -> dict[str, str]:
        """librdkafka settings to reach the broker as ``user`` (default: the super user);
        none for a broker without users."""
        if not self.users:
            return {}
        name = user or SUPER_USER
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": name, "sasl.password": self.users[name]}

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The broker's last log lines, without Java stack frames (:func:`log_tail`)."""
        return log_tail(self.log_path, "(no broker log)", lines)

    def start(self, timeout: float = _START_TIMEOUT_S) -> LocalKafka:
        """Format the storage (first start only) and start the broker; wait until the
        admin API sees it. Also used to restart it after :meth:`kill` or :meth:`stop`."""
        properties = self.data_dir / "server.properties"
        if not properties.exists():
            _write_config(self)
            _format_storage(self)
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            [java_executable(), f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseG1GC",
             f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.xml'}",
             "-cp", self.classpath, "kafka.Kafka", str(properties)],
            stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            _wait_ready(self, timeout)
        except BaseException:
            self._terminate()
            raise
        log.info("Kafka broker ready on %s (data in %s)", self.bootstrap_servers, self.data_dir)
        return self

    def kill(self) -> None:
        """SIGKILL the broker (keeps its data): an abrupt broker failure."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(_STOP_TIMEOUT_S)
        self._close_log()

    def stop(self, *, remove_data: bool = True) -> None:
        """Stop the broker (SIGTERM, then SIGKILL) and remove its data directory."""
        self._terminate()
        if remove_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _terminate(self) -> None:
        stop_process(self._process)
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


def start_local_kafka(*, heap: str = "512m", timeout: float = _START_TIMEOUT_S,
                      port: int | None = None, users: Iterable[str] = ()) -> LocalKafka:
    """Fetch the broker's jars (once), then start a fresh single-node broker. With
    ``users``: SASL/PLAIN only, each user (and :data:`SUPER_USER`, for setting it up)
    with a password of its own, and KRaft's StandardAuthorizer: a user may do only
    what an ACL allows it (:meth:`LocalKafka.client_config` to connect as one)."""
    from .jars import classpath

    cp = classpath("kafka-broker")
    data_dir = Path(tempfile.mkdtemp(prefix="oj-kafka-"))
    broker_port = port if port is not None else _free_port()
    names = sorted({*users, SUPER_USER}) if users else []
    for name in names:
        if not _USER_NAME.fullmatch(name):
            raise BrokerStartError(f"not a usable SASL user name: {name!r}")
    broker = LocalKafka(f"127.0.0.1:{broker_port}", _free_port(), data_dir, cp, heap,
                        users={n: secrets.token_hex(16) for n in names})
    try:
        return broker.start(timeout)
    except BaseException:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise


def cluster_id() -> str:
    """A KRaft cluster id as Kafka's ``Uuid.randomUuid()`` makes one: 16 random bytes,
    URL-safe base64 without padding, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home, "bin", "java") if java_home else None
    if candidate is not None and candidate.exists():
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise BrokerStartError("java is not installed: install a JDK 17 (apt-get install "
                               "openjdk-17-jre-headless)")
    return found


SUPER_USER = "admin"
"""The user a broker with users (``start_local_kafka(users=...)``) is set up by: every
ACL allows it, and the broker itself (between its listeners) authenticates as it."""

_USER_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _secured_config(broker: LocalKafka) -> dict[str, str]:
    """SASL/PLAIN on both listeners (clients and the controller's), the broker's own
    connections as the super user, and the authorizer: no ACL, no access."""
    host = "127.0.0.1"
    quoted = " ".join(f'user_{n}="{p}"' for n, p in sorted(broker.users.items()))
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{SUPER_USER}" password="{broker.users[SUPER_USER]}" {quoted};')
    return {
        "listeners": f"CLIENT://{broker.bootstrap_servers},"
                     f"CONTROLLER://{host}:{broker.controller_port}",
        "advertised.listeners": f"CLIENT://{broker.bootstrap_servers}",
        "inter.broker.listener.name": "CLIENT",
        "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.client.plain.sasl.jaas.config": jaas,
        "listener.name.controller.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": _AUTHORIZER,
        "super.users": f"User:{SUPER_USER}",
        "allow.everyone.if.no.acl.found": "false",
    }


def _write_config(broker: LocalKafka) -> None:
    host = "127.0.0.1"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{broker.controller_port}",
        "listeners": f"PLAINTEXT://{broker.bootstrap_servers},"
                     f"CONTROLLER://{host}:{broker.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{broker.bootstrap_servers}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(broker.data_dir / "logs"),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.check.interval.ms": "1000",
        # The log manager's tasks (retention among them) start at once, not 30 s after
        # the broker (an internal config since Kafka 3.8, KAFKA-16552).
        "log.initial.task.delay.ms": "0",
        # Kept until a topic sets retention.ms: tests produce records with event times
        # years back, which the default 7 days would delete within a second.
        "log.retention.ms": "-1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "log.segment.delete.delay.ms": "0",
        "file.delete.delay.ms": "0",
    }
    if broker.users:
        props.update(_secured_config(broker))
    text = "".join(f"{k}={v}\n" for k, v in props.items())
    (broker.data_dir / "server.properties").write_text(text)
    (broker.data_dir / "log4j2.xml").write_text(_LOG4J2)


def _format_storage(broker: LocalKafka) -> None:
    """``kafka-storage format``: KRaft needs its metadata log laid out before start."""
    done = subprocess.run(
        [java_executable(), "-Xmx256m",
         f"-Dlog4j2.configurationFile={broker.data_dir / 'log4j2.xml'}",
         "-cp", broker.classpath, "kafka.tools.StorageTool", "format",
         "-t", cluster_id(), "-c", str(broker.data_dir / "server.properties")],
        capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-_LOG_TAIL_LINES:])
        raise BrokerStartError(f"kafka-storage format failed (exit {done.returncode}):\n{tail}")


def _wait_ready(broker: LocalKafka, timeout: float) -> None:
    """Until the admin API lists this broker, or the process dies, or time is up."""
    from confluent_kafka.admin import AdminClient

    conf: dict[str, Any] = {"bootstrap.servers": broker.bootstrap_servers, "log_level": 0,
                            "logger": QuietLogger(), **broker.client_config()}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not broker.running():
            raise BrokerStartError("the Kafka broker exited during start; its last lines:\n"
                                   + broker.log_tail())
        if broker_answers(admin):
            return
        time.sleep(0.25)
    raise BrokerStartError(f"the Kafka broker was not ready within {timeout:.0f} s; its last "
                           "lines:\n" + broker.log_tail())


def broker_answers(admin: Any) -> bool:
    try:
        md = admin.list_topics(timeout=2)
    except Exception:  # noqa: BLE001 - not up yet: any failure means "try again"
        return False
    return bool(md.brokers) and md.controller_id is not None and md.controller_id >= 0


class QuietLogger:
    """librdkafka logs each refused connect while the broker starts; drop those."""

    def log(self, level: int, fmt: str, *args: Any) -> None:
        log.debug("librdkafka: " + fmt, *args)
