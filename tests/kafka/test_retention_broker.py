"""Retention forecasts and `check` on the test session's real broker (retention checked
every second): a job stopped while records keep arriving loses them when the forecast
said, `check` is critical before and says DATA LOSS after, as the planner does; a job
that keeps up loses nothing (its unread records are a second old: due a retention.ms
from now). Partitions added since the last batch and a topic recreated are what the
planner says too. The job's batches are journaled directly (the point is the forecast,
not Spark)."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from offset_journal.journal import Journal
from offset_journal.kafka.admin import admin_client, topic_state
from offset_journal.kafka.configs import topic_configs
from offset_journal.records import batch_from_progress
from offset_journal.testing import KafkaCluster
from tests import support
from tests.payloads import kafka_source, progress
from tests.support import Cli


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
    broker = topic_configs(admin_client(servers), [by_time], where=servers).broker
    # The broker applies retention every second (local/kafka.py, the containers' spec):
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
        # The default window (10 min) is longer than the logs: their growth is measured
        # over their own span, so the size forecast is the same as over a short window.
        code, before = _retention(cli, journal_url, servers, "--all")
        assert code == 0 and before["data_loss"] == []
        forecast = {p["query"]: p for p in before["partitions"]}
        for name in ("stopped-time", "stopped-size"):
            assert forecast[name]["status"] == "at-risk", forecast[name]
        assert forecast["stopped-time"]["basis"] == "time"
        assert forecast["stopped-size"]["basis"] == "size"
        _code, short = _retention(cli, journal_url, servers, "stopped-size",
                                  **{"--rate-window": "3s"})
        assert abs(_epoch(short["partitions"][0]["loss_earliest"])
                   - _epoch(forecast["stopped-size"]["loss_earliest"])) < 3.0, (short, forecast)

        code, out, _err = cli("--database-url", journal_url, "retention", "stopped-time",
                              "--bootstrap-servers", servers)
        assert code == 0 and out.splitlines()[0].split()[:3] == ["QUERY", "SOURCE", "TOPIC"]
        assert re.search(f"partition 0 of {by_time} loses unread records in about [0-9]+ s",
                         out), out
        assert "(time retention, at the earliest" in out and "unless stopped-time catches up" \
            in out

        # Critical before the loss, one line per query: each loss is due within the 60 s
        # asked for (the size one too with the default window, and with a short one).
        for window in ([], ["--rate-window", "3s"]):
            code, out, _err = cli("--database-url", journal_url, "check", "stopped-time",
                                  "stopped-size", "--min-time-to-loss", "5m,60s",
                                  "--bootstrap-servers", servers, *window)
            assert code == 2, out
            lines = out.splitlines()
            assert [line.split(": ")[:2] for line in lines[:2]] == [
                ["CRITICAL", "stopped-size"], ["CRITICAL", "stopped-time"]], out
            assert "loses unread records to retention in about" in lines[0]
            assert lines[2].startswith("CRITICAL: 2 queries checked: 2 critical") and \
                "DATA LOSS" not in out
        assert _log(kafka_cluster, by_time)[0] <= ends[by_time]

        # Measure when the first unread record of each really goes; the job that keeps
        # up journals a batch a second meanwhile.
        # deleted[name]: (last seen there, first seen gone)
        deleted: dict[str, tuple[float, float]] = {}
        seen = {by_time: time.time(), by_size: time.time()}
        deadline = time.monotonic() + 60
        batch, tick = 1, 1
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
                if end > _ENDS["keeps-up"] and tick % 5 == 0:
                    # Batch ids one after another, as Spark gives them: check names a
                    # skipped id as a batch the journal lost.
                    _journal_at(journal_url, "keeps-up", keeps, batch, end, end)
                    batch += 1
                tick += 1
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
        # The job that keeps up has a second's records unread at most: at risk only as
        # every record is, a retention.ms after it was written.
        kept = status["keeps-up"]
        assert kept["lost"] == 0 and kept["status"] in ("caught-up", "at-risk"), kept
        if kept["status"] == "at-risk":
            assert kept["seconds_left"] > RETENTION_MS / 1000 - 3, kept
        # DATA LOSS, as the planner says it (the same words: tests/health/test_health.py; the
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
    """Wait until the broker's retention task has run once: Kafka's LogManager starts it
    log.initial.task.delay.ms after the broker (30 s by default; 0 on the test brokers,
    local/kafka.py and the containers), so a test right after start-up would otherwise
    time that delay."""
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


def test_added_partitions_and_a_recreated_topic_as_the_planner_says(
        kafka_cluster: KafkaCluster, journal_url: str, cli: Cli) -> None:
    """A partition added since the last batch is read from 0, so records deleted from
    it before any job read them are DATA LOSS; offsets beyond a log end (the topic
    deleted and recreated) are refused: `retention` and `check` say what `plan` says."""
    from confluent_kafka.admin import NewPartitions

    servers = kafka_cluster.bootstrap_servers
    suffix = str(time.time_ns())
    grown, recreated = f"ret-grown-{suffix}", f"ret-recreated-{suffix}"
    kafka_cluster.create_topic(grown, 1)
    kafka_cluster.create_topic(recreated, 1)
    producer = kafka_cluster.producer()
    for _ in range(10):
        producer.produce(grown, value=b"x", partition=0)
        producer.produce(recreated, value=b"x", partition=0)
    producer.flush(10)
    _ENDS["grown"] = _ENDS["recreated"] = 0
    _journal_at(journal_url, "grown", grown, 0, 10, 10)
    _journal_at(journal_url, "recreated", recreated, 0, 50, 50)  # beyond its end: 10
    for fut in kafka_cluster.admin().create_partitions([NewPartitions(grown, 2)]).values():
        fut.result(30)
    deadline = time.monotonic() + 30
    while 1 not in topic_state(servers, [grown], timeout=5).get(grown, {}):
        assert time.monotonic() < deadline, "the new partition did not show"
        time.sleep(0.2)
    producer = kafka_cluster.producer()  # one that knows the new partition
    for _ in range(5):
        producer.produce(grown, value=b"x", partition=1)
    producer.flush(10)
    # Gone before any job read them (a new admin client: the session's kept one does
    # not know the new partition's leader until its metadata refresh, minutes away).
    admin = admin_client(servers)
    for fut in admin.delete_records([TopicPartition(grown, 1, 3)]).values():
        fut.result(30)

    code, found = _retention(cli, journal_url, servers, "grown", "--record")
    assert code == 1
    status = {(p["topic"], p["partition"]): p for p in found["partitions"]}
    assert status[(grown, 1)]["next_offset"] == 0 and status[(grown, 1)]["lost"] == 3
    assert status[(grown, 1)]["status"] == "lost" and status[(grown, 0)]["status"] == "caught-up"
    code, out, _err = cli("--database-url", journal_url, "plan", "grown", "--bootstrap-servers",
                          servers, "--no-record", "--format", "json")
    assert code == 1
    plan_errors = json.loads(out)["sources"][0]["errors"]
    assert found["data_loss"] == [f"query grown, source 0: {e}" for e in plan_errors]
    assert f"{grown}-1 starts at 0 but its log starts at 3" in plan_errors[0]

    code, found = _retention(cli, journal_url, servers, "recreated", "--record")
    assert code == 1 and found["partitions"][0]["status"] == "beyond-end"
    code, out, _err = cli("--database-url", journal_url, "plan", "recreated",
                          "--bootstrap-servers", servers, "--no-record", "--format", "json")
    assert found["data_loss"] == [f"query recreated, source 0: {e}"
                                  for e in json.loads(out)["sources"][0]["errors"]]
    assert "beyond its log end 10" in found["data_loss"][0]

    for live in (["--bootstrap-servers", servers], []):
        code, out, _err = cli("--database-url", journal_url, "check", "grown", "recreated",
                              "--min-time-to-loss", "1h", *live)
        assert code == 2, out
        assert "CRITICAL: grown: DATA LOSS: 3 records deleted by retention" in out, out
        assert "CRITICAL: recreated: 1 partition to read from beyond the log end" in out, out


LONG_MAX = "9223372036854775807"  # Kafka's Long.MAX: "forever" (Debezium's history topic)


def _filled(cluster: KafkaCluster, topic: str, config: dict[str, str], records: int = 10,
            ) -> None:
    cluster.create_topic(topic, 1, config=config)
    producer = cluster.producer()
    for i in range(records):
        producer.produce(topic, key=b"k%d" % i, value=VALUE, partition=0)
    producer.flush(10)


def test_a_topic_kept_forever_is_safe_and_stops_no_other_forecast(
        kafka_cluster: KafkaCluster, journal_url: str, cli: Cli) -> None:
    """A topic whose retention.ms (or segment.ms) is Long.MAX overflowed
    the loss time: `retention Q` exited 1 "unexpected ValueError: year 292279051 is out
    of range", `retention --all --record` recorded nothing for any query and `check
    --all --bootstrap-servers` exited 3 for the fleet. Such a limit is no limit (safe),
    a segment that never rolls by time leaves the loss at its earliest, and the other
    queries are forecast, recorded and checked as ever."""
    servers = kafka_cluster.bootstrap_servers
    suffix = str(time.time_ns())
    topics = {"history": f"ret-forever-{suffix}", "never-rolls": f"ret-never-rolls-{suffix}",
              "hourly": f"ret-hourly-{suffix}"}
    _filled(kafka_cluster, topics["history"], {"retention.ms": LONG_MAX})
    _filled(kafka_cluster, topics["never-rolls"], {"retention.ms": "3600000",
                                                   "segment.ms": LONG_MAX})
    _filled(kafka_cluster, topics["hourly"], {"retention.ms": "3600000"})
    for name, topic in topics.items():
        _ENDS[name] = 0
        _journal_at(journal_url, name, topic, 0, 0, 10)  # nothing read yet: 10 unread
    code, found = _retention(cli, journal_url, servers, "history")
    assert code == 0 and found["partitions"][0]["status"] == "safe", found
    assert found["topics"][topics["history"]]["retention_ms"] == int(LONG_MAX)
    code, found = _retention(cli, journal_url, servers, "--all", "--record")
    assert code == 0, found
    status = {p["query"]: p for p in found["partitions"]}
    assert {q: p["status"] for q, p in status.items()} == {
        "history": "safe", "never-rolls": "at-risk", "hourly": "at-risk"}
    assert status["never-rolls"]["loss_latest"].startswith("9999-12-31T23:59:59")
    assert 3000 < status["hourly"]["seconds_left"] <= 3600
    with Journal(journal_url) as journal:
        assert [len(journal.recorded_forecasts(q)) for q in topics] == [1, 1, 1]
    for live in (["--bootstrap-servers", servers], []):
        code, out, err = cli("--database-url", journal_url, "check", "--all",
                             "--min-time-to-loss", "2h,30m", *live)
        assert code == 1, (live, out, err)
        assert [line.split(": ")[:2] for line in out.splitlines()[:2]] == [
            ["WARNING", "hourly"], ["WARNING", "never-rolls"]], out
        assert out.splitlines()[2] == "WARNING: 3 queries checked: 0 critical, 2 warning, " \
                                      "0 unknown"


def test_retention_sentences_escape_hostile_query_names(
        kafka_cluster: KafkaCluster, journal_url: str, cli: Cli) -> None:
    """`retention`'s at-risk sentences printed the query's name raw: a
    line break in it forged lines, an escape sequence reached the terminal."""
    topic = f"ret-evil-{time.time_ns()}"
    _filled(kafka_cluster, topic, {"retention.ms": "3600000"}, records=5)
    evil = "evil\nOK: 0 queries checked, no problem\n#\x1b[2J"
    _ENDS[evil] = 0
    _journal_at(journal_url, evil, topic, 0, 0, 5)
    code, out, err = cli("--database-url", journal_url, "retention", "--all",
                         "--bootstrap-servers", kafka_cluster.bootstrap_servers)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3 and "\x1b" not in out, out  # the header, the row, one sentence
    assert lines[2].startswith(f"partition 0 of {topic} loses unread records in about ")
    assert lines[2].endswith("unless evil\\nOK: 0 queries checked, no problem\\n#\\x1b[2J "
                             "catches up"), out


def test_retention_says_when_all_selects_nothing(
        kafka_cluster: KafkaCluster, journal_url: str, cli: Cli) -> None:
    """`retention --all --exclude '*'` printed an empty table and exited 0: a cron job
    whose filters leave out every query (or that points at a journal holding none) must
    hear that nothing was forecast, and it exits 1 as when a query could not be
    forecast; what was recorded stays."""
    servers = kafka_cluster.bootstrap_servers
    base = ["--database-url", journal_url, "retention", "--all", "--bootstrap-servers",
            servers]
    code, out, err = cli(*base, "--record")
    assert (code, out) == (1, ""), out
    assert support.one_error_line(code, err) == (
        "offset-journal: error: the journal holds no query: nothing forecast (is a "
        "listener writing to this database?)")
    topic = f"ret-scope-{time.time_ns()}"
    _filled(kafka_cluster, topic, {"retention.ms": "3600000"}, records=5)
    _ENDS["scoped"] = 0
    _journal_at(journal_url, "scoped", topic, 0, 0, 5)
    assert cli(*base, "--record")[0] == 0
    def recorded() -> list[dict[str, Any]]:
        with Journal(journal_url) as journal:  # as kept ("left" is counted from now)
            return [{k: v for k, v in r.items() if k != "left"}
                    for r in journal.recorded_forecasts("scoped")]

    kept = recorded()
    assert kept
    for extra, by in ((["--exclude", "*"], "--exclude"),
                      (["--exclude", "sc*", "--record"], "--exclude"),
                      (["--exclude", "other", "--exclude", "scoped", "--format", "json"],
                       "--exclude"),
                      (["--exclude", "*", "--active-within", "7d"],
                       "--exclude and --active-within")):
        code, out, err = cli(*base, *extra)
        assert support.one_error_line(code, err) == (
            f"offset-journal: error: every query was left out: the journal holds 1 query, "
            f"and {by} left out each one: nothing forecast"), (extra, err)
        assert code == 1, extra
        if "json" in extra:  # still the document, with nothing in it
            found = json.loads(out)
            assert (found["partitions"], found["topics"], found["data_loss"]) == ([], {}, [])
        else:
            assert out == "", (extra, out)
    assert recorded() == kept
