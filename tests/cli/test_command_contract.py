"""The command contract for the inputs a hostile pass broke: one
line on stderr, a non-zero exit, no traceback, nothing changed."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from offset_journal import ConfigError, Journal, OffsetJournalListener, attach
from offset_journal.checkpoint.importing import import_checkpoint
from offset_journal.journal.db import resolve_url
from offset_journal.kafka.admin import KafkaAdminError, cluster_id, commit_group
from offset_journal.local.services import KafkaCluster
from offset_journal.records import RunRecord
from offset_journal.restart import RestartError
from offset_journal.values import parse_duration, parse_time, parse_timeout
from tests.payloads import kafka_source, progress
from tests.payloads import sql_rows as _sql
from tests.support import Cli, journal_batches, one_error_line, ts, write_checkpoint
from tests.support import count_rows as _count

RATE = {"description": "RateStreamV2[rowsPerSecond=1, rampUpTimeSeconds=0, numPartitions=2",
        "startOffset": 4, "endOffset": 5, "numInputRows": 1}


@pytest.fixture
def one_batch(journal_url: str) -> str:
    journal_batches(journal_url, [
        progress(0, name="orders", run_id="run-o", timestamp=ts(0),
                 sources=[kafka_source("orders", {"orders": {"0": 0}}, {"orders": {"0": 5}})]),
    ])
    return journal_url


def _unchanged(url: str) -> tuple[int, int, int]:
    return (_count(url, "query_runs"), _count(url, "batches"), _count(url, "kafka_partitions"))


@pytest.mark.parametrize("argv", [
    ["plan", "orders", "--as-of=-99999999999d"],
    ["starting-offsets", "orders", "--as-of", "99999999999999 days ago"],
    ["prune", "--before=-99999999999d"],
    ["plan", "orders", "--state-aware", "--window", "99999999999999d"],
    ["starting-offsets", "orders", "--kafka-timeout", "-5"],
    ["starting-offsets", "orders", "--kafka-timeout", "nan"],
    ["plan", "orders", "--kafka-timeout", "inf"],
    ["commit-group", "orders", "--group", "g", "--bootstrap-servers", "h:1",
     "--kafka-timeout", "0"],
    ["commit-group", "orders", "--group", "", "--bootstrap-servers", "127.0.0.1:1"],
    ["commit-group", "orders", "--group", "  ", "--bootstrap-servers", "127.0.0.1:1"],
    ["runs", ""],
    ["checkpoint", "import", "{ckpt}", "--query-name", ""],
    # Ignored, and the plan handed out.
    ["plan", "orders", "--replication-policy", "identity"],
    ["starting-offsets", "orders", "--replication-policy", "default"],
    ["plan", "orders", "--accept-cluster", "some-id"],  # no cluster to accept
    ["plan", "orders", "--accept-cluster", "some-id", "--bootstrap-servers", "h:1",
     "--translate-from", "primary"],
])
def test_bad_values_are_one_line_and_change_nothing(cli: Cli, one_batch: str, tmp_path: Path,
                                                     argv: list[str]) -> None:
    ckpt = write_checkpoint(tmp_path / "ck", "q", [([{"t": {"0": 5}}], True)])
    before = _unchanged(one_batch)
    code, out, err = cli("--database-url", one_batch,
                         *[a.replace("{ckpt}", str(ckpt)) for a in argv])
    line = one_error_line(code, err)
    assert code == 2 and out == "", line
    assert _unchanged(one_batch) == before


def test_value_parsers_are_bounded() -> None:
    for bad in ("99999999999999d", "nan s", "-5m", "0s", "1e9d", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert parse_duration("1h30m") == timedelta(minutes=90)
    for bad in ("-99999999999d", "-99999999999999999999999d", "2024-13-01"):
        with pytest.raises(ValueError):
            parse_time(bad)
    for bad in ("-5", "0", "nan", "inf", "-inf", "x", "1e300"):
        with pytest.raises(ValueError):
            parse_timeout(bad)
    assert parse_timeout("2.5") == 2.5


def test_an_empty_consumer_group_is_refused_before_kafka_is_touched() -> None:
    with pytest.raises(KafkaAdminError, match="must not be empty"):
        commit_group("127.0.0.1:1", "", {"t": {0: 5}}, timeout=0.5)


@pytest.mark.parametrize("url", ["mysql://u:pw@h/db", "sqlite:///{tmp}/journal.db",
                                 "sqlite://", "postgresql+asyncpg://u@h/db", "oracle://h/db"])
def test_only_postgres_urls_are_accepted_and_nothing_is_created(
        cli: Cli, tmp_path: Path, url: str) -> None:
    url = url.replace("{tmp}", str(tmp_path))
    code, out, err = cli("--database-url", url, "db", "upgrade")
    assert code == 2 and "not a PostgreSQL URL" in one_error_line(code, err)
    with pytest.raises(ConfigError, match="not a PostgreSQL URL"):
        OffsetJournalListener(url, spool_dir=str(tmp_path / "spool"))
    with pytest.raises(ConfigError, match="not a PostgreSQL URL"):
        attach(object(), database_url=url, spool_dir=str(tmp_path / "spool"))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_postgres_url_spellings_are_accepted() -> None:
    for url in ("postgresql://u@h/db", "postgres://u@h/db", "postgresql+psycopg://u@h/db"):
        assert resolve_url(url) == "postgresql+psycopg://u@h/db"


def test_starting_offsets_is_for_kafka_sources(cli: Cli, journal_url: str) -> None:
    kafka = kafka_source("orders", {"orders": {"0": 0}}, {"orders": {"0": 7}})
    journal_batches(journal_url, [
        progress(0, name="rate_only", run_id="r1", timestamp=ts(0), sources=[RATE]),
        progress(0, name="union", run_id="r2", timestamp=ts(0), sources=[RATE, kafka]),
        progress(0, name="two", run_id="r3", timestamp=ts(0), sources=[kafka, kafka]),
    ])
    code, out, err = cli("--database-url", journal_url, "starting-offsets", "rate_only")
    assert code == 1 and out == "" and "Kafka sources only" in one_error_line(code, err)
    code, out, err = cli("--database-url", journal_url, "starting-offsets", "union",
                         "--source", "0")
    assert code == 1 and out == "" and "rate source" in one_error_line(code, err)
    # The default is the union's Kafka side, not source 0.
    code, out, err = cli("--database-url", journal_url, "starting-offsets", "union")
    assert code == 0 and json.loads(out) == {"orders": {"0": 7}}, err
    code, out, err = cli("--database-url", journal_url, "starting-offsets", "two")
    assert code == 2 and out == "" and "--source" in one_error_line(code, err)
    code, out, err = cli("--database-url", journal_url, "starting-offsets", "two",
                         "--source", "1")
    assert code == 0 and json.loads(out) == {"orders": {"0": 7}}, err


def test_a_negative_checkpoint_offset_is_not_imported(cli: Cli, journal_url: str,
                                                      tmp_path: Path) -> None:
    ckpt = write_checkpoint(tmp_path / "ck", "q", [([{"t": {"0": 3}}], True),
                                                   ([{"t": {"0": -5}}], True)])
    code, out, err = cli("--database-url", journal_url, "checkpoint", "import", str(ckpt),
                         "--query-name", "neg")
    assert code == 1 and "-5" in one_error_line(code, err) and out == ""
    assert _unchanged(journal_url) == (0, 0, 0)
    with Journal(journal_url) as journal, \
            pytest.raises(RestartError, match="must not be empty"):
        import_checkpoint(journal, str(ckpt), "")


def test_the_backwards_error_names_options_the_command_has(cli: Cli, journal_url: str) -> None:
    journal_batches(journal_url, [progress(0, name="back", run_id="rb", timestamp=ts(0), sources=[
        kafka_source("t", {"t": {"0": 50}}, {"t": {"0": 10}})])])
    code, out, err = cli("--database-url", journal_url, "plan", "back")
    assert code == 1 and "backwards" in out
    text = " ".join(out.split())
    assert "(--force)" not in text and "starting-offsets --force" in text, text


def test_a_newline_in_a_query_name_does_not_break_the_runs_table(cli: Cli,
                                                                  journal_url: str) -> None:
    journal_batches(journal_url, [progress(0, name="evil\nFAKE  row", run_id="rn",
                                           timestamp=ts(0))])
    code, out, err = cli("--database-url", journal_url, "runs")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 and "evil\\nFAKE  row" in lines[1], out
    # The name itself is journaled as it is, and found by it.
    assert _sql(journal_url, "select query_name from offset_journal.query_runs") == [
        ("evil\nFAKE  row",)]
    assert cli("--database-url", journal_url, "runs", "evil\nFAKE  row")[0] == 0


def test_runs_of_an_existing_name_still_work(cli: Cli, one_batch: str) -> None:
    code, out, _ = cli("--database-url", one_batch, "runs", "orders")
    assert code == 0 and "orders" in out


def test_the_library_refuses_unbounded_kafka_timeouts(one_batch: str) -> None:
    from offset_journal.restart import plan_restart

    for bad in (-5.0, float("nan"), 0.0):
        with pytest.raises(RestartError, match="bad timeout"):
            plan_restart(one_batch, "orders", bootstrap_servers="127.0.0.1:1", kafka_timeout=bad)
        with pytest.raises(KafkaAdminError, match="bad timeout"):
            commit_group("127.0.0.1:1", "g", {"t": {0: 5}}, timeout=bad)


def _committed(servers: str, group: str, topic: str) -> int:
    """The offset ``group`` has committed for ``topic``-0 (negative: none)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": group,
                         "enable.auto.commit": False})
    try:
        (found,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return int(found.offset)
    finally:
        consumer.close()


def test_another_cluster_is_refused_unless_overruled_as_a_decision(
        cli: Cli, journal_url: str, kafka_cluster: KafkaCluster, kafka_topic: str) -> None:
    """The writer role fills a run's empty cluster id with any
    value (here "forged-id"). commit-group refused nothing; now it refuses as plan does,
    and a person who has checked overrules both with --accept-cluster ID: only the id
    the cluster says, recorded as the plan's decision, said by the plan and the audit."""
    kafka_cluster.create_topic(kafka_topic, 1)
    kafka_cluster.produce(kafka_topic, 10, partitions=1)
    journal_batches(journal_url, [progress(0, name="orders", run_id="run-a", query_id="qid-a",
                                           timestamp=ts(0), sources=[kafka_source(
                                               kafka_topic, None, {kafka_topic: {"0": 6}})])])
    with Journal(journal_url) as j:
        j.record_run(RunRecord("qid-a", "run-a", "orders", True, kafka_cluster_id="forged-id"))
    servers = kafka_cluster.bootstrap_servers
    real = cluster_id(servers)
    assert real is not None and real != "forged-id"
    url = ["--database-url", journal_url]
    group = ["commit-group", "orders", "--group", f"g-{kafka_topic}", "--bootstrap-servers",
             servers]
    for argv in (group + ["--dry-run"], group, ["plan", "orders", "--bootstrap-servers", servers]):
        code, out, err = cli(*url, *argv)
        line = one_error_line(code, err)
        assert code == 1 and out == "", line
        assert "forged-id" in line and real in line and "--accept-cluster" in line
    assert _committed(servers, f"g-{kafka_topic}", kafka_topic) < 0
    assert _count(journal_url, "restart_plans") == 0

    for wrong in ("forged-id", "another-id"):  # only the cluster the servers answer as
        code, out, err = cli(*url, "plan", "orders", "--bootstrap-servers", servers,
                             "--accept-cluster", wrong)
        assert code == 1 and out == "" and real in one_error_line(code, err)
    code, out, err = cli(*url, "plan", "orders", "--bootstrap-servers", servers,
                         "--accept-cluster", real, "--record")
    assert code == 0, err
    assert f"(--accept-cluster {real})" in " ".join(out.split())
    with Journal(journal_url) as j:
        (recorded,) = j.recorded_plans("orders")
    assert recorded.accepted_cluster == real and recorded.kafka_offsets == (
        (0, kafka_topic, 0, 6),)
    code, out, err = cli(*url, *group, "--accept-cluster", real)
    assert code == 0, err
    assert _committed(servers, f"g-{kafka_topic}", kafka_topic) == 6

    # The run started from it (3 records after 6): the audit says the check was overruled.
    journal_batches(journal_url, [progress(0, name="orders", run_id="run-b", query_id="qid-b",
                                           timestamp=ts(5), rows=3, sources=[kafka_source(
                                               kafka_topic, None, {kafka_topic: {"0": 9}},
                                               rows=3)])])
    code, out, err = cli(*url, "audit", "orders", "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["runs"][1]["plan_id"] == recorded.id, err
    assert any(f"--accept-cluster {real}" in n for n in report["notes"])
    # Nothing to overrule: refused, so that no needless decision is recorded.
    with Journal(journal_url) as j:
        j.record_run(RunRecord("qid-b", "run-b", "orders", True, kafka_cluster_id=real))
    code, out, err = cli(*url, "plan", "orders", "--bootstrap-servers", servers,
                         "--accept-cluster", real)
    assert code == 1 and "nothing to overrule" in one_error_line(code, err)
