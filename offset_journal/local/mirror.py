"""MirrorMaker 2 between two local brokers, for tests: a replica to fail over to.

It is Apache Kafka's own MM2 (``org.apache.kafka.connect.mirror.MirrorMaker`` from
``connect-mirror``, fetched by :mod:`offset_journal.local.jars` as the ``kafka-mirror`` set at
the broker's Kafka version) in dedicated mode: one JVM running the Connect herder of the
one replication flow ``source alias -> target alias``, its connectors (source,
checkpoint, heartbeat) and their tasks, configured by an ``mm2.properties`` written into
a data directory of its own. MM2 writes nothing to the source cluster (its consumers
there commit no offsets), so the source may be killed under it.

Where MM2 keeps what, under the default replication policy and aliases
``primary``/``replica``, all on the target (the replica):

* the records of topic ``T``: ``primary.T`` (``T`` under ``identity_policy``);
* the offset syncs: ``mm2-offset-syncs.primary.internal`` (:attr:`LocalMirror.
  offset_syncs_topic`), one partition; key ``Struct(topic: STRING, partition: INT32)``,
  value ``Struct(upstreamOffset: INT64, offset: INT64)`` in Kafka's protocol encoding
  (big-endian, a string as an INT16 length and UTF-8 bytes), no version prefix
  (``OffsetSync.java``; checkpoints and heartbeats have an INT16 version before their
  value, offset syncs do not);
* the checkpoints (translated group offsets): ``primary.checkpoints.internal``;
* heartbeats: ``heartbeats``;
* Connect's own state: ``mm2-configs.primary.internal``, ``mm2-offsets.primary.internal``,
  ``mm2-status.primary.internal``, in worker group ``primary-mm2``.

So a second mirror with the same aliases to the same target joins the first one's
Connect cluster and replaces its connectors' configuration: give it other aliases. A
mirror started again with the same aliases resumes where the last one stopped (its
source offsets are in ``mm2-offsets``), which is what restarting MM2 should do.

Readiness is the offset-syncs topic on the target (the source connector creates it as it
starts) and a heartbeat of this flow written to the target after this process started
(the herder has joined its group, configured its connectors and runs their tasks): the
topic alone would be there at once when a mirror is started again.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import MirrorStartError
from ..kafka.mirror import (
    POLICY_DEFAULT,
    POLICY_IDENTITY,
    SyncFormatError,
    offset_syncs_topic,
    read_string,
    replica_topic,
)
from .kafka import LocalKafka, QuietLogger, java_executable, log4j2_config, log_tail, stop_process

log = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
#: ReplicationPolicy.heartbeatsTopic(): the same name under both policies.
HEARTBEATS_TOPIC = "heartbeats"
_START_TIMEOUT_S = 120.0
_LOG_TAIL_LINES = 25
_HEAP = "320m"

_LOG4J2 = log4j2_config({
    "org.apache.kafka.connect.mirror.MirrorMaker": "INFO",
    # "The configuration 'x' was supplied but isn't a known config": MM2 hands every
    # client all of its settings, dozens of these lines per client.
    "org.apache.kafka.clients.admin.AdminClientConfig": "ERROR",
    "org.apache.kafka.clients.consumer.ConsumerConfig": "ERROR",
    "org.apache.kafka.clients.producer.ProducerConfig": "ERROR",
})


@dataclass(frozen=True)
class MirrorSettings:
    """What a local MM2 replicates and how: the two aliases, the topics (a regex), the
    replication policy, ``offset_lag_max`` (a sync at least every that many records)
    and ``offset_flush_interval_ms``: how often the source task commits, which is also
    when MM2 sends the newest offset sync it held back (Connect's default is a minute;
    a second here, so that the newest sync is at most a second old)."""

    source_alias: str = "primary"
    target_alias: str = "replica"
    topics: str = ".*"
    identity_policy: bool = False
    offset_lag_max: int = 100
    offset_flush_interval_ms: int = 1000


@dataclass
class LocalMirror:
    """A running MM2: ``process``, its ``data_dir`` (mm2.properties, the log), ``stop()``."""

    source_bootstrap: str
    target_bootstrap: str
    source_alias: str
    target_alias: str
    data_dir: Path
    identity_policy: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def properties_path(self) -> Path:
        return self.data_dir / "mm2.properties"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "mm2.log"

    @property
    def offset_syncs_topic(self) -> str:
        """On the target: ``offset-syncs.topic.location = target`` names it after the
        source (``DefaultReplicationPolicy.offsetSyncsTopic(sourceAlias)``)."""
        return offset_syncs_topic(self.source_alias)

    def remote_topic(self, topic: str) -> str:
        """The name ``topic`` of the source has on the target."""
        return replica_topic(topic, self.source_alias,
                             POLICY_IDENTITY if self.identity_policy else POLICY_DEFAULT)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """MM2's last log lines, without Java stack frames (local_kafka.log_tail)."""
        return log_tail(self.log_path, "(no MirrorMaker log)", lines)

    def stop(self, *, remove_data: bool = True) -> None:
        """Stop MM2 (SIGTERM: its shutdown hook stops the herder; SIGKILL after 20 s)
        and remove its data directory. What it wrote to the target stays."""
        stop_process(self.process)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if remove_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)


