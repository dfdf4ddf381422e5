"""Does the savepoint's state fit the new query's state layout, and how (pure).

Spark's own schema check at a restart compares the new query with the schema files that
query wrote itself: it proves nothing about state copied in from elsewhere. With the
value fields of a state declared in another order (``(total, cnt)`` for ``(cnt,
total)``, both longs), bytes copied as they are give every key wrong values, silently.
So before a byte is written the savepoint's key and value schemas are compared with the
new checkpoint's, operator by operator and column family by column family, field by
field: names, types, order, nullability. What matches is written as it is; what a rule
bridges is mapped, and the mapping is said; anything else is refused in one line naming
the operator and the difference.

The rules:

* operators are matched by id (Spark numbers them in plan order) and kind;
* fields are matched by position, their names equal; when every name of the new schema
  is found exactly once in the old one, by name (a reordered schema); a field renamed on
  purpose is declared (``fields={new: old}``);
* a type may widen (``int`` to ``long``, ``float`` to ``double``...), never narrow or
  change kind; a field that may be null in the savepoint may be null in the new query;
* an aggregation's state may go into a ``transformWithState`` value state of the same
  key (the one value state it has, or the one named); its buffer fields are Spark's
  (``count``, ``max``, ``sum``), so the value state's fields are declared against them
  unless they have the same names;
* a state variable renamed is declared (``variables={new: old}``).

The new layout is what :meth:`~offset_journal.savepoint.restore.describe` reads from the
new checkpoint (Spark's operator metadata and state schema files, after the new query's
bootstrap batch); the old one is the savepoint's manifest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ...errors import RestoreError
from ..core import operator_kind
from ..model import OperatorKind, Part

Decision = Literal["restored", "mapped", "empty", "discarded"]
"""What becomes of one operator of the new query: its state written as the savepoint has
it, written through a mapping, left empty (no state in the savepoint: a new operator, or
an empty one), or discarded (``--discard-state``)."""

Shape = Literal["rows", "join-count", "join-index"]
"""How a column family's rows are made from a part's: one per row, or a stream-stream
join's two stores per side (the number of rows per key; the rows numbered per key)."""

INDEX = "__index"
"""The synthetic column of a join's keyWithIndexToValue key: each row's number within
its key."""
COUNT = "__count"
"""The synthetic column of a join's keyToNumValues value: the rows per key."""
MATCHED = "__matched"
"""The synthetic column of a join's keyWithIndexToValue value (state format 2)."""

_WIDER: dict[str, tuple[str, ...]] = {
    "byte": ("short", "integer", "long"), "short": ("integer", "long"),
    "integer": ("long",), "float": ("double",), "date": ("timestamp",)}


@dataclass(frozen=True)
class Family:
    """One column family of the new checkpoint, as its state schema files describe it."""

    operator_id: int
    operator: str
    store: str
    name: str
    key: Any
    value: Any
    key_encoder: Any = None


@dataclass(frozen=True)
class NewOperator:
    """One stateful operator of the new query (after its bootstrap batch)."""

    id: int
    name: str
    partitions: int
    families: tuple[Family, ...]
    properties: Any = None

    @property
    def kind(self) -> OperatorKind:
        return operator_kind(self.name)

    def label(self) -> str:
        return f"operator {self.id} ({self.kind}, {self.name})"


@dataclass(frozen=True)
class Source:
    """How one field of a new key or value is made: a savepoint column (``column``,
    cast to ``type``), a struct of ``fields``, a null (``column`` and ``fields`` both
    empty), or a synthetic column (:data:`INDEX`, :data:`COUNT`, :data:`MATCHED`)."""

    name: str
    type: Any
    column: str | None = None
    fields: tuple[Source, ...] = ()


@dataclass(frozen=True)
class Target:
    """One column family of the new checkpoint written from one part of the savepoint."""

    operator_id: int
    store: str
    family: str
    part: Part
    key: tuple[Source, ...]
    value: tuple[Source, ...]
    shape: Shape = "rows"


