"""Properties over arbitrary input (hypothesis).

* Progress payloads: batch_from_progress raises nothing but ProgressFormatError on any
  JSON (or text); whatever it returns the journal stores, and the journaled partition
  rows are exactly the payload's.
* Restart plans (the pure planner): a plan after a batch never starts beyond that
  batch's end offsets, never drops a partition without saying so, and never moves a
  partition backwards unless asked; checking a cluster never changes a journaled
  offset silently.
* Concurrent runs: the journal's answer (Journal.concurrent_runs, over the spans
  run_bounds reads) and the pure rule (overlap.concurrent_runs) over spans built here
  from the same events agree.

tests/test_records.py and tests/restart/test_restart.py hold the properties of well-formed
input (round trips, monotonic chains, rewinds); these are about the rest.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from offset_journal import Journal
from offset_journal.errors import JournalConstraintError
from offset_journal.journal import Batch, SourceOffsets
from offset_journal.offsets import EARLIEST, PartitionOffset, kafka_offsets
from offset_journal.overlap import RunSpan, concurrent_runs
from offset_journal.records import (
    STARTED,
    TERMINATED,
    BatchRecord,
    ProgressFormatError,
    batch_from_progress,
    run_from_event,
)
from offset_journal.restart import KafkaFacts, compute_plan
from tests.payloads import kafka_source, progress

LONG = 2**63
T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)

# --------------------------------------------------------------------------- strategies

scalars = (st.none() | st.booleans() | st.integers() | st.floats()
           | st.text(max_size=20))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20,
)
# What a progress payload's fields may hold: the right type or anything at all.
timestamps = st.sampled_from(["2024-01-01T00:00:00.000Z", "2024-13-99", "", "now"]) | scalars
kafka_like = st.dictionaries(
    st.text(min_size=1, max_size=6),
    st.dictionaries(st.integers(-3, 2**31).map(str) | st.text(max_size=3),
                    st.integers() | st.floats() | st.text(max_size=3), max_size=4),
    max_size=3,
)
offset_values = (st.none() | kafka_like | json_values
                 | (kafka_like | json_values).map(lambda v: json.dumps(v))
                 | st.text(max_size=30))


@st.composite
def sources(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    out: dict[str, Any] = {}
    for key in ("description", "startOffset", "endOffset", "latestOffset", "numInputRows"):
        if draw(st.booleans()):
            out[key] = draw(offset_values if key.endswith("Offset") else
                            st.sampled_from(["KafkaV2[Subscribe[t]]", "Rate", None]) | scalars)
    return out


@st.composite
def progress_payloads(draw: st.DrawFn) -> dict[str, Any]:
    """Progress-shaped dicts whose every field may be wrong."""
    body: dict[str, Any] = {}
    fields = {
        "id": st.text(max_size=5) | scalars, "runId": st.text(max_size=5) | scalars,
        "name": st.text(max_size=5) | scalars, "timestamp": timestamps,
        "batchId": st.integers() | scalars, "batchDuration": st.integers() | scalars,
        "numInputRows": st.integers() | scalars, "inputRowsPerSecond": scalars,
        "processedRowsPerSecond": scalars, "durationMs": json_values,
        "eventTime": st.dictionaries(st.sampled_from(["watermark", "min", "max", "avg"]),
                                     timestamps) | json_values,
        "stateOperators": json_values, "sink": json_values,
        "sources": st.lists(sources(), max_size=3) | json_values,
    }
    for key, strategy in fields.items():
        if draw(st.integers(0, 5)) > 0:
            body[key] = draw(strategy)
    return body


# --------------------------------------------------------------------------- parsing


def _check(rec: BatchRecord, text: str | None) -> None:
    """What a returned record always satisfies."""
    assert isinstance(rec.batch_id, int) and -LONG <= rec.batch_id < LONG
    assert rec.query_id and rec.run_id and rec.query_name
    for s in rec.sources:
        if s.partitions:
            assert s.kind == "kafka"
            assert all(-LONG <= o < LONG for p in s.partitions for o in (p.start, p.end)
                       if o is not None)
    if rec.problems:  # an odd payload is kept verbatim for a person to look at
        assert rec.raw_progress is not None
        if text is not None:
            assert rec.raw_progress == text


@settings(max_examples=400, deadline=None)
@given(payload=progress_payloads(), as_text=st.booleans())
def test_only_progress_format_errors_on_progress_shaped_garbage(payload: dict[str, Any],
                                                                as_text: bool) -> None:
    text = json.dumps(payload) if as_text else None
    try:
        rec = batch_from_progress(text if text is not None else payload)
    except ProgressFormatError:
        return
    _check(rec, text)


@settings(max_examples=300, deadline=None)
@given(value=json_values | st.text(max_size=50))
def test_only_progress_format_errors_on_any_json_or_text(value: Any) -> None:
    for payload in (value, json.dumps(value)):
        try:
            rec = batch_from_progress(payload)
        except ProgressFormatError:
            continue
        _check(rec, payload if isinstance(payload, str) else None)


# --------------------------------------------------------------------------- the database

topics = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                 min_size=1, max_size=10)
# What a Kafka source's progress holds: offsets from 0 to the largest bigint. Below 0 the
# journal refuses an end and flags a start (migration 0015): the next property.
kafka_offsets_st = st.dictionaries(
    topics, st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, LONG - 1),
                            min_size=1, max_size=6),
    min_size=1, max_size=3)
any_offsets_st = st.dictionaries(
    topics, st.dictionaries(st.integers(0, 2**31 - 1), st.integers(-LONG, LONG - 1),
                            min_size=1, max_size=6),
    min_size=1, max_size=3)


def _store(journal: Journal, rec: BatchRecord) -> int:
    with journal.engine.begin() as conn:
        assert journal.record_batch(rec, conn)
        return int(conn.execute(sa.text(
            "select id from offset_journal.batches where run_id = :r and batch_id = :b"),
            {"r": rec.run_id, "b": rec.batch_id}).scalar_one())


@pytest.fixture(scope="module")
def prop_journal(journal_server: Any) -> Any:
    """One journal database for every example (runs get fresh ids)."""
    from offset_journal.journal.db import upgrade

    url = journal_server.create_database("oj_props")
    upgrade(url)
    journal = Journal(url)
    yield journal
    journal.close()
    journal_server.drop_database(url)


@settings(max_examples=120, deadline=None)
@given(start=st.none() | kafka_offsets_st, end=kafka_offsets_st, as_text=st.booleans(),
       name=st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                    min_size=1, max_size=20))
def test_journaled_partition_rows_are_the_payloads(prop_journal: Journal,
                                                   start: dict[str, dict[int, int]] | None,
                                                   end: dict[str, dict[int, int]],
                                                   as_text: bool, name: str) -> None:
    assume(name.strip())

    def js(o: dict[str, dict[int, int]] | None) -> Any:
        if o is None:
            return None
        v = {t: {str(p): x for p, x in ps.items()} for t, ps in o.items()}
        return json.dumps(v) if as_text else v

    run = str(uuid.uuid4())
    payload = progress(0, sources=[kafka_source("t", js(start), js(end))], name=name,
                       run_id=run)
    pk = _store(prop_journal, batch_from_progress(payload))
    with prop_journal.engine.connect() as conn:
        rows = set(conn.execute(sa.text(
            "select topic, partition, start_offset, end_offset from "
            "offset_journal.kafka_partitions where batch_pk = :pk"), {"pk": pk}).all())
        (problem,) = conn.execute(sa.text(
            "select problem from offset_journal.batch_sources where batch_pk = :pk"),
            {"pk": pk}).one()
    s = start or {}
    expected = {(t, p, s.get(t, {}).get(p), end.get(t, {}).get(p))
                for side in (s, end) for t, ps in side.items() for p in ps}
    assert rows == expected
    went_back = any(r[2] is not None and r[3] is not None and r[3] < r[2] for r in rows)
    assert (problem is not None) == went_back
    (batch,) = prop_journal.history(name, run_id=run)
    assert set(batch.sources[0].partitions) == {PartitionOffset(*r) for r in expected}


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(payload=progress_payloads())
def test_every_record_the_parser_returns_is_stored(prop_journal: Journal,
                                                   payload: dict[str, Any]) -> None:
    """A batch with ids is journaled (flagged if odd), never refused by the database:
    refused, it would only survive in rejected_events. Identity fields are text that
    Postgres takes (a NUL in a query name is refused, and kept in rejected_events)."""
    payload = dict(payload, id=f"q-{uuid.uuid4()}", runId=str(uuid.uuid4()))
    for key in ("name",):
        if isinstance(payload.get(key), str):
            payload[key] = payload[key].replace("\x00", "")
    raw_sources = payload.get("sources")
    for src in raw_sources if isinstance(raw_sources, list) else []:
        if isinstance(src, dict) and isinstance(src.get("description"), str):
            src["description"] = src["description"].replace("\x00", "")
    sink = payload.get("sink")
    if isinstance(sink, dict) and isinstance(sink.get("description"), str):
        sink["description"] = sink["description"].replace("\x00", "")
    try:
        rec = batch_from_progress(json.dumps(payload))
    except ProgressFormatError:
        return
    _store(prop_journal, rec)


# --------------------------------------------------------------------------- restart plans


def _batch(parts: dict[tuple[str, int], tuple[int | None, int | None]], *,
           description: str = "KafkaV2[Subscribe[a, b]]", batch_id: int = 7) -> Batch:
    rows = tuple(PartitionOffset(t, p, s, e) for (t, p), (s, e) in sorted(parts.items()))
    start = {t: {str(p): s for (tt, p), (s, _) in parts.items() if tt == t and s is not None}
             for t, _ in parts}
    end = {t: {str(p): e for (tt, p), (_, e) in parts.items() if tt == t and e is not None}
           for t, _ in parts}
    src = SourceOffsets(0, description, "kafka", start, end, 10, rows)
    return Batch("orders", "qid", "run", batch_id, T0, 100, 10, None, None, None, (src,), pk=1)


part_keys = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5))
offsets_or_none = st.none() | st.integers(0, 10_000)
anchors = st.dictionaries(part_keys, st.tuples(offsets_or_none, offsets_or_none),
                          min_size=1, max_size=10).filter(
    lambda d: any(e is not None for _, e in d.values()))


def _flat(offsets: dict[str, dict[int, int]] | None) -> dict[tuple[str, int], int]:
    return {(t, p): o for t, ps in (offsets or {}).items() for p, o in ps.items()}


@settings(max_examples=300, deadline=None)
@given(parts=anchors)
def test_plan_after_a_batch_is_its_end_and_never_silently_backwards(
        parts: dict[tuple[str, int], tuple[int | None, int | None]]) -> None:
    plan = compute_plan("orders", _batch(parts))
    source = plan.source(0)
    ends = {k: e for k, (_, e) in parts.items() if e is not None}
    # Never beyond (nor short of) the last durable end; no partition with an end dropped.
    assert _flat(source.offsets) == ends
    # A partition whose end went below its start is an error: starting there needs --force.
    back = sorted(k for k, (s, e) in parts.items() if s is not None and e is not None and e < s)
    backwards_errors = [e for e in plan.errors if "backwards" in e]
    assert bool(backwards_errors) == bool(back)
    for topic, partition in back:
        assert f"{topic}-{partition}" in backwards_errors[0]
    # Partitions Spark stopped reporting (no end) are left out, and the plan says so.
    gone = sorted(k for k, (_, e) in parts.items() if e is None)
    if gone:
        assert any(f"{t}-{p}" in n for n in source.notes for t, p in gone[:1])
    # What the command prints is what the plan holds.
    assert _flat(kafka_offsets(plan.starting_offsets())) == ends


cluster_states = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.dictionaries(st.integers(0, 7), st.tuples(st.integers(0, 12_000), st.integers(0, 12_000))
                    .map(sorted).map(tuple), max_size=8),
    max_size=3)


@settings(max_examples=300, deadline=None)
@given(parts=anchors, state=cluster_states)
def test_cluster_check_never_moves_or_drops_a_journaled_partition_silently(
        parts: dict[tuple[str, int], tuple[int | None, int | None]],
        state: dict[str, dict[int, tuple[int, int]]]) -> None:
    plan = compute_plan("orders",
                        _batch(parts),
                        kafka=KafkaFacts(state=state))
    got = _flat(plan.source(0).offsets)
    said = " ".join(plan.warnings + plan.errors + plan.source(0).notes)
    for (topic, partition), (_, end) in parts.items():
        if end is None:
            continue
        if partition in state.get(topic, {}):
            assert got[(topic, partition)] == end  # never moved, whatever the cluster says
            low, high = state[topic][partition]
            if end < low:
                assert any("DATA LOSS" in e and f"{topic}-{partition}" in e
                           for e in plan.errors)
            elif end > high:
                assert f"{topic}-{partition}" in said
        else:  # dropped, with a warning naming it
            assert (topic, partition) not in got
            assert f"{topic}-{partition}" in said or (
                topic not in state and f"topic {topic} (partitions" in said)
    for key, value in got.items():
        if key not in {k for k, (_, e) in parts.items() if e is not None}:
            assert value == EARLIEST and key[1] in state.get(key[0], {})


# --------------------------------------------------------------------------- concurrent runs

spans_st = st.lists(
    st.tuples(st.none() | st.integers(0, 60),  # start event minute
              st.lists(st.integers(0, 60), max_size=4).map(sorted),  # batch triggers
              st.none() | st.integers(0, 60)),  # termination minute
    min_size=1, max_size=5)


def _at(minute: int) -> str:
    return (T0 + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")


@settings(max_examples=60, deadline=None)
@given(runs=spans_st)
def test_journal_and_planner_agree_on_concurrent_runs(
        prop_journal: Journal,
        runs: list[tuple[int | None, list[int], int | None]]) -> None:
    name = f"conc-{uuid.uuid4()}"
    spans = []
    with prop_journal.engine.begin() as conn:
        for i, (start, triggers, end) in enumerate(runs):
            run_id = f"{name}-run-{i}"
            base = {"query_id": f"qid-{i}", "run_id": run_id, "name": name}
            if start is not None or not triggers:
                prop_journal.record_run(run_from_event(
                    dict(base, type=STARTED, timestamp=_at(start) if start is not None
                         else None)), conn)
            for b, minute in enumerate(triggers):
                prop_journal.record_batch(batch_from_progress(progress(
                    b, sources=[], name=name, query_id=f"qid-{i}", run_id=run_id,
                    timestamp=_at(minute))), conn)
            if end is not None:
                prop_journal.record_run(run_from_event(
                    dict(base, type=TERMINATED, timestamp=_at(end))), conn)
            # The planner's rule (overlap.span_of): start event else first batch,
            # termination else last batch, never ending before it starts.
            first = _dt(start) if start is not None else _dt(triggers[0]) if triggers else None
            stop = _dt(end) if end is not None else _dt(triggers[-1]) if triggers else None
            if stop is None or (first is not None and stop < first):
                stop = first
            spans.append(RunSpan(run_id, f"qid-{i}", first, stop, end is not None))
    expected = [(a.run_id, b.run_id) for a, b in concurrent_runs(spans)]
    got = [(a.run_id, b.run_id) for a, b in prop_journal.concurrent_runs(name)]
    assert sorted(got) == sorted(expected)


def _dt(minute: int | None) -> datetime | None:
    return None if minute is None else T0 + timedelta(minutes=minute)



@settings(max_examples=40, deadline=None)
@given(start=any_offsets_st, end=any_offsets_st)
def test_offsets_below_zero_are_refused_as_ends_and_flagged_as_starts(
        prop_journal: Journal, start: dict[str, dict[int, int]],
        end: dict[str, dict[int, int]]) -> None:
    """Migration 0015: a batch with an end offset below 0 is refused whole (nothing of it
    stored); a start below 0 is kept but read as no offset (out_of_range), never as a
    number a restart could be seeded from."""
    as_json = {t: {str(p): x for p, x in ps.items()} for t, ps in end.items()}
    run = str(uuid.uuid4())
    payload = progress(0, sources=[kafka_source(
        "t", {t: {str(p): x for p, x in ps.items()} for t, ps in start.items()}, as_json)],
        name="below-zero", run_id=run)
    if any(x < 0 for ps in end.values() for x in ps.values()):
        # the one-call write and the COPY path alike: the journal's own error
        with pytest.raises(JournalConstraintError, match="out of range|offsets_fit"):
            _store(prop_journal, batch_from_progress(payload))
        with prop_journal.engine.connect() as conn:
            assert conn.execute(sa.text("select count(*) from offset_journal.batches "
                                        "where run_id = :r"), {"r": run}).scalar_one() == 0
        return
    pk = _store(prop_journal, batch_from_progress(payload))
    with prop_journal.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "select topic, partition, start_offset, end_offset, out_of_range from "
            "offset_journal.kafka_partitions where batch_pk = :pk"), {"pk": pk}).all()
    for topic, partition, got_start, got_end, flagged in rows:
        given_start = start.get(topic, {}).get(partition)
        assert got_end == end.get(topic, {}).get(partition)
        if given_start is not None and given_start < 0:
            assert got_start is None and flagged
        else:
            assert got_start == given_start