#: Settings for one-broker clusters on one machine, whatever the flow.
_LOCAL_SETTINGS = {
    # One broker per cluster: every topic MM2 creates has one replica (the defaults,
    # 2 and 3, cannot be placed; Connect's own topics default to 3).
    "replication.factor": "1",
    "offset-syncs.topic.replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1",
    "config.storage.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "status.storage.replication.factor": "1",
    # Connect's defaults are 25 and 5 partitions: slow to create, nothing to spread.
    "offset.storage.partitions": "1",
    "status.storage.partitions": "1",
    # Topic configs and ACLs are not ours to copy (no authorizer: ACL sync would log
    # an error each round).
    "sync.topic.configs.enabled": "false",
    "sync.topic.acls.enabled": "false",
    # Seconds, not MM2's 10 minutes: a topic or group made by a test is seen at once,
    # checkpoints and group offsets follow within a second.
    "refresh.topics.interval.seconds": "1",
    "refresh.groups.interval.seconds": "1",
    "emit.checkpoints.interval.seconds": "1",
    "emit.heartbeats.interval.seconds": "1",
    # Spark queries have no consumer group to follow; the journal translates.
    "sync.group.offsets.enabled": "false",
}


def mirror_properties(source: str, target: str, settings: MirrorSettings) -> dict[str, str]:
    """The mm2.properties of one flow ``source_alias -> target_alias`` (bootstrap
    servers ``source`` and ``target``); why each setting is there is said beside it."""
    source_alias, target_alias = settings.source_alias, settings.target_alias
    flow, back = f"{source_alias}->{target_alias}", f"{target_alias}->{source_alias}"
    props = {
        "clusters": f"{source_alias}, {target_alias}",
        f"{source_alias}.bootstrap.servers": source,
        f"{target_alias}.bootstrap.servers": target,
        f"{flow}.enabled": "true",
        f"{back}.enabled": "false",
        # Without this MM2 still runs a herder for the way back, only to emit heartbeats:
        # with its Connect topics and a heartbeats topic on the source, and errors once
        # the source is gone (a failover test kills it).
        f"{back}.emit.heartbeats.enabled": "false",
        # MM2's "topics" is a comma-separated list of regexes; the default exclusions
        # (mm2.*\.internal, .*\.replica, __.*) still apply.
        "topics": settings.topics,
        # The syncs on the target, named mm2-offset-syncs.<source alias>.internal: they
        # must outlive the source cluster, since translating offsets after a failover
        # is what they are for (the default, "source", keeps them on the primary).
        "offset-syncs.topic.location": "target",
        "emit.offset-syncs.enabled": "true",
        # A sync at least every N records per partition (and for each partition's first
        # record): translated offsets are then at most N behind.
        "offset.lag.max": str(settings.offset_lag_max),
        **_LOCAL_SETTINGS,
        # Worker settings are read from the target cluster's prefix (workerConfig()).
        # The source task's offset commit is when MM2 sends the offset syncs it held back
        # (those fewer than offset.lag.max records after the last one): MirrorSettings.
        f"{target_alias}.offset.flush.interval.ms": str(settings.offset_flush_interval_ms),
        # A mirror killed (not stopped) leaves its tasks to a worker that is gone; the
        # next one would wait Connect's 5 minutes before taking them back.
        f"{target_alias}.scheduled.rebalance.max.delay.ms": "0",
        "task.shutdown.graceful.timeout.ms": "3000",
        # Find Connect's plugins by their ServiceLoader manifests (all of MM2's have one)
        # rather than by scanning every jar, seconds faster to start; read once at the
        # top (MirrorMakerConfig) and once per herder (the target's prefix).
        "plugin.discovery": "service_load",
        f"{target_alias}.plugin.discovery": "service_load",
    }
    if settings.identity_policy:
        # Topics keep their names on the target ("orders", not "primary.orders"): what a
        # failover without renaming reads. MM2 then cannot tell replicated topics from
        # local ones, so this suits one-way flows only.
        props["replication.policy.class"] = IDENTITY_POLICY
    return props


