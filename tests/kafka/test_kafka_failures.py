"""Bad input and failure on the JVM parts: the connector's jars missing or of another
Spark version, and a Kafka broker that cannot start. Each fails fast, in one line naming
what to use (jars) or with the broker's own last lines (broker), never a hang."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offset_journal.cli import main
from offset_journal.local.jars import (
    JarsError,
    check_connector_matches,
    connector_coordinate,
    connector_note,
    installed_scala_binary,
    installed_spark_version,
)
from offset_journal.local.kafka import BrokerStartError, start_local_kafka
from tests.jobs_support import JOBS, load_job

# Starts a broker, a Postgres or Maven of its own: not in the quick tier.
pytestmark = pytest.mark.services

SPARK = installed_spark_version()
SCALA = installed_scala_binary()  # 2.12 for PySpark 3.5's jars, 2.13 from 4.0
OTHER_SCALA = "2.13" if SCALA == "2.12" else "2.12"
EXPECTED = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{SPARK}"


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_connector_of_an_unknown_version_is_one_line_naming_the_coordinate(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Maven Central really has no 9.9.9: the error says so and names what to use."""
    monkeypatch.setenv("OFFSET_JOURNAL_JARS_DIR", str(tmp_path / "jars"))
    code = main(["jars", "kafka-connector", "--version", "9.9.9"])
    out, err = capsys.readouterr()
    line = _one_error_line(err)
    assert code != 0 and out == ""
    assert line.startswith("offset-journal: error: cannot fetch Spark's Kafka connector "
                           "org.apache.spark:spark-sql-kafka-0-10_2.13:9.9.9")
    assert "--packages org.apache.spark:spark-sql-kafka-0-10_2.13:9.9.9" in line
    # nothing half-fetched is left to be taken for a complete set later
    assert not list((tmp_path / "jars").glob("kafka-connector-9.9.9*/*.jar"))


@pytest.mark.compat
def test_the_connector_is_for_the_scala_of_pysparks_own_jars(
        capsys: pytest.CaptureFixture[str]) -> None:
    """PySpark's wheels run Scala 2.12 for 3.5 and 2.13 from 4.0: a connector for the
    other Scala fails in Spark with ClassNotFoundException (scala.$less$colon$less)."""
    assert SCALA == ("2.12" if SPARK.startswith("3.") else "2.13")
    assert main(["jars", "kafka-connector", "--packages"]) == 0
    assert capsys.readouterr().out.strip() == EXPECTED


