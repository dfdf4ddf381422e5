"""Savepoints end to end: a stateful query upgraded onto a NEW checkpoint keeps
its state, exactly once. Real Spark 4.2 with its Kafka connector on the test broker, real
Postgres; the state read back with Spark's State Data Source."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from tests import restore_support as rs
from tests.jobs_support import load_job, run_to_end
from tests.restore_support import FAR, TTL_MS
from tests.restore_support import amounts as _amounts
from tests.restore_support import cli as _cli
from tests.restore_support import reference as _reference
from tests.restore_support import state as _state

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUERY = "totals"










def test_aggregation_upgraded_to_transform_with_state_keeps_every_key(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1: groupBy(grp).agg(count, max, sum) (HDFS-backed state); v2: transformWithState
    with one more output column, on a NEW checkpoint, seeded from v1's savepoint while
    records kept arriving: v2's state for every group, and its output for every group
    that received records, equal the totals over all records."""
    spark, listener = journaled_spark
    job = load_job("stateful_counts")
    produced = kafka_cluster.produce(kafka_topic, 70, value=_amounts)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", QUERY, "--database-url", journal_url,
              "--output", str(tmp_path / "out"), "--max-offsets-per-trigger", "30"]
    v1_ck, v2_ck, sp_dir = tmp_path / "ck-v1", tmp_path / "ck-v2", tmp_path / "sp"
    run_to_end(spark, listener, job, [*common, "--checkpoint", str(v1_ck)])
    v1_state = {r.key.grp: tuple(r.value) for r in _state(spark, v1_ck)}
    assert v1_state == _reference(produced)  # what v1 held: the savepoint must carry it

    # v1 is stopped; records keep arriving, one group only from now on ("g9").
    produced += [(p, o, k, v) for p, o, k, v in kafka_cluster.produce(
        kafka_topic, 25, start=70, value=lambda i: _amounts(i) if i % 5 else f"g9,{i}")]

    code, out, err = _cli(capsys, "--database-url", journal_url, "savepoint", "create", QUERY,
                          "--checkpoint", str(v1_ck), "--to", str(sp_dir))
    assert code == 0, err
    assert "savepoint 1 of query 'totals'" in out and "aggregation" in out
    (saved,) = Journal(journal_url).savepoints(QUERY)
    last = Journal(journal_url).last_batch(QUERY)
    assert (saved.run_id, saved.batch_id) == (last.run_id, last.batch_id)

    code, out, err = _cli(capsys, "--database-url", journal_url, "plan", QUERY,
                          "--savepoint", "1", "--checkpoint", str(v2_ck), "--format", "json")
    assert code == 1, "a built-in aggregation's state must not be dropped silently"
    refused = json.loads(out)
    assert refused["state"][0]["decision"] == "refused"
    assert any("takes no initial state" in e for e in refused["errors"])

    code, out, err = _cli(capsys, "--database-url", journal_url, "plan", QUERY,
                          "--savepoint", "1", "--seed", "0", "--checkpoint", str(v2_ck))
    assert code == 0, out + err
    assert "operator 0 (aggregation, stateStoreSave): 7 keys, seeded" in out

    run_to_end(spark, listener, job, [*common, "--checkpoint", str(v2_ck), "--engine",
                                "transform-with-state", "--from-journal",
                                "--savepoint", str(sp_dir), "--seed", "0"])
    reference = _reference(produced)
    v2_state = {r.key.grp: tuple(r.value) for r in _state(spark, v2_ck, stateVarName="totals")}
    assert v2_state == reference, "v2's state for every key"
    out_rows = spark.read.parquet(job.output_dir_for(str(tmp_path / "out"), str(v2_ck))).collect()
    latest = {r.grp: r for r in sorted(out_rows, key=lambda r: r.batch_id)}
    got_new = {g for _p, _o, _k, v in produced[70:] for g in [v.decode().split(",")[0]]}
    assert set(latest) == got_new, "v2 writes only the groups that received records"
    for grp, row in latest.items():
        assert (row.n, row.mx, row.total) == reference[grp]
        assert row.mean == pytest.approx(reference[grp][2] / reference[grp][0])

    code, out, err = _cli(capsys, "--database-url", journal_url, "audit", QUERY)
    assert code == 0, out


