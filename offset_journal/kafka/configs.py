"""What a topic's retention is, as the broker describes it (DescribeConfigs, through an
open confluent-kafka AdminClient).

A cluster with an authorizer describes a topic's configs only to a principal allowed
DescribeConfigs on it, and the broker's only with DescribeConfigs on the cluster: a
consumer's principal is often allowed neither. One topic refused is that topic's
answer, kept with the reason (its configs unknown), never the fleet's: the other
topics are still read. Only a cluster that does not answer fails the whole request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .admin import cluster_metadata, confluent, one_line, request_error

log = logging.getLogger(__name__)

RETENTION_CONFIGS = ("retention.ms", "retention.bytes", "segment.ms", "segment.bytes",
                     "cleanup.policy")
"""The topic configs that say when Kafka deletes a partition's records."""

CHECK_INTERVAL = "log.retention.check.interval.ms"


@dataclass(frozen=True)
class TopicConfigs:
    """Each topic's configs (``configs``), of one broker ``log.retention.check.interval.ms``
    (``broker``: empty when not described), and the topics whose configs the broker
    would not describe, each with why (``unknown``)."""

    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    broker: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)


def _refused(exc: Any) -> str | None:
    """Why one resource was not described, or None when the cluster did not answer (the
    whole request fails then, as any other probe would)."""
    ck = confluent()
    arg: Any = exc.args[0] if exc.args else None
    code = arg.code() if arg is not None and hasattr(arg, "code") else None
    if code in (ck.KafkaError._TRANSPORT, ck.KafkaError._TIMED_OUT,
                ck.KafkaError._ALL_BROKERS_DOWN, ck.KafkaError._RESOLVE, None):
        return None
    why = one_line(exc)
    if code in (ck.KafkaError.TOPIC_AUTHORIZATION_FAILED,
                ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED):
        why = why.rstrip(".") + "; the principal lacks DescribeConfigs on it"
    return why


def topic_configs(admin: Any, topics: Iterable[str], *, timeout: float = 10,
                  where: str = "the cluster", names: Iterable[str] = RETENTION_CONFIGS,
                  ) -> TopicConfigs:
    """Each topic's configs in ``names`` (as the broker resolves them: the topic's own,
    else the broker's default) and, of one broker, ``log.retention.check.interval.ms``
    (how often it applies retention). Topics the cluster lacks are left out; a topic
    it refuses to describe is in ``unknown`` with the reason; the broker refused leaves
    ``broker`` empty (Kafka's default interval is then assumed by the forecast)."""
    from confluent_kafka.admin import ConfigResource

    ck = confluent()
    wanted = set(names)
    metadata = cluster_metadata(admin, where, timeout)
    present = sorted(t for t in set(topics) if t in metadata.topics
                     and metadata.topics[t].error is None)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in present]
    brokers = sorted(metadata.brokers)
    if brokers:
        resources.append(ConfigResource(ConfigResource.Type.BROKER, str(brokers[0])))
    out = TopicConfigs()
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout)
    except ck.KafkaException as exc:
        raise request_error("cannot read topic configs", exc, where) from None
    for resource, future in futures.items():
        try:
            entries = future.result(timeout)
        except ck.KafkaException as exc:
            why = _refused(exc)
            if why is None:
                raise request_error("cannot read topic configs", exc, where) from None
            if resource.restype == ConfigResource.Type.BROKER:
                log.info("the configs of broker %s at %s were not described (%s): Kafka's "
                         "default %s assumed", resource.name, where, why, CHECK_INTERVAL)
            else:
                out.unknown[resource.name] = why
            continue
        if resource.restype == ConfigResource.Type.BROKER:
            entry = entries.get(CHECK_INTERVAL)
            if entry is not None and entry.value is not None:
                out.broker[CHECK_INTERVAL] = str(entry.value)
            continue
        out.configs[resource.name] = {k: str(e.value) for k, e in entries.items()
                                      if k in wanted and e.value is not None}
    return out


__all__ = ["RETENTION_CONFIGS", "TopicConfigs", "topic_configs"]
