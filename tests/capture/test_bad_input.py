"""Bad input everywhere: the listener journals what it can, flags what is odd, keeps
the raw payload of what it cannot journal, and never raises into Spark; the command
answers bad input with one line on stderr and a non-zero status, never a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from offset_journal import Journal, OffsetJournalListener
from offset_journal.capture.writer import Writer, WriterConfig
from offset_journal.journal.db import ENV_URL
from offset_journal.records import PROGRESS, STARTED
from offset_journal.restart import plan_restart
from tests.payloads import kafka_source, progress, progress_offset, sql_rows
from tests.support import Cli, one_error_line
from tests.support import count_rows as _count

HOSTILE = "o'rders\"; DROP TABLE offset_journal.batches; -- ünïcødé 🚀 %s {0} \\ $1"


# --------------------------------------------------------------------------- helpers


_sql = sql_rows


def _event(payload: Any) -> SimpleNamespace:
    """What PySpark hands onQueryProgress: an event whose progress has .json."""
    return SimpleNamespace(progress=SimpleNamespace(json=payload))


RUN = "6a0d1c8e-8b3c-4c5e-9f8d-3b1d2c4e5f60"


def _p(batch_id: int, *sources: dict[str, Any], name: str = "bad", run_id: str = RUN) -> str:
    return progress(batch_id, sources=list(sources), name=name, run_id=run_id,
                    timestamp=f"2024-01-01T00:00:{batch_id:02d}.000Z")


# --------------------------------------------------------------------------- the listener


def test_listener_journals_odd_offsets_flags_them_and_keeps_what_it_cannot_journal(
        journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kafka = kafka_source("t", {"t": {"0": 1}}, {"t": {"0": 5}})
    cases: dict[int, dict[str, Any]] = {
        0: kafka,  # fine
        1: kafka_source("t", None, "{not json"),  # Kafka offsets that are not JSON
        2: kafka_source("t", None, {"t": {"x": "y"}}),  # not Kafka's shape
        3: {"description": "MySource[cursor]", "startOffset": {"cursor": [1, None]},
            "endOffset": {"cursor": [2, {"a": None, "b": "x'y"}]}},  # unknown: kept as is
        4: kafka_source("t", {"t": {"0": 500, "1": 7}}, {"t": {"0": 10, "1": 9}}),  # backwards
        5: kafka_source("t", {"t": {"0": 5}}, {"t": {"0": 2**70}}),  # not a Kafka offset
        6: {"description": "Py", "startOffset": None, "endOffset": '{"pos": NaN}'},
        7: {"description": "Py", "startOffset": None, "endOffset": '{"k": "a\\u0000b"}'},
        8: kafka_source("t", None, "[" * 5000 + "]" * 5000),  # nesting beyond json's limit
    }
    unjournalable = ["{this is not json", '{"id": "q"}', "[1, 2]", 12345, None,
                     '{"id": "q", "runId": "r", "batchId": Infinity}',
                     '{"id": "q", "runId": "r", "batchId": 1e300}',
                     "[" * 100_000 + "]" * 100_000]
    listener = OffsetJournalListener(journal_url, spool_dir=str(tmp_path / "spool"))
    with caplog.at_level(logging.WARNING, logger="offset_journal"):
        listener.onQueryStarted(SimpleNamespace(runId=RUN, id="qid", name="bad",
                                                timestamp="2024-01-01T00:00:00.000Z"))
        for i, src in cases.items():
            listener.onQueryProgress(_event(_p(i, src)))
        for payload in unjournalable:
            listener.onQueryProgress(_event(payload))
        listener.onQueryProgress(object())  # no .progress at all
        listener.onQueryTerminated(SimpleNamespace(runId=RUN, id="qid", exception=None))
        # The unjournalable events are in rejected_events, not in the journal: False.
        assert listener.close(timeout=30) is False

    # Every batch with ids is journaled, odd sources flagged, raw payload kept.
    rows = _sql(journal_url, """
        select b.batch_id, s.kind, s.problem, b.raw_progress is not null, s.end_offset,
               (select count(*) from offset_journal.kafka_partitions k
                where k.batch_pk = b.id)
        from offset_journal.batches b join offset_journal.source_offsets s on s.batch_pk = b.id
        order by b.batch_id""")
    got = {r[0]: r[1:] for r in rows}
    assert sorted(got) == sorted(cases)
    assert got[0] == ("kafka", None, False, {"t": {"0": 5}}, 1)
    assert got[3] == ("other", None, False, cases[3]["endOffset"], 0)
    flagged = {i: got[i][1] for i in got if got[i][1]}
    assert sorted(flagged) == [1, 2, 4, 5, 6, 7, 8]
    assert all(got[i][2] for i in flagged), "flagged batches keep their raw progress"
    assert "not JSON" in flagged[1] and "shape" in flagged[2]
    assert "backwards" in flagged[4] and "t-0 500->10" in flagged[4] and "t-1" not in flagged[4]
    # A batch that goes backwards keeps its partition rows, for a person to look at.
    assert got[4][4] == 2
    assert "NaN" in flagged[6] and "NUL" in flagged[7] and "nested" in flagged[8]
    raw = _sql(journal_url, "select raw_progress from offset_journal.batches where batch_id = 4")
    assert raw == [(_p(4, cases[4]),)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("batch 4" in w and "backwards" in w for w in warnings), warnings

    # What cannot be journaled at all is kept verbatim in rejected_events.
    rejected = [r[0] for r in _sql(journal_url,
                                   "select payload from offset_journal.rejected_events")]
    assert len(rejected) == len(unjournalable)  # object() had no payload to keep
    for payload in unjournalable:
        if isinstance(payload, str):
            assert payload in rejected
    (run,) = Journal(journal_url).runs("bad")
    assert run.terminated_at is not None and run.batches == len(cases)


def test_a_listener_fed_garbage_never_raises(journal_url: str, tmp_path: Path) -> None:
    listener = OffsetJournalListener(journal_url, spool_dir=str(tmp_path / "spool"))
    weird: list[Any] = [None, object(), 42, SimpleNamespace(runId=None, id=None, name=None),
                        SimpleNamespace(progress=None), SimpleNamespace(runId=object()),
                        _event(b"\xff\xfe"), _event({"not": "a string"})]
    for event in weird:
        listener.onQueryStarted(event)
        listener.onQueryProgress(event)
        listener.onQueryIdle(event)
        listener.onQueryTerminated(event)
    # Handled, none raised; what could not be journaled is in rejected_events: False.
    assert listener.close(timeout=30) is False
    assert _count(journal_url, "batches") == 0 and _count(journal_url, "rejected_events") > 0


def test_ten_thousand_partitions_in_one_batch_are_journaled_completely(
        journal_url: str, tmp_path: Path) -> None:
    n = 10_000
    start = {"wide": {str(p): p for p in range(n)}, "narrow": {"0": 0}}
    end = {"wide": {str(p): p + 1 + p % 7 for p in range(n)}, "narrow": {"0": 3}}
    payload = _p(0, kafka_source("wide,narrow", start, end), name="wide")
    writer = Writer(WriterConfig(journal_url, str(tmp_path / "spool")))
    writer.start()
    writer.submit({"type": PROGRESS, "json": payload})
    assert writer.flush(timeout=60)
    writer.close()

    (count, distinct, total, lo, hi), = _sql(journal_url, """
        select count(*), count(distinct (topic, partition)), sum(end_offset - start_offset),
               min(partition), max(partition)
        from offset_journal.kafka_partitions where topic = 'wide'""")
    assert (count, distinct, lo, hi) == (n, n, 0, n - 1)
    assert total == sum(1 + p % 7 for p in range(n))
    assert _count(journal_url, "kafka_partitions") == n + 1
    plan = plan_restart(journal_url, "wide")
    assert plan.ok, plan.errors
    offsets = json.loads(plan.starting_offsets())
    assert offsets == {t: {p: int(o) for p, o in parts.items()} for t, parts in end.items()}


# --------------------------------------------------------------------------- real Spark


def _run_to_end(spark: Any, listener: Any, df: Any, name: str, checkpoint: Path,
                batches: int) -> list[Any]:
    q = (df.writeStream.format("noop").queryName(name)
         .option("checkpointLocation", str(checkpoint))
         .trigger(processingTime="100 milliseconds").start())
    deadline = time.monotonic() + 120
    try:
        while len(q.recentProgress) < batches:
            assert q.exception() is None, q.exception()
            assert time.monotonic() < deadline, f"{name}: fewer than {batches} batches"
            time.sleep(0.1)
    finally:
        q.stop()
    assert listener.wait_terminated(q.runId)
    assert q.exception() is None
    return list(q.recentProgress)


_j = progress_offset


@pytest.mark.spark
@pytest.mark.needs_spark("4.0", "the Python data source API (pyspark.sql.datasource)")
def test_backwards_and_unknown_offsets_from_a_real_query(
        journaled_spark: tuple[Any, Any], journal_url: str, tmp_path: Path, cli: Cli,
        caplog: pytest.LogCaptureFixture) -> None:
    spark, listener = journaled_spark
    from tests.odd_source import OddSource

    spark.dataSource.register(OddSource)
    back = spark.readStream.format("odd_offsets").option("mode", "backwards").load()
    other = spark.readStream.format("odd_offsets").option("mode", "unknown").load()
    with caplog.at_level(logging.WARNING, logger="offset_journal"):
        prog = _run_to_end(spark, listener, back.union(other), "odd_q", tmp_path / "ck", 3)
    rows = _sql(journal_url, """
        select b.batch_id, s.source_index, s.kind, s.problem, s.end_offset,
               b.raw_progress is not null
        from offset_journal.batches b join offset_journal.source_offsets s on s.batch_pk = b.id
        where b.query_name = 'odd_q' order by b.batch_id, s.source_index""")
    by_batch = {p.batchId: p for p in prog}
    assert sorted({r[0] for r in rows}) == sorted(by_batch)
    for batch_id, index, kind, problem, end, raw in rows:
        assert end == _j(by_batch[batch_id].sources[index].endOffset)
        assert kind == ("kafka" if index == 0 else "other")
        went_back = index == 0 and end["t"]["0"] == 40
        assert (problem is not None and "backwards" in problem) == went_back, (batch_id, problem)
        assert raw == any(r[0] == batch_id and r[3] for r in rows)
    assert any("backwards" in r.getMessage() for r in caplog.records)

    # The last batch went forward again: a plan from it is fine.
    code, out, err = cli("--database-url", journal_url, "starting-offsets", "odd_q")
    assert code == 0, err
    assert json.loads(out) == {"step": {"0": 3}, "t": {"0": 60, "1": 15}}
    # Restarting after the batch that went backwards is refused unless asked (--force).
    (back_batch,) = {r[0] for r in rows if r[3]}
    run = str(prog[0].runId)
    after_back = plan_restart(journal_url, "odd_q", as_of=_trigger(by_batch[back_batch]))
    assert after_back.anchor.batch_id == back_batch
    assert any("backwards" in e and "t-0" in e for e in after_back.errors), after_back.errors
    assert json.loads(after_back.starting_offsets(0)) == {"step": {"0": 2}, "t": {"0": 40,
                                                                                 "1": 10}}
    when = by_batch[back_batch].timestamp
    code, out, err = cli("--database-url", journal_url, "starting-offsets", "odd_q",
                         "--as-of", when)
    assert code == 1 and out == "" and "backwards" in err and "Traceback" not in err
    code, out, err = cli("--database-url", journal_url, "starting-offsets", "odd_q",
                         "--as-of", when, "--force")
    assert code == 0 and json.loads(out)["t"] == {"0": 40, "1": 10}
    # Asking for the batch itself (reprocess it) starts at its start offsets, no error.
    at = plan_restart(journal_url, "odd_q", batch=(run, back_batch))
    assert json.loads(at.starting_offsets(0))["t"] == {"0": 100, "1": 5}
    # The unknown source's offsets are journaled as they came, and the plan says so.
    plan = plan_restart(journal_url, "odd_q", source=1)
    assert plan.source(1).journaled == _j(prog[-1].sources[1].endOffset)
    assert any("no option is known" in w for w in plan.warnings)


def _trigger(p: Any) -> Any:
    from offset_journal.records import parse_timestamp

    return parse_timestamp(p.timestamp)


@pytest.mark.spark
@pytest.mark.needs_spark("4.0", "the Python data source API (pyspark.sql.datasource)")
def test_ten_thousand_partitions_from_a_real_query(
        journaled_spark: tuple[Any, Any], journal_url: str, tmp_path: Path) -> None:
    spark, listener = journaled_spark
    from tests.odd_source import OddSource

    spark.dataSource.register(OddSource)
    df = spark.readStream.format("odd_offsets").option("mode", "wide").option("batches", 2).load()
    prog = _run_to_end(spark, listener, df, "wide_q", tmp_path / "ck", 2)
    rows = _sql(journal_url, """
        select b.batch_id, count(*), count(k.start_offset), sum(k.end_offset)
        from offset_journal.kafka_partitions k join offset_journal.batches b on b.id = k.batch_pk
        where b.query_name = 'wide_q' and k.topic = 'wide' group by b.batch_id
        order by b.batch_id""")
    expected = []
    for p in prog:
        start = (_j(p.sources[0].startOffset) or {}).get("wide", {})  # none in batch 0
        end = _j(p.sources[0].endOffset)["wide"]
        expected.append((p.batchId, 10_000, len(start), sum(end.values())))
    assert rows == expected
    last = Journal(journal_url).last_offsets("wide_q")[0]
    assert len(last.partitions) == 10_001


@pytest.mark.spark
@pytest.mark.needs_spark("4.0", "the Python data source API (pyspark.sql.datasource)")
def test_hostile_query_name_round_trips_through_spark_journal_and_command(
        journaled_spark: tuple[Any, Any], journal_url: str, tmp_path: Path, cli: Cli) -> None:
    from tests.kafka_shaped_source import KafkaShapedSource

    spark, listener = journaled_spark
    spark.dataSource.register(KafkaShapedSource)
    df = spark.readStream.format("kafka_shaped").option("batches", "2").load()
    prog = _run_to_end(spark, listener, df, HOSTILE, tmp_path / "ck", 2)
    assert [r[0] for r in _sql(journal_url, "select distinct query_name from "
                                            "offset_journal.batches")] == [HOSTILE]
    assert _count(journal_url, "batches") == len(prog)

    code, out, err = cli("--database-url", journal_url, "history", HOSTILE, "--format", "json")
    assert code == 0, err
    history = json.loads(out)
    assert [h["batch_id"] for h in history] == [p.batchId for p in prog]
    assert history[-1]["sources"][0]["end_offset"] == _j(prog[-1].sources[0].endOffset)
    code, out, err = cli("--database-url", journal_url, "starting-offsets", HOSTILE)
    assert code == 0, err
    end = _j(prog[-1].sources[0].endOffset)
    assert json.loads(out) == {t: {p: o for p, o in parts.items()} for t, parts in end.items()}
    code, out, err = cli("--database-url", journal_url, "runs", HOSTILE)
    assert code == 0 and HOSTILE in out
    # A name that only looks like the hostile one finds nothing: no pattern matching.
    code, _, err = cli("--database-url", journal_url, "history", HOSTILE[:5] + "%")
    assert "no journaled batches" in one_error_line(code, err)


# --------------------------------------------------------------------------- the command


def _start_event(url: str, spool: Path, name: str = "q") -> None:
    w = Writer(WriterConfig(url, str(spool)))
    w.start()
    w.submit({"type": STARTED, "query_id": "qid", "run_id": RUN, "name": name,
              "timestamp": "2024-01-01T00:00:00Z"})
    assert w.flush(timeout=30)
    w.close()


QUERY_COMMANDS = [
    ["history", "orders"], ["history", "orders", "--format", "csv"], ["runs", "orders"],
    ["runs"], ["starting-offsets", "orders"], ["plan", "orders"],
    ["plan", "orders", "--format", "json"],
]


@pytest.mark.parametrize("argv", QUERY_COMMANDS, ids=" ".join)
def test_missing_journal_database_is_one_line(cli: Cli, journal_server: Any,
                                              argv: list[str]) -> None:
    url = journal_server.url_for("oj_no_such_database")
    line = one_error_line(*cli("--database-url", url, *argv)[::2])
    assert "oj_no_such_database" in line and "does not exist" in line


@pytest.mark.parametrize("argv", QUERY_COMMANDS, ids=" ".join)
def test_journal_without_schema_is_one_line(cli: Cli, empty_database_url: str,
                                            argv: list[str]) -> None:
    line = one_error_line(*cli("--database-url", empty_database_url, *argv)[::2])
    assert "db upgrade" in line


@pytest.mark.parametrize("argv", QUERY_COMMANDS, ids=" ".join)
def test_empty_journal_is_one_line(cli: Cli, journal_url: str, argv: list[str]) -> None:
    line = one_error_line(*cli("--database-url", journal_url, *argv)[::2])
    assert "orders" in line or "no runs" in line


def test_query_with_runs_but_no_batches_is_one_line(cli: Cli, journal_url: str,
                                                    tmp_path: Path) -> None:
    _start_event(journal_url, tmp_path / "spool", "orders")
    for argv in (["history", "orders"], ["starting-offsets", "orders"], ["plan", "orders"]):
        line = one_error_line(*cli("--database-url", journal_url, *argv)[::2])
        assert "no journaled batches for query 'orders'" in line


def test_no_database_url_is_one_line(cli: Cli) -> None:
    code, _, err = cli("history", "orders")
    assert code == 2 and ENV_URL in one_error_line(code, err)


def test_console_script_on_an_empty_journal_is_one_line(journal_url: str) -> None:
    script = Path(sys.executable).parent / "offset-journal"
    env = {k: v for k, v in os.environ.items() if k != ENV_URL}
    done = subprocess.run([str(script), "--database-url", journal_url, "starting-offsets", "q"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout == ""
    assert "no journaled batches" in one_error_line(done.returncode, done.stderr)


# --------------------------------------------------------------------------- checkpoints


def _checkpoint(root: Path, batches: int = 2) -> Path:
    """A small Kafka checkpoint as Spark writes it (v1 offsets log), every batch committed."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "sources" / "0").mkdir(parents=True)
    (root / "metadata").write_text('{"id":"3f3c9a1e-5d0b-4b47-9a3e-1b2c3d4e5f60"}')
    (root / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"t":{"0":0,"1":0}}')
    for i in range(batches):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_704_067_200_000 + i * 60_000,
                "conf": {"spark.sql.shuffle.partitions": "2"}}
        offsets = {"t": {"0": 10 * (i + 1), "1": 5 * (i + 1)}}
        (root / "offsets" / str(i)).write_text(
            "v1\n" + json.dumps(meta) + "\n" + json.dumps(offsets, separators=(",", ":")))
        (root / "commits" / str(i)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


def _replace_by_file(directory: Path) -> None:
    for p in directory.iterdir():
        p.unlink()
    directory.rmdir()
    directory.write_text("x")


def _truncate(path: Path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


CORRUPTIONS: dict[str, Any] = {
    "offsets truncated": lambda c: _truncate(c / "offsets" / "0", 0.8),
    "offsets cut after the version line": lambda c: (c / "offsets" / "1").write_text("v1\n"),
    "offsets empty": lambda c: (c / "offsets" / "0").write_text(""),
    "offsets binary garbage": lambda c: (c / "offsets" / "1").write_bytes(b"\xff\xfe\x00\x80x"),
    "offsets text garbage": lambda c: (c / "offsets" / "0").write_text("garbage\n{[}\n"),
    "offsets of an unknown version": lambda c: (c / "offsets" / "0").write_text(
        (c / "offsets" / "0").read_text().replace("v1", "v99", 1)),
    "offsets with NaN": lambda c: (c / "offsets" / "0").write_text(
        "v1\n{}\n" + '{"t":{"0":NaN}}'),
    "offsets nested too deeply": lambda c: (c / "offsets" / "0").write_text(
        "v1\n{}\n" + "[" * 100_000 + "]" * 100_000),
    "metadata truncated": lambda c: _truncate(c / "metadata", 0.5),
    "metadata binary garbage": lambda c: (c / "metadata").write_bytes(b"\x00\x01\xff{{"),
    "metadata empty": lambda c: (c / "metadata").write_text(""),
    "offsets is a file": lambda c: _replace_by_file(c / "offsets"),
}


@pytest.mark.parametrize("corrupt", sorted(CORRUPTIONS))
def test_garbage_checkpoint_is_one_line_and_journals_nothing(
        cli: Cli, journal_url: str, tmp_path: Path, corrupt: str) -> None:
    ckpt = _checkpoint(tmp_path / "ck")
    assert cli("checkpoint", "inspect", str(ckpt))[0] == 0  # fine before the damage
    CORRUPTIONS[corrupt](ckpt)
    one_error_line(*cli("checkpoint", "inspect", str(ckpt))[::2])
    one_error_line(*cli("checkpoint", "inspect", "--all", str(ckpt))[::2])
    one_error_line(*cli("--database-url", journal_url, "checkpoint", "import", str(ckpt),
                        "--query-name", "imp")[::2])
    one_error_line(*cli("--database-url", journal_url, "checkpoint", "compare", str(ckpt),
                        "imp")[::2])
    one_error_line(*cli("--database-url", journal_url, "plan", "imp", "--checkpoint",
                        str(ckpt))[::2])
    for table in ("query_runs", "batches", "batch_sources", "kafka_partitions"):
        assert _count(journal_url, table) == 0, table


def test_torn_last_uncommitted_batch_is_imported_without_it(
        cli: Cli, journal_url: str, tmp_path: Path) -> None:
    """A crash while Spark wrote the next offsets file: the committed batches are
    imported, the torn one is skipped with a note, and the command says so."""
    ckpt = _checkpoint(tmp_path / "ck", batches=3)
    os.remove(ckpt / "commits" / "2")
    _truncate(ckpt / "offsets" / "2", 0.7)
    code, out, err = cli("checkpoint", "inspect", str(ckpt))
    assert code == 0 and json.loads(out)["last_committed"]["batch_id"] == 1
    code, out, err = cli("--database-url", journal_url, "checkpoint", "import", str(ckpt),
                         "--query-name", "imp")
    assert code == 0 and "imported 2 batches" in out and "Traceback" not in err
    assert "batch 2" in err
    assert _sql(journal_url, "select batch_id from offset_journal.batches order by 1") == [
        (0,), (1,)]
