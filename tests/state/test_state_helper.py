"""The state-restore helper the package ships (offset_journal/_jars): the committed jar is
the one its sources compile to against the installed PySpark's jars, the command prints
it without Maven, the JVM it runs in is checked before anything is written, and a
restore on a multi-process Spark (executors in JVMs of their own, no Maven on the PATH)
writes every key's state through it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from offset_journal.errors import JarsError, RestoreError
from offset_journal.local import helper_jar as hj
from offset_journal.local.jars import installed_scala_binary, spark_jars_dir
from offset_journal.spark_version import DATABRICKS_CONF, parse, spec
from tests import restore_support as rs

MASTER = "local-cluster[2,1,1024]"
RUNNING = parse(__import__("pyspark").__version__)


def _shipped() -> Path:
    return hj.SHIPPED_DIR / hj.jar_name(RUNNING.line)


def test_every_minor_the_restore_runs_on_has_a_jar_built_from_these_sources() -> None:
    """Each shipped jar's manifest names the digest of the sources in the repository: a
    source changed without the jar rebuilt (scripts/build-state-restore.py) fails here."""
    assert set(spec("state-restore").only) <= set(hj.shipped_lines())
    for line in hj.shipped_lines():
        manifest = hj.read_manifest(hj.SHIPPED_DIR / hj.jar_name(line))
        assert manifest["Spark-Line"] == f"{line[0]}.{line[1]}"
        assert manifest["Source-SHA-256"] == hj.source_digest(line), (
            f"the shipped helper for Spark {line[0]}.{line[1]} was not built from these "
            "sources: run scripts/build-state-restore.py with that Spark's venv")


def test_the_minors_the_helper_is_built_for_are_the_ones_the_gate_lets_run(tmp_path) -> None:
    """One list of minors, spark_version's: the sources have a part for exactly those, each
    part's SparkLine names its own minor, and the build refuses any other before javac."""
    proven = spec("state-restore").only
    assert hj.source_lines() == proven
    for line in proven:
        java = hj.sources_dir() / f"spark-{line[0]}.{line[1]}" / "java" / "io" / \
            "offsetjournal" / "state" / "SparkLine.java"
        assert f'LINE = "{line[0]}.{line[1]}";' in java.read_text()
    (tmp_path / "spark-core_2.13-4.1.0.jar").write_bytes(b"")
    with pytest.raises(JarsError, match="proven on Spark 4.2, 4.3, not 4.1"):
        hj.build(tmp_path, tmp_path / "out", javac="/no/such/javac")


def test_a_rebuild_against_the_installed_pyspark_equals_the_shipped_jar(tmp_path) -> None:
    """javac against this PySpark's own jars (no Maven) gives the committed classes byte
    for byte, and the list of Spark classes the probe loads."""
    if RUNNING.line not in hj.shipped_lines():
        pytest.fail(f"no shipped helper for the installed Spark {RUNNING.raw}")
    rebuilt = hj.build(spark_jars_dir(), tmp_path)
    shipped = hj.read_manifest(_shipped())
    assert hj.read_manifest(rebuilt)["Source-SHA-256"] == shipped["Source-SHA-256"]
    assert hj.class_files(rebuilt) == hj.class_files(_shipped()), (
        f"rebuilt with javac {hj.javac_version(hj.find_javac())}, shipped with "
        f"{shipped['Javac']}: commit the rebuilt jar")


def _no_build_tools(tmp_path: Path) -> str:
    """A PATH with every program of this one but Maven and javac: what a cluster's
    driver has."""
    bin_dir = tmp_path / "bin-without-maven"
    bin_dir.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not Path(directory).is_dir():
            continue
        for tool in Path(directory).iterdir():
            link = bin_dir / tool.name
            if tool.name in ("mvn", "mvnDebug", "javac") or link.exists() or link.is_symlink():
                continue
            link.symlink_to(tool)
    path = f"{Path(sys.executable).parent}{os.pathsep}{bin_dir}"
    assert not any(Path(d, t).exists() for d in path.split(os.pathsep)
                   for t in ("mvn", "javac"))
    return path


def test_jars_state_restore_prints_the_shipped_jar_without_maven(capsys, monkeypatch,
                                                                 tmp_path) -> None:
    monkeypatch.setenv("PATH", _no_build_tools(tmp_path))
    code, out, err = rs.cli(capsys, "jars", "state-restore")
    assert (code, err) == (0, "")
    assert out.strip() == str(_shipped())
    code, out, _err = rs.cli(capsys, "jars", "state-restore", "--version",
                             f"{RUNNING.major}.{RUNNING.minor}.9-amzn-1")
    assert (code, out.strip()) == (0, str(_shipped()))  # any patch, a vendor's build
    code, out, err = rs.cli(capsys, "jars", "state-restore", "--version", "4.1.1")
    assert code != 0 and out == ""
    assert err.startswith("offset-journal: error: no state-restore helper for Spark 4.1.1: "
                          "state restore") and err.count("\n") == 1, err
    assert "needs Spark 4.2 or 4.3 (any 4.2.x, 4.3.x)" in err


