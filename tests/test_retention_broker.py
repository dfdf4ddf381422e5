"""Retention forecasts and `check` on the test session's real broker (retention checked
every second): a job stopped while records keep arriving loses them when the forecast
said, `check` is critical before and says DATA LOSS after, as the planner does; a job
that keeps up is never at risk. The job's batches are journaled directly (the point is
the forecast, not Spark)."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from offset_journal.journal import Journal
from offset_journal.kafka_admin import admin_client, topic_configs, topic_state
from offset_journal.records import batch_from_progress
from offset_journal.testing import KafkaCluster
from tests import support
from tests.payloads import kafka_source, progress
from tests.support import Cli

cli = support.cli


def kafka_cluster_consumer(servers: str) -> Any:
    """One consumer to watch log starts with (a new one per look is too slow to time)."""
    return Consumer({"bootstrap.servers": servers, "group.id": "retention-watch",
                     "enable.auto.commit": False})

SEGMENT_MS = 2000
RETENTION_MS = 15_000
RETENTION_BYTES = 100_000
VALUE = b"x" * 1000
PER_SECOND = 10
SLACK = 1.0


class Producing:
    """Keeps producing PER_SECOND records a second to each topic until stopped."""

    def __init__(self, cluster: KafkaCluster, topics: list[str]) -> None:
        self.producer = cluster.producer()
        self.topics = topics
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.sent = 0

    def run(self) -> None:
        while not self.stop.wait(1 / PER_SECOND):
            for topic in self.topics:
                self.producer.produce(topic, key=b"k%06d" % self.sent, value=VALUE, partition=0)
            self.sent += 1
            self.producer.poll(0)
        self.producer.flush(10)

    def __enter__(self) -> Producing:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(15)


_ENDS: dict[str, int] = {}


def _journal_at(url: str, name: str, topic: str, batch_id: int, end: int, latest: int) -> None:
    """Journal batch ``batch_id`` of query ``name``, which read ``topic``-0 on from its
    previous batch's end up to ``end``."""
    start = {topic: {"0": _ENDS[name]}} if batch_id else None
    _ENDS[name] = end
    payload = progress(batch_id, sources=[kafka_source(topic, start, {topic: {"0": end}},
                                                       latest={topic: {"0": latest}})],
                       name=name, query_id=f"qid-{name}", run_id=f"run-{name}",
                       timestamp=time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()))
    with Journal(url) as journal:
        assert journal.record_batch(batch_from_progress(payload))


def _log(cluster: KafkaCluster, topic: str) -> tuple[int, int]:
    return topic_state(cluster.bootstrap_servers, [topic], timeout=5)[topic][0]


def _retention(run: Cli, url: str, servers: str, *names: str, **extra: str,
               ) -> tuple[int, dict[str, Any]]:
    args = [a for kv in extra.items() for a in kv]
    code, out, err = run("--database-url", url, "retention", *names, "--bootstrap-servers",
                         servers, "--format", "json", *args)
    assert code in (0, 1), err
    return code, json.loads(out)


