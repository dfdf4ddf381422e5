"""docs/restarts.md's restore section, followed as a newcomer would: its v2 file as the
page shows it, its shell blocks line by line in bash (each command a process of its
own: the console script, ``spark-submit``), against the real parts (Kafka, Postgres,
Spark with its Kafka connector). Only the page's placeholders are pointed at the test's
(the journal's URL, the broker, the topic, /chk, /savepoints, /lake); v1 ran journaled
beforehand, as the section begins. The page cannot drift from what works."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from offset_journal import Journal
from tests import restore_support as rs
from tests.jobs_support import SHORT_LIVED_DRIVER

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RESTARTS = Path(__file__).resolve().parents[2] / "docs" / "restarts.md"
SECTION = "### Restore a savepoint into the new checkpoint (the JVM path)\n"
URL = "postgresql://journal@db.example/offsets"
V2_RUNS_S = 300


def section() -> str:
    text = RESTARTS.read_text(encoding="utf-8")
    start = text.index(SECTION)
    return text[start:text.index("\n### ", start)]


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", section(), flags=re.S)


def commands(block: str) -> list[str]:
    """The block's commands, continuation lines joined, comments left out."""
    joined = block.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_section_shows_the_command_line_flow() -> None:
    flow = [c.split()[:3] for c in commands(blocks("bash")[0])]
    assert flow == [["export", f"OFFSET_JOURNAL_DATABASE_URL={URL}"],
                    ["offset-journal", "savepoint", "create"],
                    ["offset-journal", "plan", "totals"],
                    ["offset-journal", "state", "restore"],
                    ["spark-submit", "--jars", '"$(offset-journal']]
    assert [b.splitlines()[0] for b in blocks("python")] == ["# totals_v2.py"]


class Shell:
    """The page's commands, run as written with its placeholders pointed here."""

    def __init__(self, tmp_path: Path, swap: dict[str, str]) -> None:
        self.tmp_path, self.swap, self.exports = tmp_path, swap, ""
        conf = tmp_path / "spark-conf"  # no UI port opened, the driver on loopback
        conf.mkdir()
        (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        self.env = {**SHORT_LIVED_DRIVER,
                    **{k: v for k, v in os.environ.items()
                       if k != "OFFSET_JOURNAL_DATABASE_URL"},
                    "PATH": path, "PYSPARK_PYTHON": sys.executable,
                    "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_CONF_DIR": str(conf)}

    def local(self, text: str) -> str:
        for placeholder, here in self.swap.items():
            text = text.replace(placeholder, here)
        return text

    def script(self, command: str) -> str:
        return f"set -eu\n{self.exports}{self.local(command)}"

    def run(self, command: str) -> str:
        """One command; its stdout (it must succeed). An ``export`` holds for the next."""
        if command.startswith("export "):
            self.exports += self.local(command) + "\n"
            return ""
        done = subprocess.run(["bash", "-c", self.script(command)], cwd=self.tmp_path,
                              env=self.env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
        return done.stdout

    def deploy(self, command: str, ready: Callable[[], bool]) -> None:
        """A job that runs until stopped: started, left until ``ready()`` (checked each
        second), then stopped."""
        log = self.tmp_path / "v2.log"
        proc = subprocess.Popen(["bash", "-c", self.script(f"exec {command}")],
                                cwd=self.tmp_path, env=self.env, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            for _ in range(V2_RUNS_S):
                if ready():
                    break
                try:
                    code = proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    continue
                pytest.fail(f"v2 ended ({code}) before it was ready: {log.read_text()[-3000:]}")
            else:
                pytest.fail(f"v2 not ready within {V2_RUNS_S} s: {log.read_text()[-3000:]}")
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)


def test_the_sections_flow_restores_and_v2_reads_on(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    """v1 (RocksDB, 2 partitions) journaled, records arriving while nothing runs; then
    the page's blocks: savepoint, preview, restore into 8 partitions, v2 deployed. v2's
    state is every key's totals over all records, in 8 partitions; its first batch is 1,
    from the savepoint's end, its output there the totals; v2 journaled its batch; the
    repartition block repartitions v1's checkpoint."""
    from offset_journal.checkpoint import read_checkpoint
    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER, session_conf

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    shell = Shell(tmp_path, {URL: journal_url, "kafka:9092": servers,
                             '"orders"': f'"{kafka_topic}"', "/chk/": f"{tmp_path}/chk/",
                             "/savepoints/": f"{tmp_path}/savepoints/",
                             "/lake/": f"{tmp_path}/lake/"})
    for placeholder in shell.swap:
        assert placeholder in section(), placeholder
    (v2_file,) = blocks("python")
    (tmp_path / "totals_v2.py").write_text(shell.local(v2_file))

    produced = kafka_cluster.produce(kafka_topic, 60, value=rs.amounts)
    with session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER):
        rs.run(rs.totals(rs.events(spark, servers, kafka_topic)).writeStream
               .outputMode("update").format("noop"), "totals", tmp_path / "chk" / "totals-v1",
               listener)
    produced += kafka_cluster.produce(kafka_topic, 25, start=60,
                                      value=lambda i: rs.amounts(i) if i % 5 else f"g9,{i}")

    v2_ck = tmp_path / "chk" / "totals-v2"

    def v2_journaled_batch_1() -> bool:
        """v2's batch 1 committed and journaled (by the listener v2 attaches)."""
        if not (v2_ck / "commits" / "1").exists():
            return False
        v2_id = read_checkpoint(str(v2_ck)).query_id
        with Journal(journal_url) as journal:
            runs = {r.run_id for r in journal.runs("totals") if r.query_id == v2_id}
            return any(b.batch_id == 1 and b.run_id in runs
                       for b in journal.history("totals"))

    said = []
    for command in commands(blocks("bash")[0]):
        if command.startswith("spark-submit"):
            shell.deploy(command, ready=v2_journaled_batch_1)
        else:
            said.append(shell.run(command))
    _, made, preview, restored = said
    assert "savepoint 1 of query 'totals'" in made
    assert "restored" in preview, preview
    assert "operator 0 (aggregation): restored (typed)" in restored, restored
    assert "recorded as plan" in restored, restored
    rs.check_upgraded_totals(spark, produced, v2_ck, tmp_path / "lake" / "totals-v2", 60)

    (scale,) = commands(blocks("bash")[1])
    out = shell.run(scale)
    assert "2 -> 16 partitions" in out and "journaled as decision" in out, out

