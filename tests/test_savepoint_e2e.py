"""Savepoints end to end (issue 31): a stateful query upgraded onto a NEW checkpoint keeps
its state, exactly once. Real Spark 4.2 with its Kafka connector on the test broker, real
Postgres; the state read back with Spark's State Data Source."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.cli import main
from tests.jobs_support import load_job

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUERY = "totals"


def _run(spark: Any, listener: Any, module: Any, argv: list[str]) -> Any:
    args = module.parser().parse_args(argv)
    q = module.build_query(spark, args)
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)
    return q


def _cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _amounts(i: int) -> str:
    return f"g{i % 7},{(i * 37) % 101}"


def _reference(produced: list[tuple[int, int, bytes, bytes]]) -> dict[str, tuple[int, int, int]]:
    """(n, max, sum) per group over every record produced."""
    acc: dict[str, list[int]] = defaultdict(list)
    for _p, _o, _k, value in produced:
        grp, amount = value.decode().split(",")
        acc[grp].append(int(amount))
    return {g: (len(a), max(a), sum(a)) for g, a in acc.items()}


def _state(spark: Any, checkpoint: Path, **options: str) -> list[Any]:
    spark.streams.active  # noqa: B018 - the StateStoreCoordinator
    return spark.read.format("statestore").options(**options).load(str(checkpoint)).collect()


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
    _run(spark, listener, job, [*common, "--checkpoint", str(v1_ck)])
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

    _run(spark, listener, job, [*common, "--checkpoint", str(v2_ck), "--engine",
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
