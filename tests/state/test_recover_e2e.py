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


def _none_usable(s: _Setup, new: Path, newest: int) -> None:
    """No usable savepoint: one line naming the newest and why, and the stateless plan;
    nothing journaled, no new checkpoint."""
    before = _journaled(s.url)
    code, _out, err = s.recover(new)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"no usable savepoint of query 'dedup': the newest, savepoint {newest} (batch 4)" in err
    assert "does not match its checksum in the manifest" in err
    assert "(nor any of the 1 older)" in err and "`offset-journal plan dedup`" in err
    assert _journaled(s.url) == before and not new.exists()


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
    _none_usable(s, new, sp2)

    # state-deleted: savepoint 1 made usable again, savepoint 2 left altered: 1 is chosen
    # (batches 3..6 read again); delta-truncated: savepoint 2 (batches 5..6).
    part, data = altered[-1]
    part.write_bytes(data)
    chosen, batch, first = (sp1, 2, 3) if broken == "state-deleted" else (sp2, 4, 5)
    if broken == "state-deleted":  # a file sink never sees the batches again
        code, out, err = s.recover(new, "--reread-sink")
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert "--reread-sink: the query's sink is a file sink" in err and not new.exists()
    code, out, err = (s.recover(new) if broken == "state-deleted"
                      else s.recover(new, "--savepoint", str(sp2)))
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


def _windowed(spark: Any, servers: str, topic: str, out: Path, checkpoint: str,
              starting: str) -> Any:
    """Counts per 10 s event-time window, a 4 s watermark, append mode, each batch's
    windows appended to ``out/<checkpoint's name>`` by foreachBatch."""
    from pyspark.sql import functions as F

    frame, values = rs.kafka_csv(spark, servers, topic, starting, per_trigger=8)
    ts = (values[1].cast("long") / 1000).cast("timestamp")
    counts = (frame.select(ts.alias("ts")).withWatermark("ts", "4 seconds")
              .groupBy(F.window("ts", "10 seconds")).count())
    path = str(out / Path(checkpoint).name)

    def write(batch: Any, batch_id: int) -> None:
        (batch.select(F.col("window.start").alias("window_start"), "count")
         .withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(path))

    return (counts.writeStream.outputMode("append").foreachBatch(write).queryName("clicks")
            .option("checkpointLocation", checkpoint))


def _click(i: int) -> str:
    late = 30_000 if i % 9 == 4 else 0  # some records late: the batch watermark drops them
    return f"k{i},{rs.click_ms(i) - late}"


def test_a_watermarked_aggregation_recovered_batch_by_batch_equals_the_never_broken(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """A windowed count with a watermark (late records dropped by each batch's
    watermark), recovered by the function (``offset_journal.restart.recover``) after its
    state was deleted: the old batches since the savepoint replayed one by one on their
    own watermarks, the state and every window emitted after equal those of a copy of
    the checkpoint taken before it broke and run on the same records (never broken);
    no window emitted twice; the foreachBatch sink never saw the replayed batches."""
    import shutil

    from offset_journal.restart import recover

    spark, listener = journaled_spark
    servers, out = kafka_cluster.bootstrap_servers, tmp_path / "out"
    v1, copy, new = tmp_path / "ck-v1", tmp_path / "ck-copy", tmp_path / "ck-new"

    def writer(checkpoint: Path, starting: str = "earliest") -> Any:
        return _windowed(spark, servers, kafka_topic, out, str(checkpoint), starting)

    produced: list[Any] = []
    with session_conf(spark, "spark.sql.shuffle.partitions", "2"), \
            session_conf(spark, PROVIDER_CONF, rs.HDFS):
        for count in (24, 32):
            produced += kafka_cluster.produce(kafka_topic, count, start=len(produced),
                                              value=_click)
            rs.run(writer(v1), "clicks", v1, listener)
            if len(produced) == 24:
                code, _o, err = rs.cli(capsys, "--database-url", journal_url, "savepoint",
                                       "create", "clicks", "--checkpoint", str(v1),
                                       "--to", str(tmp_path / "sp"))
                assert code == 0, err
    shutil.copytree(v1, copy)
    shutil.rmtree(v1 / "state")
    produced += kafka_cluster.produce(kafka_topic, 24, start=len(produced), value=_click)

    with Journal(journal_url) as journal:
        saved = journal.savepoints("clicks")[-1].batch_id
        last = journal.last_batch("clicks")
        done = recover(spark, journal, "clicks", str(new),
                       lambda starting: writer(new, starting[0]))
    assert last is not None and last.batch_id >= saved + 2
    assert [r.old_batch_id for r in done.replayed] == list(range(saved + 1, last.batch_id + 1))
    assert done.decision.endswith(f"batches {saved + 1}..{last.batch_id} read again into "
                                  "state, not written")
    # foreachBatch ran once, for the restore's batch 0 (empty): never for a replayed one
    assert len(list((out / new.name).glob("part-*"))) == 1
    assert spark.read.parquet(str(out / new.name)).count() == 0
    rs.run(writer(new), "clicks", new, listener)
    rs.run(writer(copy), "never", copy)  # not journaled as "clicks": the copy is v1 again

    def rows(checkpoint: Path) -> list[tuple[Any, ...]]:
        return sorted((str(r.key), str(r.value)) for r in rs.state(spark, checkpoint))

    assert rows(new) == rows(copy)
    emitted = {d: sorted((r.window_start, r["count"]) for r in
                         spark.read.parquet(str(out / d)).collect()) for d in (new.name, copy.name)}
    assert emitted[new.name] == emitted[copy.name] and emitted[new.name]
    before = {r.window_start for r in spark.read.parquet(str(out / v1.name)).collect()}
    assert not before & {w for w, _c in emitted[new.name]}, "a window emitted twice"
