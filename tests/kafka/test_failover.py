"""Fail over to a MirrorMaker 2 replica, for real: two local KRaft brokers, MM2 in
dedicated mode between them, Spark's Kafka connector, the listener and Postgres.

Job v1 reads the primary with the listener attached (which journals the primary's
cluster id); the primary is killed; job v2 starts on the replica on a NEW checkpoint
from the journal, its offsets translated through MM2's offset syncs. Records are
identified by key (their offsets differ between the clusters): every record produced
is in the output at least once, and those read twice are within the bound the plan
printed. A plan against the replica without --translate-from refuses in one line."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal, attach
from offset_journal.audit import audit_query
from offset_journal.cli import main as cli_main
from offset_journal.kafka.admin import cluster_id, topic_state
from offset_journal.local.kafka import LocalKafka, start_local_kafka
from offset_journal.local.mirror import LocalMirror, MirrorSettings, start_local_mirror
from offset_journal.local.services import KafkaCluster
from tests.jobs_support import load_job, read_parquet_outputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]
log = logging.getLogger(__name__)

TOPIC = "orders"
ALIAS = "primary"
PARTITIONS = 3
READ_BY_V1 = 600  # records v1 reads from the primary
AFTER_V1 = 150  # records produced after v1 stopped, read by v2 on the replica
LAG_MAX = 50  # MM2's offset.lag.max: a sync at least every 50 records per partition
WAIT_S = 120.0


class Pair:
    """Two brokers and MM2 replicating the first to the second."""

    def __init__(self, primary: LocalKafka, replica: LocalKafka, mirror: LocalMirror) -> None:
        self.primary, self.replica, self.mirror = primary, replica, mirror
        self.primary_cluster = KafkaCluster(primary.bootstrap_servers, "local", broker=primary)
        self.replica_cluster = KafkaCluster(replica.bootstrap_servers, "local", broker=replica)


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    primary = start_local_kafka(heap="384m")
    replica = start_local_kafka(heap="384m")
    mirror = None
    try:
        KafkaCluster(primary.bootstrap_servers, "local").create_topic(TOPIC, PARTITIONS)
        # Connect's own minute between offset commits, as in production: MM2 then
        # writes a sync only every offset.lag.max records (and once a minute), so
        # v1's end offsets fall between syncs and the plan must bound a re-read.
        mirror = start_local_mirror(primary, replica, MirrorSettings(
            source_alias=ALIAS, topics=TOPIC, offset_lag_max=LAG_MAX,
            offset_flush_interval_ms=60_000))
        yield Pair(primary, replica, mirror)
    finally:
        if mirror is not None:
            mirror.stop()
        primary.stop()
        replica.stop()


def _replicated(pair: Pair, produced: int) -> None:
    """Until the replica's topic holds at least ``produced`` records (MM2 may add
    duplicates, never fewer)."""
    deadline = time.monotonic() + WAIT_S
    held = 0
    while time.monotonic() < deadline:
        state = topic_state(pair.replica.bootstrap_servers, [f"{ALIAS}.{TOPIC}"])
        held = sum(high - low for high_low in state.values()
                   for low, high in high_low.values())
        if held >= produced:
            return
        time.sleep(0.5)
    pytest.fail(f"MM2 replicated {held} of {produced} records within {WAIT_S:.0f} s; its "
                f"log:\n{pair.mirror.log_tail()}")


def _journaled_cluster(url: str, run_id: str) -> str | None:
    deadline = time.monotonic() + 30
    with Journal(url) as j:
        while time.monotonic() < deadline:
            found = j.run_cluster_id(run_id)
            if found is not None:
                return found
            time.sleep(0.2)
    return None


@contextmanager
def listening(spark: Any, url: str, tmp_path: Path, servers: str) -> Iterator[Any]:
    """A journal listener told which Kafka cluster the job reads, for one job."""
    listener = attach(spark, database_url=url, spool_dir=str(tmp_path / "spool"),
                      kafka_bootstrap_servers=servers)
    try:
        yield listener
    finally:
        spark.streams.removeListener(listener)
        listener.close()


def _run_job(spark: Any, argv: list[str]) -> Any:
    job = load_job("kafka_to_sink")
    query = job.build_query(spark, job.parser().parse_args(argv))
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return query


def _refused_without_translation(url: str, name: str, replica: str, ids: tuple[str, str],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Without a translation the plan refuses, in one line naming both clusters."""
    code = cli_main(["--database-url", url, "starting-offsets", name,
                     "--bootstrap-servers", replica, "--no-record"])
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    (line,) = err.strip().splitlines()
    assert all(i in line for i in ids) and "--translate-from" in line


