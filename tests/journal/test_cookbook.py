"""The SQL cookbook (docs/cookbook.md), run against a journal written by real streaming
runs."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from offset_journal import Journal
from offset_journal.journal.db import resolve_url
from tests.jobs_support import load_job

pytestmark = pytest.mark.spark

COOKBOOK = Path(__file__).resolve().parents[2] / "docs" / "cookbook.md"


def cookbook() -> dict[str, str]:
    blocks = re.findall(r"```sql\n(.*?)```", COOKBOOK.read_text(), flags=re.S)
    out = {}
    for block in blocks:
        m = re.match(r"-- cookbook: (.+)\n", block)
        if m:
            out[m.group(1).strip()] = block
    return out


@pytest.fixture
def journal(journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    """Two runs of the stateless job under 'orders-to-lake', on two checkpoints."""
    spark, listener = journaled_spark
    job = load_job("kafka_to_sink")
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "orders-to-lake", "--database-url", journal_url,
              "--sink", "parquet", "--output", str(tmp_path / "out"),
              "--max-offsets-per-trigger", "20"]
    kafka_cluster.produce(kafka_topic, 60)
    for argv in (["--checkpoint", str(tmp_path / "v1")],
                 ["--checkpoint", str(tmp_path / "v2"), "--from-journal"]):
        q = job.build_query(spark, job.parser().parse_args(common + argv))
        q.awaitTermination(300)
        assert listener.wait_terminated(q.runId)
        kafka_cluster.produce(kafka_topic, 40, start=60)
    j = Journal(journal_url)
    yield j, journal_url, kafka_topic
    j.close()


def _run(url: str, sql: str) -> list[dict]:
    engine = sa.create_engine(resolve_url(url))
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.exec_driver_sql(sql).mappings()]  # as psql would
    engine.dispose()
    return rows


def test_the_docs_have_the_cookbook():
    assert set(cookbook()) == {
        "last offsets per partition", "throughput per batch", "how far a restart would rewind",
        "the runs of a query", "batches slower than N milliseconds", "history of one partition",
        "offsets of the last batch as JSON", "current lag per partition", "lag over time",
        "the slowest partitions", "batches whose lag grew", "freshness of the last batches"}


def test_cookbook_queries_answer_what_the_journal_api_says(journal):
    j, url, topic = journal
    sql = cookbook()
    history = j.history("orders-to-lake")
    last = j.last_batch("orders-to-lake")
    assert len(history) >= 5  # 60 then 40 records, 20 per trigger

    rows = _run(url, sql["last offsets per partition"])
    assert {(r["topic"], r["partition"]): r["end_offset"] for r in rows} == {
        (p.topic, p.partition): p.end for p in last.sources[0].partitions}

    rows = _run(url, sql["offsets of the last batch as JSON"])
    assert [(r["run_id"], r["batch_id"], r["source_index"], r["start_offset"], r["end_offset"])
            for r in rows] == [(last.run_id, last.batch_id, s.source_index, s.start_offset,
                                s.end_offset) for s in last.sources]
    assert rows[0]["end_offset"] == {
        topic: {str(p.partition): p.end for p in last.sources[0].partitions if p.topic == topic}
        for topic in {p.topic for p in last.sources[0].partitions}}

    rows = _run(url, sql["throughput per batch"])
    assert len(rows) == min(20, len(history))
    assert [(r["run_id"], r["batch_id"]) for r in rows] == [
        (b.run_id, b.batch_id) for b in reversed(history)][:20]
    assert all(r["num_input_rows"] is not None for r in rows)

    rows = _run(url, sql["how far a restart would rewind"])
    as_of = j.batch_as_of("orders-to-lake", last.trigger_at - timedelta(seconds=2))
    restart = {(p.topic, p.partition): p.end for p in as_of.sources[0].partitions} if as_of else {}
    assert {(r["topic"], r["partition"]): r["records_to_reprocess"] for r in rows} == {
        (p.topic, p.partition): p.end - restart.get((p.topic, p.partition), 0)
        for p in last.sources[0].partitions}

    rows = _run(url, sql["the runs of a query"])
    runs = j.runs("orders-to-lake")
    assert [(r["run_id"], r["batches"]) for r in rows] == [(r.run_id, r.batches) for r in runs]
    assert len(rows) == 2 and not any(r["failed"] for r in rows)

    rows = _run(url, sql["batches slower than N milliseconds"])
    slow = sorted((b.run_id, b.batch_id) for b in history if (b.batch_duration_ms or 0) > 200)
    assert sorted((r["run_id"], r["batch_id"]) for r in rows) == slow
    assert rows, "no batch over 200 ms: the query proved nothing"

    rows = _run(url, sql["history of one partition"])
    expected = [(b.run_id, b.batch_id, p.start, p.end) for b in history
                for p in b.sources[0].partitions if p.partition == 0]
    got = [(r["run_id"], r["batch_id"], r["start_offset"], r["end_offset"]) for r in rows]
    assert got == expected

    _lag_queries_answer_from_what_spark_reported(url, history)


def _lag_queries_answer_from_what_spark_reported(url: str, history: list) -> None:
    """The lag queries against lag computed here from each source's latestOffset JSON as
    Spark reported it (the source_offsets view: batch_sources keeps it only where the
    partition values do not rebuild it) and the batches' end offsets."""
    sql = cookbook()
    latest_json = {(r["run_id"], r["batch_id"]): r["latest_offset"] for r in _run(url, """
        SELECT b.run_id, b.batch_id, s.latest_offset FROM offset_journal.batches b
        JOIN offset_journal.source_offsets s ON s.batch_pk = b.id""")}
    lags = {}  # (run, batch) -> {(topic, partition): lag}, in trigger order
    for b in sorted(history, key=lambda b: (b.trigger_at, b.batch_id)):
        latest = latest_json[(b.run_id, b.batch_id)]
        lags[(b.run_id, b.batch_id)] = {
            (p.topic, p.partition): latest[p.topic][str(p.partition)] - p.end
            for p in b.sources[0].partitions}
    assert any(v > 0 for lag in lags.values() for v in lag.values()), "no lag: proves nothing"

    rows = _run(url, sql["current lag per partition"])
    last = history[-1]
    assert {(r["topic"], r["partition"]): r["lag"] for r in rows} == lags[
        (last.run_id, last.batch_id)]

    totals = [(key, sum(lag.values())) for key, lag in lags.items()]
    rows = _run(url, sql["lag over time"])
    assert sum(r["batches"] for r in rows) == len(totals)
    assert max(r["max_lag"] for r in rows) == max(t for _, t in totals)

    rows = _run(url, sql["batches whose lag grew"])
    grew = [(key, prev, t) for (_, prev), (key, t) in zip(totals, totals[1:], strict=False)
            if t > prev]
    assert [((r["run_id"], r["batch_id"]), r["previous_lag"], r["total_lag"]) for r in rows
            ] == grew
    assert grew, "the second run starts behind the first one's end: its lag grew"

    rows = _run(url, sql["the slowest partitions"])
    worst = {}
    for lag in lags.values():
        for part, v in lag.items():
            worst[part] = max(worst.get(part, v), v)
    assert len(worst) <= 10  # every partition is listed, the furthest behind first
    assert {(r["topic"], r["partition"]): r["max_lag"] for r in rows} == worst
    assert [r["max_lag"] for r in rows] == sorted(worst.values(), reverse=True)

    rows = _run(url, sql["freshness of the last batches"])
    newest = sorted(history, key=lambda b: (b.trigger_at, b.batch_id), reverse=True)[:20]
    assert [(r["run_id"], r["batch_id"], r["event_time_max"]) for r in rows] == [
        (b.run_id, b.batch_id, b.event_time_max) for b in newest]
    assert all(r["freshness"] == (None if r["event_time_max"] is None
                                  else r["trigger_at"] - r["event_time_max"]) for r in rows)
