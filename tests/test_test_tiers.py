"""The suite's own tiers (tests/conftest.py): `--quick` keeps the pure core only, and a
full run on a machine without Debian's chromium stops up front with one line instead of
failing the report's test after twenty minutes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_quick_tier_is_the_pure_core() -> None:
    done = _pytest("--quick", "--collect-only", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    files = {i.split("::")[0] for i in ids}
    assert "tests/test_restart.py" in files and "tests/test_audit_core.py" in files
    for real in ("tests/test_e2e.py", "tests/test_broker_scenarios.py", "tests/test_delta.py",
                 "tests/test_kafka_failures.py", "tests/test_services.py"):
        assert real not in files, real
    # and nothing that takes Postgres: the plan's database tests are deselected
    assert not any("test_planner.py::test_batches_another_writer" in i for i in ids)
    assert "deselected" in done.stdout


def test_a_full_run_without_chromium_stops_up_front_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "OFFSET_JOURNAL_CHROMIUM": str(tmp_path / "no-chromium"),
           "PATH": str(Path(sys.executable).parent)}
    done = _pytest("tests/test_report.py", "-q", "-k", "chromium", env=env)
    assert done.returncode == 4, done.stdout + done.stderr
    said = [line for line in (done.stdout + done.stderr).splitlines() if "chromium" in line]
    assert len(said) == 1 and "apt-get install -y chromium" in said[0], said
    assert "passed" not in done.stdout and "Traceback" not in done.stdout + done.stderr
