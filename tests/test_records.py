"""Progress payloads as Spark reports them become journal records (no Spark, no DB)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offset_journal.offsets import (
    OffsetFormatError,
    PartitionOffset,
    as_kafka_offsets,
    format_kafka_offsets,
    kafka_offsets,
    looks_like_kafka,
    offsets_json,
    partition_offsets,
)
from offset_journal.records import ProgressFormatError, batch_from_progress, parse_timestamp
from tests.payloads import QUERY_ID, RUN_ID, kafka_source, progress


def test_guide_example_kafka_progress():
    rec = batch_from_progress(progress())
    ids = (rec.query_id, rec.run_id, rec.query_name, rec.batch_id)
    assert ids == (QUERY_ID, RUN_ID, "myQuery", 2)
    assert rec.named
    assert rec.trigger_at == datetime(2016, 12, 14, 18, 45, 24, 873000, tzinfo=timezone.utc)
    (src,) = rec.sources
    assert src.kind == "kafka" and src.description == "KafkaV2[Subscribe[topic-0]]"
    assert src.partitions == (
        PartitionOffset("topic-0", 0, 1, 534),
        PartitionOffset("topic-0", 1, 1, 134),
        PartitionOffset("topic-0", 2, 0, 0),
        PartitionOffset("topic-0", 3, 1, 21),
        PartitionOffset("topic-0", 4, 1, 115),
    )
    assert src.end_offset == {"topic-0": {"2": 0, "4": 115, "1": 134, "3": 21, "0": 534}}
    assert rec.raw_progress is None and rec.problems == []


def test_batch_duration_is_batch_duration_or_on_spark_3_5_the_trigger_execution():
    """Spark 4's progress JSON says ``batchDuration``; Spark 3.5's leaves it out (the guide's
    example is that shape), and its ``durationMs.triggerExecution`` is journaled instead."""
    body = json.loads(progress())
    assert "batchDuration" not in body and body["durationMs"]["triggerExecution"] == 3
    assert batch_from_progress(json.dumps(body)).batch_duration_ms == 3
    body["batchDuration"] = 7  # Spark 4: the batch's own duration, taken as it is
    assert batch_from_progress(json.dumps(body)).batch_duration_ms == 7
    del body["batchDuration"], body["durationMs"]
    assert batch_from_progress(json.dumps(body)).batch_duration_ms is None


def test_two_kafka_sources_in_one_query():
    rec = batch_from_progress(progress(sources=[
        kafka_source("orders", {"orders": {"0": 5}}, {"orders": {"0": 9}}),
        kafka_source("payments,refunds", {"payments": {"0": 1}, "refunds": {"0": 0, "1": 3}},
                     {"payments": {"0": 2}, "refunds": {"0": 4, "1": 3}}),
    ]))
    assert [s.index for s in rec.sources] == [0, 1]
    assert rec.sources[0].partitions == (PartitionOffset("orders", 0, 5, 9),)
    assert rec.sources[1].partitions == (
        PartitionOffset("payments", 0, 1, 2),
        PartitionOffset("refunds", 0, 0, 4),
        PartitionOffset("refunds", 1, 3, 3),
    )


def test_partition_appearing_mid_stream_has_no_start():
    rec = batch_from_progress(progress(sources=[
        kafka_source("t", {"t": {"0": 10, "1": 20}}, {"t": {"0": 12, "1": 25, "2": 4}}),
    ]))
    assert PartitionOffset("t", 2, None, 4) in rec.sources[0].partitions


def test_first_batch_has_null_start_offset():
    rec = batch_from_progress(progress(batch_id=0, sources=[
        kafka_source("t", None, {"t": {"0": 3}}),
    ]))
    assert rec.sources[0].partitions == (PartitionOffset("t", 0, None, 3),)


def test_offsets_given_as_json_strings_are_parsed():
    # Checkpoint lines and some older progress reports carry offsets as JSON text.
    rec = batch_from_progress(progress(sources=[
        kafka_source("t", '{"t":{"0":1}}', '{"t":{"0":7}}'),
    ]))
    assert rec.sources[0].partitions == (PartitionOffset("t", 0, 1, 7),)


def test_non_kafka_sources_keep_offsets_as_json():
    delta_end = {"sourceVersion": 1, "reservoirId": "3c2f", "reservoirVersion": 5, "index": -1,
                 "isStartingVersion": False}
    rec = batch_from_progress(progress(sources=[
        {"description": "RateStreamV2[rowsPerSecond=10]", "startOffset": 3, "endOffset": 4,
         "latestOffset": 4, "numInputRows": 10},
        {"description": "DeltaSource[file:/tmp/t]", "startOffset": None, "endOffset": delta_end,
         "latestOffset": None, "numInputRows": 0},
        {"description": "FileStreamSource[file:/in]", "startOffset": {"logOffset": 0},
         "endOffset": {"logOffset": 1}, "latestOffset": None, "numInputRows": 2},
    ]))
    kinds = [(s.kind, s.end_offset, s.partitions) for s in rec.sources]
    assert kinds == [("other", 4, ()), ("other", delta_end, ()), ("other", {"logOffset": 1}, ())]


def test_spark_connect_json_with_spaces_is_the_same():
    compact = progress()
    spaced = json.dumps(json.loads(compact))  # Connect's json uses ", " and ": "
    assert batch_from_progress(compact) == batch_from_progress(spaced)


def test_unnamed_query_is_journaled_under_its_id():
    rec = batch_from_progress(progress(name=None))
    assert rec.query_name == QUERY_ID and not rec.named


def test_event_time_and_watermark():
    rec = batch_from_progress(progress(event_time={
        "avg": "2024-01-01T00:00:30.000Z", "max": "2024-01-01T00:01:00.000Z",
        "min": "2024-01-01T00:00:00.000Z", "watermark": "2023-12-31T23:59:00.000Z"}))
    assert rec.event_time_min == datetime(2024, 1, 1, tzinfo=timezone.utc)
    assert rec.event_time_max == datetime(2024, 1, 1, 0, 1, tzinfo=timezone.utc)
    assert rec.watermark == datetime(2023, 12, 31, 23, 59, tzinfo=timezone.utc)


def test_malformed_offsets_keep_the_raw_payload():
    text = progress(sources=[
        kafka_source("t", {"t": {"0": 1}}, "{not json"),
    ])
    rec = batch_from_progress(text)
    assert rec.raw_progress == text
    assert rec.sources[0].partitions == ()
    assert "endOffset" in rec.problems[0]


def test_source_metrics_are_kept_and_unstorable_ones_set_aside():
    metrics = {"avgOffsetsBehindLatest": "2.5", "maxOffsetsBehindLatest": "4",
               "minOffsetsBehindLatest": "1"}
    source = kafka_source("t", {"t": {"0": 1}}, {"t": {"0": 3}}) | {"metrics": metrics}
    rec = batch_from_progress(progress(sources=[source]))
    assert rec.sources[0].metrics == metrics and rec.raw_progress is None
    assert batch_from_progress(progress()).sources[0].metrics is None  # none reported
    bad = source | {"metrics": {"note": "a\x00b"}}
    rec = batch_from_progress(progress(sources=[bad]))
    assert rec.sources[0].metrics is None and "metrics: holds a NUL" in rec.problems[0]
    # the offsets are journaled all the same, and the raw payload keeps the metrics
    assert [(p.partition, p.start, p.end) for p in rec.sources[0].partitions] == [(0, 1, 3)]
    assert rec.raw_progress is not None and "a\\u0000b" in rec.raw_progress


@pytest.mark.parametrize("payload", ["", "nope", "[]", json.dumps({"id": "q"}),
                                     json.dumps({"id": "q", "runId": "r"})])
def test_unjournalable_payloads_raise(payload):
    with pytest.raises(ProgressFormatError):
        batch_from_progress(payload)


def test_kafka_shape():
    assert looks_like_kafka({"t": {"0": 1}})
    assert not looks_like_kafka({"sourceVersion": 1, "reservoirVersion": 2})
    assert not looks_like_kafka({"t": {"x": 1}})
    assert not looks_like_kafka({"t": {"0": True}})
    assert not looks_like_kafka({})
    with pytest.raises(OffsetFormatError):
        kafka_offsets('{"logOffset": 3}')
    # Unicode digits pass str.isdigit() but are no partition number.
    assert not looks_like_kafka({"t": {"\u00b2": 1}})
    assert as_kafka_offsets({"t": {"\u0663": 1}}) is None
    rec = batch_from_progress(progress(sources=[kafka_source("t", None, {"t": {"\u00b2": 1}})]))
    assert rec.sources[0].problem and "shape" in rec.sources[0].problem


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["0", "1", "01", "t", "\u00b2", "99999999999"]),
                      inner, max_size=3),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=3), json_values, max_size=3))
def test_one_pass_kafka_check_agrees_with_the_shape_check(obj):
    converted = as_kafka_offsets(obj)
    assert (converted is not None) == looks_like_kafka(obj)
    if converted is not None:
        assert converted == {t: {int(p): o for p, o in ps.items()} for t, ps in obj.items()}


def test_format_is_what_starting_offsets_takes():
    text = format_kafka_offsets({"b": {1: 5, 0: -2}, "a": {0: 7}})
    assert text == '{"a":{"0":7},"b":{"0":-2,"1":5}}'


def test_parse_timestamp():
    assert parse_timestamp("1970-01-01T00:00:00.000Z") == datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert parse_timestamp("garbage") is None
    assert parse_timestamp(None) is None


offsets_strategy = st.dictionaries(
    st.text(min_size=1, max_size=12),
    st.dictionaries(st.integers(0, 5000), st.integers(0, 2**62), min_size=1, max_size=8),
    min_size=1, max_size=4,
)


@given(offsets_strategy)
def test_format_then_parse_round_trips(offsets):
    assert kafka_offsets(format_kafka_offsets(offsets)) == offsets


@given(offsets_strategy, offsets_strategy)
def test_partition_rows_cover_both_sides(start, end):
    rows = partition_offsets(start, end)
    keys = {(r.topic, r.partition) for r in rows}
    expected = {(t, p) for side in (start, end) for t, ps in side.items() for p in ps}
    assert keys == expected
    for r in rows:
        assert r.start == start.get(r.topic, {}).get(r.partition)
        assert r.end == end.get(r.topic, {}).get(r.partition)
    # What the journal stores as rows only, it gives back as Spark's JSON.
    as_json = {t: {str(p): o for p, o in ps.items()} for t, ps in end.items()}
    assert offsets_json(rows, use="end") == as_json
    assert offsets_json(rows, use="start") == {t: {str(p): o for p, o in ps.items()}
                                               for t, ps in start.items()}


_partition_keys = st.sampled_from(["0", "1", "2", "7", "10", "01", "007", "3"])


@given(st.dictionaries(st.sampled_from(["a", "b", "t-1"]),
                       st.dictionaries(_partition_keys, st.integers(0, 2**40), min_size=1,
                                       max_size=5), min_size=1, max_size=3),
       st.integers(0, 5), st.booleans())
def test_offsets_said_rebuildable_are_what_the_partitions_rebuild(end, advance, first):
    """The journal keeps no start/end JSON for a source the parser calls rebuildable
    (journal_checks.stored_offsets): that must be exactly what offsets_json gives back,
    and a key such as "01", which it would write as "1", must keep the JSON."""
    from offset_journal.journal._checks import stored_offsets

    start = None if first else {t: {k: max(0, v - advance) for k, v in ps.items()}
                                for t, ps in end.items()}
    src = batch_from_progress(progress(sources=[kafka_source("t", start, end)])).sources[0]
    rebuilt = (offsets_json(src.partitions, use="start"),
               offsets_json(src.partitions, use="end"))
    exact = (start is None or rebuilt[0] == start) and rebuilt[1] == end
    if src.offsets_rebuildable:
        assert exact
    stored = stored_offsets(src)
    # what is not kept is what the rows give back; what is kept is verbatim
    for kept, given_json, back in zip(stored, (start, end), rebuilt, strict=True):
        assert kept is None and (given_json is None or back == given_json) \
            or kept == given_json
    if any(k.startswith("0") and k != "0" for ps in end.values() for k in ps):
        assert not src.offsets_rebuildable and stored[1] == end
