"""Spark's description strings, read in one module (offset_journal/descriptions.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import offset_journal
from offset_journal.descriptions import (
    delta_source_path,
    described_sink,
    described_source,
    is_foreach_batch_sink,
    is_kafka_description,
    kafka_strategy,
)

ROOT = Path(offset_journal.__file__).parent
SPARK_WORDS = ("FileSink[", "DeltaSink[", "ForeachBatchSink", "KafkaV2", "DeltaSource",
               "FileStreamSource", "RateStream", "RateSource")


@pytest.mark.parametrize("description, expected", [
    ("FileSink[s3a://b/out]", ("file", "s3a://b/out")),
    (" DeltaSink[/tables/t] ", ("delta", "/tables/t")),
    ("FileSink[]", None),
    ("ForeachBatchSink", None),
    ("org.apache.spark.sql.kafka010.KafkaSourceProvider$KafkaTable@1", None),
    (None, None),
])
def test_a_sink_description_names_its_kind_and_path(description, expected):
    assert described_sink(description) == expected


def test_the_other_descriptions():
    assert is_foreach_batch_sink("ForeachBatchSink") and not is_foreach_batch_sink("FileSink[x]")
    assert not is_foreach_batch_sink(None)
    assert is_kafka_description("KafkaV2[Subscribe[a]]") and not is_kafka_description("Delta")
    assert delta_source_path("DeltaSource[file:/t]") == "file:/t"
    assert delta_source_path("DeltaSource[]") is None and delta_source_path("Kafka") is None
    assert described_source("DeltaSource[file:/t]") == "delta"
    assert described_source("FileStreamSource[file:/in]") == "file"
    assert described_source("RateStreamV2[rowsPerSecond=1]") == "rate"
    assert described_source("KafkaV2[Subscribe[a]]") is None
    assert kafka_strategy("KafkaV2[Subscribe[a, b]]") == ("subscribe", ["a", "b"])


def test_no_other_module_reads_a_spark_description_string():
    """A string constant naming Spark's description (not a docstring) lives only in
    descriptions.py: a change of Spark's wording is met there."""
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "descriptions.py":
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef,
                                  ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr)
                and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docs and node.value.startswith(SPARK_WORDS):
                offenders.append(f"{path.relative_to(ROOT)}: {node.value!r}")
    assert offenders == []
