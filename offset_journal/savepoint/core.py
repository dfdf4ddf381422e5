"""A savepoint's decisions (pure): which batch, which operators and parts, which columns,
and whether a manifest and its files are what was written.

* :func:`choose_batch`: the newest batch both the old checkpoint's ``commits/`` and the
  journal have, saying which is ahead when they disagree;
* :func:`operators_of` and :func:`read_specs`: ``state-metadata``'s rows as operators, and
  how to read each part of their state (store, join side, state variable, timers);
* :func:`export_columns`: the reader's schema as flat, uniquely named columns, taken by
  POSITION (an aggregation's buffer repeats names: ``count``, ``count``, ``sum``...);
* :func:`manifest_from_dict` / :func:`check_files`: a manifest read back, and its files
  against the checksums it lists: altered means refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import SavepointError
from ..rows import RecordedSavepoint
from .model import (
    FORMAT,
    OPERATOR_KINDS,
    VERSION,
    Column,
    FileSum,
    Manifest,
    Operator,
    OperatorKind,
    Part,
    PartKind,
    SourceEnd,
    digest_of,
)

TTL_FIELD = "ttlExpirationMs"
TTL_COLUMN = "ttl_expiration_ms"
TIMERS = "timers"


# --------------------------------------------------------------------------- the batch


def choose_batch(committed: Iterable[int], journaled: Iterable[int]) -> tuple[int, list[str]]:
    """The newest batch id both the checkpoint committed and the journal holds (of the
    checkpoint's query id), and notes saying which was ahead. SavepointError when they
    share none."""
    done, known = set(committed), set(journaled)
    both = done & known
    if not both:
        if done and known and max(known) < min(done):
            raise SavepointError(
                f"the checkpoint no longer holds batch {max(known)}, the journal's newest "
                f"of it: the oldest batch still there is {min(done)} "
                "(spark.sql.streaming.minBatchesToRetain), so no state matches offsets the "
                "journal has")
        have = (f"commits {min(done)}..{max(done)}" if done else "no commit")
        jour = (f"journal up to {max(known)}" if known else "no journaled batch")
        raise SavepointError(f"the checkpoint and the journal have no batch in common "
                             f"({have}, {jour}): no state can be matched to offsets")
    chosen = max(both)
    notes = []
    top_done, top_known = max(done), max(known)
    if top_done > top_known:
        notes.append(f"the checkpoint is ahead of the journal (commits up to batch "
                     f"{top_done}, journal up to {top_known}: the listener had not "
                     f"journaled the last batches); the savepoint takes batch {chosen}, the "
                     "newest both have")
    elif top_known > top_done:
        notes.append(f"the journal is ahead of the checkpoint (journal up to batch "
                     f"{top_known}, commits up to {top_done}: the checkpoint's last "
                     f"commits were not written); the savepoint takes batch {chosen}, the "
                     "newest both have")
    return chosen, notes


def committed_after(committed: Iterable[int], chosen: int) -> tuple[int, int] | None:
    """(first, last) of the batches the checkpoint committed after ``chosen`` (the
    journal lacks them: ``chosen`` is the newest both have), None when none: their
    output is written already, and a new query from the savepoint writes it again."""
    after = sorted(b for b in committed if b > chosen)
    return (after[0], after[-1]) if after else None


# --------------------------------------------------------------------------- operators


def operator_kind(name: str) -> OperatorKind:
    return OPERATOR_KINDS.get(name, "other")


def _properties(text: Any) -> Any:
    if text is None or isinstance(text, (dict, list)):
        return text
    try:
        return json.loads(str(text))
    except ValueError:
        return None


def operators_of(rows: Iterable[Mapping[str, Any]]) -> list[Operator]:
    """``state-metadata``'s rows (one per operator and store) as operators, by id."""
    grouped: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(int(row["operatorId"]), []).append(row)
    out = []
    for op_id, group in sorted(grouped.items()):
        first = group[0]
        mins = [int(r["minBatchId"]) for r in group if r.get("minBatchId") is not None]
        maxs = [int(r["maxBatchId"]) for r in group if r.get("maxBatchId") is not None]
        out.append(Operator(
            id=op_id, name=str(first["operatorName"]),
            kind=operator_kind(str(first["operatorName"])),
            partitions=int(first.get("numPartitions") or 0),
            stores=tuple(sorted({str(r["stateStoreName"]) for r in group})),
            min_batch=max(mins) if mins else None, max_batch=min(maxs) if maxs else None,
            properties=_properties(first.get("operatorProperties"))))
    return out


def state_gone(operator: Operator, batch_id: int) -> str | None:
    """Why ``operator``'s state at ``batch_id`` is no longer in the checkpoint (Spark
    keeps ``spark.sql.streaming.minBatchesToRetain`` batches), or None."""
    if operator.min_batch is not None and batch_id < operator.min_batch:
        return (f"the state of {operator.label()} at batch {batch_id} is no longer in the "
                f"checkpoint: the oldest batch still there is {operator.min_batch} "
                "(spark.sql.streaming.minBatchesToRetain)")
    return None


@dataclass(frozen=True)
class ReadSpec:
    """How one part of an operator's state is read: ``format("statestore")`` options
    besides the checkpoint and batch id."""

    operator_id: int
    name: str
    kind: PartKind
    options: dict[str, str]
    ttl: bool = False


_VARIABLE_KINDS: dict[str, PartKind] = {"ValueState": "value", "ListState": "list",
                                        "MapState": "map", "TimerState": "timers"}


def read_specs(operator: Operator) -> list[ReadSpec]:
    """The parts of ``operator``'s state and how to read each: every state variable of a
    transformWithState (and its timers), both sides of a stream-stream join, the store of
    any other operator. SavepointError when a transformWithState names a state variable
    of a kind this release does not know."""
    base = {"operatorId": str(operator.id)}
    if operator.kind == "stream-stream-join":
        return [ReadSpec(operator.id, side, "join-side", {**base, "joinSide": side})
                for side in ("left", "right")]
    if operator.kind == "transform-with-state":
        variables = (operator.properties or {}).get("stateVariables") or []
        specs = []
        timers = False
        for var in variables:
            kind = _VARIABLE_KINDS.get(str(var.get("stateVariableType")))
            name = str(var.get("stateName"))
            if kind is None:
                raise SavepointError(f"{operator.label()} has state variable {name!r} of a "
                                     f"kind this release cannot read "
                                     f"({var.get('stateVariableType')})")
            if kind == "timers":
                timers = True
                continue
            specs.append(ReadSpec(operator.id, name, kind, {**base, "stateVarName": name},
                                  bool(var.get("ttlEnabled"))))
        if timers:
            specs.append(ReadSpec(operator.id, TIMERS, "timers",
                                  {**base, "readRegisteredTimers": "true"}))
        return specs
    stores = operator.stores or ("default",)
    return [ReadSpec(operator.id, store, "store",
                     {**base, **({"storeName": store} if store != "default" else {})})
            for store in stores]


# --------------------------------------------------------------------------- columns


def struct_fields(struct: Any) -> list[Mapping[str, Any]]:
    """A struct type's fields (Spark's JSON); none for any other type."""
    if isinstance(struct, Mapping) and struct.get("type") == "struct":
        return list(struct.get("fields") or [])
    return []


def is_struct(t: Any) -> bool:
    return isinstance(t, Mapping) and t.get("type") == "struct"


def positional(t: Any) -> Any:
    """A Spark type (JSON) with every struct's fields renamed ``_0``, ``_1``... (nested
    too): a struct cast to it keeps its values by position, so repeated names (an
    aggregation's ``count``, ``count``) can each be selected."""
    if not is_struct(t):
        return t
    return {"type": "struct", "fields": [
        {**f, "name": f"_{i}", "type": positional(f["type"]), "metadata": {}}
        for i, f in enumerate(struct_fields(t))]}


class _Names:
    """Unique column names: a name taken gets ``prefix`` first, then a number."""

    def __init__(self) -> None:
        self.taken: set[str] = set()

    def add(self, name: str, prefix: str = "value_") -> str:
        candidate = name
        if candidate in self.taken:
            candidate = f"{prefix}{name}"
        n = 1
        while candidate in self.taken:
            candidate = f"{prefix}{name}_{n}"
            n += 1
        self.taken.add(candidate)
        return candidate


def _unwrap_ttl(t: Any) -> tuple[Any, int | None, int | None]:
    """A ``{value: struct, ttlExpirationMs: long}`` struct (state with a TTL): the inner
    struct, the positions of ``value`` and of the TTL field; else (t, None, None)."""
    fields = struct_fields(t)
    names = [f["name"] for f in fields]
    if len(fields) == 2 and set(names) == {"value", TTL_FIELD} and is_struct(
            fields[names.index("value")]["type"]):
        return fields[names.index("value")]["type"], names.index("value"), names.index(TTL_FIELD)
    return t, None, None


def export_columns(kind: PartKind, operator: OperatorKind, schema: Any,
                   ) -> tuple[list[Column], list[str], list[str]]:
    """The flat columns a part is exported with, from the State Data Source's schema (a
    struct type as JSON): the key's fields first (the grouping key), then the state's.
    Returns (columns, opaque fields, dropped fields). Fields are taken by position: a
    name repeated in its struct gets its position (``count``, ``count_1``, ``sum``,
    ``count_3``), one the key already has a prefix (``value_``, ``map_key_``)."""
    flat = _Flattener(operator, {f["name"]: (i, f["type"])
                                 for i, f in enumerate(struct_fields(schema))})
    top = flat.top
    if "key" in top:
        flat.struct("key", (), top["key"][1], key=True)
    if kind == "list":
        flat.state("list_element")
    elif kind == "map":
        if "user_map_key" in top:
            flat.struct("user_map_key", (), top["user_map_key"][1], prefix="map_key_")
        flat.state("user_map_value")
    elif kind == "timers":
        if "expiration_timestamp_ms" in top:
            flat.leaf("expiration_timestamp_ms", ("expiration_timestamp_ms",),
                      top["expiration_timestamp_ms"][1])
    else:
        flat.state("value")
    return flat.columns, flat.opaque, flat.dropped


class _Flattener:
    """One part's schema flattened into columns, field by field (export_columns)."""

    def __init__(self, operator: OperatorKind, top: dict[str, tuple[int, Any]]) -> None:
        self.operator, self.top = operator, top
        self.names = _Names()
        self.columns: list[Column] = []
        self.opaque: list[str] = []
        self.dropped: list[str] = []

    def leaf(self, name: str, source: tuple[str | int, ...], t: Any, *, key: bool = False,
             prefix: str = "value_") -> None:
        if t == "void" or t == "null":
            self.dropped.append(name)
            return
        column = Column(self.names.add(name, prefix), source, t, key)
        if t == "binary" and self.operator == "aggregation":
            self.opaque.append(column.name)
        self.columns.append(column)

    def struct(self, head: str, path: tuple[str | int, ...], t: Any, prefix: str = "value_",
               key: bool = False) -> None:
        """A struct's fields, by position; a name repeated inside it (an aggregation's
        ``count``, ``count``) gets its position: ``count``, ``count_1``."""
        seen: set[str] = set()
        for i, f in enumerate(struct_fields(t)):
            name = str(f["name"])
            self.leaf(f"{name}_{i}" if name in seen else name, (head, *path, i), f["type"],
                      key=key, prefix=prefix)
            seen.add(name)

    def state(self, head: str) -> None:
        """A value struct: flattened (TTL unwrapped; applyInPandasWithState's groupState
        flattened once more)."""
        if head not in self.top:
            return
        t = self.top[head][1]
        if not is_struct(t):
            self.leaf(head, (head,), t)
            return
        inner, at_value, at_ttl = _unwrap_ttl(t)
        if at_value is not None and at_ttl is not None:
            self.struct(head, (at_value,), inner)
            self.leaf(TTL_COLUMN, (head, at_ttl), "long")
            return
        fields = struct_fields(t)
        if self.operator == "apply-in-pandas-with-state" and fields and \
                fields[0]["name"] == "groupState" and is_struct(fields[0]["type"]):
            self.struct(head, (0,), fields[0]["type"])
            for i, f in enumerate(fields[1:], start=1):
                self.leaf(str(f["name"]), (head, i), f["type"])
            return
        self.struct(head, (), t)


def windowed_key(schema: Any) -> bool:
    """True when a state's key holds a time window (``window: struct<start, end>``)."""
    top = {f["name"]: f["type"] for f in struct_fields(schema)}
    return any(f["name"] == "window" and is_struct(f["type"])
               for f in struct_fields(top.get("key")))


# --------------------------------------------------------------------------- reading back


def _need(document: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = document.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ValueError(f"{key} is missing or malformed")
    return value


def _file(d: Mapping[str, Any]) -> FileSum:
    sha = _need(d, "sha256", str)
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise ValueError("a file checksum is malformed")
    name = _need(d, "name", str)
    if name in ("", ".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"file name {name!r} is not a name in its part's directory")
    return FileSum(name, _need(d, "size", int), sha)


def _part(d: Mapping[str, Any]) -> Part:
    kind = _need(d, "kind", str)
    if kind not in ("store", "join-side", "value", "list", "map", "timers"):
        raise ValueError(f"unknown part kind {kind!r}")
    path = _need(d, "path", str)
    if path.startswith(("/", "\\")) or ".." in path.replace("\\", "/").split("/"):
        raise ValueError(f"part path {path!r} leaves the savepoint")
    columns = tuple(Column(_need(c, "name", str), tuple(_need(c, "source", list)),
                           c.get("type"), bool(c.get("key"))) for c in _need(d, "columns", list))
    return Part(
        operator_id=_need(d, "operator_id", int), name=_need(d, "name", str), kind=kind,
        path=path, options={str(k): str(v) for k, v in _need(d, "options", dict).items()},
        schema=d.get("schema"), columns=columns, rows=_need(d, "rows", int),
        keys=_need(d, "keys", int), files=tuple(_file(f) for f in _need(d, "files", list)),
        ttl=bool(d.get("ttl")), opaque=tuple(d.get("opaque") or ()),
        dropped=tuple(d.get("dropped") or ()))


def _operator(d: Mapping[str, Any]) -> Operator:
    return Operator(
        id=_need(d, "id", int), name=_need(d, "name", str),
        kind=operator_kind(_need(d, "name", str)), partitions=_need(d, "partitions", int),
        stores=tuple(_need(d, "stores", list)), min_batch=d.get("min_batch"),
        max_batch=d.get("max_batch"), properties=d.get("properties"),
        windowed=bool(d.get("windowed")), problem=d.get("problem"))


def _batch_range(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) for v in value)):
        raise ValueError("committed_after is malformed")
    return int(value[0]), int(value[1])


def manifest_from_dict(d: Any) -> Manifest:
    """A manifest from its JSON; SavepointError (one line) when it is not one."""
    try:
        if not isinstance(d, Mapping) or d.get("format") != FORMAT:
            raise ValueError("not an offset-journal savepoint manifest")
        if d.get("version") != VERSION:
            raise ValueError(f"manifest version {d.get('version')!r} is not {VERSION}")
        ends = tuple(SourceEnd(_need(e, "index", int), e.get("description"),
                               _need(e, "kind", str), e.get("offset"))
                     for e in _need(d, "end_offsets", list))
        return Manifest(
            query_name=_need(d, "query_name", str), run_id=_need(d, "run_id", str),
            query_id=_need(d, "query_id", str), batch_id=_need(d, "batch_id", int),
            checkpoint=_need(d, "checkpoint", str), end_offsets=ends,
            operators=tuple(_operator(o) for o in _need(d, "operators", list)),
            parts=tuple(_part(p) for p in _need(d, "parts", list)),
            created_at=_need(d, "created_at", str),
            spark_version=str(d.get("spark_version") or ""), provider=d.get("provider"),
            notes=tuple(str(n) for n in d.get("notes") or ()),
            committed_after=_batch_range(d.get("committed_after")))
    except (ValueError, TypeError, AttributeError) as exc:
        raise SavepointError(f"the savepoint manifest is malformed: {exc}") from None


def recorded_operators(manifest: Any) -> tuple[int | None, str | None]:
    """How many operators a ``savepoints`` row's manifest lists, or (None, why it is
    ignored): any role with INSERT on the table can write a row `savepoint create` did
    not, so the manifest is read as a manifest, never trusted to be one."""
    try:
        return len(manifest_from_dict(manifest).operators), None
    except SavepointError as exc:
        return None, str(exc)


ROW_FIELDS = ("query_name", "run_id", "query_id", "batch_id", "checkpoint")
"""What a ``savepoints`` row and its manifest must both name (migration 0020 has the
database refuse a row whose manifest names others)."""


def _row_fields(row: Any) -> Mapping[str, Any]:
    return row if isinstance(row, Mapping) else vars(row)


def _batch_words(v: Mapping[str, Any]) -> str:
    return (f"batch {v['batch_id']} of run {v['run_id']} of query {v['query_name']!r} "
            f"(query id {v['query_id']}, checkpoint {v['checkpoint']})")


def row_mismatch(row: Mapping[str, Any] | RecordedSavepoint, manifest: Manifest) -> str | None:
    """Why a ``savepoints`` row does not vouch for ``manifest`` (None: it does). A row
    vouches only for a manifest of its own query, run, query id and batch: a SHA-256
    alone would let a row naming one query's batch vouch for another query's state."""
    have, want = _row_fields(row), manifest.to_dict()
    if all(have.get(k) == want[k] for k in ROW_FIELDS):
        return None
    return f"its manifest names {_batch_words(want)}, not the row's {_batch_words(have)}"


def recorded_problem(row: Mapping[str, Any] | RecordedSavepoint, *,
                     sha256: bool = False) -> str | None:
    """Why a ``savepoints`` row's own recorded manifest is ignored (None: it is a
    manifest, of the row's batch, and with ``sha256`` the one the row's SHA-256 names):
    such a row lists as unknown and pins nothing. The SHA-256 is left out where a
    false alarm would cost (``prune``): a manifest's JSON read back from Postgres may
    spell a very large float otherwise (1e+16 as 10000000000000000)."""
    fields = _row_fields(row)
    try:
        manifest = manifest_from_dict(fields.get("manifest"))
    except SavepointError as exc:
        return str(exc)
    mismatch = row_mismatch(fields, manifest)
    if mismatch is not None:
        return f"the recorded manifest does not match the row: {mismatch}"
    if sha256 and digest_of(fields.get("manifest")) != fields.get("manifest_sha256"):
        return ("it is not the one its SHA-256 names (manifest_sha256), the manifest a "
                "directory is checked against")
    return None


def pinning(rows: Iterable[RecordedSavepoint]) -> tuple[list[int], list[tuple[int, str]]]:
    """Which recorded savepoints keep their batch from ``prune`` (ids), and which pin
    nothing, with why: a row whose manifest is not one, or not of its batch, is not a
    savepoint (any role with INSERT on the table may write one). A savepoint whose files
    retention deleted keeps nothing, and needs no note: no plan can start from it."""
    pins: list[int] = []
    ignored: list[tuple[int, str]] = []
    for row in rows:
        if row.deleted_at is not None:
            continue
        why = recorded_problem(row)
        if why is None:
            pins.append(row.id)
        else:
            ignored.append((row.id, why))
    return pins, ignored


def check_files(part: Part, found: Mapping[str, FileSum], where: str) -> None:
    """SavepointError when a part's files are not exactly those its manifest lists, with
    the same sizes and SHA-256 (``found``: what the directory holds, by name)."""
    listed = {f.name: f for f in part.files}
    missing = sorted(set(listed) - set(found))
    extra = sorted(set(found) - set(listed))
    if missing:
        raise SavepointError(f"savepoint at {where}: {part.path}/{missing[0]} is missing: "
                             "the savepoint was altered")
    if extra:
        raise SavepointError(f"savepoint at {where}: {part.path}/{extra[0]} is not in the "
                             "manifest: Spark would read it; the savepoint was altered")
    for name, want in sorted(listed.items()):
        got = found[name]
        if got.size != want.size or got.sha256 != want.sha256:
            raise SavepointError(f"savepoint at {where}: {part.path}/{name} does not match "
                                 "its checksum in the manifest: the savepoint was altered")


def choose_parts(manifest: Manifest, operator: int | None,
                 state_var: str | Sequence[str] | None) -> tuple[Operator, list[Part]]:
    """The operator and parts a caller asks for: ``operator`` may be omitted when the
    savepoint has one; ``state_var`` (a name, names, or None: every part) picks parts by
    name (state variables, ``timers``, ``left``/``right``, ``default``). SavepointError
    naming what exists otherwise."""
    have = ", ".join(str(o.id) for o in manifest.operators) or "none"
    if operator is None:
        if len(manifest.operators) != 1:
            raise SavepointError(f"the savepoint has operators {have}: name one (operator=)")
        op = manifest.operators[0]
    else:
        found = manifest.operator(operator)
        if found is None:
            raise SavepointError(f"the savepoint has no operator {operator} (operators: "
                                 f"{have})")
        op = found
    if op.problem:
        raise SavepointError(f"{op.label()} was not exported: {op.problem}")
    parts = list(manifest.parts_of(op.id))
    if state_var is None:
        return op, parts
    wanted = [state_var] if isinstance(state_var, str) else list(state_var)
    names = [p.name for p in parts]
    for name in wanted:
        if name not in names:
            raise SavepointError(f"{op.label()} has no state variable {name!r} (it has: "
                                 f"{', '.join(names) or 'none'})")
    return op, [p for p in parts if p.name in wanted]
