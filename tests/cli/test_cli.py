"""The offset-journal command, in-process through main() and as the installed script."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from offset_journal.cli import main
from offset_journal.cli.parser import batch_arg, duration_arg, time_arg
from offset_journal.journal import Journal
from offset_journal.journal.db import ENV_URL
from offset_journal.kafka.admin import committed_offsets
from offset_journal.restart import plan_restart
from offset_journal.testing import KafkaCluster
from tests.payloads import kafka_source, progress
from tests.support import Cli, Ran, fill, journal_batches, ts, write_checkpoint

RUN = "88e2ff94-ede0-45a8-b687-6316fbef529a"


@pytest.fixture
def db(journal_url: str, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> str:
    """A journal with a Kafka query 'orders': three batches of one run, its URL in the
    environment (set after ``cli`` has cleared it)."""
    monkeypatch.setenv(ENV_URL, journal_url)
    src = [
        (None, {"orders": {"0": 10, "1": 5}}),
        ({"orders": {"0": 10, "1": 5}}, {"orders": {"0": 20, "1": 9}}),
        ({"orders": {"0": 20, "1": 9}}, {"orders": {"0": 25, "1": 9}}),
    ]
    journal_batches(journal_url, [
        progress(i, name="orders", run_id=RUN, timestamp=ts(i),
                 sources=[kafka_source("orders", s, e)], rows=7)
        for i, (s, e) in enumerate(src)
    ])
    return journal_url


# --------------------------------------------------------------------------- values


def test_parse_time() -> None:
    now = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    assert time_arg("2024-05-01T10:00:00Z") == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)
    assert time_arg("2024-05-01T10:00:00") == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)
    assert time_arg("2024-05-01 12:00:00+02:00") == datetime(2024, 5, 1, 10,
                                                              tzinfo=timezone.utc)
    assert time_arg("2024-05-01") == datetime(2024, 5, 1, tzinfo=timezone.utc)
    assert time_arg("-2h", now) == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)
    assert time_arg("90 minutes ago", now) == datetime(2024, 5, 1, 10, 30, tzinfo=timezone.utc)
    assert time_arg("now", now) == now
    for bad in ("yesterday", "-2x", "2024-13-01", ""):
        with pytest.raises(Exception, match="bad time"):
            time_arg(bad, now)


def test_parse_duration_and_batch() -> None:
    assert duration_arg("10m") == timedelta(minutes=10)
    assert duration_arg("10 minutes") == timedelta(minutes=10)
    assert duration_arg("1h30m") == timedelta(hours=1, minutes=30)
    assert duration_arg("1.5s") == timedelta(seconds=1.5)
    for bad in ("", "10", "ten minutes", "0s", "5 parsecs"):
        with pytest.raises(Exception, match="bad duration"):
            duration_arg(bad)
    assert batch_arg(f"{RUN}:41") == (RUN, 41)
    for bad in ("41", f"{RUN}:", f"{RUN}:x", ":4", f"{RUN}:-1"):
        with pytest.raises(Exception, match="bad batch"):
            batch_arg(bad)


# --------------------------------------------------------------------------- usage errors


def test_usage_errors_are_one_line_with_status_2(cli: Any, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    monkeypatch.delenv(ENV_URL, raising=False)
    r = cli("runs")
    assert r.code == 2 and "no database URL" in r.error_line
    assert cli().code == 2
    assert "invalid choice" in cli("frobnicate").error_line
    r = cli("--database-url", "postgresql://x@h/db", "plan", "q", "--batch", "nope")
    assert r.code == 2 and "bad batch 'nope'" in r.error_line
    r = cli("--database-url", "postgresql://x@h/db", "plan", "q", "--as-of", "soon")
    assert r.code == 2 and "bad time 'soon'" in r.error_line
    r = cli("--database-url", "postgresql://x@h/db", "plan", "q", "--window", "10m")
    assert r.code == 2 and "--state-aware" in r.error_line
    r = cli("--database-url", "postgresql://x@h/db", "plan", "q", "--as-of", "now",
            "--batch", f"{RUN}:1")
    assert r.code == 2 and "not allowed with" in r.error_line
    r = cli("history", "q", "--limit", "0")
    assert r.code == 2


def test_help_and_version(cli: Any) -> None:
    r = cli("--version")
    assert r.code == 0 and r.out.startswith("offset-journal ")
    r = cli("plan", "--help")
    assert r.code == 0 and "--state-aware" in r.out


def test_unreachable_database_is_redacted(cli: Any) -> None:
    r = cli("--database-url", "postgresql://me:s3cret@127.0.0.1:1/journal", "history", "q")
    assert r.code == 1
    line = r.error_line
    assert "s3cret" not in r.err and "***" in line and "cannot reach" in line


def test_demo_help_comes_from_the_demo(cli: Any) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli("demo", "--help")
    assert exit_info.value.code == 0


def test_demo_gets_its_arguments(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    seen: list[list[str]] = []
    stand_in = types.ModuleType("offset_journal.cli.demo")
    stand_in.main = lambda args: seen.append(args) or 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "offset_journal.cli.demo", stand_in)
    r = cli("-v", "--database-url", "postgresql://x@h/db", "demo", "--fast", "-n", "2")
    assert r.code == 3 and seen == [["--fast", "-n", "2"]]


# --------------------------------------------------------------------------- database


def test_db_upgrade_and_current(cli: Any, empty_database_url: str) -> None:
    r = cli("--database-url", empty_database_url, "db", "current")
    assert r.code == 0 and r.out.startswith("none")
    r = cli("db", "upgrade", "--database-url", empty_database_url)
    assert r.code == 0 and "journal schema at" in r.out
    r = cli("--database-url", empty_database_url, "db", "current")
    assert r.code == 0 and r.out.strip().endswith("(head)")


def test_missing_schema_is_explained(cli: Any, empty_database_url: str) -> None:
    r = cli("--database-url", empty_database_url, "history", "orders")
    assert r.code == 1 and "db upgrade" in r.error_line


def test_runs(cli: Any, db: str) -> None:
    r = cli("runs")
    assert r.code == 0
    header, row = r.out.strip().splitlines()
    assert header.split()[:3] == ["QUERY", "RUN", "ID"]
    assert row.split()[:2] == ["orders", RUN] and " 0..2 " in row
    assert cli("runs", "orders").out == r.out
    r = cli("runs", "nope")
    assert r.code == 1 and "no runs journaled for query 'nope'" in r.error_line


def test_history_formats(cli: Any, db: str) -> None:
    table = cli("history", "orders")
    assert table.code == 0
    lines = table.out.strip().splitlines()
    assert len(lines) == 4 and "SOURCE 0 END" in lines[0]
    assert '{"orders":{"0":25,"1":9}}' in lines[-1]
    rows = json.loads(cli("history", "orders", "--format", "json").out)
    assert [b["batch_id"] for b in rows] == [0, 1, 2]
    assert rows[2]["sources"][0]["end_offset"] == {"orders": {"0": 25, "1": 9}}
    assert rows[0]["trigger_at"] == "2024-01-01T00:00:00.000Z"
    got = list(csv.DictReader(io.StringIO(cli("history", "orders", "--format", "csv",
                                               "--limit", "2").out)))
    assert [g["batch_id"] for g in got] == ["1", "2"]
    assert json.loads(got[1]["source_0_end_offset"]) == {"orders": {"0": 25, "1": 9}}
    assert got[1]["num_input_rows"] == "7" and got[1]["run_id"] == RUN
    r = cli("history", "nope")
    assert r.code == 1 and r.error_line.endswith("no journaled batches for query 'nope'")


# --------------------------------------------------------------------------- plans


def test_starting_offsets_prints_only_json(cli: Any, db: str) -> None:
    r = cli("starting-offsets", "orders")
    assert r.code == 0
    assert json.loads(r.out) == {"orders": {"0": 25, "1": 9}}
    assert r.out == '{"orders":{"0":25,"1":9}}\n'
    assert "not checked against a Kafka cluster" in r.err
    r = cli("starting-offsets", "orders", "--as-of", "2024-01-01T00:01:30")
    assert json.loads(r.out) == {"orders": {"0": 20, "1": 9}}
    r = cli("starting-offsets", "orders", "--batch", f"{RUN}:1")
    assert json.loads(r.out) == {"orders": {"0": 10, "1": 5}}
    r = cli("starting-offsets", "orders", "--as-of=-2h")  # relative: the last batch
    assert json.loads(r.out) == {"orders": {"0": 25, "1": 9}}


def test_starting_offsets_bad_input(cli: Any, db: str, tmp_path: Path) -> None:
    r = cli("starting-offsets", "nope")
    assert r.code == 1 and "no journaled batches for query 'nope'" in r.error_line
    assert r.out == ""
    r = cli("starting-offsets", "orders", "--batch", f"{RUN}:99")
    assert r.code == 1 and "no journaled batch 99" in r.error_line
    r = cli("starting-offsets", "orders", "--source", "3")
    assert r.code == 1 and "no source 3" in r.error_line
    used = write_checkpoint(tmp_path / "ck", "q", [([{"orders": {"0": 1}}], True)])
    r = cli("starting-offsets", "orders", "--checkpoint", str(used))
    assert r.code == 1 and "already holds" in r.error_line and r.out == ""


def test_starting_offsets_against_kafka(cli: Any, journal_url: str, kafka_cluster: KafkaCluster,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, journal_url)
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    fill(kafka_cluster, topic, {0: 3, 1: 3, 2: 1, 3: 1})
    journal_batches(journal_url, [progress(
        5, name="orders", timestamp=ts(0),
        sources=[kafka_source(topic, {topic: {"0": 0, "1": 0}}, {topic: {"0": 3, "1": 2}})])])
    r = cli("starting-offsets", "orders", "--bootstrap-servers", kafka_cluster.bootstrap_servers,
            "--kafka-timeout", "5")
    assert r.code == 0, r.err
    assert json.loads(r.out) == {topic: {"0": 3, "1": 2, "2": -2, "3": -2}}
    assert r.err == ""  # checked against the cluster: nothing to warn about

    # A journaled topic that is gone from the cluster leaves nothing to start from:
    # an error, and no JSON unless forced.
    gone = f"gone-{uuid.uuid4().hex[:6]}"
    journal_batches(journal_url, [progress(
        1, name="lost", timestamp=ts(0),
        sources=[kafka_source(gone, {gone: {"0": 0}}, {gone: {"0": 3}})])])
    args = ("starting-offsets", "lost", "--bootstrap-servers", kafka_cluster.bootstrap_servers)
    r = cli(*args)
    assert r.code == 1 and r.out == ""
    assert "offset-journal: error: source 0: no partition is left" in r.err
    assert f"topic {gone}" in r.err and "no longer exists" in r.err
    r = cli(*args, "--force")
    assert r.code == 0 and r.out == "{}\n" and "no partition is left" in r.err
    # The new job reads another topic instead: it starts from earliest there.
    fill(kafka_cluster, f"{gone}-v2", {0: 1})
    r = cli(*args, "--subscribe", f"{gone}-v2")
    assert r.code == 0, r.err
    assert json.loads(r.out) == {f"{gone}-v2": {str(p): -2 for p in range(4)}}
    assert cli(*args, "--subscribe", " , ").code == 2


def test_plan_text_and_json(cli: Any, db: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "_spark_metadata").mkdir(parents=True)
    (out / "_spark_metadata" / "0").write_text("v1\n")
    r = cli("plan", "orders", "--checkpoint", str(tmp_path / "new"), "--output-path", str(out))
    assert r.code == 0
    text = " ".join(r.out.split())
    assert "Restart plan for query 'orders' (stateless)" in text
    assert 'option startingOffsets = {"orders":{"0":25,"1":9}}' in text
    assert "_spark_metadata" in text and "will honour startingOffsets" in text
    data = json.loads(cli("plan", "orders", "--format", "json").out)
    assert data["position"] == "after" and data["anchor"]["batch_id"] == 2
    assert data["sources"][0]["options"] == {"startingOffsets": '{"orders":{"0":25,"1":9}}'}


def test_state_aware_plan(cli: Any, journal_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, journal_url)

    def et(wm: int, hi: int) -> dict[str, str]:
        return {"watermark": ts(wm), "min": ts(0), "max": ts(hi), "avg": ts(0)}

    journal_batches(journal_url, [
        progress(0, name="win", timestamp=ts(0), event_time=et(0, 4),
                 sources=[kafka_source("t", None, {"t": {"0": 10}})]),
        progress(1, name="win", timestamp=ts(1), event_time=et(0, 12),
                 sources=[kafka_source("t", {"t": {"0": 10}}, {"t": {"0": 20}})]),
        progress(2, name="win", timestamp=ts(2), event_time=et(20, 25),
                 sources=[kafka_source("t", {"t": {"0": 20}}, {"t": {"0": 30}})]),
    ])
    r = cli("plan", "win", "--state-aware", "--window", "10 minutes")
    assert r.code == 0, r.err
    assert "event_time_cutoff = 2024-01-01T00:20:00Z" in " ".join(r.out.split())
    r = cli("starting-offsets", "win", "--state-aware", "--window", "10m")
    assert json.loads(r.out) == {"t": {"0": 10}}
    assert "event_time_cutoff 2024-01-01T00:20:00.000Z" in r.err
    r = cli("plan", "win", "--state-aware", "--batch", f"{RUN}:1")
    assert r.code == 2 and "--as-of" in r.error_line


# --------------------------------------------------------------------------- checkpoints


@pytest.fixture
def hand_checkpoint(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "ck", "qid-hand", [
        ([{"orders": {"0": 12, "1": 5}}], True),
        ([{"orders": {"0": 30, "1": 9}}], True),
        ([{"orders": {"0": 40, "1": 9}}], False),
    ], initial={"0": {"orders": {"0": 0, "1": 0}}})


def test_checkpoint_inspect(cli: Any, hand_checkpoint: Path) -> None:
    r = cli("checkpoint", "inspect", str(hand_checkpoint))
    assert r.code == 0
    data = json.loads(r.out)
    assert data["query_id"] == "qid-hand" and data["batches"] == 3
    last = data["last_committed"]
    assert last["batch_id"] == 1 and last["offsets"] == [{"orders": {"0": 30, "1": 9}}]
    assert last["starting_offsets"] == {"0": '{"orders":{"0":30,"1":9}}'}
    assert last["timestamp"] == "2024-01-01T00:01:00.000Z"
    full = json.loads(cli("checkpoint", "inspect", "--all", str(hand_checkpoint)).out)
    assert len(full["batches"]) == 3


def test_checkpoint_bad_input(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, "postgresql://nobody@127.0.0.1:1/none")
    r = cli("checkpoint", "inspect", str(tmp_path / "missing"))
    assert r.code == 1 and "does not exist" in r.error_line
    bad = write_checkpoint(tmp_path / "bad", "q", [([{"t": {"0": 1}}], True)])
    (bad / "offsets" / "0").write_text("garbage")
    r = cli("checkpoint", "inspect", str(bad))
    assert r.code == 1 and "unreadable" in r.error_line
    # A malformed checkpoint fails before the database is even contacted.
    r = cli("checkpoint", "import", str(bad), "--query-name", "x")
    assert r.code == 1 and "unreadable" in r.error_line


def test_checkpoint_import_and_compare(cli: Any, journal_url: str, hand_checkpoint: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, journal_url)
    r = cli("checkpoint", "import", str(hand_checkpoint), "--query-name", "legacy")
    assert r.code == 0 and r.out.startswith("imported 2 batches")
    assert "skipped batch 2: not committed" in r.err
    r = cli("checkpoint", "import", str(hand_checkpoint), "--query-name", "legacy")
    assert r.code == 0 and "imported 0 batches" in r.out and "2 were already" in r.out
    assert json.loads(cli("starting-offsets", "legacy").out) == {"orders": {"0": 30, "1": 9}}
    r = cli("checkpoint", "compare", str(hand_checkpoint), "legacy")
    assert r.code == 0 and "verdict:    same" in r.out
    # The checkpoint moves on without the journal.
    (hand_checkpoint / "commits" / "2").write_text("v1\n{}")
    r = cli("checkpoint", "compare", str(hand_checkpoint), "legacy")
    assert "verdict:    checkpoint ahead" in r.out
    assert any(line.split()[:6] == ["0", "orders", "0", "40", "30", "checkpoint"]
               for line in r.out.splitlines())
    data = json.loads(cli("checkpoint", "compare", str(hand_checkpoint), "legacy",
                          "--format", "json").out)
    assert data["verdict"] == "checkpoint ahead" and data["checkpoint"]["batch_id"] == 2
    r = cli("checkpoint", "compare", str(hand_checkpoint), "nope")
    assert r.code == 1 and "no journaled batches for query 'nope'" in r.error_line


# --------------------------------------------------------------------------- Kafka groups


def test_commit_group(cli: Any, journal_url: str, kafka_cluster: KafkaCluster,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, journal_url)
    topic = f"lag-{uuid.uuid4().hex[:6]}"
    fill(kafka_cluster, topic, {0: 10, 1: 10})
    journal_batches(journal_url, [progress(
        3, name="orders", timestamp=ts(0),
        sources=[kafka_source(topic, {topic: {"0": 1, "1": 1}}, {topic: {"0": 7, "1": 4}})])])
    group = f"g-{uuid.uuid4().hex[:6]}"
    r = cli("commit-group", "orders", "--group", group, "--bootstrap-servers",
            kafka_cluster.bootstrap_servers, "--dry-run")
    assert r.code == 0 and "would commit" in r.out
    assert committed_offsets(kafka_cluster.bootstrap_servers, group, [topic], timeout=5) == {}
    r = cli("commit-group", "orders", "--group", group, "--bootstrap-servers",
            kafka_cluster.bootstrap_servers, "--kafka-timeout", "5")
    assert r.code == 0, r.err
    assert committed_offsets(kafka_cluster.bootstrap_servers, group, [topic], timeout=5) == {
        topic: {0: 7, 1: 4}
    }
    r = cli("commit-group", "orders", "--group", group, "--bootstrap-servers",
            "127.0.0.1:1", "--kafka-timeout", "1")
    assert r.code == 1 and "127.0.0.1:1" in r.error_line


# --------------------------------------------------------------------------- Spark


@pytest.fixture(scope="module")
def spark_checkpoint(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint written by a real Spark run: a file source, two files, one per batch."""
    base = tmp_path_factory.mktemp("spark-run")
    src = base / "in"
    src.mkdir()
    (src / "a.json").write_text('{"n": 1}\n{"n": 2}\n')
    (src / "b.json").write_text('{"n": 3}\n')
    query = (
        spark.readStream.schema("n INT").option("maxFilesPerTrigger", 1).json(str(src))
        .writeStream.format("parquet").option("path", str(base / "out"))
        .option("checkpointLocation", str(base / "ck")).trigger(availableNow=True)
        .queryName(f"files_{uuid.uuid4().hex[:6]}").start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    return base


@pytest.mark.spark
def test_real_spark_checkpoint(cli: Any, journal_url: str, spark_checkpoint: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, journal_url)
    ck = spark_checkpoint / "ck"
    data = json.loads(cli("checkpoint", "inspect", str(ck)).out)
    assert data["last_committed"]["batch_id"] == 1
    assert data["last_committed"]["offsets"] == [{"logOffset": 1}]
    assert data["last_committed"]["starting_offsets"] == {}
    r = cli("checkpoint", "import", str(ck), "--query-name", "files")
    assert r.code == 0 and r.out.startswith("imported 2 batches")
    plan = plan_restart(journal_url, "files")
    assert plan.source(0).kind == "file" and plan.options() == {}
    # Seeding the used checkpoint is refused, and so is writing the same output path.
    r = cli("plan", "files", "--checkpoint", str(ck))
    assert r.code == 1 and "already holds batches up to 1" in r.error_line
    r = cli("plan", "files", "--output-path", str(spark_checkpoint / "out"))
    assert "_spark_metadata" in r.out
    with Journal(journal_url) as journal:
        assert [b.batch_id for b in journal.history("files")] == [0, 1]


# --------------------------------------------------------------------------- the script


def _script() -> str:
    path = Path(sys.executable).parent / "offset-journal"
    if not path.exists():
        pytest.skip("offset-journal console script not installed")
    return str(path)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != ENV_URL}
    env.update(extra)
    return env


