"""A lost or broken checkpoint of a stateful query recovered with its state by
``state recover``: the newest usable savepoint restored into a new checkpoint, the old
query's batches since read again into state without being written, the query then
resumed. Real Spark 4.2 with its Kafka connector on the test broker, real Postgres.

The query drops duplicate (grp, amount) pairs into a file sink: a key seen again after
a state that lost it would be written twice, so the sink's output proves both the state
and the exactly-once. "Never broke" is the same query over the same records on a
checkpoint of its own."""

from __future__ import annotations

import runpy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.checkpoint.sinks import read_file_sink_log
from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf
from tests import restore_support as rs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUERY_FILE = '''
import os

from pyspark.sql import functions as F


def dedup(spark, checkpoint, starting):
    frame = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "{servers}")
             .option("subscribe", "{topic}").option("startingOffsets", starting[0])
             .option("maxOffsetsPerTrigger", "8").load())
    v = F.split(F.col("value").cast("string"), ",")
    pairs = frame.select(v[0].alias("grp"), v[1].cast("long").alias("amount"))
    out = os.path.join("{out}", os.path.basename(checkpoint))
    return (pairs.dropDuplicates(["grp", "amount"]).writeStream.format("parquet")
            .option("path", out).queryName("dedup").option("checkpointLocation", checkpoint))
'''


def _value(i: int) -> str:
    return f"g{i % 5},{i % 13}"  # 65 pairs: most records repeat one seen before


def _pairs(produced: list[tuple[int, int, bytes, bytes]]) -> set[tuple[str, int]]:
    return {(g, int(a)) for g, a in (v.decode().split(",") for *_x, v in produced)}


class _Setup:
    def __init__(self, spark: Any, listener: Any, journal_url: str, cluster: Any, topic: str,
                 tmp_path: Path, capsys: Any) -> None:
        self.spark, self.listener, self.url = spark, listener, journal_url
        self.cluster, self.topic, self.tmp, self.capsys = cluster, topic, tmp_path, capsys
        self.out = tmp_path / "out"
        path = tmp_path / "dedup.py"
        path.write_text(QUERY_FILE.format(servers=cluster.bootstrap_servers, topic=topic,
                                          out=self.out))
        self.query = f"{path}:dedup"
        self.build = runpy.run_path(str(path))["dedup"]
        self.produced: list[tuple[int, int, bytes, bytes]] = []

    def produce(self, count: int) -> None:
        self.produced += self.cluster.produce(self.topic, count, start=len(self.produced),
                                              value=_value)

    def run(self, checkpoint: Path, starting: str = "earliest") -> None:
        rs.run(self.build(self.spark, str(checkpoint), [starting]), "dedup", checkpoint,
               self.listener)

    def savepoint(self, checkpoint: Path, to: Path) -> int:
        code, _out, err = rs.cli(self.capsys, "--database-url", self.url, "savepoint",
                                 "create", "dedup", "--checkpoint", str(checkpoint),
                                 "--to", str(to))
        assert code == 0, err
        with Journal(self.url) as journal:
            return journal.savepoints("dedup")[-1].id

    def recover(self, to: Path, *extra: str) -> tuple[int, str, str]:
        return rs.cli(self.capsys, "--database-url", self.url, "state", "recover", "dedup",
                      "--to", str(to), "--query", self.query,
                      "--bootstrap-servers", self.cluster.bootstrap_servers, *extra)


def _v1(s: _Setup, v1: Path) -> tuple[tuple[int, Path], tuple[int, Path]]:
    """v1 runs to batch 2 (savepoint 1), to batch 4 (savepoint 2), then to batch 6."""
    taken = []
    for n, count in enumerate((24, 16)):
        s.produce(count)
        s.run(v1)
        sp = s.tmp / f"sp{n}"
        taken.append((s.savepoint(v1, sp), sp))
    s.produce(16)
    s.run(v1)
    assert read_file_sink_log(s.out / v1.name).last_batch == 6
    return taken[0], taken[1]


def _tampered(sp: Path) -> tuple[Path, bytes]:
    part = sorted(sp.rglob("*.parquet"))[0]
    data = part.read_bytes()
    part.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    return part, data


def _journaled(url: str) -> tuple[Any, ...]:
    with Journal(url) as journal:
        return (len(journal.recorded_plans("dedup")), len(journal.runs("dedup")),
                len(journal.history("dedup")))


