"""What a savepoint is made of (pure data): its operators, the parts of their state
exported as Parquet, and the manifest that lists them with their checksums.

Nothing here reads a file or talks to Spark; :mod:`.core` decides, :mod:`._files` and
:mod:`.spark` do the I/O.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

OperatorKind = Literal["aggregation", "dedup", "dedup-within-watermark", "session-window",
                       "stream-stream-join", "transform-with-state",
                       "apply-in-pandas-with-state", "flat-map-groups-with-state", "other"]
"""What a stateful operator is, from its name in ``state-metadata``."""

PartKind = Literal["store", "join-side", "value", "list", "map", "timers"]
"""One exported part of an operator's state: a built-in operator's store (key and value
rows), one side of a stream-stream join, or one state variable of a transformWithState
(value, list or map state, and its registered timers)."""

OPERATOR_KINDS: dict[str, OperatorKind] = {
    "stateStoreSave": "aggregation",
    "dedupe": "dedup",
    "dedupeWithinWatermark": "dedup-within-watermark",
    "sessionWindowStateStoreSaveExec": "session-window",
    "symmetricHashJoin": "stream-stream-join",
    "transformWithStateExec": "transform-with-state",
    "transformWithStateInPandasExec": "transform-with-state",
    "transformWithStateInPySparkExec": "transform-with-state",
    "applyInPandasWithState": "apply-in-pandas-with-state",
    "flatMapGroupsWithState": "flat-map-groups-with-state",
}
"""Spark's operator names (``state-metadata``'s ``operatorName``) and what they are."""

BUILT_IN: frozenset[OperatorKind] = frozenset({
    "aggregation", "dedup", "dedup-within-watermark", "session-window", "stream-stream-join"})
"""Built-in operators: Spark seeds none of them with an initial state."""

FORMAT = "offset-journal-savepoint"
VERSION = 1
MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class FileSum:
    """One file of an exported part: its name in the part's directory, size, SHA-256."""

    name: str
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class Column:
    """One column of an exported part: its ``name`` in the Parquet files (and in
    :func:`~offset_journal.savepoint.initial_state`'s rows), where it comes from in the
    State Data Source's row (``source``: top-level column, then field POSITIONS, as an
    aggregation's fields repeat names such as ``count``), its Spark type (JSON) and
    whether it is part of the grouping key."""

    name: str
    source: tuple[str | int, ...]
    type: Any
    key: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": list(self.source), "type": self.type,
                "key": self.key}


@dataclass(frozen=True)
class Part:
    """One part of an operator's state, exported to ``path`` (relative to the
    savepoint's directory): how it was read (``options`` of ``format("statestore")``),
    the reader's schema, the columns written, its rows and distinct keys, the files and
    their checksums. ``opaque``: value fields Spark keeps as bytes (an aggregate buffer
    such as collect_list's), exported but not usable; ``dropped``: fields with no data
    (void) left out."""

    operator_id: int
    name: str
    kind: PartKind
    path: str
    options: dict[str, str]
    schema: Any
    columns: tuple[Column, ...]
    rows: int
    keys: int
    files: tuple[FileSum, ...]
    ttl: bool = False
    opaque: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.key)

    def to_dict(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "name": self.name, "kind": self.kind,
                "path": self.path, "options": dict(self.options), "schema": self.schema,
                "columns": [c.to_dict() for c in self.columns], "rows": self.rows,
                "keys": self.keys, "files": [f.to_dict() for f in self.files],
                "ttl": self.ttl, "opaque": list(self.opaque), "dropped": list(self.dropped)}


@dataclass(frozen=True)
class Operator:
    """A stateful operator of the old query, as ``state-metadata`` describes it.
    ``windowed``: its key holds a time window (a windowed aggregation, which the
    state-aware rewind can rebuild instead); ``problem``: why its state was not
    exported (None: it was)."""

    id: int
    name: str
    kind: OperatorKind
    partitions: int
    stores: tuple[str, ...]
    min_batch: int | None = None
    max_batch: int | None = None
    properties: Any = None
    windowed: bool = False
    problem: str | None = None

    def label(self) -> str:
        return f"operator {self.id} ({self.kind}, {self.name})"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "kind": self.kind,
                "partitions": self.partitions, "stores": list(self.stores),
                "min_batch": self.min_batch, "max_batch": self.max_batch,
                "properties": self.properties, "windowed": self.windowed,
                "problem": self.problem}


@dataclass(frozen=True)
class SourceEnd:
    """A source's end offset at the savepoint's batch, as the journal has it: where the
    new query starts (Kafka: topic -> partition -> offset)."""

    index: int
    description: str | None
    kind: str
    offset: Any

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "description": self.description, "kind": self.kind,
                "offset": self.offset}


@dataclass(frozen=True)
class Manifest:
    """What a savepoint holds: the query, the run and the batch whose state it is (the
    batch both the checkpoint's ``commits/`` and the journal have), that batch's end
    offsets, the operators and the parts of their state. ``notes``: what was found on
    the way (which of checkpoint and journal was ahead); ``committed_after``: (first,
    last) of the batches the old checkpoint committed after ``batch_id`` that the
    journal lacks (their output is written already, and a new query from the savepoint
    writes it again), None when none."""

    query_name: str
    run_id: str
    query_id: str
    batch_id: int
    checkpoint: str
    end_offsets: tuple[SourceEnd, ...]
    operators: tuple[Operator, ...]
    parts: tuple[Part, ...]
    created_at: str
    spark_version: str = ""
    provider: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    committed_after: tuple[int, int] | None = None

    def operator(self, operator_id: int) -> Operator | None:
        for op in self.operators:
            if op.id == operator_id:
                return op
        return None

    def parts_of(self, operator_id: int) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.operator_id == operator_id)

    def keys(self, operator_id: int) -> int:
        """The operator's keys: the most distinct keys of any of its parts."""
        return max((p.keys for p in self.parts_of(operator_id)), default=0)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "query_name": self.query_name,
                "run_id": self.run_id, "query_id": self.query_id, "batch_id": self.batch_id,
                "checkpoint": self.checkpoint,
                "end_offsets": [e.to_dict() for e in self.end_offsets],
                "operators": [o.to_dict() for o in self.operators],
                "parts": [p.to_dict() for p in self.parts], "created_at": self.created_at,
                "spark_version": self.spark_version, "provider": self.provider,
                "notes": list(self.notes),
                # Only when set: a manifest written before the field keeps its digest.
                **({"committed_after": list(self.committed_after)}
                   if self.committed_after is not None else {})}

    @property
    def digest(self) -> str:
        """SHA-256 of the manifest's canonical JSON: what the journal records, and what
        the file's own ``sha256`` must match."""
        return digest_of(self.to_dict())


def digest_of(document: Any) -> str:
    """SHA-256 (hex) of a JSON document in canonical form (sorted keys, no spaces)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class Savepoint:
    """A savepoint found and checked: its manifest, its directory, its id in the
    journal's ``savepoints`` (None: not recorded there), and the SHA-256 its manifest
    was read with (``sha256``; empty: computed from ``manifest``)."""

    manifest: Manifest
    location: str
    id: int | None = None
    warnings: tuple[str, ...] = ()
    sha256: str = ""

    @property
    def digest(self) -> str:
        """The manifest's SHA-256: what a plan from it names, and ``initial_state``
        checks the manifest it reads against."""
        return self.sha256 or self.manifest.digest

    def label(self) -> str:
        which = f"savepoint {self.id}" if self.id is not None else "savepoint"
        return f"{which} at {self.location}"
