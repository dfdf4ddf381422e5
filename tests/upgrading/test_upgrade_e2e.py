"""An upgrade in one call (``offset_journal.upgrade``) on real parts: Spark 4.2 with its
Kafka connector on the test broker, Postgres, the journal's listener attached. v1 is a
built-in aggregation (count, max, sum per group) writing each batch's totals to Parquet;
records keep arriving.

First an upgrade whose v2's state layout does not fit: refused in one line before v2
starts, v1 running again. Then one whose v2 fails in its second batch (its foreachBatch
raises): rolled back, v1 runs again on its own checkpoint; then one whose v2 fails a
user check: rolled back again; then one whose v2 passes (with a check): v2 runs with
every key's state, its first batch where v1 stopped. Over the whole run, v1's output
counts every record exactly once (the latest totals those over every record, each group
once per batch), and the audit explains every run: the upgrades' plans, the roll
backs, the refusal."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from tests import restore_support as rs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NAME = "totals-upgraded"


class Queries:
    """v1 and v2 of the totals, as ``upgrade`` builds them: ``(spark, checkpoint,
    starting_offsets) -> DataStreamWriter``; each writes each batch's rows under its batch
    id in its own Parquet directory (one per checkpoint)."""

    def __init__(self, servers: str, topic: str, out: Path) -> None:
        self.servers, self.topic, self.out = servers, topic, out
        self.fail_at: int | None = None
        self.layout_changed = False

    def _writer(self, frame: Any, checkpoint: str, out: Path, fail_at: int | None) -> Any:

        def write(batch: Any, batch_id: int) -> None:
            # Idempotent by batch id, as a foreachBatch must be: a batch a stop cut short
            # runs again with the same id and the same records, and replaces its rows.
            if fail_at is not None and batch_id == fail_at:
                raise RuntimeError(f"v2 cannot write batch {batch_id}")
            batch.write.mode("overwrite").parquet(f"{out}/batch_id={batch_id}")

        return (frame.writeStream.outputMode("update").foreachBatch(write).queryName(NAME)
                .option("checkpointLocation", checkpoint)
                .trigger(processingTime="500 milliseconds"))

    def v1(self, spark: Any, checkpoint: str, starting: Any) -> Any:
        events = rs.events(spark, self.servers, self.topic, starting[0], per_trigger=12)
        return self._writer(rs.totals(events), checkpoint, self.out / "v1", None)

    def v2(self, spark: Any, checkpoint: str, starting: Any) -> Any:
        from pyspark.sql import functions as F

        events = rs.events(spark, self.servers, self.topic, starting[0], per_trigger=12)
        frame = rs.totals(events).withColumn("mean", F.col("total") / F.col("n"))
        if self.layout_changed:  # no max: the savepoint's state does not fit
            frame = events.groupBy("grp").agg(F.count("*").alias("n"),
                                              F.sum("amount").alias("total"))
        return self._writer(frame, checkpoint, self.out / Path(checkpoint).name, self.fail_at)


def _wait(what: str, ready: Any, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.5)


def _read_all(query: Any, produced: list[Any]) -> bool:
    """The query has read every record produced (its last batch's end offsets)."""
    import json

    assert query.exception() is None, query.exception()
    progress = query.lastProgress
    if not progress:
        return False
    (source,) = progress["sources"]
    end = source["endOffset"]
    (parts,) = (json.loads(end) if isinstance(end, str) else end).values()
    want = Counter(p for p, *_x in produced)
    return all(int(parts.get(str(p), 0)) >= n for p, n in want.items())


def _v1_output_exactly_once(spark: Any, out: Path, produced: list[Any]) -> None:
    """v1's Parquet output over all its runs: every group's latest totals those over
    every record produced (v1 read them all: none lost, none counted twice, the records
    v2 read among them), each group once per batch."""
    rows = _written_once(spark, out)
    latest = {r.grp: (r.n, r.mx, r.total) for r in sorted(rows, key=lambda r: r.batch_id)}
    assert latest == rs.reference(produced)


def _written_once(spark: Any, out: Path) -> list[Any]:
    rows = spark.read.parquet(str(out)).collect()
    keys = Counter((r.grp, r.batch_id) for r in rows)
    assert max(keys.values()) == 1, "a batch of v1's was written twice"
    return rows


class Feed:
    """Records keep arriving: 4 every 0.3 s from a thread, until :meth:`stop`."""

    def __init__(self, cluster: Any, topic: str, produced: list[Any]) -> None:
        import threading

        self.cluster, self.topic, self.produced = cluster, topic, produced
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(0.3):
            self.produced += self.cluster.produce(self.topic, 4, start=len(self.produced),
                                                  value=rs.amounts)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)


