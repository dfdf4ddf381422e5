"""The upgrade the product is for, as a user runs it, on whichever supported Spark is
installed: v1 reads Kafka through Spark's own connector into Parquet, journaled, and is
stopped mid-stream; records arrive while it is down; ``offset-journal starting-offsets``
gives v2 its start on a NEW checkpoint. Every record lands once by (partition, offset),
the journal's end offsets are what Spark reported for each batch, the audit is clean,
and the checkpoint commands read the checkpoints as this Spark wrote them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from tests.jobs_support import read_parquet_outputs
from tests.payloads import progress_offset
from tests.restore_support import cli

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.compat]

NAME = "orders-mid-stream"


def _start(spark: Any, servers: str, topic: str, starting: str, per_trigger: int,
           ck: Path, out: Path, trigger: dict[str, Any]) -> Any:
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic).option("startingOffsets", starting)
            .option("maxOffsetsPerTrigger", str(per_trigger)).load()
            .selectExpr("partition", "offset")
            .writeStream.format("parquet").queryName(NAME)
            .option("path", str(out)).option("checkpointLocation", str(ck))
            .trigger(**trigger).start())


def _reported(query: Any) -> dict[int, dict[int, int]]:
    """batch id -> partition -> end offset, as Spark reported each batch."""
    ends: dict[int, dict[int, int]] = {}
    for p in query.recentProgress:
        (source,) = p["sources"]
        (by_partition,) = progress_offset(source["endOffset"]).values()
        ends[p["batchId"]] = {int(k): v for k, v in by_partition.items()}
    return ends


def _journaled(url: str, run_id: str) -> dict[int, dict[int, int | None]]:
    with Journal(url) as journal:
        return {b.batch_id: {p.partition: p.end for p in b.sources[0].partitions}
                for b in journal.history(NAME, run_id=run_id)}


def test_stopped_mid_stream_and_restarted_from_starting_offsets_exactly_once(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    kafka_cluster.create_topic(kafka_topic, 3)
    produced = kafka_cluster.produce(kafka_topic, 600)
    ck1, ck2, out = tmp_path / "ck-v1", tmp_path / "ck-v2", tmp_path / "out"

    v1 = _start(spark, servers, kafka_topic, "earliest", 12, ck1, out / "v1",
                {"processingTime": "200 milliseconds"})
    deadline = time.monotonic() + 180
    while len(v1.recentProgress) < 3 and time.monotonic() < deadline:
        if v1.awaitTermination(0.5):
            break
    assert v1.exception() is None, v1.exception()
    v1.stop()  # mid-stream: hundreds of records not read yet, perhaps a batch cut short
    assert listener.wait_terminated(v1.runId, 60)
    v1_ends = _reported(v1)
    assert 3 <= len(v1_ends) and sum(p["numInputRows"] for p in v1.recentProgress) < 600

    produced += kafka_cluster.produce(kafka_topic, 60, start=600)  # while no job runs
    code, starting, err = cli(capsys, "--database-url", journal_url, "starting-offsets",
                              NAME, "--bootstrap-servers", servers, "--checkpoint", str(ck2),
                              "--old-checkpoint", str(ck1))
    assert code == 0, err
    v2 = _start(spark, servers, kafka_topic, starting.strip(), 250, ck2, out / "v2",
                {"availableNow": True})
    assert v2.awaitTermination(300)
    assert v2.exception() is None, v2.exception()
    assert listener.wait_terminated(v2.runId, 60)

    got = read_parquet_outputs(spark, out, ["partition", "offset"])
    assert len(got) == len(set(got)), "a record was written twice"
    assert sorted(got) == sorted((p, o) for p, o, _k, _v in produced)

    # The journal holds what Spark reported for each batch. A batch v1's stop cut after
    # its sink had committed it is journaled by the plan from v1's checkpoint (and only
    # such a batch, the one after the last Spark reported).
    journaled_v1 = _journaled(journal_url, str(v1.runId))
    assert {b: journaled_v1[b] for b in v1_ends} == v1_ends
    assert set(journaled_v1) - set(v1_ends) <= {max(v1_ends) + 1}
    v2_ends = _reported(v2)
    assert len(v2_ends) >= 2 and _journaled(journal_url, str(v2.runId)) == v2_ends

    code, report, err = cli(capsys, "--database-url", journal_url, "audit", NAME,
                            "--format", "json")
    assert code == 0 and json.loads(report)["findings"] == [], report + err

    _checkpoint_commands(capsys, journal_url, kafka_topic, ck1, ck2, journaled_v1,
                         len(v2_ends))


def _checkpoint_commands(capsys: Any, journal_url: str, topic: str, ck1: Path, ck2: Path,
                         journaled_v1: dict[int, dict[int, int | None]], v2_batches: int) -> None:
    """The checkpoint commands on the checkpoints this Spark wrote: v1's as its stop left
    it, v2's complete (it agrees with the journal, which already holds all of it)."""
    code, inspected, err = cli(capsys, "checkpoint", "inspect", str(ck1))
    assert code == 0, err
    last = json.loads(inspected)["last_committed"]
    (ends,) = last["offsets"]
    assert {int(k): v for k, v in ends[topic].items()} == journaled_v1[last["batch_id"]]
    code, compared, err = cli(capsys, "--database-url", journal_url, "checkpoint",
                              "compare", str(ck2), NAME)
    assert code == 0 and "verdict:    same" in compared, compared + err
    code, imported, err = cli(capsys, "--database-url", journal_url, "checkpoint", "import",
                              str(ck2), "--query-name", NAME)
    # every batch of it is the listener's already: none imported twice, and said so
    assert code == 0 and imported.startswith("imported 0 batches"), imported + err
    assert (f"skipped {v2_batches} batches already journaled by the listener for this "
            "query id") in err, err
