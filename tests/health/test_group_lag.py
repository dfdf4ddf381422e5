"""Lag in Kafka's own tools: after ``offset-journal commit-group``,
Kafka's consumer-groups tool (``ConsumerGroupCommand`` from the broker's jars, what
``kafka-consumer-groups.sh --describe`` runs) shows the Spark query's group with the
journal's offsets: per partition, CURRENT-OFFSET = the last batch's end offset and
LAG = log end - that offset.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.local.jars import classpath
from offset_journal.local.kafka import java_executable
from tests.jobs_support import load_job
from tests.support import Cli

pytestmark = [pytest.mark.spark, pytest.mark.slow]


TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
"""Kafka 4's class (kafka-tools jar); Kafka 3 had kafka.admin.ConsumerGroupCommand."""


def describe_group(servers: str, group: str) -> dict[tuple[str, int], dict[str, str]]:
    """``kafka-consumer-groups --describe``'s table: (topic, partition) -> its columns."""
    done = subprocess.run(
        [java_executable(), "-Xmx256m", "-cp", classpath("kafka-broker"), TOOL,
         "--bootstrap-server", servers, "--describe", "--group", group],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    header = next(i for i, cols in enumerate(lines) if cols[:2] == ["GROUP", "TOPIC"])
    names = lines[header]
    rows = [dict(zip(names, cols, strict=False)) for cols in lines[header + 1:]
            if len(cols) >= len(names) - 3 and cols[0] == group]
    return {(r["TOPIC"], int(r["PARTITION"])): r for r in rows}


def test_kafka_consumer_groups_shows_the_journals_offsets_and_lag(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path: Path,
        cli: Cli) -> None:
    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 3)
    kafka_cluster.produce(kafka_topic, 30)
    job = load_job("kafka_to_sink")
    argv = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
            "--query-name", "lagging", "--database-url", journal_url, "--sink", "parquet",
            "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck")]
    q: Any = job.build_query(spark, job.parser().parse_args(argv))
    q.awaitTermination(300)
    assert q.exception() is None and listener.wait_terminated(q.runId, 60)
    kafka_cluster.produce(kafka_topic, 7, start=30)  # unread: the lag
    last = Journal(journal_url).last_batch("lagging")
    assert last is not None
    journaled = {(p.topic, p.partition): p.end for p in last.sources[0].partitions}
    assert journaled == {(kafka_topic, 0): 10, (kafka_topic, 1): 10, (kafka_topic, 2): 10}

    code, out, err = cli("--database-url", journal_url, "commit-group", "lagging",
                         "--group", "lagging-lag", "--bootstrap-servers",
                         kafka_cluster.bootstrap_servers)
    assert code == 0, err
    shown = describe_group(kafka_cluster.bootstrap_servers, "lagging-lag")
    ends = {(kafka_topic, p): high for p, (_low, high) in
            kafka_cluster.watermarks(kafka_topic).items()}
    assert set(shown) == set(journaled)
    for key, end in journaled.items():
        assert int(shown[key]["CURRENT-OFFSET"]) == end
        assert int(shown[key]["LOG-END-OFFSET"]) == ends[key]
        assert int(shown[key]["LAG"]) == ends[key] - end
    assert sum(int(r["LAG"]) for r in shown.values()) == 7