@dataclass(frozen=True)
class RawTarget:
    """One store of the new checkpoint written with the old checkpoint's bytes as they
    are (its RocksDB store at the savepoint's batch, every column family), column
    families renamed by ``families`` (new name -> old name)."""

    operator_id: int
    store: str
    old_operator_id: int
    old_store: str
    families: tuple[tuple[str, str], ...] = ()


Path = Literal["typed", "raw", "none"]
"""How an operator's state is written: the savepoint's typed rows encoded, the old
checkpoint's bytes copied, or nothing written (empty, discarded)."""


@dataclass(frozen=True)
class OperatorPlan:
    """What becomes of one operator's state, how it is written, and why."""

    operator_id: int
    kind: OperatorKind
    decision: Decision
    how: str
    targets: tuple[Target, ...] = ()
    raw: tuple[RawTarget, ...] = ()
    keys: int = 0

    @property
    def path(self) -> Path:
        return "raw" if self.raw else "typed" if self.targets else "none"


@dataclass(frozen=True)
class Rules:
    """What the caller declares or accepts: per new operator id, a value state variable
    to map an aggregation into (``variable``), fields renamed (``fields``: new name ->
    old name, per operator), state variables renamed (``variables``: new -> old), and
    operators whose state is discarded (``discard``: ids, or True for every one that
    cannot be carried)."""

    variable: Mapping[int, str] = field(default_factory=dict)
    fields: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    variables: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    discard: frozenset[int] | bool = frozenset()

    def discards(self, operator_id: int) -> bool:
        return self.discard is True or (
            not isinstance(self.discard, bool) and operator_id in self.discard)


@dataclass(frozen=True)
class Layout:
    """The plan of a restore: one entry per operator of either side, and the notes that
    say each mapping made. ``errors``: why it cannot be made (each one line)."""

    operators: tuple[OperatorPlan, ...]
    notes: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(t for op in self.operators for t in op.targets)

    def check(self) -> Layout:
        """The layout, or RestoreError with its first error."""
        if self.errors:
            more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
            raise RestoreError(self.errors[0] + more)
        return self


# --------------------------------------------------------------------------- reading


def new_operators(described: Sequence[Mapping[str, Any]]) -> tuple[NewOperator, ...]:
    """The new checkpoint's operators from the JVM helper's description (plain JSON)."""
    out = []
    for op in described:
        families = tuple(
            Family(int(op["id"]), str(op["name"]), str(store["name"]), str(cf["name"]),
                   cf["key_schema"], cf["value_schema"], cf.get("key_encoder"))
            for store in op.get("stores") or () for cf in store.get("column_families") or ())
        partitions = max((int(s.get("partitions") or 0) for s in op.get("stores") or ()),
                         default=0)
        out.append(NewOperator(int(op["id"]), str(op["name"]), partitions, families,
                               op.get("properties")))
    return tuple(sorted(out, key=lambda o: o.id))


def struct_fields(struct: Any) -> list[Mapping[str, Any]]:
    if isinstance(struct, Mapping) and struct.get("type") == "struct":
        return list(struct.get("fields") or [])
    return []


def _is_struct(t: Any) -> bool:
    return isinstance(t, Mapping) and t.get("type") == "struct"


def top(schema: Any, name: str) -> Any:
    """A top-level column's type in a State Data Source schema (None: absent)."""
    for f in struct_fields(schema):
        if f["name"] == name:
            return f["type"]
    return None


def type_name(t: Any) -> str:
    """A Spark type (JSON) as people read it: ``long``, ``struct<a: long, b: string>``."""
    if _is_struct(t):
        return "struct<" + ", ".join(f"{f['name']}: {type_name(f['type'])}"
                                     for f in struct_fields(t)) + ">"
    if isinstance(t, Mapping):
        kind = t.get("type")
        if kind == "array":
            return f"array<{type_name(t.get('elementType'))}>"
        if kind == "map":
            return f"map<{type_name(t.get('keyType'))}, {type_name(t.get('valueType'))}>"
        return str(kind)
    return "void" if t in ("null", "void") else str(t)


