"""A plan on an MM2 replica of the journaled cluster (pure): its offsets translated
through MirrorMaker 2's offset syncs (whether the cluster is another one, and may be:
:mod:`.cluster`).

Told that the plan's cluster is an MM2 replica of the journaled one
(``translate_from``: MM2's alias of the source cluster), each journaled partition offset
is translated (:func:`translate_offsets`) to the replica's offset of the same record,
never past it (:mod:`offset_journal.kafka.mirror`), and the plan says per partition how
many records at most are read again, and which records never reached the replica (DATA
LOSS).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...kafka.mirror import (
    offset_syncs_topic,
    replica_topic,
    translate_offset,
)
from ...offsets import KafkaOffsets
from ...wording import count, tp
from .._findings import Findings
from .._inputs import ClusterFacts, MirrorFacts  # ClusterFacts: importable as before
from ..model import PartitionTranslation, Translation
from .cluster import cluster_findings, refuse_other_cluster  # importable here as before

if TYPE_CHECKING:
    from ...kafka.admin import TopicState

def translate_offsets(offsets: KafkaOffsets, mirror: MirrorFacts,
                      replica: TopicState | None = None, allow_data_loss: bool = False,
                      ) -> tuple[KafkaOffsets, Translation, Findings]:
    """``offsets`` (the source cluster's topics and offsets; -2 earliest) on the replica:
    renamed by the replication policy, each offset translated by its partition's last
    offset sync at or below it. A partition without one starts at the replica's
    earliest, with a warning; but when the replica (``replica``: its log ranges) holds
    nothing before the first sync's record, MM2 began copying the partition above the
    journaled offset and the records between never reached the replica: DATA LOSS, an
    error unless ``allow_data_loss``, and the partition starts at that record."""
    out: KafkaOffsets = {}
    done = Translation(mirror.alias, mirror.policy)
    for topic, parts in sorted(offsets.items()):
        renamed = replica_topic(topic, mirror.alias, mirror.policy)
        for partition, offset in sorted(parts.items()):
            logs = (replica or {}).get(renamed, {})
            row = _translated(topic, partition, offset, renamed,
                              mirror.syncs.get((topic, partition), ()),
                              logs[partition][0] if partition in logs else None)
            out.setdefault(renamed, {})[partition] = row.offset
            done.partitions.append(row)
    return out, done, _translation_findings(done, allow_data_loss)


def _translated(topic: str, partition: int, offset: int, renamed: str,
                pairs: Sequence[tuple[int, int]], log_start: int | None,
                ) -> PartitionTranslation:
    """``log_start``: the replica partition's (None: it has none, or is not known)."""
    if offset < 0:  # earliest (-2) or latest (-1) mean the same on the replica
        return PartitionTranslation(topic, partition, offset, renamed, offset,
                                    0 if offset == -1 else None)
    found = translate_offset(offset, pairs)
    if found.offset is not None:
        return PartitionTranslation(topic, partition, offset, renamed, found.offset,
                                    found.reread, found.sync)
    if not pairs:
        return PartitionTranslation(topic, partition, offset, renamed, -2, None)
    upstream, downstream = pairs[0]  # the first sync, above the journaled offset
    if log_start is not None and log_start < downstream:
        # The replica holds records before it: maybe the journaled ones, their syncs
        # compacted away (the syncs topic keeps a partition's latest). Skip nothing.
        return PartitionTranslation(topic, partition, offset, renamed, -2, None,
                                    (upstream, downstream), held=downstream - log_start)
    # Nothing before it on the replica: offsets offset..upstream-1 were never copied.
    return PartitionTranslation(topic, partition, offset, renamed, downstream, 0,
                                (upstream, downstream), lost=upstream - offset)


def _translation_findings(done: Translation, allow_data_loss: bool) -> Findings:
    found = Findings()
    synced = len(done.partitions) - len(done.unsynced) - len(done.lost)
    found.notes.append(
        f"translated from the journal's offsets on cluster alias {done.alias} with MM2's "
        f"offset syncs ({offset_syncs_topic(done.alias)}): {count(synced, 'partition')} "
        f"start at the replica's record of the journaled offset or just before it; "
        f"records read again: at most {done.reread_bound} (MM2 writes a sync at least "
        "every offset.lag.max records; its own duplicates come on top)")
    if done.unsynced:
        names = ", ".join(_unsynced_label(p) for p in done.unsynced[:8])
        more = f" and {len(done.unsynced) - 8} more" if len(done.unsynced) > 8 else ""
        found.warnings.append(
            f"{count(len(done.unsynced), 'partition')} ({names}{more}) have no MM2 offset "
            "sync at or below the journaled offset: they start at the replica's earliest. "
            "If the syncs topic was compacted (it keeps a partition's latest sync), the "
            "journaled records are among those the replica holds and are read again; if "
            "MM2 began copying above the journaled offset, the records in between never "
            "reached the replica")
    if done.lost:
        lost = _not_replicated(done.lost, allow_data_loss)
        found.merge(lost)
    return found


def _unsynced_label(p: PartitionTranslation) -> str:
    name = tp(p.replica_topic, p.partition)
    if p.sync is None or p.held is None:
        return f"{name}: no sync at all"
    return (f"{name}: journaled {p.journaled}, first sync {p.sync[0]} -> {p.sync[1]}, "
            f"{count(p.held, 'record')} held before it")


def _not_replicated(lost: list[PartitionTranslation], allow_data_loss: bool) -> Findings:
    """DATA LOSS, worded as the planner words records deleted before being read."""
    total = sum(p.lost for p in lost)
    head = (f"{count(total, 'record')} in {count(len(lost), 'partition')} never reached the "
            "MirrorMaker 2 replica (MM2 began copying them above the journaled offset)")

    def first(p: PartitionTranslation) -> int:
        return p.journaled + p.lost

    if allow_data_loss:
        return Findings(warnings=[
            f"DATA LOSS accepted (--allow-data-loss): {head}: "
            + "; ".join(f"{tp(p.replica_topic, p.partition)} starts at {p.offset}, MM2's "
                        f"copy of {tp(p.topic, p.partition)} {first(p)}: records "
                        f"{p.journaled}..{first(p) - 1} ({count(p.lost, 'record')}) are lost"
                        for p in lost)])
    return Findings(errors=[
        f"DATA LOSS: {head}: "
        + "; ".join(f"{tp(p.topic, p.partition)} was journaled at {p.journaled}, but MM2's "
                    f"first offset sync for it is {first(p)} -> "
                    f"{tp(p.replica_topic, p.partition)} {p.offset} and the replica holds "
                    f"nothing before that: records {p.journaled}..{first(p) - 1} were never "
                    f"replicated ({count(p.lost, 'record')} lost)"
                    for p in lost)
        + ". To start those partitions at MM2's first record and accept the loss: "
        "--allow-data-loss"])


def subscription_errors(subscribe: list[str] | tuple[str, ...], mirror: MirrorFacts,
                        journaled: list[str]) -> list[str]:
    """An error for each journaled topic the new job subscribes to by its source name
    when the replica names it otherwise: the translated offsets would be dropped."""
    out = []
    for topic in sorted(set(journaled)):
        renamed = replica_topic(topic, mirror.alias, mirror.policy)
        if renamed != topic and topic in subscribe and renamed not in subscribe:
            out.append(f"the new job subscribes to {topic}, but on the replica MM2 named it "
                       f"{renamed}: subscribe to {renamed}, or its translated offsets are "
                       "not used and its backlog is not read")
    return out


def translated_items(items: list[str], mirror: MirrorFacts | None,
                     strategy: str) -> list[str]:
    """The new job's topics on the replica (a pattern is left as it is)."""
    if mirror is None or strategy == "pattern":
        return items
    return [replica_topic(t, mirror.alias, mirror.policy) for t in items]


__all__ = ["ClusterFacts", "MirrorFacts", "cluster_findings", "refuse_other_cluster",
           "subscription_errors", "translate_offsets", "translated_items"]