def test_forecast_holds_for_time_and_size_retention_and_check_warns_first(
        kafka_cluster: KafkaCluster, journal_url: str, cli: Cli) -> None:
    servers = kafka_cluster.bootstrap_servers
    suffix = str(time.time_ns())
    by_time, by_size, keeps = f"ret-time-{suffix}", f"ret-size-{suffix}", f"ret-keeps-{suffix}"
    kafka_cluster.create_topic(by_time, 1, config={
        "retention.ms": str(RETENTION_MS), "segment.ms": str(SEGMENT_MS)})
    kafka_cluster.create_topic(by_size, 1, config={
        "retention.ms": "-1", "retention.bytes": str(RETENTION_BYTES),
        "segment.ms": str(SEGMENT_MS)})
    kafka_cluster.create_topic(keeps, 1, config={
        "retention.ms": str(RETENTION_MS), "segment.ms": str(SEGMENT_MS)})
    _configs, broker = topic_configs(admin_client(servers), [by_time], where=servers)
    # The broker applies retention every second (local_kafka.py, the containers' spec):
    # with Kafka's default of five minutes this test would wait that long.
    assert int(broker["log.retention.check.interval.ms"]) <= 1000
    _retention_running(kafka_cluster, f"ret-canary-{suffix}")

    with Producing(kafka_cluster, [by_time, by_size, keeps]):
        time.sleep(4)  # a steady rate to measure the size-limited log's growth by
        ends = {t: _log(kafka_cluster, t)[1] for t in (by_time, by_size, keeps)}
        # Two jobs stop here; the third keeps up. Records keep arriving.
        _journal_at(journal_url, "stopped-time", by_time, 0, ends[by_time], ends[by_time])
        _journal_at(journal_url, "stopped-size", by_size, 0, ends[by_size], ends[by_size])
        _journal_at(journal_url, "keeps-up", keeps, 0, ends[keeps], ends[keeps])
        time.sleep(0.5)
        code, before = _retention(cli, journal_url, servers, "--all",
                                  **{"--rate-window": "3s"})
        assert code == 0 and before["data_loss"] == []
        forecast = {p["query"]: p for p in before["partitions"]}
        for name in ("stopped-time", "stopped-size"):
            assert forecast[name]["status"] == "at-risk", forecast[name]
        assert forecast["stopped-time"]["basis"] == "time"
        assert forecast["stopped-size"]["basis"] == "size"

        code, out, _err = cli("--database-url", journal_url, "retention", "stopped-time",
                              "--bootstrap-servers", servers)
        assert code == 0 and out.splitlines()[0].split()[:3] == ["QUERY", "SOURCE", "TOPIC"]
        assert re.search(f"partition 0 of {by_time} loses unread records in about [0-9]+ s",
                         out), out
        assert "(time retention, at the earliest" in out and "unless stopped-time catches up" \
            in out

        # Critical before the loss: the loss is due within the 60 s asked for.
        code, out, _err = cli("--database-url", journal_url, "check", "stopped-time",
                              "stopped-size", "--min-time-to-loss", "5m,60s",
                              "--bootstrap-servers", servers)
        assert code == 2, out
        assert out.count("CRITICAL: ") == 2 and "DATA LOSS" not in out
        assert _log(kafka_cluster, by_time)[0] <= ends[by_time]

        # Measure when the first unread record of each really goes; the job that keeps
        # up journals a batch a second meanwhile.
        # deleted[name]: (last seen there, first seen gone)
        deleted: dict[str, tuple[float, float]] = {}
        seen = {by_time: time.time(), by_size: time.time()}
        deadline = time.monotonic() + 60
        batch = 1
        watch = kafka_cluster_consumer(servers)
        try:
            while len(deleted) < 2:
                assert time.monotonic() < deadline, f"not deleted within 60 s: {deleted}"
                for name, topic in (("stopped-time", by_time), ("stopped-size", by_size)):
                    if name in deleted:
                        continue
                    low, _high = watch.get_watermark_offsets(TopicPartition(topic, 0),
                                                             timeout=5, cached=False)
                    if low > ends[topic]:
                        deleted[name] = (seen[topic], time.time())
                    else:
                        seen[topic] = time.time()
                end = watch.get_watermark_offsets(TopicPartition(keeps, 0), timeout=5,
                                                  cached=False)[1]
                if end > _ENDS["keeps-up"] and batch % 5 == 0:
                    _journal_at(journal_url, "keeps-up", keeps, batch, end, end)
                batch += 1
                time.sleep(0.05)
        finally:
            watch.close()

        for name in ("stopped-time", "stopped-size"):
            earliest = _epoch(forecast[name]["loss_earliest"])
            latest = _epoch(forecast[name]["loss_latest"])
            last_there, first_gone = deleted[name]
            # Never before the forecast; within one segment's span (and one retention
            # check) after it, give or take a second of a loaded machine's scheduling
            # (the producer's pace decides a size-limited log's growth).
            info = (name, earliest, latest, last_there, first_gone)
            assert first_gone >= earliest and last_there <= latest + SLACK, info
            assert last_there - earliest <= SEGMENT_MS / 1000 + 1.0 + SLACK, info

        code, after = _retention(cli, journal_url, servers, "--all", "--record")
        assert code == 1
        status = {p["query"]: p for p in after["partitions"]}
        assert status["stopped-time"]["status"] == status["stopped-size"]["status"] == "lost"
        assert status["keeps-up"]["status"] in ("caught-up", "at-risk")
        assert status["keeps-up"]["lost"] == 0
        # DATA LOSS, as the planner says it (the same words: tests/test_health.py; the
        # counts here move on as retention goes on deleting).
        for name, topic in (("stopped-time", by_time), ("stopped-size", by_size)):
            code, out, _err = cli("--database-url", journal_url, "plan", name,
                                  "--bootstrap-servers", servers, "--no-record",
                                  "--format", "json")
            assert code == 1
            (error,) = [e for e in json.loads(out)["sources"][0]["errors"]
                        if e.startswith("DATA LOSS")]
            (mine,) = [e for e in after["data_loss"] if e.startswith(f"query {name},")]
            starts = f"{topic}-0 starts at {ends[topic]} but its log starts at "
            assert starts in error and starts in mine, (error, mine)
            assert mine.startswith(f"query {name}, source 0: DATA LOSS: ")
        code, out, err = cli("--database-url", journal_url, "retention", "stopped-size",
                             "--bootstrap-servers", servers)
        assert code == 1 and " lost" in out
        assert err.startswith("offset-journal: error: query stopped-size, source 0: DATA LOSS: ")

        # check says DATA LOSS, from the broker and from the recorded forecast alike;
        # the job that kept up is fine.
        for live in (["--bootstrap-servers", servers], []):
            code, out, _err = cli("--database-url", journal_url, "check", "--all",
                                  "--min-time-to-loss", "5s", *live)
            assert code == 2, out
            assert out.count("DATA LOSS") == 2 and "keeps-up" not in out, out
        code, out, _err = cli("--database-url", journal_url, "check", "keeps-up",
                              "--min-time-to-loss", "5s", "--bootstrap-servers", servers)
        assert code == 0, out


def _retention_running(cluster: KafkaCluster, topic: str) -> None:
    """Wait until the broker's retention task has run once: it starts 30 s after the
    broker (Kafka's LogManager), so a test right after start-up would time that delay."""
    cluster.create_topic(topic, 1, config={"retention.ms": "100", "segment.ms": "100"})
    producer = cluster.producer()
    deadline = time.monotonic() + 45
    while _log(cluster, topic)[0] == 0:
        assert time.monotonic() < deadline, "the broker applied no retention within 45 s"
        producer.produce(topic, value=b"canary", partition=0)
        producer.flush(5)
        time.sleep(0.3)


def _epoch(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