def test_the_probe_names_a_spark_class_this_jvm_lacks(tmp_path) -> None:
    """Every Spark class the helper's classes name loads on the installed Spark; a JVM
    that lacks one (a vendor's fork) gets its name, from the jar's own list."""
    import zipfile

    java = str(Path(os.environ["JAVA_HOME"], "bin", "java")) if "JAVA_HOME" in os.environ \
        else "java"
    cp = f"{{}}{os.pathsep}{spark_jars_dir() / '*'}"
    probe = "io.offsetjournal.state.Probe"
    done = subprocess.run([java, "-cp", cp.format(_shipped()), probe], capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    with zipfile.ZipFile(_shipped()) as zf:
        listed = zf.read(hj.CLASS_LIST).decode().split()
    assert "org.apache.spark.sql.execution.streaming.checkpointing.CommitLog" in listed
    fork = tmp_path / "fork.jar"
    entries = hj.class_files(_shipped())
    entries[hj.CLASS_LIST] = ("org.apache.spark.sql.execution.streaming.state.StateRewriter2\n"
                              + "\n".join(listed) + "\n").encode()
    hj.write_jar(fork, hj.read_manifest(_shipped()), entries)
    done = subprocess.run([java, "-cp", cp.format(fork), probe], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert done.stdout.strip() == "org.apache.spark.sql.execution.streaming.state.StateRewriter2"


@pytest.mark.spark
def test_databricks_runtime_is_refused_in_one_line_before_anything_is_written(
        spark, monkeypatch, tmp_path) -> None:
    """Databricks Runtime's Spark reports an Apache version, but its internals are its
    own: its setting (or its driver's environment) refuses the restore before the
    savepoint is read or the new checkpoint made."""
    from offset_journal.state import restore_savepoint

    new_ck = tmp_path / "ck-v2"
    spark.conf.set(DATABRICKS_CONF, "17.3.x-scala2.13")
    try:
        with pytest.raises(RestoreError) as err:
            restore_savepoint(spark, str(tmp_path / "no-savepoint"), str(new_ck),
                              lambda: pytest.fail("the new query was built"))
    finally:
        spark.conf.unset(DATABRICKS_CONF)
    text = str(err.value)
    assert text.startswith("state restore (a savepoint written into a new checkpoint) calls "
                           "Apache Spark's internal classes") and "\n" not in text, text
    assert f"Databricks Runtime 17.3.x-scala2.13 builds its Spark {spark.version}" in text
    assert "instead, seed the new query in Python from a savepoint (initial_state)" in text
    assert not new_ck.exists()
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "18.0")
    with pytest.raises(RestoreError, match="Databricks Runtime 18.0 builds"):
        restore_savepoint(spark, str(tmp_path / "no-savepoint"), str(new_ck),
                          lambda: pytest.fail("the new query was built"))
    assert not new_ck.exists()


V2 = '''
from pyspark.sql import functions as F


def v2(spark, checkpoint, starting_offsets):
    values = F.split(F.col("value").cast("string"), ",")
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "{servers}")
              .option("subscribe", "{topic}").option("startingOffsets", starting_offsets[0])
              .load().select(values[0].alias("grp"), values[1].cast("long").alias("amount")))
    return (events.groupBy("grp").agg(F.count("*").alias("n"), F.max("amount").alias("mx"),
                                      F.sum("amount").alias("total"))
            .writeStream.outputMode("update").format("noop").queryName("totals")
            .option("checkpointLocation", checkpoint))
'''


@pytest.mark.spark
@pytest.mark.slow
def test_restore_on_local_cluster_without_maven_writes_every_keys_state(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, capsys, tmp_path) -> None:
    """v1 journaled and savepointed here; then ``state restore --master local-cluster``
    in a process of its own whose PATH has no Maven and no javac: its executors (JVMs of
    their own) fetch the shipped helper through spark.jars and run its tasks; the new
    checkpoint's state is every key's totals, in 4 partitions."""
    from tests.capture.test_multiprocess import _executor_logs, spark_home

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    produced = kafka_cluster.produce(kafka_topic, 60, value=rs.amounts)
    rs.run(rs.totals(rs.events(spark, servers, kafka_topic)).writeStream
           .outputMode("update").format("noop"), "totals", tmp_path / "ck-v1", listener)
    code, out, err = rs.cli(capsys, "savepoint", "create", "totals", "--checkpoint",
                            str(tmp_path / "ck-v1"), "--to", str(tmp_path / "sp"),
                            "--database-url", journal_url)
    assert code == 0, err
    (tmp_path / "totals_v2.py").write_text(V2.format(servers=servers, topic=kafka_topic))
    home = spark_home(tmp_path)
    env = {**os.environ, "PATH": _no_build_tools(tmp_path), "SPARK_HOME": str(home),
           "SPARK_SCALA_VERSION": installed_scala_binary(), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    v2_ck = tmp_path / "ck-v2"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "offset-journal"), "state", "restore", "1",
         "--to", str(v2_ck), "--query", "totals_v2.py:v2", "--partitions", "4",
         "--bootstrap-servers", servers, "--master", MASTER, "--database-url", journal_url],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "operator 0 (aggregation): restored (typed)" in done.stdout, done.stdout

    worked = [t for t in _executor_logs(home) if "Running task" in t]
    assert len(worked) == 2, f"expected 2 executors that ran tasks, found {len(worked)}"
    for text in worked:  # each fetched the helper from the driver, not from a class path
        assert any("Fetching spark://" in ln and _shipped().name in ln
                   for ln in text.splitlines()), text[-3000:]
    state = rs.state(spark, v2_ck)
    assert {r.key.grp: tuple(r.value) for r in state} == rs.reference(produced)
    (meta,) = spark.read.format("state-metadata").load(str(v2_ck)).collect()
    assert meta.numPartitions == 4
