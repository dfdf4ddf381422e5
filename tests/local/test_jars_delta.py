"""Delta Lake's jars for spark.jars: resolved by Maven from jvm/delta (never Spark's Ivy
--packages), at the installed delta-spark's version, without second copies of what
PySpark ships; an unknown version is one line naming the coordinate."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest

from offset_journal.cli import main
from offset_journal.local.jars import _artifact, spark_binary_version, spark_jars_dir

# Starts a broker, a Postgres or Maven of its own: not in the quick tier.
pytestmark = pytest.mark.services

DELTA = version("delta-spark")


def test_delta_jars_match_the_installed_delta_spark_and_leave_out_what_spark_ships(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jars", "delta", "--format", "list"]) == 0
    paths = [Path(line) for line in capsys.readouterr().out.split()]
    names = {p.name for p in paths}
    assert all(p.is_file() for p in paths)
    assert f"delta-spark_{spark_binary_version()}_2.13-{DELTA}.jar" in names
    assert f"delta-storage-{DELTA}.jar" in names
    shipped = {_artifact(p.name): p.name for p in spark_jars_dir().glob("*.jar")}
    assert not {_artifact(n) for n in names} & set(shipped), "a jar PySpark already has"
    # Spark ships jcl-over-slf4j (the same classes as commons-logging)
    assert not any(n.startswith("commons-logging") for n in names)
    # the one Jackson module Delta adds is at the version of Spark's own Jackson
    databind = shipped["jackson-databind"].removeprefix("jackson-databind-")
    assert f"jackson-datatype-jdk8-{databind}" in names

    assert main(["jars", "delta", "--packages"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"io.delta:delta-spark_{spark_binary_version()}_2.13:{DELTA}")


def test_delta_jars_of_an_unknown_version_is_one_line_naming_the_coordinate(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFSET_JOURNAL_JARS_DIR", str(tmp_path / "jars"))
    code = main(["jars", "delta", "--version", "9.9.9"])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code != 0 and out == "" and len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith(
        "offset-journal: error: cannot fetch Delta Lake "
        f"io.delta:delta-spark_{spark_binary_version()}_2.13:9.9.9: Maven could not resolve")
    assert not list((tmp_path / "jars").glob("delta-9.9.9*/*.jar"))