def _same_type(old: Any, new: Any) -> bool:
    """Equal Spark types, names of struct fields, nullability and metadata aside."""
    if _is_struct(old) and _is_struct(new):
        a, b = struct_fields(old), struct_fields(new)
        return len(a) == len(b) and all(_same_type(x["type"], y["type"])
                                        for x, y in zip(a, b, strict=True))
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = set(old) | set(new)
        return all(k in ("containsNull", "valueContainsNull") or
                   _same_type(old.get(k), new.get(k)) for k in keys)
    return _void(old) and _void(new) or old == new


def _void(t: Any) -> bool:
    return t in ("null", "void")


# --------------------------------------------------------------------------- fields


@dataclass
class FieldCompare:
    """One struct of the savepoint set against one of the new checkpoint."""

    where: str  # "operator 0 (aggregation, stateStoreSave): the value"
    part: Part
    renames: Mapping[str, str]
    notes: list[str]
    errors: list[str]

    def column(self, source: tuple[Any, ...]) -> str | None:
        for c in self.part.columns:
            if tuple(c.source) == source:
                return c.name
        return None

    def struct(self, old: Any, new: Any, source: tuple[Any, ...]) -> tuple[Source, ...]:
        """The new struct's fields, each from the old struct's field it matches."""
        olds, news = struct_fields(old), struct_fields(new)
        names_old = [str(f["name"]) for f in olds]
        names_new = [self.renames.get(str(f["name"]), str(f["name"])) for f in news]
        if len(olds) != len(news):
            self.errors.append(
                f"{self.where} has {len(olds)} field(s) in the savepoint "
                f"({', '.join(names_old) or 'none'}) and {len(news)} in the new query "
                f"({', '.join(str(f['name']) for f in news) or 'none'})")
            return ()
        order = list(range(len(olds)))
        if names_new != names_old:
            unique = len(set(names_old)) == len(names_old)
            if unique and sorted(names_new) == sorted(names_old):
                order = [names_old.index(n) for n in names_new]
                self.notes.append(f"{self.where}: fields taken by name, in the new query's "
                                  f"order ({', '.join(names_new)})")
            else:
                i = next(i for i, (a, b) in enumerate(zip(names_old, names_new, strict=True))
                         if a != b)
                self.errors.append(
                    f"{self.where}: field {i + 1} is {names_old[i]!r} in the savepoint and "
                    f"{news[i]['name']!r} in the new query (declare a rename, e.g. "
                    f"fields={{{str(news[i]['name'])!r}: {names_old[i]!r}}}, if it is the "
                    "same value)")
                return ()
        out = []
        for j, n in enumerate(news):
            i = order[j]
            out.append(self.field(olds[i], n, (*source, i)))
        renamed = [f"{n['name']} <- {o}" for n, o in zip(news, names_old, strict=False)
                   if self.renames.get(str(n["name"])) == o and n["name"] != o]
        if renamed:
            self.notes.append(f"{self.where}: renamed {', '.join(renamed)} (declared)")
        return tuple(out)

    def field(self, old: Mapping[str, Any], new: Mapping[str, Any],
              source: tuple[Any, ...]) -> Source:
        name, to = str(new["name"]), new["type"]
        what = f"{self.where}: field {name!r}"
        if old.get("nullable", True) and not new.get("nullable", True):
            self.errors.append(f"{what} may be null in the savepoint and may not in the new "
                               "query")
        column = self.column(source)
        if _void(to):
            return Source(name, to)
        if _is_struct(to) and _is_struct(old["type"]) and column is None:
            inner = FieldCompare(f"{what}", self.part, {}, self.notes, self.errors)
            return Source(name, to, fields=inner.struct(old["type"], to, source))
        if column is None:
            self.errors.append(f"{what} is not in the savepoint's exported columns "
                               f"({type_name(old['type'])})")
            return Source(name, to)
        if not _same_type(old["type"], to):
            if to not in _WIDER.get(str(old["type"]), ()):
                self.errors.append(f"{what} is {type_name(old['type'])} in the savepoint and "
                                   f"{type_name(to)} in the new query")
            else:
                self.notes.append(f"{what} widened from {type_name(old['type'])} to "
                                  f"{type_name(to)}")
        return Source(name, to, column)


def _renames(rules: Rules, operator_id: int) -> Mapping[str, str]:
    return rules.fields.get(operator_id, {})