# --------------------------------------------------------------------------- transformWithState



def _kafka(spark: Any, servers: str, topic: str, starting: str = "earliest") -> Any:
    from pyspark.sql import functions as F

    values = F.split(F.col("value").cast("string"), ",")
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic).option("startingOffsets", starting)
            .option("maxOffsetsPerTrigger", "30").load()
            .select(values[0].alias("grp"), values[1].cast("long").alias("amount"),
                    F.col("topic")))




def _start_tws(df: Any, keys: list[str], processor: Any, checkpoint: Path, name: str,
               initial: Any = None, *, format_v2: bool = False,
               schema: str = "grp string, n long", each_batch: Any = None) -> Any:
    """A transformWithState query to completion: RocksDB (which it needs), processing
    time (which TTL needs) without no-data batches (availableNow would never end), set
    for this query only: the session is shared."""
    from contextlib import ExitStack

    from offset_journal.savepoint.spark import (
        FORMAT_CONF,
        PROVIDER_CONF,
        ROCKSDB_PROVIDER,
        session_conf,
    )

    out = df.groupBy(*keys).transformWithState(processor, schema, "Update",
                                               "ProcessingTime", initialState=initial)
    spark = df.sparkSession
    with ExitStack() as confs:
        confs.enter_context(session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER))
        confs.enter_context(session_conf(spark, "spark.sql.streaming.noDataMicroBatches.enabled",
                                         "false"))
        confs.enter_context(session_conf(spark, FORMAT_CONF, "2" if format_v2 else None))
        writer = out.writeStream.outputMode("update").queryName(name)
        writer = writer.foreachBatch(each_batch) if each_batch else writer.format("noop")
        q = (writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
             .start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    return q


def _tws_state(spark: Any, checkpoint: Path) -> dict[str, dict[str, Any]]:
    """Per group: cnt, the list (sorted), the map, the timers; and whether every list and
    map entry has a TTL."""
    got: dict[str, dict[str, Any]] = defaultdict(lambda: {"seen": [], "m": {}, "timers": []})
    for r in _state(spark, checkpoint, stateVarName="cnt"):
        got[r.key.grp]["cnt"] = r.value.n
    for r in _state(spark, checkpoint, stateVarName="seen"):
        got[r.key.grp]["seen"].append(r.list_element.value.amount)
        assert r.list_element.ttlExpirationMs is not None
    for r in _state(spark, checkpoint, stateVarName="m"):
        got[r.key.grp]["m"][r.user_map_key.mk] = r.user_map_value.value.mv
        assert r.user_map_value.ttlExpirationMs is not None
    for r in _state(spark, checkpoint, readRegisteredTimers="true"):
        got[r.key.grp]["timers"].append(r.expiration_timestamp_ms)
    return {g: {**v, "seen": sorted(v["seen"]), "timers": sorted(v["timers"])}
            for g, v in got.items()}


def test_transform_with_state_regrouped_keeps_value_list_map_ttl_and_timers(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1: transformWithState with a value, a list and a map state (TTL) and a timer, on
    RocksDB with checkpoint format v2; v2 groups by (grp, topic), so a new checkpoint is
    required, and is seeded from v1's savepoint: per key, its state equals a run that
    never stopped."""
    import sys

    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    from offset_journal.savepoint import state_frame

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    kafka_cluster.produce(kafka_topic, 60, value=_amounts)
    v1_ck = tmp_path / "ck-v1"
    q = _start_tws(_kafka(spark, servers, kafka_topic), ["grp"], rs.sessions(), v1_ck,
                   "sessions", format_v2=True)  # two batches of 30
    assert listener.wait_terminated(q.runId, 60)
    assert (v1_ck / "commits" / "1").read_text().startswith("v2")  # checkpoint format v2

    code, out, err = _cli(capsys, "--database-url", journal_url, "savepoint", "create",
                          "sessions", "--checkpoint", str(v1_ck), "--to", str(tmp_path / "sp"))
    assert code == 0, err
    for part in ("cnt", "seen", "m", "timers"):
        assert f" {part} " in out, out
    kafka_cluster.produce(kafka_topic, 30, start=60, value=_amounts)

    code, out, err = _cli(capsys, "--database-url", journal_url, "plan", "sessions",
                          "--savepoint", str(tmp_path / "sp"), "--seed", "all",
                          "--checkpoint", str(tmp_path / "ck-v2"), "--format", "json")
    assert code == 0, out + err
    plan = json.loads(out)
    seeded = plan["state"][0]
    assert seeded["decision"] == "seeded" and seeded["keys"] == 7
    starting = plan["sources"][0]["options"]["startingOffsets"]

    frame = state_frame(spark, str(tmp_path / "sp"), operator=0)
    initial = frame.withColumn("topic", F.lit(kafka_topic)).groupBy("grp", "topic")
    q = _start_tws(_kafka(spark, servers, kafka_topic, starting), ["grp", "topic"],
                   rs.sessions(initial=True), tmp_path / "ck-v2", "sessions", initial)
    assert listener.wait_terminated(q.runId, 60)

    _start_tws(_kafka(spark, servers, kafka_topic), ["grp"], rs.sessions(),
               tmp_path / "ck-ref", "sessions-reference")
    reference = _tws_state(spark, tmp_path / "ck-ref")
    assert len(reference) == 7 and all(v["timers"] == [FAR + v["cnt"]]
                                       for v in reference.values())
    assert _tws_state(spark, tmp_path / "ck-v2") == reference


# --------------------------------------------------------------------------- bad input


def _recorded(url: str) -> tuple[int, int]:
    from tests.payloads import sql_rows

    return sql_rows(url, "SELECT (SELECT count(*) FROM offset_journal.savepoints), "
                         "(SELECT count(*) FROM offset_journal.restart_plans)")[0]


def _one_line(code: int, out: str, err: str) -> str:
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, (code, out, err)
    assert lines[0].startswith("offset-journal: error: ") and "Traceback" not in err
    return lines[0]


def test_bad_savepoint_input_is_one_line_and_records_nothing(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    import shutil

    from offset_journal.errors import SavepointError
    from offset_journal.savepoint import initial_state
    from tests.payloads import sql_execute

    spark, listener = journaled_spark
    job = load_job("stateful_counts")
    kafka_cluster.produce(kafka_topic, 40, value=_amounts)
    v1_ck, sp = tmp_path / "ck-v1", tmp_path / "sp"
    run_to_end(spark, listener, job, ["--bootstrap-servers", kafka_cluster.bootstrap_servers,
                                "--topics", kafka_topic, "--query-name", QUERY,
                                "--database-url", journal_url, "--checkpoint", str(v1_ck),
                                "--output", str(tmp_path / "out"),
                                "--max-offsets-per-trigger", "15"])
    url = ["--database-url", journal_url]

    def create(*argv: str) -> str:
        before = _recorded(journal_url)
        line = _one_line(*_cli(capsys, *url, "savepoint", "create", *argv))
        assert _recorded(journal_url) == before
        return line

    def plan(*argv: str) -> str:
        before = _recorded(journal_url)
        line = _one_line(*_cli(capsys, *url, "plan", *argv))
        assert _recorded(journal_url) == before
        return line

    assert "does not exist" in create(QUERY, "--checkpoint", str(tmp_path / "nope"),
                                      "--to", str(sp))
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("x")
    assert "not a Spark checkpoint" in create(QUERY, "--checkpoint", str(tmp_path / "plain"),
                                              "--to", str(sp))
    assert "is the checkpoint of query 'totals', not of 'other'" in create(
        "other", "--checkpoint", str(v1_ck), "--to", str(sp))
    assert "is not empty" in create(QUERY, "--checkpoint", str(v1_ck),
                                    "--to", str(tmp_path / "plain"))
    assert not sp.exists()

    code, out, err = _cli(capsys, *url, "savepoint", "create", QUERY, "--checkpoint",
                          str(v1_ck), "--to", str(sp))
    assert code == 0, err
    assert _recorded(journal_url) == (1, 0)

    assert "holds the state of query 'totals', not of 'other'" in plan(
        "other", "--savepoint", "1")
    assert "--seed 5: savepoint 1 at" in plan(QUERY, "--savepoint", "1", "--seed", "5")
    assert "no savepoint 9 in the journal" in plan(QUERY, "--savepoint", "9")
    with pytest.raises(SavepointError, match="has no state variable 'nope'"):
        initial_state(spark, str(sp), operator=0, state_var="nope")
    with pytest.raises(SavepointError, match="has no operator 3"):
        initial_state(spark, str(sp), operator=3)

    parquet = next((sp / "operator=0" / "part=0").glob("part-*.parquet"))
    original = parquet.read_bytes()
    parquet.write_bytes(original[:-9] + bytes([original[-9] ^ 1]) + original[-8:])
    assert "does not match its checksum" in plan(QUERY, "--savepoint", str(sp))
    with pytest.raises(SavepointError, match="does not match its checksum"):
        initial_state(spark, str(sp), operator=0)
    parquet.write_bytes(original)
    manifest = json.loads((sp / "manifest.json").read_text())
    changed = json.loads(json.dumps(manifest))
    changed["manifest"]["parts"][0]["keys"] += 1
    (sp / "manifest.json").write_text(json.dumps(changed))
    assert "does not match its checksum: the savepoint was altered" in plan(
        QUERY, "--savepoint", "1")
    from offset_journal.savepoint.model import digest_of

    changed["sha256"] = digest_of(changed["manifest"])  # altered, and re-signed
    (sp / "manifest.json").write_text(json.dumps(changed))
    assert "is not the one the journal recorded as savepoint 1" in plan(
        QUERY, "--savepoint", "1")
    (sp / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = _cli(capsys, *url, "savepoint", "show", "1")
    assert code == 0 and "checksums verified" in out, err

    # The journal far behind a checkpoint Spark has purged (minBatchesToRetain): one
    # line naming the oldest batch still there.
    purged = tmp_path / "ck-purged"
    shutil.copytree(v1_ck, purged)
    for log_dir in ("commits", "offsets"):
        for f in (purged / log_dir).iterdir():
            if f.name.lstrip(".").split(".")[0] in ("0", "1"):
                f.unlink()
    sql_execute(journal_url, "DELETE FROM offset_journal.batches WHERE query_name = 'totals' "
                             "AND batch_id > 0")
    line = create(QUERY, "--checkpoint", str(purged), "--to", str(tmp_path / "sp2"))
    assert "no longer holds batch 0" in line and "oldest batch still there is 2" in line


# --------------------------------------------------------------------------- dedup, pandas


def _ids(i: int) -> str:
    return f"g{i % 5},u{i % 23 if i < 50 else i % 31}"


def _dedup_processor() -> Any:
    """v2 of the deduplication: a value state with a TTL per id, seeded with the ids
    dropDuplicates had seen; an id is written the first time only."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BooleanType, StructField, StructType

    class FirstSeen(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.seen = handle.getValueState(
                "seen", StructType([StructField("seen", BooleanType())]), TTL_MS)

        def handleInitialState(self, key: Any, row: Any, timerValues: Any) -> None:
            self.seen.update((True,))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            for _row in rows:
                pass
            if not self.seen.exists():
                self.seen.update((True,))
                yield Row(id=key[0])

        def close(self) -> None:
            pass

    return FirstSeen()


def _count_processor() -> Any:
    """v2 of applyInPandasWithState's count per group: a value state seeded with the
    group state."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class Count(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.n = handle.getValueState("n", StructType([StructField("n", LongType())]))

        def handleInitialState(self, key: Any, row: Any, timerValues: Any) -> None:
            self.n.update((row.n,))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            n = (self.n.get()[0] if self.n.exists() else 0) + sum(1 for _ in rows)
            self.n.update((n,))
            yield Row(grp=key[0], n=n)

        def close(self) -> None:
            pass

    return Count()


def _count_in_pandas(key: Any, frames: Any, state: Any) -> Any:
    import pandas as pd

    n = state.get[0] if state.exists else 0
    n += sum(len(f) for f in frames)
    state.update((n,))
    yield pd.DataFrame({"grp": [key[0]], "n": [n]})


def test_deduplication_and_apply_in_pandas_with_state_carried_across_the_upgrade(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1: dropDuplicates(id), and applyInPandasWithState counting per group (both read
    by the State Data Source: its groupState); v2 of each: a transformWithState seeded
    from their savepoints. No id is written twice, none is missing; every group's count
    is the count over all records."""
    import sys

    from pyspark import cloudpickle
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from offset_journal.savepoint import initial_state

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    produced = kafka_cluster.produce(kafka_topic, 50, value=_ids)

    def events(starting: str = "earliest") -> Any:
        values = F.split(F.col("value").cast("string"), ",")
        return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
                .option("subscribe", kafka_topic).option("startingOffsets", starting)
                .option("maxOffsetsPerTrigger", "30").load()
                .select(values[0].alias("grp"), values[1].alias("id")))

    emitted: list[str] = []

    def keep(df: Any, _batch_id: int) -> None:
        emitted.extend(r.id for r in df.collect())

    dedup = (events().dropDuplicates(["id"]).select("id").writeStream.queryName("ids")
             .foreachBatch(keep).option("checkpointLocation", str(tmp_path / "ids-v1"))
             .trigger(availableNow=True).start())
    counts = (events().groupBy("grp").applyInPandasWithState(
        _count_in_pandas, "grp string, n long", "n long", "update", GroupStateTimeout.NoTimeout)
        .writeStream.queryName("groups").format("noop").outputMode("update")
        .option("checkpointLocation", str(tmp_path / "groups-v1"))
        .trigger(availableNow=True).start())
    for q in (dedup, counts):
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()
        assert listener.wait_terminated(q.runId, 60)
    assert sorted(emitted) == sorted({f"u{i}" for i in range(23)})

    starts = {}
    for name in ("ids", "groups"):
        sp = str(tmp_path / f"sp-{name}")
        code, out, err = _cli(capsys, "--database-url", journal_url, "savepoint", "create",
                              name, "--checkpoint", str(tmp_path / f"{name}-v1"), "--to", sp)
        assert code == 0, err
        code, out, err = _cli(capsys, "--database-url", journal_url, "starting-offsets",
                              name, "--savepoint", sp, "--seed", "0")
        assert code == 0, err
        starts[name] = out.strip()
    produced += kafka_cluster.produce(kafka_topic, 40, start=50, value=_ids)

    v2_ids = _start_tws(events(starts["ids"]), ["id"], _dedup_processor(),
                        tmp_path / "ids-v2", "ids",
                        initial_state(spark, str(tmp_path / "sp-ids"), operator=0),
                        schema="id string", each_batch=keep)
    v2_groups = _start_tws(events(starts["groups"]), ["grp"], _count_processor(),
                           tmp_path / "groups-v2", "groups",
                           initial_state(spark, str(tmp_path / "sp-groups"), operator=0))
    for q in (v2_ids, v2_groups):
        assert listener.wait_terminated(q.runId, 60)
    every_id = {v.decode().split(",")[1] for _p, _o, _k, v in produced}
    assert len(emitted) == len(set(emitted)), "an id was written twice"
    assert set(emitted) == every_id, "an id was dropped"
    reference: dict[str, int] = defaultdict(int)
    for _p, _o, _k, v in produced:
        reference[v.decode().split(",")[0]] += 1
    got = {r.key.grp: r.value.n for r in _state(spark, tmp_path / "groups-v2",
                                                stateVarName="n")}
    assert got == dict(reference)


# --------------------------------------------------------------------------- SIGKILL


def test_killed_mid_stream_the_savepoint_takes_the_consistent_batch(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1 SIGKILLed mid-stream, and its checkpoint's last journaled commit lost too: the
    journal and commits/ disagree, the savepoint takes the newest batch both have, and
    v2 from it counts every record exactly once (its state equals the totals)."""
    import os
    import signal
    import time

    from tests.jobs_support import start_driver

    spark, listener = journaled_spark
    job = load_job("stateful_counts")
    produced = kafka_cluster.produce(kafka_topic, 150, value=_amounts)
    v1_ck, sp = tmp_path / "ck-v1", tmp_path / "sp"
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", QUERY, "--database-url", journal_url,
              "--output", str(tmp_path / "out"), "--max-offsets-per-trigger", "10"]
    log = tmp_path / "v1.log"
    proc = start_driver("stateful_counts", [*common, "--checkpoint", str(v1_ck),
                                            "--trigger", "1 second"], log)
    journal = Journal(journal_url)
    deadline = time.monotonic() + 240
    try:
        while len(journal.history(QUERY)) < 4:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "v1 journaled too few batches"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    journaled = max(b.batch_id for b in journal.history(QUERY))
    committed = max(int(f.name) for f in (v1_ck / "commits").iterdir() if f.name.isdigit())
    assert committed >= journaled  # the listener journals a batch after Spark commits it
    (v1_ck / "commits" / str(journaled)).unlink()  # and that commit lost
    produced += kafka_cluster.produce(kafka_topic, 30, start=150, value=_amounts)

    code, out, err = _cli(capsys, "--database-url", journal_url, "savepoint", "create", QUERY,
                          "--checkpoint", str(v1_ck), "--to", str(sp))
    assert code == 0, err
    assert f"the savepoint takes batch {journaled - 1}, the newest both have" in err
    assert f"the state at batch {journaled - 1} of run" in out

    run_to_end(spark, listener, job, [*common, "--checkpoint", str(tmp_path / "ck-v2"), "--engine",
                                "transform-with-state", "--from-journal",
                                "--savepoint", str(sp), "--seed", "0"])
    v2_state = {r.key.grp: tuple(r.value) for r in _state(spark, tmp_path / "ck-v2",
                                                          stateVarName="totals")}
    assert v2_state == _reference(produced), "every record counted exactly once"
    (plan,) = [p for p in Journal(journal_url).recorded_plans(QUERY)]
    assert plan.position == "savepoint" and plan.anchor_batch_id == journaled - 1
    assert any(f"goes on past the savepoint's batch, to batch {journaled}" in w
               for w in plan.request.get("warnings", []))


# ---------------------------------------------------------------------------

SEEDED = "seeded"


def _parquet(spark: Any, where: Path, rows: list[tuple[str, int]]) -> bytes:
    """The bytes of one Parquet file Spark writes with ``rows`` (grp, n)."""
    spark.createDataFrame(rows, "grp string, n long").coalesce(1).write.parquet(str(where))
    (written,) = where.glob("part-*.parquet")
    return written.read_bytes()


def _hand_made_savepoint(spark: Any, url: str, where: Path) -> tuple[int, str]:
    """A recorded savepoint of batch 1 of 'seeded' whose one operator holds two keys (a
    and b), written as `savepoint create` writes one: Parquet by Spark, the manifest with
    the files' checksums, the row in the journal. Returns (id, manifest SHA-256)."""
    from offset_journal.records import batch_from_progress
    from offset_journal.savepoint._files import sums, write_manifest
    from offset_journal.savepoint.model import Column, Manifest, Operator, Part, SourceEnd
    from tests.payloads import kafka_source, progress

    with Journal(url) as j:
        for batch_id in (0, 1):
            assert j.record_batch(batch_from_progress(progress(
                batch_id, run_id="run-s", query_id="qid-s", name=SEEDED,
                timestamp=f"2026-11-25T10:0{batch_id}:00Z",
                sources=[kafka_source("t", {"t": {"0": batch_id * 10}},
                                      {"t": {"0": batch_id * 10 + 10}})])))
    path = "operator=0/part=0"
    _parquet(spark, where / path, [("a", 1), ("b", 2)])
    columns = (Column("grp", ("key", 0), "string", True), Column("n", ("value", 0), "long"))
    part = Part(0, "cnt", "value", path, {"operatorId": "0", "stateVarName": "cnt"},
                {"type": "struct", "fields": []}, columns, 2, 2,
                tuple(sums(str(where), path).values()))
    manifest = Manifest(
        query_name=SEEDED, run_id="run-s", query_id="qid-s", batch_id=1, checkpoint="/chk/s",
        end_offsets=(SourceEnd(0, "KafkaV2[Subscribe[t]]", "kafka", {"t": {"0": 20}}),),
        operators=(Operator(0, "transformWithStateInPySparkExec", "transform-with-state", 2,
                            ("default",)),),
        parts=(part,), created_at="2026-11-25T10:02:00.000+00:00", spark_version="4.2.0")
    digest = write_manifest(str(where), manifest)
    with Journal(url) as j:
        saved = j.record_savepoint({
            "query_name": SEEDED, "run_id": "run-s", "query_id": "qid-s", "batch_id": 1,
            "checkpoint": "/chk/s", "location": str(where), "manifest_sha256": digest,
            "manifest": manifest.to_dict(), "host": "h", "os_user": "u"})
    return saved, digest


def test_only_the_files_the_manifest_lists_are_read_and_only_as_checked(
        spark, journal_url, tmp_path, capsys):
    """A file no checksum covers (``_x=1.parquet``: Spark's file index
    reads a ``_`` name holding ``=``) was read into the new query's state, 5 keys
    instead of 2; and a file replaced after ``state_frame``/``initial_state`` returned
    was read unchecked by Spark's lazy read."""
    from offset_journal.errors import SavepointError
    from offset_journal.savepoint import initial_state, state_frame

    url = ["--database-url", journal_url]
    saved, digest = _hand_made_savepoint(spark, journal_url, tmp_path / "sp")
    part_dir = tmp_path / "sp" / "operator=0" / "part=0"
    (listed,) = part_dir.glob("part-*.parquet")
    (part_dir / "_x=1.parquet").write_bytes(
        _parquet(spark, tmp_path / "three", [("c", 3), ("d", 4), ("e", 5)]))
    assert spark.read.parquet(str(part_dir)).count() == 5  # Spark reads it as data

    line = _one_line(*_cli(capsys, *url, "savepoint", "show", str(saved)))
    assert "_x=1.parquet is not in the manifest" in line
    line = _one_line(*_cli(capsys, *url, "plan", SEEDED, "--savepoint", str(saved),
                           "--seed", "0"))
    assert "_x=1.parquet is not in the manifest" in line
    with Journal(journal_url) as j:
        with pytest.raises(SavepointError, match="_x=1.parquet is not in the manifest"):
            state_frame(spark, saved, journal=j)
        with pytest.raises(SavepointError, match="_x=1.parquet is not in the manifest"):
            initial_state(spark, saved, journal=j, expect_sha256=digest)
        unchecked = state_frame(spark, saved, journal=j, verify=False)
        assert sorted(r.grp for r in unchecked.collect()) == ["a", "b"]  # the listed file
    (part_dir / "_x=1.parquet").unlink()

    code, out, err = _cli(capsys, *url, "plan", SEEDED, "--savepoint", str(saved), "--seed", "0")
    assert code == 0, out + err
    with Journal(journal_url) as j:
        frame = state_frame(spark, saved, journal=j)
        seed = initial_state(spark, saved, journal=j, expect_sha256=digest)
    assert sorted(r.grp for r in frame.collect()) == ["a", "b"]
    assert seed.count().count() == 2
    # Replaced after both returned (Spark reads lazily, at every action), with Hadoop's
    # own .crc gone (local files only have one; an object store has none).
    listed.write_bytes(_parquet(spark, tmp_path / "five", [(g, 1) for g in "abcde"]))
    (part_dir / f".{listed.name}.crc").unlink()
    with pytest.raises(Exception, match="does not match its checksum"):
        frame.collect()
    with pytest.raises(Exception, match="does not match its checksum"):
        seed.count().count()
    listed.unlink()
    with pytest.raises(Exception, match=listed.name):
        frame.collect()
