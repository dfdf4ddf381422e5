"""Every benchmark in bench/ runs (issue 30, item 9): each script, at the tiny size
``bench/run_all.py --tiny`` gives it, exits 0 and prints its tables.

Benchmarks are not tests of the product, but one that the code has moved away from
(restart_planning.py loaded history the way the journal stored it before migration
0013, and starting-offsets found nothing; migration.py expected 0013 to be the head)
fails whoever measures with it next. They run here through run_all.py, against the
session's Postgres (OFFSET_JOURNAL_TEST_ADMIN_URL), as subprocesses, as a person runs
them; the databases they create are dropped after each.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa

from offset_journal.journal.db import resolve_url
from offset_journal.local.services import PostgresServer
from offset_journal.testing import ENV_ADMIN_URL, ENV_BOOTSTRAP

BENCH = Path(__file__).resolve().parents[1] / "bench"
HELPERS = {"_common", "delay_proxy", "run_all"}  # not benchmarks themselves
LIVE_KAFKA = {"check_fleet", "sink_chaos", "restore"}  # they ask a broker
NEEDS = {"stream_overhead": pytest.mark.spark, "fleet_pgbouncer": pytest.mark.pgbouncer,
         "ceiling": pytest.mark.pgbouncer, "savepoint": pytest.mark.spark,
         "sink_chaos": pytest.mark.spark, "restore": pytest.mark.spark,
         "object_store": pytest.mark.spark}
TIMEOUT = {"sink_chaos": 600}  # two driver JVMs, one killed; seconds (300 for the rest)


def _run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run_all", BENCH / "run_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUN_ALL = _run_all()


def test_run_all_has_every_benchmark_at_every_size() -> None:
    scripts = {p.stem for p in BENCH.glob("*.py")} - HELPERS
    assert len(scripts) >= 12, scripts
    for sizes in (RUN_ALL.TINY, RUN_ALL.QUICK, RUN_ALL.FULL):
        assert scripts == {script for script, _ in sizes.values()}, sizes


def _databases(admin_url: str) -> set[str]:
    engine = sa.create_engine(resolve_url(admin_url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        names = conn.execute(sa.text("SELECT datname FROM pg_database")).scalars().all()
    engine.dispose()
    return set(names)


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=NEEDS.get(n, ()))
                                  for n in RUN_ALL.TINY])
def test_each_benchmark_runs_at_a_tiny_size(name: str, journal_server: PostgresServer,
                                            request: pytest.FixtureRequest) -> None:
    before = _databases(journal_server.admin_url)
    env = {**os.environ, ENV_ADMIN_URL: journal_server.admin_url}
    if name in LIVE_KAFKA:  # the session's broker, not one more of its own
        env[ENV_BOOTSTRAP] = request.getfixturevalue("kafka_cluster").bootstrap_servers
    try:
        done = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "--tiny", "--only",
                               name], capture_output=True, text=True, env=env,
                              timeout=TIMEOUT.get(name, 300), check=False)
    finally:
        for database in _databases(journal_server.admin_url) - before:
            journal_server.drop_database(journal_server.url_for(database))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"== {name}: exit 0" in done.stderr and "Traceback" not in done.stderr, done.stderr
    # Its figures: a markdown table with a row of numbers under its header.
    assert re.search(r"^\|---.*\n\|[^\n]*\d", done.stdout, re.M), done.stdout[-3000:]
