"""Where a restored checkpoint's sources start, as its ``offsets/`` files hold it (pure).

A restore's bootstrap batch must read nothing: its ``offsets/0`` ends where the new query
starts. A restart plan hands out Kafka start offsets with ``-2`` for a partition to read
from its earliest (one added since the savepoint's batch); an offsets file holds real
offsets, so such a partition is written at the log start the plan saw (``log_starts``),
where the query then starts reading it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..errors import RestoreError


def concrete_ends(sources: Iterable[Any]) -> tuple[str, ...]:
    """Each source's start offsets as JSON, in source order, from a plan's sources
    (``index``, ``offsets``: topic -> partition -> offset, ``log_starts``: (topic,
    partition) -> log start, ``starting_offsets()`` for a source that is not Kafka).
    RestoreError for an earliest partition whose log start the plan did not see."""
    out = []
    for source in sorted(sources, key=lambda s: s.index):
        if source.offsets is None:
            out.append(source.starting_offsets())
            continue
        ends: dict[str, dict[str, int]] = {}
        for topic, parts in source.offsets.items():
            for partition, offset in parts.items():
                if int(offset) < 0:
                    low = source.log_starts.get((topic, int(partition)))
                    if low is None:
                        raise RestoreError(
                            f"the plan starts {topic}-{partition} at its earliest without "
                            "its log start: plan with the cluster's bootstrap servers")
                    offset = low
                ends.setdefault(topic, {})[str(partition)] = int(offset)
        out.append(json.dumps(ends, sort_keys=True, separators=(",", ":")))
    return tuple(out)
