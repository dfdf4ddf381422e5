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


def read_parquet_outputs(spark: Any, base: Path, columns: list[str]) -> list[tuple]:
    """Rows of every per-checkpoint output directory under ``base``, each read through its
    own ``_spark_metadata`` log (files of uncommitted batches are not read)."""
    rows: list[tuple] = []
    for sub in sorted(p for p in base.iterdir() if p.is_dir()):
        df = spark.read.parquet(str(sub))
        rows += [tuple(r) for r in df.select(*columns).collect()]
    return rows
