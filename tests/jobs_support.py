"""Helpers for end-to-end tests of the jobs in jobs/."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

JOBS = Path(__file__).resolve().parents[1] / "jobs"


def load_job(name: str) -> Any:
    if str(JOBS) not in sys.path:
        sys.path.insert(0, str(JOBS))
    return importlib.import_module(name)


def run_to_end(spark: Any, listener: Any, module: Any, argv: list[str]) -> Any:
    """Run a job's query in this process until it ends (``--trigger available-now``), and
    wait until the listener has journaled its end."""
    args = module.parser().parse_args(argv)
    q = module.build_query(spark, args)
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)
    return q


def read_parquet_outputs(spark: Any, base: Path, columns: list[str]) -> list[tuple]:
    """Rows of every per-checkpoint output directory under ``base``, each read through its
    own ``_spark_metadata`` log (files of uncommitted batches are not read)."""
    rows: list[tuple] = []
    for sub in sorted(p for p in base.iterdir() if p.is_dir()):
        df = spark.read.parquet(str(sub))
        rows += [tuple(r) for r in df.select(*columns).collect()]
    return rows


def start_driver(job: str, argv: list[str], log: Path) -> Any:
    """Start a job as its own driver process (Python and its JVM in a new session, so
    that ``os.killpg(proc.pid, SIGKILL)`` kills the whole driver)."""
    import os
    import subprocess

    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.Popen([sys.executable, str(JOBS / f"{job}.py"), *argv], env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
