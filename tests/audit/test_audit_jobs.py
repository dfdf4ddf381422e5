"""The audit on real jobs: Spark's Kafka connector on the real broker, journaled by the
listener, restarted the ways people restart them. Each test is small (a few records,
availableNow) and checks the exit status the command gives a cron job."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal, attach
from offset_journal.cli import main as cli_main
from tests.jobs_support import load_job

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _args(kafka: Any, topic: str, url: str, tmp: Path, ck: str, *extra: str) -> list[str]:
    return ["--bootstrap-servers", kafka.bootstrap_servers, "--topics", topic,
            "--query-name", topic, "--database-url", url, "--sink", "parquet",
            "--output", str(tmp / "out"), "--checkpoint", str(tmp / ck),
            "--max-offsets-per-trigger", "4", *extra]


def _run(spark: Any, listener: Any, argv: list[str]) -> str:
    """Run the job to the end (availableNow); its run id once journaled."""
    job = load_job("kafka_to_sink")
    q = job.build_query(spark, job.parser().parse_args(argv))
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)
    assert listener.flush(30)
    return str(q.runId)


def _audit(capsys: pytest.CaptureFixture[str], url: str, name: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli_main(["--database-url", url, "audit", name, "--format", "json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, json.loads(out)


def _kinds(report: dict) -> list[tuple[str, str, int, int | None, int | None]]:
    return [(f["kind"], f["status"], f["partition"], f["first_offset"], f["end_offset"])
            for f in report["findings"]]


def test_restarted_from_a_plan_is_clean_and_from_latest_is_a_gap(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 2)
    kafka_cluster.produce(kafka_topic, 10)
    v1 = _run(spark, listener, _args(kafka_cluster, kafka_topic, journal_url, tmp_path, "v1"))
    kafka_cluster.produce(kafka_topic, 6, start=10)
    # The upgrade done right: a new checkpoint from the journal's plan (recorded, linked).
    v2 = _run(spark, listener, _args(kafka_cluster, kafka_topic, journal_url, tmp_path, "v2",
                                     "--from-journal"))
    code, report = _audit(capsys, journal_url, kafka_topic)
    assert code == 0 and report["ok"] and report["findings"] == [], report
    runs = {r["run_id"]: r for r in report["runs"]}
    assert runs[v1]["how"] == "origin"
    assert (runs[v2]["how"], runs[v2]["link"], runs[v2]["position"]) == (
        "plan", "recorded", "after")
    with Journal(journal_url) as j:
        (plan,) = j.recorded_plans(kafka_topic)
    assert plan.run_ids == (v2,) and runs[v2]["plan_id"] == plan.id

    # Done wrong: records arrive while no job runs, and v3 starts at latest on a new
    # checkpoint. They are never read: a gap of exactly those records, per partition.
    lost = kafka_cluster.produce(kafka_topic, 6, start=16)
    _run(spark, listener, _args(kafka_cluster, kafka_topic, journal_url, tmp_path, "v3",
                                "--starting-offsets", "latest"))
    kafka_cluster.produce(kafka_topic, 4, start=22)
    v3 = _run(spark, listener, _args(kafka_cluster, kafka_topic, journal_url, tmp_path, "v3"))
    code, report = _audit(capsys, journal_url, kafka_topic)
    assert code == 3 and not report["ok"]
    gaps = [f for f in report["findings"] if f["kind"] == "gap"]
    assert {f["status"] for f in gaps} == {"unexplained"}
    assert sum(f["records"] for f in gaps) == len(lost)
    for f in gaps:
        assert f["first_offset"] == min(o for p, o, *_ in lost if p == f["partition"])
        assert f["end_offset"] == max(o for p, o, *_ in lost if p == f["partition"]) + 1
        assert f["earlier"][0]["run_id"] == v2
    assert not [f for f in report["findings"] if f["kind"] != "gap"]
    # The table says the same for people, and --since after it reports nothing.
    assert cli_main(["--database-url", journal_url, "audit", kafka_topic]) == 3
    assert "NOT OK" in capsys.readouterr().out
    assert cli_main(["--database-url", journal_url, "audit", kafka_topic,
                     "--since=now"]) == 0
    assert v3


def test_an_older_checkpoint_copy_is_an_overlap_and_a_planned_rewind_is_planned(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 1)
    kafka_cluster.produce(kafka_topic, 8)
    v1 = _run(spark, listener, _args(kafka_cluster, kafka_topic, journal_url, tmp_path, "v1"))
    with Journal(journal_url) as j:
        assert [b.batch_id for b in j.history(kafka_topic)] == [0, 1]  # 4 records each
    # A planned rewind: reprocess batch 1 (offsets 4..7) on a new checkpoint.
    _run(spark, listener, _args(kafka_cluster, kafka_topic, journal_url, tmp_path, "v2",
                                "--from-journal", "--batch", f"{v1}:1"))
    code, report = _audit(capsys, journal_url, kafka_topic)
    assert code == 0, report
    assert _kinds(report) == [("overlap", "planned", 0, 4, 8)]
    assert report["findings"][0]["plan_id"] is not None
    assert report["runs"][-1]["position"] == "at"

    # A copy of v1's checkpoint, kept from before it read on; v1 reads on, then the copy
    # is started: it reads 8..11 again.
    shutil.copytree(tmp_path / "v1", tmp_path / "v1-copy")
    kafka_cluster.produce(kafka_topic, 4, start=8)
    _run(spark, listener, _args(kafka_cluster, kafka_topic, journal_url, tmp_path, "v2"))
    copy = _run(spark, listener, _args(kafka_cluster, kafka_topic, journal_url, tmp_path,
                                       "v1-copy"))
    code, report = _audit(capsys, journal_url, kafka_topic)
    assert code == 3
    assert _kinds(report) == [("overlap", "planned", 0, 4, 8),
                              ("overlap", "unexplained", 0, 8, 12)]
    f = report["findings"][1]
    assert f["run_id"] == copy and f["records"] == 4 and "resumed a checkpoint" in f["reason"]
    assert report["runs"][-1]["how"] == "checkpoint"


def test_two_concurrent_runs_of_one_name(journaled_spark, journal_url, kafka_cluster,
                                         kafka_topic, tmp_path, capsys):
    """Two drivers under one name (two sessions here), each on its own checkpoint: the
    second reads what the first read; the audit says so and names the pair."""
    spark, listener = journaled_spark
    kafka_cluster.create_topic(kafka_topic, 1)
    kafka_cluster.produce(kafka_topic, 4)
    other = spark.newSession()
    other_listener = attach(other, database_url=journal_url, spool_dir=str(tmp_path / "sp2"))
    job = load_job("kafka_to_sink")
    queries = []
    try:
        for session, ck in ((spark, "a"), (other, "b")):
            argv = _args(kafka_cluster, kafka_topic, journal_url, tmp_path, ck,
                         "--trigger", "200 milliseconds")
            queries.append(job.build_query(session, job.parser().parse_args(argv)))
            time.sleep(1)  # the second starts while the first runs
        kafka_cluster.produce(kafka_topic, 4, start=4)
        deadline = time.monotonic() + 120
        while not all(_read_up_to(q, kafka_topic) >= 8 for q in queries):
            assert time.monotonic() < deadline, [q.lastProgress for q in queries]
            assert all(q.exception() is None for q in queries)
            time.sleep(0.2)
    finally:
        for q in queries:
            q.stop()
        for q, lst in zip(queries, (listener, other_listener), strict=False):
            assert lst.wait_terminated(q.runId, 60)
        other.streams.removeListener(other_listener)
        other_listener.close()
    assert listener.flush(30)
    code, report = _audit(capsys, journal_url, kafka_topic)
    assert code == 3
    a, b = (str(q.runId) for q in queries)
    assert [list(p) for p in report["concurrent_runs"]] == [[a, b]]
    overlaps = [f for f in report["findings"] if f["kind"] == "overlap"]
    assert overlaps and {f["status"] for f in overlaps} == {"unexplained"}
    # Every record both read is counted once as read twice: 8 in all.
    assert sum(f["records"] for f in overlaps) == 8
    assert not [f for f in report["findings"] if f["kind"] == "gap"]


def _read_up_to(query: Any, topic: str) -> int:
    progress = query.lastProgress
    if not progress:
        return 0
    end = progress["sources"][0]["endOffset"]
    if isinstance(end, str):
        end = json.loads(end)
    return int((end or {}).get(topic, {}).get("0", 0))
