"""Spark's own Kafka connector (``format("kafka")``) on a real broker, journaled by the
listener: every subscription kind and two Kafka sources in one query, checked in SQL
against the query's own ``recentProgress``; and the connector's real ``startingOffsets``
rules, including the offsets ``offset-journal starting-offsets`` prints."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest

from offset_journal.cli import main
from offset_journal.journal.db import ENV_URL
from tests.payloads import progress_offset, sql_rows

pytestmark = pytest.mark.spark


_j = progress_offset


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _reader(spark: Any, bootstrap: str, **options: Any) -> Any:
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _run(listener: Any, df: Any, name: str, tmp_path: Any, *, sink: str = "noop") -> Any:
    """Run ``df`` to what is there now (availableNow) and wait for the journal."""
    q = (df.writeStream.format(sink).queryName(name)
         .option("checkpointLocation", str(tmp_path / f"ck-{name}"))
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)
    return q


def _progress_rows(query: Any) -> list[tuple[Any, ...]]:
    """(batch, source, description, rows, topic, partition, start, end) from Spark."""
    rows = []
    for p in query.recentProgress:
        for index, s in enumerate(p["sources"]):
            start, end = _j(s["startOffset"]) or {}, _j(s["endOffset"])
            for topic in sorted(end):
                for part in sorted(end[topic], key=int):
                    rows.append((p["batchId"], index, s["description"], s["numInputRows"],
                                 topic, int(part), start.get(topic, {}).get(part),
                                 end[topic][part]))
    return rows


def _journal_rows(url: str, name: str) -> list[tuple[Any, ...]]:
    return sql_rows(url, """
        select b.batch_id, s.source_index, s.description, s.num_input_rows,
               k.topic, k.partition, k.start_offset, k.end_offset
        from offset_journal.batches b
        join offset_journal.batch_sources s on s.batch_pk = b.id
        join offset_journal.kafka_partitions k
          on k.batch_pk = b.id and k.source_index = s.source_index
        where b.query_name = :q
        order by b.batch_id, s.source_index, k.topic, k.partition""", q=name)


def _check_journal_matches_progress(url: str, query: Any) -> list[tuple[Any, ...]]:
    expected = _progress_rows(query)
    assert expected, "the query ran no batch: the comparison would prove nothing"
    assert _journal_rows(url, query.name) == expected
    kinds = sql_rows(url, """
        select distinct s.kind, s.problem from offset_journal.batch_sources s
        join offset_journal.batches b on b.id = s.batch_pk where b.query_name = :q""",
                     q=query.name)
    assert kinds == [("kafka", None)]
    totals = sql_rows(url, "select batch_id, num_input_rows from offset_journal.batches "
                           "where query_name = :q order by batch_id", q=query.name)
    assert totals == [(p["batchId"], p["numInputRows"]) for p in query.recentProgress]
    return expected


def test_subscribe_splits_by_max_offsets_and_keeps_latest_offset_and_metrics(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    spark, listener = journaled_spark
    kafka_cluster.produce(kafka_topic, 30)
    name = _name("subscribe")
    q = _run(listener, _reader(spark, kafka_cluster.bootstrap_servers, subscribe=kafka_topic,
                               startingOffsets="earliest", maxOffsetsPerTrigger=12),
             name, tmp_path)
    progress = q.recentProgress
    # maxOffsetsPerTrigger splits the 30 records into batches of at most 12 (the
    # connector shares the limit among partitions in proportion to their lag)
    sizes = [p["numInputRows"] for p in progress]
    assert len(sizes) >= 3 and max(sizes) <= 12 and sum(sizes) == 30, sizes
    assert {p["sources"][0]["description"] for p in progress} == {
        f"KafkaV2[Subscribe[{kafka_topic}]]"}
    rows = _check_journal_matches_progress(journal_url, q)
    assert sum(end - (start or 0) for *_x, start, end in rows) == 30
    # What the connector reports besides the offsets: latestOffset (the end of each
    # partition when the batch was planned; stored per partition, the source_offsets
    # view gives the JSON back) and its metrics (how far behind it is).
    stored = sql_rows(journal_url, """
        select b.batch_id, o.latest_offset, s.metrics from offset_journal.batch_sources s
        join offset_journal.source_offsets o
          on o.batch_pk = s.batch_pk and o.source_index = s.source_index
        join offset_journal.batches b on b.id = s.batch_pk where b.query_name = :q
        order by b.batch_id""", q=name)
    sources = [p["sources"][0] for p in progress]
    assert stored == [(p["batchId"], _j(s["latestOffset"]), dict(s["metrics"]))
                      for p, s in zip(progress, sources, strict=True)]
    first_metrics = stored[0][2]
    assert {"avgOffsetsBehindLatest", "maxOffsetsBehindLatest",
            "minOffsetsBehindLatest"} <= set(first_metrics)
    # after the first batch, the records not yet read were behind the latest offsets
    assert sum(stored[0][1][kafka_topic].values()) == 30
    behind = 30 - sizes[0]
    assert float(first_metrics["avgOffsetsBehindLatest"]) * 4 == pytest.approx(behind)
    assert stored[-1][2]["maxOffsetsBehindLatest"] == "0"


def test_subscribe_pattern_and_assign_are_journaled_as_spark_reports_them(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    spark, listener = journaled_spark
    kafka_cluster.produce(f"{kafka_topic}-a", 8)
    kafka_cluster.produce(f"{kafka_topic}-b", 8)
    pattern = re.escape(kafka_topic) + "-[ab]"
    q = _run(listener, _reader(spark, kafka_cluster.bootstrap_servers, subscribePattern=pattern,
                               startingOffsets="earliest", maxOffsetsPerTrigger=10),
             _name("pattern"), tmp_path)
    assert q.recentProgress[0]["sources"][0]["description"] == \
        f"KafkaV2[SubscribePattern[{pattern}]]"
    rows = _check_journal_matches_progress(journal_url, q)
    assert {r[4] for r in rows} == {f"{kafka_topic}-a", f"{kafka_topic}-b"}
    assert sum(p["numInputRows"] for p in q.recentProgress) == 16

    assign = {f"{kafka_topic}-a": [0, 2]}
    q = _run(listener, _reader(spark, kafka_cluster.bootstrap_servers,
                               assign=json.dumps(assign), startingOffsets="earliest"),
             _name("assign"), tmp_path)
    description = q.recentProgress[0]["sources"][0]["description"]
    assert description.startswith("KafkaV2[Assign[") and f"{kafka_topic}-a-2" in description
    rows = _check_journal_matches_progress(journal_url, q)
    assert {(r[4], r[5]) for r in rows} == {(f"{kafka_topic}-a", 0), (f"{kafka_topic}-a", 2)}
    assert sum(p["numInputRows"] for p in q.recentProgress) == 4  # 2 of 8, round-robin


def test_two_kafka_sources_in_one_query_each_get_their_rows(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    spark, listener = journaled_spark
    other = f"{kafka_topic}-other"
    kafka_cluster.produce(kafka_topic, 12)
    kafka_cluster.produce(other, 8)
    left = _reader(spark, kafka_cluster.bootstrap_servers, subscribe=kafka_topic,
                   startingOffsets="earliest", maxOffsetsPerTrigger=8)
    right = _reader(spark, kafka_cluster.bootstrap_servers,
                    assign=json.dumps({other: [0, 1, 2, 3]}), startingOffsets="earliest",
                    maxOffsetsPerTrigger=8)
    q = _run(listener, left.union(right), _name("union"), tmp_path)
    assert all(len(p["sources"]) == 2 for p in q.recentProgress)
    rows = _check_journal_matches_progress(journal_url, q)
    by_source = {i: {r[4] for r in rows if r[1] == i} for i in (0, 1)}
    assert by_source == {0: {kafka_topic}, 1: {other}}
    descriptions = sql_rows(journal_url, """
        select distinct s.source_index, s.description from offset_journal.batch_sources s
        join offset_journal.batches b on b.id = s.batch_pk where b.query_name = :q
        order by 1""", q=q.name)
    assert descriptions[0] == (0, f"KafkaV2[Subscribe[{kafka_topic}]]")
    assert descriptions[1][1].startswith("KafkaV2[Assign[")
    assert sum(p["numInputRows"] for p in q.recentProgress) == 20


# --------------------------------------------------------------------------- startingOffsets


def _read_all(spark: Any, listener: Any, bootstrap: str, topic: str, starting: str,
              tmp_path: Any) -> set[tuple[str, int, int]]:
    name = _name("read")
    q = _run(listener, _reader(spark, bootstrap, subscribe=topic, startingOffsets=starting)
             .selectExpr("topic", "partition", "offset"), name, tmp_path, sink="memory")
    assert q.recentProgress
    return {tuple(r) for r in spark.table(name).collect()}


def test_starting_offsets_naming_only_some_partitions_is_refused_by_spark(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    spark, listener = journaled_spark
    kafka_cluster.produce(kafka_topic, 8)  # 4 partitions
    name = _name("some_partitions")
    q = (_reader(spark, kafka_cluster.bootstrap_servers, subscribe=kafka_topic,
                 startingOffsets=json.dumps({kafka_topic: {"0": 0, "1": 0}}))
         .writeStream.format("noop").queryName(name)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    with pytest.raises(Exception) as err:
        q.awaitTermination(180)
    text = str(err.value)
    assert "If startingOffsets contains specific offsets, you must specify all " \
           "TopicPartitions." in text
    assert "Use -1 for latest, -2 for earliest, if you don't care." in text
    assert f"Specified: Set({kafka_topic}-0, {kafka_topic}-1) Assigned: Set(" in text
    assert listener.wait_terminated(q.runId, 60)
    (exc,) = sql_rows(journal_url, "select exception from offset_journal.query_runs "
                                   "where query_name = :q", q=name)
    assert "you must specify all TopicPartitions" in exc[0]


def test_starting_offsets_minus_two_and_minus_one(
        journaled_spark, kafka_cluster, kafka_topic, tmp_path):
    spark, listener = journaled_spark
    produced = kafka_cluster.produce(kafka_topic, 16)
    starting = {kafka_topic: {"0": -2, "1": -1, "2": 2, "3": -1}}
    got = _read_all(spark, listener, kafka_cluster.bootstrap_servers, kafka_topic,
                    json.dumps(starting), tmp_path)
    assert got == {(kafka_topic, p, o) for p, o, _k, _v in produced
                   if p == 0 or (p == 2 and o >= 2)}


def test_offsets_from_the_cli_are_accepted_and_give_exactly_the_rest(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys,
        monkeypatch):
    spark, listener = journaled_spark
    first = kafka_cluster.produce(kafka_topic, 20)
    name = _name("v1")
    _run(listener, _reader(spark, kafka_cluster.bootstrap_servers, subscribe=kafka_topic,
                           startingOffsets="earliest", maxOffsetsPerTrigger=7), name, tmp_path)
    # v1 is gone; more records arrive, and the topic grows a partition the journal has
    # never seen (the connector refuses a JSON that leaves it out).
    kafka_cluster.add_partitions(kafka_topic, 5)
    rest = kafka_cluster.produce(kafka_topic, 15, start=20)
    assert {p for p, *_ in rest} == {0, 1, 2, 3, 4}

    monkeypatch.setenv(ENV_URL, journal_url)
    code = main(["starting-offsets", name, "--bootstrap-servers",
                 kafka_cluster.bootstrap_servers, "--subscribe", kafka_topic])
    out, err = capsys.readouterr()
    assert code == 0, err
    starting = json.loads(out)
    assert starting[kafka_topic]["4"] == -2 and len(starting[kafka_topic]) == 5
    got = _read_all(spark, listener, kafka_cluster.bootstrap_servers, kafka_topic, out.strip(),
                    tmp_path)
    assert got == {(kafka_topic, p, o) for p, o, _k, _v in rest}
    assert not got & {(kafka_topic, p, o) for p, o, _k, _v in first}


def test_records_deleted_before_being_read_data_loss_in_the_cli_and_the_connector(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys,
        monkeypatch):
    spark, listener = journaled_spark
    kafka_cluster.produce(kafka_topic, 8)  # 2 per partition
    name = _name("lossy")
    _run(listener, _reader(spark, kafka_cluster.bootstrap_servers, subscribe=kafka_topic,
                           startingOffsets="earliest"), name, tmp_path)
    rest = kafka_cluster.produce(kafka_topic, 16, start=8)  # offsets 2..5 per partition
    # retention (here DeleteRecords) removes partition 0's records up to offset 4: two
    # records the job never read are gone
    kafka_cluster.delete_records(kafka_topic, {0: 4})
    assert kafka_cluster.watermarks(kafka_topic)[0] == (4, 6)

    monkeypatch.setenv(ENV_URL, journal_url)
    argv = ["starting-offsets", name, "--bootstrap-servers", kafka_cluster.bootstrap_servers]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert "DATA LOSS" in err and f"{kafka_topic}-0 starts at 2 but its log starts at 4" in err
    assert main([*argv, "--force"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {kafka_topic: {"0": 2, "1": 2, "2": 2, "3": 2}}

    # The connector agrees: with failOnDataLoss (its default) the query fails ...
    q = (_reader(spark, kafka_cluster.bootstrap_servers, subscribe=kafka_topic,
                 startingOffsets=out.strip())
         .writeStream.format("noop").queryName(_name("strict"))
         .option("checkpointLocation", str(tmp_path / "ck-strict"))
         .trigger(availableNow=True).start())
    with pytest.raises(Exception) as failed:
        q.awaitTermination(180)
    text = " ".join(str(failed.value).split())
    assert "Some data may have been lost because they are not available in Kafka any more" \
        in text, text[:3000]
    # partition 0 named from offset 2, in the words of the connector of each Spark
    assert re.search(rf"Could not read records in offset \[2, 6\) for topic partition "
                     rf"{kafka_topic}-0"  # 4.0 and later
                     rf"|Cannot fetch offset 2 \(GroupId: \S+, TopicPartition: {kafka_topic}-0\)",
                     text), text[:3000]  # 3.5
    assert listener.wait_terminated(q.runId, 60)
    # ... and without it reads what is left: everything but the two deleted records.
    name = _name("lenient")
    q = _run(listener, _reader(spark, kafka_cluster.bootstrap_servers, subscribe=kafka_topic,
                               startingOffsets=out.strip(), failOnDataLoss="false")
             .selectExpr("topic", "partition", "offset"), name, tmp_path, sink="memory")
    got = {tuple(r) for r in spark.table(name).collect()}
    assert got == {(kafka_topic, p, o) for p, o, _k, _v in rest if (p, o) not in {(0, 2), (0, 3)}}