def test_upgrade_rolls_back_a_failing_v2_and_keeps_a_passing_one(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    from offset_journal import upgrade
    from offset_journal.audit import audit_query, format_table
    from offset_journal.savepoint.spark import session_conf

    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 2)
    produced = kafka_cluster.produce(kafka_topic, 48, value=rs.amounts)
    q = Queries(kafka_cluster.bootstrap_servers, kafka_topic, tmp_path / "out")
    v1_ck = str(tmp_path / "ck-v1")
    with session_conf(spark, "spark.sql.shuffle.partitions", "4"), \
            Journal(journal_url) as journal:
        v1 = q.v1(spark, v1_ck, ["earliest"]).start()
        _wait("v1 ran 2 batches", lambda: len(v1.recentProgress) >= 2)

        def once(fail_at: int | None, check: Any, new: str) -> Any:
            q.fail_at = fail_at
            feed = Feed(kafka_cluster, kafka_topic, produced)
            try:
                return upgrade(spark, v1, q.v2, str(tmp_path / new), journal=journal,
                               build_v1=q.v1, savepoint_to=str(tmp_path / f"sp-{new}"),
                               listener=listener, batches=3, check=check, timeout_s=120)
            finally:
                feed.stop()

        # v2's state does not fit the savepoint's: refused before v2 starts, v1 again.
        q.layout_changed = True
        refused = once(None, None, "ck-v2-bad")
        q.layout_changed = False
        assert refused.outcome == "refused", refused.explain()
        (reason,) = refused.reasons
        assert "the value has 3 field(s) in the savepoint (count, max, sum) and 2" in reason
        assert "\n" not in reason and not (tmp_path / "ck-v2-bad").exists()
        v1 = refused.query
        assert v1.isActive and refused.verification is None

        # v2 raises in its second batch: v1 back, on its own checkpoint.
        failed = once(2, None, "ck-v2a")
        assert failed.outcome == "rolled-back", failed.explain()
        assert "v2 cannot write batch 2" in failed.explain() and failed.verification
        assert failed.verification.batches == (1,)
        v1 = failed.query
        assert v1.isActive and v1.name == NAME
        _wait("v1 read every record again", lambda: _read_all(v1, produced))
        _v1_output_exactly_once(spark, tmp_path / "out" / "v1", produced)

        # A user check says no after v2's batches: rolled back again.
        said_no = once(None, lambda query: False, "ck-v2b")
        assert said_no.outcome == "rolled-back" and "the check returned False" in \
            said_no.explain(), said_no.explain()
        v1 = said_no.query
        _wait("v1 read every record again", lambda: _read_all(v1, produced))
        _v1_output_exactly_once(spark, tmp_path / "out" / "v1", produced)

        # v2 passes (its check too): it runs on with every key's state.
        seen: list[Any] = []
        passed = once(None, lambda query: seen.append(query.id) is None, "ck-v2c")
        assert passed.outcome == "upgraded", passed.explain()
        v2 = passed.query
        assert v2.isActive and seen == [v2.id]
        produced += kafka_cluster.produce(kafka_topic, 24, start=len(produced),
                                          value=rs.amounts)
        _wait("v2 read every record", lambda: _read_all(v2, produced))
        v2.stop()
        assert listener.wait_terminated(v2.runId, 60)
    assert {r.key.grp: tuple(r.value) for r in rs.state(spark, tmp_path / "ck-v2c")} == \
        rs.reference(produced)
    rows = spark.read.parquet(str(tmp_path / "out" / "ck-v2c")).collect()
    assert min(r.batch_id for r in rows) == 1  # right after the restore's batch 0
    _written_once(spark, tmp_path / "out" / "v1")
    with Journal(journal_url) as journal:
        report = audit_query(journal, NAME)
    text = format_table(report)
    assert report.ok, text
    assert [f.kind for f in report.planned].count("overlap") >= 2, text
    assert sum("rolled back" in n for n in report.notes) == 2, text
    assert any("v2 verified over 3 batch(es)" in n for n in report.notes), text
    assert {failed.result_id, said_no.result_id} <= {r.plan_id for r in report.runs}, text
    assert any(f"upgrade {refused.result_id} by plan" in n and "refused" in n
               for n in report.notes), text


