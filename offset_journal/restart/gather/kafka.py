"""What the Kafka cluster says for a plan (I/O: asks the cluster, reads nothing of the
journal but the clusters its runs read; writes nothing): the topics' partitions and
log ranges, offsets at a time, which cluster it is, MM2's offset syncs on a replica."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ...errors import RestartError
from ...journal import Journal
from ...kafka.admin import TopicState, cluster_id, offsets_for_time, read_offset_syncs, topic_state
from ...kafka.mirror import index_syncs, offset_syncs_topic, replica_topic
from .._inputs import ClusterFacts, JournalFacts, KafkaFacts, MirrorFacts
from ..decide.from_time import chosen_offsets, epoch_millis
from ..decide.kafka_offsets import kafka_topics
from ..request import PlanRequest

if TYPE_CHECKING:
    from ...kafka.admin import TimeLookup


def kafka_facts(journal: Journal, request: PlanRequest, found: JournalFacts) -> KafkaFacts:
    """The cluster's facts for a plan from ``found``: which cluster it is, MM2's syncs,
    a record-time plan's offsets (:func:`time_facts`) or else the topics' partitions and
    log ranges (:func:`cluster_state`), and where a real-time run's partitions stood
    after it stopped. Nothing is asked without bootstrap servers."""
    cluster = cluster_facts(journal, request, found)
    mirror = mirror_facts(request)
    if request.from_time is not None:
        facts = time_facts(journal, request, found)
    else:
        facts = KafkaFacts(cluster_state(request, found))
    return KafkaFacts(facts.state, facts.time_lookup, facts.reread, cluster, mirror,
                      real_time_ends(request, found))


def cluster_facts(journal: Journal, request: PlanRequest,
                  found: JournalFacts) -> ClusterFacts | None:
    """Which clusters the runs the plan reads batches of read, and which one the
    bootstrap servers are (None: no bootstrap servers given)."""
    if not request.bootstrap_servers:
        return None
    anchor = found.anchor.run_id
    runs = {b.run_id for b in [*found.chain, found.before] if b is not None} - {anchor}
    return clusters_of(journal, request.bootstrap_servers, anchor, runs,
                       timeout=request.kafka_timeout, config=request.kafka_config)


def clusters_of(journal: Journal, servers: str, run_id: str, others: Iterable[str] = (), *,
                timeout: float = 10, config: Mapping[str, Any] | None = None) -> ClusterFacts:
    """The cluster ``run_id`` (and the ``others``) journaled, and the one at ``servers``
    now: what :func:`~.translate.refuse_other_cluster` holds a plan (or commit-group)
    to."""
    now = cluster_id(servers, timeout=timeout, config=config)
    return ClusterFacts(journal.run_cluster_id(run_id), now, servers, run_id,
                        tuple((r, journal.run_cluster_id(r)) for r in sorted(set(others))))


def mirror_facts(request: PlanRequest) -> MirrorFacts | None:
    """MM2's offset syncs on the replica, for a translated plan (None: not asked).
    RestartError when the replica has no syncs topic for the alias."""
    alias = request.translate_from
    if alias is None or not request.bootstrap_servers:
        return None
    topic = offset_syncs_topic(alias)
    syncs = read_offset_syncs(request.bootstrap_servers, topic,
                              timeout=max(request.kafka_timeout, 30), config=request.kafka_config)
    if syncs is None:
        raise RestartError(
            f"--translate-from {alias}: the cluster at {request.bootstrap_servers} has no "
            f"topic {topic}: is {alias} MM2's alias of the journaled cluster, and does MM2 "
            "keep its offset syncs on the replica (offset-syncs.topic.location = target)?")
    return MirrorFacts(alias, index_syncs(syncs), request.policy)


def cluster_state(request: PlanRequest, found: JournalFacts) -> TopicState | None:
    """The partitions and log ranges of the topics the plan names (None: not asked);
    on a replica (a translated plan), of the replica's topics."""
    if not request.bootstrap_servers:
        return None
    journaled = kafka_topics([*found.chain, found.anchor], request.source)
    if request.translate_from is not None:
        journaled = [replica_topic(t, request.translate_from, request.policy)
                     for t in journaled]
    topics = sorted(set(journaled) | set(request.subscribe or ()))
    if not topics:
        return None
    return topic_state(request.bootstrap_servers, topics, timeout=request.kafka_timeout,
                       config=request.kafka_config)


def real_time_ends(request: PlanRequest, found: JournalFacts) -> TimeLookup | None:
    """Per partition of the anchor's Kafka topics, the first offset timestamped after a
    real-time run stopped (None per partition: no such record); None when the run was
    not real-time, the cluster is not asked or the stop time is unknown."""
    tail = found.real_time
    if tail is None or not request.bootstrap_servers or tail.stopped_by is None:
        return None
    topics = kafka_topics([found.anchor], request.source)
    if not topics:
        return None
    _state, lookup = offsets_for_time(request.bootstrap_servers, topics,
                                      epoch_millis(tail.stopped_by) + 1,
                                      timeout=request.kafka_timeout,
                                      config=request.kafka_config)
    return lookup


def time_facts(journal: Journal, request: PlanRequest, found: JournalFacts) -> KafkaFacts:
    """A record-time plan's facts: the cluster's partitions, each one's first offset at
    or after ``request.from_time`` and the journaled batches that reads again.
    RestartError for a subscribed topic the cluster does not have."""
    assert request.from_time is not None and request.bootstrap_servers
    topics = sorted(set(kafka_topics([found.anchor], request.source))
                    | set(request.subscribe or ()))
    state, lookup = offsets_for_time(request.bootstrap_servers, topics,
                                     epoch_millis(request.from_time),
                                     timeout=request.kafka_timeout, config=request.kafka_config)
    unknown = sorted(set(request.subscribe or ()) - set(state))
    if unknown:
        raise RestartError(f"unknown topic {', '.join(unknown)}: not on the Kafka cluster at "
                           f"{request.bootstrap_servers}")
    if request.subscribe:
        lookup = {t: parts for t, parts in lookup.items() if t in request.subscribe}
    reread = journal.reread_runs(request.query_name, chosen_offsets(lookup, state),
                                 request.source)
    return KafkaFacts(state, lookup, reread)


__all__ = ["cluster_facts", "cluster_state", "clusters_of", "kafka_facts", "mirror_facts",
           "real_time_ends", "time_facts"]
