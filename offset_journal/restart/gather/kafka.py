"""What the Kafka cluster holds for a plan (I/O: asks the cluster, writes nothing): the
topics' partitions and log ranges, offsets at a time (and the journaled batches they
read again), where a real-time run's partitions stood after it stopped. Which cluster
it is, and MM2's syncs on a replica: :mod:`.cluster`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...errors import RestartError
from ...journal import Journal
from ...kafka.admin import offsets_for_time, topic_state
from ...kafka.mirror import replica_topic
from ...rows import kafka_topics
from .._inputs import ClusterFacts, JournalFacts, KafkaFacts, MirrorFacts
from ..decide.from_time import chosen_offsets, epoch_millis
from ..request import PlanRequest

if TYPE_CHECKING:
    from ...kafka.admin import TimeLookup
    from ...rows import RereadRun


def kafka_facts(journal: Journal, request: PlanRequest, found: JournalFacts,
                cluster: ClusterFacts | None, mirror: MirrorFacts | None) -> KafkaFacts:
    """The cluster's facts for a plan from ``found`` (with ``cluster`` and ``mirror``,
    read first): a record-time plan's offsets, or else the partitions and log ranges of
    the topics the plan names (on a replica, of the replica's topics); then where a
    real-time run's partitions stood after it stopped. Nothing is asked without
    bootstrap servers; RestartError for a subscribed topic the cluster lacks at a time."""
    servers = request.bootstrap_servers
    if not servers:
        return KafkaFacts(cluster=cluster, mirror=mirror)
    timeout, config = request.kafka_timeout, request.kafka_config
    subscribed = set(request.subscribe or ())
    mine = kafka_topics([found.anchor], request.source)  # the anchor's own topics
    lookup: TimeLookup | None = None
    reread: Sequence[RereadRun] = ()
    if request.from_time is None:
        journaled = kafka_topics([*found.chain, found.anchor], request.source)
        if request.translate_from is not None:
            journaled = [replica_topic(t, request.translate_from, request.policy)
                         for t in journaled]
        topics = sorted(set(journaled) | subscribed)
        state = topic_state(servers, topics, timeout=timeout, config=config) if topics \
            else None
    else:
        state, lookup = offsets_for_time(servers, sorted(set(mine) | subscribed),
                                         epoch_millis(request.from_time), timeout=timeout,
                                         config=config)
        unknown = sorted(subscribed - set(state))
        if unknown:
            raise RestartError(f"unknown topic {', '.join(unknown)}: not on the Kafka "
                               f"cluster at {servers}")
        if subscribed:
            lookup = {t: parts for t, parts in lookup.items() if t in subscribed}
        reread = journal.reread_runs(request.query_name, chosen_offsets(lookup, state),
                                     request.source)
    tail, ends = found.real_time, None
    if tail is not None and tail.stopped_by is not None and mine:
        # Per partition the first offset timestamped after the run stopped (None: none).
        _state, ends = offsets_for_time(servers, mine, epoch_millis(tail.stopped_by) + 1,
                                        timeout=timeout, config=config)
    return KafkaFacts(state, lookup, reread, cluster, mirror, ends)


__all__ = ["kafka_facts"]
