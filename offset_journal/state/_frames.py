"""The rows a restore writes, as DataFrames (public Spark API only): each target column
family's ``key`` and ``value`` structs built from the savepoint's Parquet columns as the
layout says (:class:`~.layout.Source`; a nested value by name, as its
:class:`~._nested.Convert` says, where Spark's positional cast would be wrong), and the
old checkpoint's bytes with column families renamed. The JVM helper encodes and writes
them.
"""

from __future__ import annotations

from typing import Any

from ..savepoint import read_part
from ._nested import Convert
from .layout import COUNT, INDEX, MATCHED, RawTarget, Source, Target


def _type(t: Any) -> Any:
    from pyspark.sql.types import _parse_datatype_json_value

    return _parse_datatype_json_value(t)


def _expr(source: Source, synthetic: dict[str, Any]) -> Any:
    """One field as a column: a savepoint column cast to the new type, a struct of its
    fields, a synthetic column, or a null of the new type."""
    from pyspark.sql import functions as F

    if source.column in synthetic:
        return synthetic[source.column].cast(_type(source.type)).alias(source.name)
    if source.fields:
        inner = F.struct(*[_expr(s, synthetic) for s in source.fields])
        return inner.cast(_type(source.type)).alias(source.name)
    if source.column is None:
        return F.lit(None).cast(_type(source.type)).alias(source.name)
    column = F.col(f"`{source.column}`")
    if source.convert is not None:
        return converted(column, source.convert).alias(source.name)
    return column.cast(_type(source.type)).alias(source.name)


def converted(value: Any, how: Convert) -> Any:
    """``value`` (a column of the savepoint's type) as the new type, built as ``how``
    says: each struct field taken by its name (a null struct stays null), each array
    element and map entry converted, a date at midnight of its zone."""
    from pyspark.sql import functions as F

    if how.kind == "cast":
        return value.cast(_type(how.type))
    if how.kind == "date":
        return F.make_timestamp(years=F.year(value), months=F.month(value),
                                days=F.dayofmonth(value), hours=F.lit(0), mins=F.lit(0),
                                secs=F.lit(0), timezone=F.lit(how.zone))
    if how.kind == "struct":
        built = F.struct(*[converted(value.getField(old), inner).alias(new)
                           for new, old, inner in how.fields])
        return F.when(value.isNull(), F.lit(None)).otherwise(built)
    element = _given(how.element)
    if how.kind == "array":
        return F.transform(value, lambda x: converted(x, element))
    key = _given(how.key)
    return F.map_from_entries(F.transform(F.map_entries(value), lambda e: F.struct(
        converted(e["key"], key).alias("key"), converted(e["value"], element).alias("value"))))


def _given(how: Convert | None) -> Convert:
    """An array's or map's part of a Convert (always there for those kinds)."""
    assert how is not None
    return how


def _struct(sources: tuple[Source, ...], synthetic: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    return F.struct(*[_expr(s, synthetic) for s in sources])


def target_frame(spark: Any, location: str, target: Target) -> Any:
    """The rows of one target column family: ``key`` and ``value`` structs."""
    from pyspark.sql import functions as F

    part = target.part
    # Exactly the files the manifest lists, each checked by the read that parses it: a
    # file added to the part directory, or swapped after the savepoint was loaded, is
    # never written into the new checkpoint's state.
    rows = read_part(spark, location, part, verify=True)
    if target.shape == "rows":
        return rows.select(_struct(target.key, {}).alias("key"),
                           _struct(target.value, {}).alias("value"))
    plain_key = tuple(s for s in target.key if s.column != INDEX)
    keyed = rows.select(_struct(plain_key, {}).alias("k"), F.struct(*[
        F.col(f"`{c.name}`") for c in part.columns if not c.key]).alias("v"))
    if target.shape == "join-count":
        counted = keyed.groupBy("k").agg(F.count(F.lit(1)).alias("n"))
        return counted.select(F.col("k").alias("key"),
                              _struct(target.value, {COUNT: F.col("n")}).alias("value"))
    listed = keyed.groupBy("k").agg(F.collect_list("v").alias("vs"))
    numbered = listed.select("k", F.posexplode("vs").alias("i", "v"))
    cols = {c.name: F.col(f"v.`{c.name}`") for c in part.columns if not c.key}
    key_fields = [F.col(f"k.`{s.name}`").alias(s.name) for s in plain_key]
    index = next(s for s in target.key if s.column == INDEX)
    key = F.struct(*key_fields, _expr(index, {INDEX: F.col("i")}))
    value = _struct(target.value, {**cols, MATCHED: F.lit(target.matched)})
    return numbered.select(key.alias("key"), value.alias("value"))


def raw_frame(spark: Any, frame: Any, target: RawTarget) -> Any:
    """The old checkpoint's rows of one store with column families renamed."""
    from pyspark.sql import functions as F

    if not target.families:
        return frame
    name = F.col("column_family_name")
    for new, old in target.families:
        name = F.when(F.col("column_family_name") == old, F.lit(new)).otherwise(name)
    return frame.withColumn("column_family_name", name)