def start_local_mirror(source: LocalKafka, target: LocalKafka,
                       settings: MirrorSettings | None = None, *,
                       timeout: float = _START_TIMEOUT_S) -> LocalMirror:
    """Fetch MM2's jars (once), start it replicating ``source`` to ``target`` and wait
    until it replicates (see the module's docstring); a :class:`MirrorStartError` with
    MM2's last lines if it exits or is not ready within ``timeout`` seconds."""
    from .jars import classpath

    settings = settings or MirrorSettings()
    if settings.source_alias == settings.target_alias:
        raise MirrorStartError(f"the source and target aliases are both "
                               f"{settings.source_alias!r}")
    cp = classpath("kafka-mirror")
    data_dir = Path(tempfile.mkdtemp(prefix="oj-mirror-"))
    mirror = LocalMirror(source.bootstrap_servers, target.bootstrap_servers,
                         settings.source_alias, settings.target_alias, data_dir,
                         settings.identity_policy)
    props = mirror_properties(source.bootstrap_servers, target.bootstrap_servers, settings)
    mirror.properties_path.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
    (data_dir / "log4j2.xml").write_text(_LOG4J2)
    # Heartbeats are stamped with the wall clock (the JVM's, this machine's): one from
    # before this moment is from a mirror that ran before (killed, perhaps a second ago).
    started_ms = int(time.time() * 1000)
    mirror._log_file = open(mirror.log_path, "ab")  # noqa: SIM115 - closed in stop()
    try:
        mirror.process = subprocess.Popen(
            [java_executable(), f"-Xmx{_HEAP}", f"-Xms{_HEAP}", "-XX:+UseSerialGC",
             f"-Dlog4j2.configurationFile={data_dir / 'log4j2.xml'}",
             "-cp", cp, MAIN_CLASS, str(mirror.properties_path),
             # this node runs the herders that write to the target only
             "--clusters", settings.target_alias],
            stdout=mirror._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _wait_ready(mirror, started_ms, timeout)
    except BaseException:
        mirror.stop()
        raise
    log.info("MirrorMaker 2 replicating %s (%s) to %s (%s), data in %s",
             settings.source_alias, source.bootstrap_servers, settings.target_alias,
             target.bootstrap_servers, data_dir)
    return mirror


def _wait_ready(mirror: LocalMirror, started_ms: int, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient

    conf: dict[str, Any] = {"bootstrap.servers": mirror.target_bootstrap, "log_level": 0,
                            "logger": QuietLogger()}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not mirror.running():
            raise MirrorStartError("MirrorMaker 2 exited during start; its last lines:\n"
                                   + mirror.log_tail())
        try:
            names = set(admin.list_topics(timeout=2).topics)
        except Exception:  # noqa: BLE001 - the target may be slow to answer: try again
            names = set()
        if {mirror.offset_syncs_topic, HEARTBEATS_TOPIC} <= names and _heartbeat_since(
                mirror, started_ms):
            return
        time.sleep(0.5)
    raise MirrorStartError(f"MirrorMaker 2 was not replicating within {timeout:.0f} s; its "
                           "last lines:\n" + mirror.log_tail())


def _heartbeat_since(mirror: LocalMirror, since_ms: int) -> bool:
    """Whether the target's heartbeats topic holds a heartbeat of this flow (key:
    ``Struct(sourceClusterAlias: STRING, targetClusterAlias: STRING)``) stamped at or
    after ``since_ms``: other flows may write to the same topic."""
    from confluent_kafka import Consumer, TopicPartition

    conf: dict[str, Any] = {"bootstrap.servers": mirror.target_bootstrap,
                            "group.id": "oj-mirror-probe", "enable.auto.commit": False,
                            "allow.auto.create.topics": False, "log_level": 0,
                            "logger": QuietLogger()}
    consumer = Consumer(conf)
    try:
        md = consumer.list_topics(HEARTBEATS_TOPIC, timeout=2).topics.get(HEARTBEATS_TOPIC)
        if md is None or md.error is not None or not md.partitions:
            return False
        wanted = [TopicPartition(HEARTBEATS_TOPIC, p, since_ms) for p in md.partitions]
        starts = [tp for tp in consumer.offsets_for_times(wanted, timeout=2) if tp.offset >= 0]
        if not starts:
            return False
        consumer.assign(starts)
        end = time.monotonic() + 2
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            if _heartbeat_flow(msg.key()) == (mirror.source_alias, mirror.target_alias):
                return True
        return False
    except Exception:  # noqa: BLE001 - not there yet: any failure means "try again"
        return False
    finally:
        consumer.close()


def _heartbeat_flow(key: Any) -> tuple[str, str] | None:
    """(source alias, target alias) of a heartbeat's key (two protocol STRINGs)."""
    if not isinstance(key, bytes):
        return None
    try:
        source, at = read_string(key, 0)
        return source, read_string(key, at)[0]
    except SyncFormatError:
        return None
