"""One field's type in the savepoint against its type in the new query, at every depth
(pure): structs in structs, arrays' elements, maps' keys and values.

A struct, array or map field is exported as ONE column, and Spark's cast between struct
types is positional: ``struct<a, b>`` cast to ``struct<b, a>`` writes ``a``'s value into
``b``. So nested structs are compared as the top level is: by name, taken in the new
query's order when every name is found once (said in a note), refused in one line
otherwise; nullability is checked at every depth (a struct field, an array's elements, a
map's values that may be null in the savepoint may be null in the new query). What the
comparison finds is a :class:`Convert`: how the value is built (:mod:`._frames` turns it
into a Spark expression); a plain cast where Spark's positional cast is right.

A ``date`` becomes a ``timestamp`` at midnight of a time zone: the zone the new query
runs in, declared or taken from the restore's session (the job's), named in the note;
never the zone of whatever session the restore happens to run in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..savepoint.core import is_struct, struct_fields

ConvertKind = Literal["cast", "date", "struct", "array", "map"]
"""How a value is converted: Spark's cast (the same type by name, or a widening whose
positional cast is right), a date at midnight of a zone, or built field by field,
element by element, entry by entry."""

WIDER: dict[str, tuple[str, ...]] = {
    "byte": ("short", "integer", "long"), "short": ("integer", "long"),
    "integer": ("long",), "float": ("double",), "date": ("timestamp",)}
"""The widenings a restore takes: every value of the old type is one of the new."""


@dataclass(frozen=True)
class Convert:
    """How a value of the savepoint's type becomes one of the new query's ``type``.
    ``fields`` (a struct): each new field's name, the old field it is taken from, and
    how; ``element``: an array's elements or a map's values; ``key``: a map's keys;
    ``zone`` (a date): the time zone of its midnight."""

    kind: ConvertKind
    type: Any
    fields: tuple[tuple[str, str, Convert], ...] = ()
    element: Convert | None = None
    key: Convert | None = None
    zone: str | None = None


def is_void(t: Any) -> bool:
    return t in ("null", "void")


def type_name(t: Any) -> str:
    """A Spark type (JSON) as people read it: ``long``, ``struct<a: long, b: string>``."""
    if is_struct(t):
        return "struct<" + ", ".join(f"{f['name']}: {type_name(f['type'])}"
                                     for f in struct_fields(t)) + ">"
    if isinstance(t, Mapping):
        kind = t.get("type")
        if kind == "array":
            return f"array<{type_name(t.get('elementType'))}>"
        if kind == "map":
            return f"map<{type_name(t.get('keyType'))}, {type_name(t.get('valueType'))}>"
        return str(kind)
    return "void" if is_void(t) else str(t)


def _kind(t: Any) -> str:
    return str(t.get("type")) if isinstance(t, Mapping) else "void" if is_void(t) else str(t)


@dataclass
class TypeCompare:
    """One field's types compared at every depth; what it finds goes into ``notes`` and
    ``errors`` (each one line, starting with ``where``). ``zone``: the time zone a date
    becomes a timestamp in (None: not declared, refused); ``declare_zone``: how the
    caller's interface declares one, for the refusal to say."""

    where: str
    notes: list[str]
    errors: list[str]
    zone: str | None
    declare_zone: Callable[[], str]

    def convert(self, old: Any, new: Any, path: str) -> Convert:
        """How a value of ``old`` becomes one of ``new`` (``path``: the field's name,
        ``info.a`` inside a struct, ``tags[]`` an array's elements)."""
        what = f"{self.where}: field {path!r}"
        kinds = _kind(old), _kind(new)
        if kinds == ("struct", "struct"):
            return self._struct(old, new, path)
        if kinds == ("array", "array"):
            self._nulls(old, new, "containsNull",
                        f"{self.where}: the elements of field {path!r}")
            element = self.convert(old.get("elementType"), new.get("elementType"), path + "[]")
            return (Convert("cast", new) if element.kind == "cast"
                    else Convert("array", new, element=element))
        if kinds == ("map", "map"):
            self._nulls(old, new, "valueContainsNull",
                        f"{self.where}: the values of field {path!r}")
            key = self.convert(old.get("keyType"), new.get("keyType"), path + "{key}")
            value = self.convert(old.get("valueType"), new.get("valueType"), path + "{value}")
            return (Convert("cast", new) if key.kind == value.kind == "cast"
                    else Convert("map", new, element=value, key=key))
        return self._leaf(old, new, what)

    def _leaf(self, old: Any, new: Any, what: str) -> Convert:
        if old == new or (is_void(old) and is_void(new)):
            return Convert("cast", new)
        said = f"{what} is {type_name(old)} in the savepoint and {type_name(new)} in the new query"
        if isinstance(old, Mapping) or isinstance(new, Mapping) or \
                new not in WIDER.get(str(old), ()):
            self.errors.append(said)
            return Convert("cast", new)
        if (old, new) != ("date", "timestamp"):
            self.notes.append(f"{what} widened from {old} to {new}")
            return Convert("cast", new)
        if self.zone is None:
            self.errors.append(
                f"{said}: a date becomes the timestamp of its midnight in a time zone, and "
                "the new query keys it in its session's zone (spark.sql.session.timeZone), "
                f"which this restore cannot see: declare it ({self.declare_zone()})")
            return Convert("cast", new)
        self.notes.append(f"{what} widened from date to timestamp: each date at midnight in "
                          f"{self.zone}")
        return Convert("date", new, zone=self.zone)

    def _nulls(self, old: Mapping[str, Any], new: Mapping[str, Any], flag: str,
               what: str) -> None:
        if old.get(flag, True) and not new.get(flag, True):
            self.errors.append(f"{what} may be null in the savepoint and may not in the new "
                               "query")

    def _struct(self, old: Any, new: Any, path: str) -> Convert:
        """A struct's fields by name at this depth (see the module)."""
        olds, news = struct_fields(old), struct_fields(new)
        a, b = [str(f["name"]) for f in olds], [str(f["name"]) for f in news]
        what = f"{self.where}: field {path!r}"
        if len(a) != len(b) or (a != b and (len(set(a)) != len(a) or sorted(a) != sorted(b))):
            self.errors.append(f"{what} is {type_name(old)} in the savepoint and "
                               f"{type_name(new)} in the new query: {_differ(a, b)}")
            return Convert("cast", new)
        if a != b:
            self.notes.append(f"{what}: its fields taken by name, in the new query's order "
                              f"({', '.join(b)}), not by position as Spark's cast would")
        fields = []
        for f in news:
            name = str(f["name"])
            was = olds[a.index(name)]
            if was.get("nullable", True) and not f.get("nullable", True):
                self.errors.append(f"{self.where}: field {path + '.' + name!r} may be null in "
                                   "the savepoint and may not in the new query")
            fields.append((name, name, self.convert(was["type"], f["type"], f"{path}.{name}")))
        if a == b and all(c.kind == "cast" for _n, _o, c in fields):
            return Convert("cast", new)
        return Convert("struct", new, fields=tuple(fields))


def _differ(old: Sequence[str], new: Sequence[str]) -> str:
    """How two structs' field names differ, in a few words."""
    if len(old) != len(new):
        return f"{len(old)} field(s) against {len(new)}"
    i = next(i for i, (x, y) in enumerate(zip(old, new, strict=True)) if x != y)
    return (f"its field {i + 1} is {old[i]!r} in the savepoint and {new[i]!r} in the new query "
            "(a field inside a struct is matched by its name)")