@pytest.mark.compat
def test_another_patch_of_the_connector_is_the_users_choice_said_and_of_this_minor_only(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry lacks a patch release: the error names the artifact missing in full
    and how to choose another patch; chosen, it is used everywhere the connector goes and
    said; another minor is refused."""
    monkeypatch.setenv("OFFSET_JOURNAL_JARS_DIR", str(tmp_path / "jars"))
    minor = ".".join(SPARK.split(".")[:2])
    missing = f"{minor}.99"  # no registry has it: what a lacking mirror looks like
    monkeypatch.setenv("OFFSET_JOURNAL_CONNECTOR_VERSION", missing)
    code = main(["jars", "kafka-connector"])
    out, err = capsys.readouterr()
    line = _one_error_line(err)
    assert code != 0 and out == ""
    coordinate = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{missing}"
    assert f"Maven could not resolve it ({coordinate} cannot be had: " in line, line
    assert (f"to use the connector of another Spark {minor}.x release (your choice, none is "
            f"picked for you), set OFFSET_JOURNAL_CONNECTOR_VERSION={minor}.<patch>") in line
    assert main(["jars", "kafka-connector", "--packages"]) == 0  # fetches nothing
    assert capsys.readouterr().out.strip() == coordinate
    # the jobs' check of a submitted jar follows the choice
    check_connector_matches(SPARK, [f"/x/spark-sql-kafka-0-10_{SCALA}-{missing}.jar"])
    with pytest.raises(JarsError, match=f"expected {re.escape(coordinate)}$"):
        check_connector_matches(SPARK, [f"/x/spark-sql-kafka-0-10_{SCALA}-{SPARK}.jar"])
    assert connector_note() == (
        f"Spark's Kafka connector {missing} for PySpark {SPARK}: another patch release, as "
        "OFFSET_JOURNAL_CONNECTOR_VERSION or --version chose")

    monkeypatch.setenv("OFFSET_JOURNAL_CONNECTOR_VERSION", "9.9.0")
    code = main(["jars", "kafka-connector", "--packages"])
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert _one_error_line(err) == (
        f"offset-journal: error: OFFSET_JOURNAL_CONNECTOR_VERSION=9.9.0 is not a Spark {minor}.x "
        f"release, and PySpark here is {SPARK}: the Kafka connector must be of Spark's own "
        f"minor (unset it, or give a {minor}.x release)")
    assert not list((tmp_path / "jars").glob("kafka-connector-*/*.jar"))


def test_connector_without_maven_is_one_line_naming_the_coordinate(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFSET_JOURNAL_JARS_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    code = main(["jars", "kafka-connector"])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2
    assert "Maven (mvn) is not installed" in line
    assert f"--packages {EXPECTED}" in line


def test_connector_jar_of_another_spark_is_refused_with_the_expected_coordinate() -> None:
    other = f"/opt/jars/spark-sql-kafka-0-10_2.13-{'3.5.1' if SPARK != '3.5.1' else '4.0.0'}.jar"
    with pytest.raises(JarsError) as err:
        check_connector_matches(SPARK, ["/opt/jars/kafka-clients-3.9.0.jar", other])
    assert str(err.value).endswith(f"expected {EXPECTED}")
    # this Spark's version built for the other Scala: ClassNotFoundException at run time
    with pytest.raises(JarsError, match=f"does not match Spark {SPARK}: expected {EXPECTED}$"):
        check_connector_matches(SPARK, [f"/x/spark-sql-kafka-0-10_{OTHER_SCALA}-{SPARK}.jar"])
    with pytest.raises(JarsError, match=f"not on spark.jars: expected {EXPECTED}$"):
        check_connector_matches(SPARK, ["/opt/jars/kafka-clients-3.9.0.jar"])
    check_connector_matches(SPARK, [f"file:/x/spark-sql-kafka-0-10_{SCALA}-{SPARK}.jar"])
    assert connector_coordinate(SPARK) == EXPECTED


def test_packages_coordinate_of_another_spark_is_refused() -> None:
    common = load_job("_common")
    with pytest.raises(JarsError) as err:
        common._check_package(SPARK, ["org.apache.spark:spark-sql-kafka-0-10_2.13:3.5.1"])
    assert str(err.value) == (
        "--packages org.apache.spark:spark-sql-kafka-0-10_2.13:3.5.1 does not match Spark "
        f"{SPARK}: expected {EXPECTED}")
    common._check_package(SPARK, [EXPECTED, "org.postgresql:postgresql:42.7.4"])


@pytest.mark.spark
def test_job_given_a_connector_jar_of_another_spark_refuses_in_one_line(tmp_path: Path) -> None:
    """What a user hits: spark-submit --jars (here PYSPARK_SUBMIT_ARGS, which is how
    spark-submit passes them to a Python driver) with the connector of another Spark
    version. The job stops before its query starts, in one line naming the coordinate it
    needs, not with a NoSuchMethodError from an executor later."""
    jar = tmp_path / "spark-sql-kafka-0-10_2.13-3.5.1.jar"
    jar.write_bytes(b"")  # never opened: refused on its name
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
               PYSPARK_SUBMIT_ARGS=f"--jars {jar} pyspark-shell")
    done = subprocess.run(
        [sys.executable, str(JOBS / "kafka_to_sink.py"), "--bootstrap-servers", "127.0.0.1:1",
         "--topics", "t", "--query-name", "q", "--checkpoint", str(tmp_path / "ck"),
         "--output", str(tmp_path / "out"), "--database-url", "postgresql://unused/x"],
        env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("kafka_to_sink: error:")]
    assert errors == [
        "kafka_to_sink: error: Spark's Kafka connector spark-sql-kafka-0-10_2.13-3.5.1.jar "
        f"does not match Spark {SPARK}: expected {EXPECTED}"], done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "ck").exists()  # no query was started


# --------------------------------------------------------------------------- the broker


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another process listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _temp_kafka_dirs() -> set[str]:
    import tempfile

    return {p.name for p in Path(tempfile.gettempdir()).glob("oj-kafka-*")}


def _start_fails(**kwargs: Any) -> tuple[str, float]:
    before = _temp_kafka_dirs()
    t0 = time.monotonic()
    with pytest.raises(BrokerStartError) as err:
        start_local_kafka(timeout=60, **kwargs)
    elapsed = time.monotonic() - t0
    assert _temp_kafka_dirs() <= before, "the failed broker's data directory was left behind"
    return str(err.value), elapsed


def test_broker_port_in_use_fails_fast_with_the_brokers_own_lines(held_port: int) -> None:
    message, elapsed = _start_fails(port=held_port)
    assert elapsed < 45, f"took {elapsed:.0f} s: the broker's death was not noticed"
    assert message.startswith("the Kafka broker exited during start; its last lines:")
    # the broker's own log, through its logging binding (not SLF4J's "no binding" lines),
    # with the error and its cause in view rather than pushed out by stack frames
    assert f"Socket server failed to bind to 127.0.0.1:{held_port}: Address already in use" \
        in message
    assert "(kafka.server.BrokerServer)" in message
    assert "\tat " not in message and "StaticLoggerBinder" not in message


def test_broker_with_too_little_memory_fails_fast_with_the_jvms_lines() -> None:
    message, elapsed = _start_fails(heap="2m")
    assert elapsed < 45
    assert "the Kafka broker exited during start" in message
    assert "Error occurred during initialization of VM" in message


@pytest.mark.spark
@pytest.mark.parametrize("with_connector", [False, True])
def test_job_under_spark_submit_needs_the_connector_on_the_drivers_class_path(
        with_connector: bool, tmp_path: Path) -> None:
    """Under spark-submit the driver's JVM runs before the job's code: jars the job
    added then would miss the driver's class path. Without the connector the job says
    what to submit with, in one line; with ``--jars`` of the right connector it goes on
    (and here stops at the next thing, a journal that cannot be reached)."""
    import pyspark

    from offset_journal.local.jars import spark_jars_value

    submit = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
    jars = ["--jars", spark_jars_value()] if with_connector else []
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run(
        [str(submit), "--master", "local[1]", *jars, str(JOBS / "kafka_to_sink.py"),
         "--bootstrap-servers", "127.0.0.1:1", "--topics", "t", "--query-name", "q",
         "--checkpoint", str(tmp_path / "ck"), "--output", str(tmp_path / "out"),
         "--from-journal", "--database-url", "postgresql://nobody@127.0.0.1:1/x"],
        env=env, capture_output=True, text=True, timeout=180)
    # spark-submit passes the Python driver's stderr on to its own stdout
    output = done.stdout + done.stderr
    errors = [ln for ln in output.splitlines() if ln.startswith("kafka_to_sink: error:")]
    assert done.returncode == 2 and len(errors) == 1, output[-3000:]
    assert "Traceback" not in output
    if with_connector:
        assert "Kafka connector" not in errors[0]  # past the connector check
    else:
        assert errors[0] == (
            "kafka_to_sink: error: Spark's Kafka connector is not on the driver's class path: "
            f"spark-submit --packages {EXPECTED} (or --jars with the output of: "
            "offset-journal jars kafka-connector)")