def _translated_bound(url: str, name: str, replica: str,
                      capsys: pytest.CaptureFixture[str]) -> int:
    """The translated plan, as an operator reads it first: its re-read bound."""
    code = cli_main(["--database-url", url, "plan", name, "--format", "json",
                     "--bootstrap-servers", replica, "--translate-from", ALIAS,
                     "--subscribe", f"{ALIAS}.{TOPIC}", "--no-record"])
    out, err = capsys.readouterr()
    assert code == 0, err
    translation = json.loads(out)["sources"][0]["translation"]
    assert translation["partitions_without_sync"] == 0
    assert {r["replica_topic"] for r in translation["partitions"]} == {f"{ALIAS}.{TOPIC}"}
    return int(translation["reread_bound"])


def test_a_job_fails_over_to_the_replica_with_nothing_missing(
        pair: Pair, spark: Any, journal_url: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    produced = pair.primary_cluster.produce(TOPIC, READ_BY_V1)
    name = "orders-failover"
    common = ["--query-name", name, "--database-url", journal_url, "--sink", "parquet",
              "--output", str(tmp_path / "out"), "--max-offsets-per-trigger", "120"]
    with listening(spark, journal_url, tmp_path, pair.primary.bootstrap_servers) as listener:
        v1 = _run_job(spark, common + ["--bootstrap-servers", pair.primary.bootstrap_servers,
                                       "--topics", TOPIC,
                                       "--checkpoint", str(tmp_path / "ck-v1")])
        assert listener.wait_terminated(v1.runId, 60)
    primary_id = cluster_id(pair.primary.bootstrap_servers)
    assert _journaled_cluster(journal_url, str(v1.runId)) == primary_id

    # More records after v1 stopped; MM2 copies everything; the primary is lost.
    produced += pair.primary_cluster.produce(TOPIC, AFTER_V1, start=READ_BY_V1)
    _replicated(pair, READ_BY_V1 + AFTER_V1)
    pair.primary.kill()
    pair.mirror.stop()
    replica = pair.replica.bootstrap_servers
    replica_id = cluster_id(replica)

    _refused_without_translation(journal_url, name, replica, (primary_id, replica_id), capsys)
    bound = _translated_bound(journal_url, name, replica, capsys)

    with listening(spark, journal_url, tmp_path, replica) as listener:
        v2 = _run_job(spark, common + ["--bootstrap-servers", replica,
                                       "--topics", f"{ALIAS}.{TOPIC}", "--from-journal",
                                       "--translate-from", ALIAS,
                                       "--checkpoint", str(tmp_path / "ck-v2")])
        assert listener.wait_terminated(v2.runId, 60)
    assert _journaled_cluster(journal_url, str(v2.runId)) == replica_id

    got = read_parquet_outputs(spark, tmp_path / "out", ["topic", "key"])
    v1_keys = [k for t, k in got if t == TOPIC]
    v2_keys = [k for t, k in got if t == f"{ALIAS}.{TOPIC}"]
    every = {k for _p, _o, k, _v in produced}
    assert len(every) == READ_BY_V1 + AFTER_V1
    assert set(v1_keys) | set(v2_keys) == every, "a record is missing"
    twice = set(v1_keys) & set(v2_keys)
    log.info("failover: plan's bound %d records read again, actually %d", bound, len(twice))
    print(f"\nfailover: the plan said at most {bound} records read again; {len(twice)} were")
    assert len(twice) <= bound
    assert bound > 0  # the syncs fell between v1's end offsets: a real window
    assert set(v2_keys) >= every - set(v1_keys)

    with Journal(journal_url) as j:
        report = audit_query(j, name)
    assert report.exit_code == 0, report.findings
    assert any("new log" in n for n in report.notes)
