"""A broker with an authorizer (KRaft's StandardAuthorizer, SASL/PLAIN users): a topic
whose configs the job's principal may not describe is that topic's answer, never the
fleet's. `retention` forecasts every other topic (and records them), `check` says the
refused topic's partitions UNKNOWN with the reason when time to loss is asked, and the
report says what its unknown rows mean, each in one line."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offset_journal.journal import Journal
from offset_journal.kafka.admin import admin_client
from offset_journal.kafka.configs import topic_configs
from offset_journal.local.kafka import LocalKafka, QuietLogger, start_local_kafka
from offset_journal.records import batch_from_progress
from tests import support
from tests.payloads import kafka_source, progress
from tests.support import Cli

USER = "alice"  # a job's principal: reads its topics, describes the configs of one only
OPEN, SHUT = "acl-open", "acl-shut"
REFUSED = "Topic authorization failed; the principal lacks DescribeConfigs on it"


@pytest.fixture(scope="module")
def acl_kafka() -> Iterator[LocalKafka]:
    """A broker that enforces ACLs: USER may read and describe both topics (5 records
    each, an hour's retention), and describe the configs of OPEN only; nothing on the
    cluster (so not the broker's configs either)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    broker = start_local_kafka(users=[USER])
    try:
        admin = admin_client(broker.bootstrap_servers, broker.client_config())
        topics = [NewTopic(t, 1, 1, config={"retention.ms": "3600000"}) for t in (OPEN, SHUT)]
        for fut in admin.create_topics(topics, operation_timeout=30).values():
            fut.result(60)
        allowed = [(OPEN, AclOperation.READ), (OPEN, AclOperation.DESCRIBE),
                   (OPEN, AclOperation.DESCRIBE_CONFIGS), (SHUT, AclOperation.READ),
                   (SHUT, AclOperation.DESCRIBE)]
        bindings = [AclBinding(ResourceType.TOPIC, t, ResourcePatternType.LITERAL,
                               f"User:{USER}", "*", op, AclPermissionType.ALLOW)
                    for t, op in allowed]
        for fut in admin.create_acls(bindings).values():
            fut.result(60)
        # The broker enforces what its authorizer holds: wait (bounded) until it holds all.
        every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
        deadline = time.monotonic() + 60
        while len(admin.describe_acls(every).result(30)) < len(bindings):
            assert time.monotonic() < deadline, "the broker did not hold the ACLs in 60 s"
            time.sleep(0.2)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers,
                             "logger": QuietLogger(), **broker.client_config()})
        for topic in (OPEN, SHUT):
            for i in range(5):
                producer.produce(topic, key=b"k%d" % i, value=b"v" * 100, partition=0)
        assert producer.flush(30) == 0
        del producer, admin  # no client left to retry the broker once it stops
        yield broker
    finally:
        broker.stop()


def _as_user(broker: LocalKafka) -> list[str]:
    return [a for k, v in broker.client_config(USER).items()
            for a in ("--kafka-config", f"{k}={v}")]


def test_one_topic_refused_is_that_topics_answer(acl_kafka: LocalKafka) -> None:
    """A DescribeConfigs refused for one topic failed the whole request: "cannot read
    topic configs ... Topic authorization failed", for every topic asked with it."""
    where = acl_kafka.bootstrap_servers
    found = topic_configs(admin_client(where, acl_kafka.client_config(USER)), [OPEN, SHUT],
                          where=where)
    assert found.configs[OPEN]["retention.ms"] == "3600000"
    assert found.unknown == {SHUT: REFUSED}
    assert found.broker == {}  # no DescribeConfigs on the cluster: Kafka's default assumed
    full = topic_configs(admin_client(where, acl_kafka.client_config()), [OPEN, SHUT],
                         where=where)
    assert set(full.configs) == {OPEN, SHUT} and not full.unknown
    assert int(full.broker["log.retention.check.interval.ms"]) == 1000


def _journal(url: str, name: str, topics: list[str]) -> None:
    """One batch of ``name`` that read nothing of ``topics`` yet (all 5 records unread)."""
    end = {t: {"0": 0} for t in topics}
    payload = progress(0, name=name, run_id=f"run-{name}", query_id=f"qid-{name}",
                       timestamp=time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                       sources=[kafka_source(",".join(topics), None, end, end)])
    with Journal(url) as journal:
        assert journal.record_batch(batch_from_progress(payload))


def test_retention_check_and_report_say_a_refused_topic_in_one_line(
        acl_kafka: LocalKafka, journal_url: str, cli: Cli, tmp_path: Path) -> None:
    """`retention --all --record` and `check --bootstrap-servers` failed for the whole
    fleet when one topic's configs were refused: now every other topic is forecast and
    recorded, and the refused one is said once, with why."""
    for name, topics in (("reads-open", [OPEN]), ("reads-shut", [SHUT]),
                         ("reads-both", [OPEN, SHUT])):
        _journal(journal_url, name, topics)
    db = ["--database-url", journal_url]
    kafka = ["--bootstrap-servers", acl_kafka.bootstrap_servers, *_as_user(acl_kafka)]
    line = (f"the retention configs of topic {SHUT} could not be read ({REFUSED}): its "
            "partitions' time to loss is unknown")

    code, out, err = cli(*db, "retention", "--all", *kafka, "--format", "json", "--record")
    assert code == 1, err  # a topic not forecast, as a query not forecast
    found: dict[str, Any] = json.loads(out)
    assert {(p["query"], p["topic"]): p["status"] for p in found["partitions"]} == {
        ("reads-open", OPEN): "at-risk", ("reads-both", OPEN): "at-risk",
        ("reads-shut", SHUT): "unknown", ("reads-both", SHUT): "unknown"}
    assert found["configs_unknown"] == {SHUT: REFUSED} and found["not_forecast"] == {}
    with Journal(journal_url) as journal:
        assert [r["status"] for r in journal.recorded_forecasts("reads-both")] == [
            "at-risk", "unknown"]
    code, out, err = cli(*db, "retention", "reads-both", *kafka)
    assert support.one_error_line(code, err) == f"offset-journal: error: {line}"
    assert f"partition 0 of {OPEN} loses unread records in about " in out, out

    code, out, _err = cli(*db, "check", "--all", *kafka)
    assert (code, out) == (0, "OK: 3 queries checked, no problem\n"), out
    code, out, _err = cli(*db, "check", "--all", *kafka, "--min-time-to-loss", "10m")
    assert code == 3, out
    assert out.splitlines() == [
        f"UNKNOWN: {q}: 1 partition could not be forecast ({line}) (forecast now; see "
        f"`offset-journal retention {q}`)" for q in ("reads-both", "reads-shut")] + [
        "UNKNOWN: 3 queries checked: 0 critical, 0 warning, 2 unknown"], out

    page = tmp_path / "report.html"
    assert cli(*db, "report", "reads-both", "-o", str(page))[0] == 0
    assert ("1 partition could not be forecast (the first unread record unreadable or "
            "without a timestamp, or the topic&#x27;s configs not described to the "
            "recording&#x27;s principal): <code>offset-journal retention reads-both "
            "--bootstrap-servers ...</code> says why.") in page.read_text()
