"""Spark's description strings of a query's sources and sink, parsed in one place (pure).

A progress names each source and the sink by a ``toString``: ``KafkaV2[Subscribe[a, b]]``,
``DeltaSource[file:/t]``, ``FileSink[s3a://b/out]``, ``DeltaSink[/tables/t]``,
``ForeachBatchSink``. They are not a format Spark promises to keep; reading them here
only means a change of Spark's wording is met in one module. Everything that tells a
sink or a source by its description (the recorder, the restart plan, the restore's
bootstrap) asks this module.
"""

from __future__ import annotations

import re
from typing import Literal

FILE_SINK = "FileSink["
DELTA_SINK = "DeltaSink["
FOREACH_BATCH_SINK = "ForeachBatchSink"
DELTA_SOURCE = "DeltaSource["

DescribedSinkKind = Literal["file", "delta"]
DescribedSourceKind = Literal["delta", "file", "rate"]

_STRATEGY = re.compile(r"\b(SubscribePattern|Subscribe|Assign)\[([^\]]*)\]")

Strategy = Literal["subscribe", "pattern", "assign", "unknown"]
"""How a Kafka source picks its partitions."""

_STRATEGIES: dict[str, Strategy] = {"Subscribe": "subscribe", "SubscribePattern": "pattern",
                                    "Assign": "assign"}


def _bracketed(text: str, prefix: str) -> str | None:
    """What ``prefix...]`` holds (None: another description, or nothing inside)."""
    if text.startswith(prefix) and text.endswith("]") and len(text) > len(prefix) + 1:
        return text[len(prefix):-1]
    return None


def described_sink(description: str | None) -> tuple[DescribedSinkKind, str] | None:
    """(kind, path) of a sink Spark describes as ``FileSink[path]`` or ``DeltaSink[path]``
    (a progress's ``sink.description``, the journal's ``sink_description``); None for
    any other sink."""
    text = (description or "").strip()
    kinds: tuple[tuple[str, DescribedSinkKind], ...] = ((FILE_SINK, "file"),
                                                        (DELTA_SINK, "delta"))
    for prefix, kind in kinds:
        path = _bracketed(text, prefix)
        if path is not None:
            return kind, path
    return None


def is_foreach_batch_sink(description: str | None) -> bool:
    """A ``foreachBatch`` sink: what its function writes is not in the description."""
    return (description or "").strip().startswith(FOREACH_BATCH_SINK)


def is_kafka_description(description: str | None) -> bool:
    """Spark's Kafka source describes itself as ``KafkaV2[...]`` (or ``KafkaSource[...]``)."""
    return bool(description) and str(description).lstrip().startswith("Kafka")


def described_source(description: str | None) -> DescribedSourceKind | None:
    """A Delta, file or rate source by its description (None: another, or none)."""
    text = (description or "").strip()
    if text.startswith("DeltaSource"):
        return "delta"
    if text.startswith("FileStreamSource"):
        return "file"
    if text.startswith(("RateStream", "RateSource", "RatePerMicroBatch")):
        return "rate"
    return None


def delta_source_path(description: str | None) -> str | None:
    """The table path of a Delta source, from Spark's ``DeltaSource[file:/path]``."""
    return _bracketed((description or "").strip(), DELTA_SOURCE)


def kafka_strategy(description: str | None) -> tuple[Strategy, list[str]]:
    """How a Kafka source picks partitions, from Spark's description.

    ``KafkaV2[Subscribe[a, b]]`` -> ("subscribe", ["a", "b"]); SubscribePattern ->
    ("pattern", [regex]); ``Assign[t-0, t-1]`` -> ("assign", ["t-0", "t-1"]); anything
    else (other Kafka sources, imported checkpoints) -> ("unknown", []).
    """
    match = _STRATEGY.search(description or "")
    if match is None:
        return "unknown", []
    name, body = match.group(1), match.group(2)
    items = [x.strip() for x in body.split(",") if x.strip()]
    return _STRATEGIES[name], items


__all__ = ["DELTA_SINK", "DELTA_SOURCE", "FILE_SINK", "FOREACH_BATCH_SINK", "DescribedSinkKind",
           "DescribedSourceKind", "described_source",
           "Strategy", "delta_source_path", "described_sink", "is_foreach_batch_sink",
           "is_kafka_description", "kafka_strategy"]
