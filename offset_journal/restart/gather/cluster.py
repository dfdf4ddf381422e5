"""Which Kafka cluster a plan is for (I/O: asks the cluster its id and reads the
clusters the journal's runs read; writes nothing), and MM2's offset syncs on a replica
for a translated plan."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...errors import RestartError
from ...journal import Journal
from ...kafka.admin import cluster_id, read_offset_syncs
from ...kafka.mirror import index_syncs, offset_syncs_topic
from .._inputs import ClusterFacts, JournalFacts, MirrorFacts
from ..request import PlanRequest


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
    now: what :func:`~..decide.cluster.refuse_other_cluster` holds a plan (or commit-group)
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


__all__ = ["cluster_facts", "clusters_of", "mirror_facts"]
