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
  purpose is declared (``fields={new: old}``); the fields of a struct inside a field,
  an array's elements and a map's keys and values the same way, at every depth
  (:mod:`._nested`: Spark's cast between structs is positional);
* a type may widen (``int`` to ``long``, ``float`` to ``double``...), never narrow or
  change kind; ``date`` to ``timestamp`` only in a declared time zone (``time_zone``:
  the zone the new query keys its days in); a field that may be null in the savepoint
  may be null in the new query, at every depth;
* a stream-stream join that reads its rows' ``matched`` flags (an outer or semi join),
  written from the savepoint's rows, which lack them, only with the flag its rows get
  declared (``matched``), or its state discarded;
* an aggregation's state may go into a ``transformWithState`` value state of the same
  key (the one value state it has, or the one named); its buffer fields are Spark's
  (``count``, ``max``, ``sum``), so the value state's fields are declared against them
  unless they have the same names;
* a state variable renamed is declared (``variables={new: old}``).

The new layout is what :func:`._jvm.describe` reads from the
new checkpoint (Spark's operator metadata and state schema files, after the new query's
bootstrap batch); the old one is the savepoint's manifest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..errors import RestoreError
from ..savepoint.core import operator_kind
from ..savepoint.model import OperatorKind, Part
from ._nested import Convert, TypeCompare, is_struct, struct_fields, type_name

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

SESSION_ZONE = "session"
"""``Rules.time_zone`` by default: the zone of the session the restore runs in, which
:func:`~._write.restore_savepoint` puts in its place (a job's own session: the one the
new query runs in)."""


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
    """One stateful operator of the new query (after its bootstrap batch); a
    stream-stream join's ``join_type`` as Spark's plan says it (``INNER``, ``LEFT
    OUTER``...; None: not read)."""

    id: int
    name: str
    partitions: int
    families: tuple[Family, ...]
    properties: Any = None
    join_type: str | None = None

    @property
    def kind(self) -> OperatorKind:
        return operator_kind(self.name)

    def label(self) -> str:
        return f"operator {self.id} ({self.kind}, {self.name})"


@dataclass(frozen=True)
class Source:
    """How one field of a new key or value is made: a savepoint column (``column``,
    cast to ``type``, or built as ``convert`` says where a cast would be wrong), a struct
    of ``fields``, a null (``column`` and ``fields`` both empty), or a synthetic column
    (:data:`INDEX`, :data:`COUNT`, :data:`MATCHED`)."""

    name: str
    type: Any
    column: str | None = None
    fields: tuple[Source, ...] = ()
    convert: Convert | None = None


@dataclass(frozen=True)
class Target:
    """One column family of the new checkpoint written from one part of the savepoint;
    ``matched``: the flag a join's rows are written with (the savepoint has none)."""

    operator_id: int
    store: str
    family: str
    part: Part
    key: tuple[Source, ...]
    value: tuple[Source, ...]
    shape: Shape = "rows"
    matched: bool = True


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


WriteRoute = Literal["typed", "raw", "none"]
"""How an operator's state is written (a route, not a file path): the savepoint's typed
rows encoded, the old checkpoint's bytes copied, or nothing written (empty, discarded)."""


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
    def path(self) -> WriteRoute:
        return "raw" if self.raw else "typed" if self.targets else "none"


class Spelling:
    """How the interface a restore is asked through writes each declaration, so that a
    refusal names what its user types: the Python API's :class:`Rules` (this class). A
    command gives its flags by a subclass of its own (the pure core knows no parser)."""

    def rename(self, operator_id: int, new: str, old: str) -> str:
        return f"Rules(fields={{{operator_id}: {{{new!r}: {old!r}}}}})"

    def into_state(self, operator_id: int, name: str) -> str:
        return f"Rules(variable={{{operator_id}: {name!r}}})"

    def discard(self, operator_id: int) -> str:
        return f"Rules(discard={{{operator_id}}})"

    def matched(self, operator_id: int, value: bool) -> str:
        return f"Rules(matched={{{operator_id}: {value}}})"

    def time_zone(self) -> str:
        return "Rules(time_zone='ZONE'), the new query's spark.sql.session.timeZone"


@dataclass(frozen=True)
class Rules:
    """What the caller declares or accepts: per new operator id, a value state variable
    to map an aggregation into (``variable``), fields renamed (``fields``: new name ->
    old name, per operator), state variables renamed (``variables``: new -> old),
    operators whose state is discarded (``discard``: ids, or True for every one that
    cannot be carried), the ``matched`` flag a stream-stream join's rows are written
    with where the join reads it and the savepoint lacks it (per operator), and the
    ``time_zone`` a date becomes a timestamp in (:data:`SESSION_ZONE`: the restore
    session's; None: none declared, such a field refused). ``spelling``: how the
    caller's interface writes these, for the refusals to say."""

    variable: Mapping[int, str] = field(default_factory=dict)
    fields: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    variables: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    discard: frozenset[int] | bool = frozenset()
    matched: Mapping[int, bool] = field(default_factory=dict)
    time_zone: str | None = SESSION_ZONE
    spelling: Spelling = field(default_factory=Spelling, compare=False)

    def discards(self, operator_id: int) -> bool:
        return self.discard is True or (
            not isinstance(self.discard, bool) and operator_id in self.discard)

    def in_session(self, zone: str) -> Rules:
        """These rules, the session's time zone ``zone`` taken where none was given."""
        return replace(self, time_zone=zone) if self.time_zone == SESSION_ZONE else self

    def recorded(self) -> dict[str, Any]:
        """What these rules declare, as a recorded plan keeps it (plain JSON: operator
        ids as text; what is not declared left out)."""
        def by_op(m: Mapping[int, Any]) -> dict[str, Any]:
            return {str(k): (dict(v) if isinstance(v, Mapping) else v)
                    for k, v in sorted(m.items())}
        out = {"variable": by_op(self.variable), "fields": by_op(self.fields),
               "variables": by_op(self.variables), "matched": by_op(self.matched),
               "time_zone": None if self.time_zone == SESSION_ZONE else self.time_zone}
        return {k: v for k, v in out.items() if v}


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


def new_operators(described: Sequence[Mapping[str, Any]],
                  join_types: Mapping[int, str] | None = None) -> tuple[NewOperator, ...]:
    """The new checkpoint's operators from the JVM helper's description (plain JSON),
    with each stream-stream join's type as the new query's plan has it."""
    out = []
    for op in described:
        families = tuple(
            Family(int(op["id"]), str(op["name"]), str(store["name"]), str(cf["name"]),
                   cf["key_schema"], cf["value_schema"], cf.get("key_encoder"))
            for store in op.get("stores") or () for cf in store.get("column_families") or ())
        partitions = max((int(s.get("partitions") or 0) for s in op.get("stores") or ()),
                         default=0)
        out.append(NewOperator(int(op["id"]), str(op["name"]), partitions, families,
                               op.get("properties"), (join_types or {}).get(int(op["id"]))))
    return tuple(sorted(out, key=lambda o: o.id))


def top(schema: Any, name: str) -> Any:
    """A top-level column's type in a State Data Source schema (None: absent)."""
    for f in struct_fields(schema):
        if f["name"] == name:
            return f["type"]
    return None


# --------------------------------------------------------------------------- fields


@dataclass
class FieldCompare:
    """One struct of the savepoint set against one of the new checkpoint (of operator
    ``operator_id``, under ``rules``: its time zone, its interface's spelling)."""

    where: str  # "operator 0 (aggregation, stateStoreSave): the value"
    part: Part
    renames: Mapping[str, str]
    notes: list[str]
    errors: list[str]
    operator_id: int = 0
    rules: Rules = field(default_factory=Rules)

    def column(self, source: tuple[Any, ...]) -> str | None:
        for c in self.part.columns:
            if tuple(c.source) == source:
                return c.name
        return None

    def inner(self, where: str) -> FieldCompare:
        """The same comparison for a struct inside this one (no renames there)."""
        return FieldCompare(where, self.part, {}, self.notes, self.errors, self.operator_id,
                            self.rules)

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
                hint = self.rules.spelling.rename(self.operator_id, str(news[i]["name"]),
                                                  names_old[i])
                self.errors.append(
                    f"{self.where}: field {i + 1} is {names_old[i]!r} in the savepoint and "
                    f"{news[i]['name']!r} in the new query (declare a rename if it is the "
                    f"same value: {hint})")
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
        if to in ("null", "void"):
            return Source(name, to)
        if is_struct(to) and is_struct(old["type"]) and column is None:
            return Source(name, to, fields=self.inner(what).struct(old["type"], to, source))
        if column is None:
            self.errors.append(f"{what} is not in the savepoint's exported columns "
                               f"({type_name(old['type'])})")
            return Source(name, to)
        zone = self.rules.time_zone
        how = TypeCompare(self.where, self.notes, self.errors,
                          None if zone == SESSION_ZONE else zone,
                          self.rules.spelling.time_zone).convert(old["type"], to, name)
        return Source(name, to, column, convert=None if how.kind == "cast" else how)