def test_the_stateful_job_upgrades_a_stopped_v1_in_one_submit(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    """jobs/stateful_counts.py ``--upgrade-from``: v1 (the built-in aggregation) ran and
    stopped; records arrived; the job, as v2 (transformWithState) on a NEW checkpoint,
    takes the savepoint, restores it and runs verified: every key's totals over every
    record, the audit clean and naming the upgrade. Without ``--savepoint-to`` it
    refuses in one line, before anything is journaled."""
    from offset_journal.audit import audit_query, format_table
    from tests.jobs_support import load_job, run_to_end

    spark, listener = journaled_spark
    job = load_job("stateful_counts")
    produced = kafka_cluster.produce(kafka_topic, 40, value=rs.amounts)
    common = ["--bootstrap-servers", kafka_cluster.bootstrap_servers, "--topics", kafka_topic,
              "--query-name", "totals-job", "--database-url", journal_url,
              "--output", str(tmp_path / "out"), "--max-offsets-per-trigger", "12"]
    v1_ck, v2_ck = str(tmp_path / "ck-v1"), str(tmp_path / "ck-v2")
    run_to_end(spark, listener, job, [*common, "--checkpoint", v1_ck])
    produced += kafka_cluster.produce(kafka_topic, 30, start=40, value=rs.amounts)
    upgrade_args = [*common, "--checkpoint", v2_ck, "--engine", "transform-with-state",
                    "--upgrade-from", v1_ck]
    with pytest.raises(job.JobError, match=r"^--upgrade-from needs --savepoint-to DIR"):
        job.build_query(spark, job.parser().parse_args(upgrade_args))
    run_to_end(spark, listener, job, [*upgrade_args, "--savepoint-to", str(tmp_path / "sp")])
    # The same submit again (a driver restarted): v2 resumes on its checkpoint, it is not
    # refused for a checkpoint that is no longer new, nor upgraded from v1 again.
    produced += kafka_cluster.produce(kafka_topic, 20, start=70, value=rs.amounts)
    run_to_end(spark, listener, job, [*upgrade_args, "--savepoint-to", str(tmp_path / "sp")])
    state = rs.state(spark, Path(v2_ck), stateVarName="totals")
    assert {r.key.grp: tuple(r.value) for r in state} == rs.reference(produced)
    with Journal(journal_url) as journal:
        report = audit_query(journal, "totals-job")
    assert report.ok, format_table(report)
    assert any("v2 verified" in n for n in report.notes), format_table(report)


def _v1_running(spark: Any, q: Queries, v1_ck: str) -> Any:
    v1 = q.v1(spark, v1_ck, ["earliest"]).start()
    _wait("v1 ran 2 batches", lambda: len(v1.recentProgress) >= 2)
    return v1


def test_a_v2_failing_after_its_batches_were_counted_is_rolled_back(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    """v2 completes the batches asked for, then fails (in batch 4) while the user's check
    runs (a check that takes its time: here, until v2 ends): that is a failed v2, rolled
    back, never an "upgraded" with a dead query."""
    from offset_journal import upgrade
    from offset_journal.audit import audit_query, format_table
    from offset_journal.savepoint.spark import session_conf

    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 2)
    produced = kafka_cluster.produce(kafka_topic, 48, value=rs.amounts)
    q = Queries(kafka_cluster.bootstrap_servers, kafka_topic, tmp_path / "out")
    q.fail_at = 4

    def slow_check(query: Any) -> bool:
        deadline = time.monotonic() + 120
        while query.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
        return True

    with session_conf(spark, "spark.sql.shuffle.partitions", "4"), \
            Journal(journal_url) as journal:
        v1 = _v1_running(spark, q, str(tmp_path / "ck-v1"))
        feed = Feed(kafka_cluster, kafka_topic, produced)
        try:
            done = upgrade(spark, v1, q.v2, str(tmp_path / "ck-v2"), journal=journal,
                           build_v1=q.v1, savepoint_to=str(tmp_path / "sp"),
                           listener=listener, batches=2, check=slow_check, timeout_s=120)
        finally:
            feed.stop()
        assert done.outcome == "rolled-back", done.explain()
        assert "v2 cannot write batch 4" in done.explain(), done.explain()
        v1 = done.query
        assert v1 is not None and v1.isActive, done.explain()
        _wait("v1 read every record again", lambda: _read_all(v1, produced))
        v1.stop()
        assert listener.wait_terminated(v1.runId, 60)
    _v1_output_exactly_once(spark, tmp_path / "out" / "v1", produced)
    with Journal(journal_url) as journal:
        report = audit_query(journal, NAME)
    assert report.ok, format_table(report)


def test_whatever_fails_once_v1_is_stopped_v1_is_started_again(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    """Not only the library's own refusals: any error after v1 was stopped (here the
    restore's rules given as a dict, which fails as the plan is made) is a refusal in
    one line, with v1 started again on its own checkpoint."""
    from offset_journal import upgrade
    from offset_journal.savepoint.spark import session_conf

    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 2)
    produced = kafka_cluster.produce(kafka_topic, 48, value=rs.amounts)
    q = Queries(kafka_cluster.bootstrap_servers, kafka_topic, tmp_path / "out")
    with session_conf(spark, "spark.sql.shuffle.partitions", "4"), \
            Journal(journal_url) as journal:
        v1 = _v1_running(spark, q, str(tmp_path / "ck-v1"))
        done = upgrade(spark, v1, q.v2, str(tmp_path / "ck-v2"), journal=journal,
                       build_v1=q.v1, savepoint_to=str(tmp_path / "sp"), listener=listener,
                       rules={"variable": {0: "totals"}}, batches=2, timeout_s=120)
        assert done.outcome == "refused", done.explain()
        (reason,) = done.reasons
        assert reason.startswith("AttributeError: ") and "\n" not in reason, reason
        v1 = done.query
        assert v1 is not None and v1.isActive, done.explain()
        produced += kafka_cluster.produce(kafka_topic, 12, start=len(produced),
                                          value=rs.amounts)
        _wait("v1 read every record", lambda: _read_all(v1, produced))
        v1.stop()
        assert listener.wait_terminated(v1.runId, 60)
    _v1_output_exactly_once(spark, tmp_path / "out" / "v1", produced)
