"""The suite's own tiers (tests/conftest.py): `--quick` keeps the pure core only, and a
full run on a machine without Debian's chromium or pgbouncer stops up front with one
line instead of failing their tests after twenty minutes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pytest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_quick_tier_is_the_pure_core() -> None:
    done = _pytest("--quick", "--collect-only", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    files = {i.split("::")[0] for i in ids}
    assert "tests/restart/test_restart.py" in files and "tests/audit/test_audit_core.py" in files
    for real in ("tests/jobs/test_e2e.py", "tests/kafka/test_broker_scenarios.py",
                 "tests/restart/test_delta.py",
                 "tests/kafka/test_kafka_failures.py", "tests/local/test_services.py",
                 "tests/journal/test_search_path.py"):
        assert real not in files, real
    # and nothing that takes Postgres: the plan's database tests are deselected
    assert not any("test_planner.py::test_batches_another_writer" in i for i in ids)
    assert "deselected" in done.stdout


@pytest.mark.parametrize(("package", "test"), [("chromium", "tests/report/test_report.py"),
                                                ("pgbouncer", "tests/capture/test_pgbouncer.py")])
def test_a_full_run_without_a_debian_package_stops_up_front_in_one_line(
        tmp_path: Path, package: str, test: str) -> None:
    env = {**os.environ, f"OFFSET_JOURNAL_{package.upper()}": str(tmp_path / "absent"),
           "PATH": str(Path(sys.executable).parent)}
    done = _pytest(test, "-q", "-k", "chromium" if package == "chromium" else "", env=env)
    assert done.returncode == 4, done.stdout + done.stderr
    said = [line for line in (done.stdout + done.stderr).splitlines() if package in line]
    assert len(said) == 1 and f"apt-get install -y {package}" in said[0], said
    assert "passed" not in done.stdout and "Traceback" not in done.stdout + done.stderr