def _check_recovered(s: _Setup, v1: Path, new: Path, replayed: int) -> None:
    """The recovered query's state and output against a query that never broke."""
    never = s.tmp / "ck-never"  # under another name: the journal's "dedup" is the one audited
    rs.run(s.build(s.spark, str(never), ["earliest"]), "never", never, s.listener)
    expected = _pairs(s.produced)
    for checkpoint in (new, never):
        got = {(r.key.grp, r.key.amount) for r in rs.state(s.spark, checkpoint)}
        assert got == expected, checkpoint
    written = Counter((r.grp, r.amount) for d in (v1, new)
                      for r in s.spark.read.parquet(str(s.out / d.name)).collect())
    assert set(written) == expected and max(written.values()) == 1, "a pair written twice"
    held = read_file_sink_log(s.out / new.name)
    assert held is not None and held.batches[: replayed + 1] == tuple(range(replayed + 1))
    log = s.out / new.name / "_spark_metadata"
    for n in range(1, replayed + 1):  # in the log (readers need every id), with no file
        assert (log / str(n)).read_text().strip() == "v1", "a batch read again was written"


def _audited(s: _Setup, decision: str, replayed: int) -> None:
    """Exit 0; every overlap the replays made is planned, by the recovery's decision;
    the run the plan started says it."""
    import json

    code, out, err = rs.cli(s.capsys, "--database-url", s.url, "audit", "dedup",
                            "--format", "json")
    assert code == 0, out + err
    report = json.loads(out)
    findings = report["findings"]
    assert findings and all(f["status"] == "planned" and decision in f["reason"]
                            for f in findings), findings
    assert len({f["run_id"] for f in findings}) == replayed
    assert any(decision in note for note in report["notes"]), report["notes"]


@pytest.mark.parametrize("broken", ["state-deleted", "delta-truncated"])
def test_a_broken_checkpoint_recovered_from_the_newest_usable_savepoint(
        broken, journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1 with savepoints at batches 2 and 4 runs to batch 6; its checkpoint's state is
    then deleted (or its newest delta file truncated) while records keep arriving.

    First no usable savepoint: every one's files altered (or the older one deleted by
    retention): refused in one line naming the newest and why, and the stateless plan;
    nothing journaled. Then the newest usable savepoint: the state of every key and the
    sink's output equal a query that never broke, each pair written once across v1's
    and the new query's output, the replayed batches written nowhere; the plan and the
    audit name the decision."""
    import shutil

    spark, listener = journaled_spark
    s = _Setup(spark, listener, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys)
    v1, new = tmp_path / "ck-v1", tmp_path / "ck-new"
    with session_conf(spark, "spark.sql.shuffle.partitions", "3"), \
            session_conf(spark, PROVIDER_CONF, rs.HDFS):
        (sp1, dir1), (sp2, dir2) = _v1(s, v1)
    if broken == "state-deleted":
        shutil.rmtree(v1 / "state")
    else:
        delta = max((v1 / "state").rglob("*.delta"), key=lambda p: int(p.stem))
        delta.write_bytes(delta.read_bytes()[: delta.stat().st_size // 2])
    s.produce(20)  # records keep arriving

    altered = [_tampered(dir2)]
    if broken == "state-deleted":
        altered.append(_tampered(dir1))
    else:  # the older one deleted by retention
        with Journal(journal_url) as journal:
            assert journal.record_savepoint_deletion(sp1, "kept 1") is None
    before = _journaled(journal_url)
    code, out, err = s.recover(new)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"no usable savepoint of query 'dedup': the newest, savepoint {sp2} (batch 4)" in err
    assert "does not match its checksum in the manifest" in err
    assert "(nor any of the 1 older)" in err and "`offset-journal plan dedup`" in err
    assert _journaled(journal_url) == before and not new.exists()

    # state-deleted: savepoint 1 made usable again, savepoint 2 left altered: 1 is chosen
    # (batches 3..6 read again); delta-truncated: savepoint 2 (batches 5..6).
    part, data = altered[-1]
    part.write_bytes(data)
    chosen, batch, first = (sp1, 2, 3) if broken == "state-deleted" else (sp2, 4, 5)
    code, out, err = s.recover(new)
    assert code == 0, err
    decision = (f"recovered from savepoint {chosen} (batch {batch}): batches {first}..6 read "
                "again into state, not written")
    assert decision in out and "recorded as plan" in out
    with Journal(journal_url) as journal:
        plan = journal.recorded_plans("dedup")[-1]
    assert plan.request["recovery"]["old_batches"] == list(range(first, 7))
    s.run(new)
    _check_recovered(s, v1, new, 7 - first)
    _audited(s, decision, 7 - first)