def test_console_script_prints_only_json(db: str) -> None:
    done = subprocess.run([_script(), "starting-offsets", "orders"], capture_output=True,
                          text=True, timeout=60, env=_env(**{ENV_URL: db}))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"orders": {"0": 25, "1": 9}}


def test_console_script_errors_are_one_line() -> None:
    done = subprocess.run(
        [_script(), "--database-url", "postgresql://u:pw0rd@127.0.0.1:1/x", "runs"],
        capture_output=True, text=True, timeout=60, env=_env())
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "pw0rd" not in done.stderr
    done = subprocess.run([_script(), "plan", "q", "--batch", "x"], capture_output=True,
                          text=True, timeout=60, env=_env())
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "offset-journal: error: argument --batch: bad batch 'x': use RUN_ID:BATCH_ID, "
        "e.g. 88e2ff94-...-6316fbef529a:41"
    ]


@pytest.fixture(autouse=True)
def _no_url_leak(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test states the URL it uses: none comes from the developer's environment."""
    if os.environ.get(ENV_URL):
        monkeypatch.delenv(ENV_URL)
    yield


def test_the_command_does_not_import_pyspark():
    """Planning a restart needs the journal, not Spark: PySpark's import (about a quarter
    of a second) is paid only by code that attaches the listener."""
    code = ("import sys, offset_journal.cli, offset_journal.restart; "
            "assert 'pyspark' not in sys.modules, 'pyspark imported'; "
            "from offset_journal import attach; assert 'pyspark' in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("version", ["..", "../../escape", "4.2.0/../..", "4.2.0 x", "${x}",
                                     "[4.0,)", ".4", "4..2", "a\nb"])
def test_a_jar_version_that_is_not_a_version_is_one_line_and_writes_nothing(
        version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The version names a directory under the cache and goes to Maven."""
    cache = tmp_path / "cache" / "jars"
    monkeypatch.setenv("OFFSET_JOURNAL_JARS_DIR", str(cache))
    code = main(["jars", "kafka-connector", "--version", version])
    r = Ran(code, *capsys.readouterr())
    assert r.code == 2 and r.out == ""
    assert r.error_line.startswith("offset-journal: error: not a version: ")
    assert list(tmp_path.rglob("*")) == [], "nothing is written anywhere"


def test_a_line_break_in_a_value_never_splits_the_error_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The one error line holds whatever a value holds, escaped."""
    code = main(["history", "q", "--since", "2024x\nforged: line"])
    r = Ran(code, *capsys.readouterr())
    assert r.code == 2 and "2024x\\nforged: line" in r.error_line
