"""Every benchmark in bench/ runs: each script, at the tiny size
``bench/run_all.py --tiny`` gives it, exits 0 and prints its tables.

Benchmarks are not tests of the product, but one that the code has moved away from
(restart_planning.py loaded history the way the journal stored it before migration
0013, and starting-offsets found nothing; migration.py expected 0013 to be the head)
fails whoever measures with it next. They run here through run_all.py, against the
session's Postgres (OFFSET_JOURNAL_TEST_ADMIN_URL), as subprocesses, as a person runs
them, two at a time from one runner; the databases they create are dropped after.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sqlalchemy as sa

from offset_journal.journal.db import resolve_url
from offset_journal.local.services import PostgresServer
from offset_journal.testing import ENV_ADMIN_URL, ENV_BOOTSTRAP
from tests.jobs_support import SHORT_LIVED_DRIVER

BENCH = Path(__file__).resolve().parents[2] / "bench"
HELPERS = {"_common", "delay_proxy", "run_all"}  # not benchmarks themselves
LIVE_KAFKA = {"check_fleet", "sink_chaos", "restore", "recovery"}  # they ask a broker
NEEDS = {"stream_overhead": pytest.mark.spark, "fleet_pgbouncer": pytest.mark.pgbouncer,
         "ceiling": pytest.mark.pgbouncer, "savepoint": pytest.mark.spark,
         "savepoint_schedule": pytest.mark.spark,
         "sink_chaos": pytest.mark.spark, "restore": pytest.mark.spark,
         "object_store": pytest.mark.spark, "recovery": pytest.mark.spark}
TIMEOUT = 600  # seconds, for any one script (sink_chaos: two driver JVMs, one killed)


def _run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run_all", BENCH / "run_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up by name
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


SLOWEST_FIRST = ["sink_chaos", "object_store", "restore", "recovery", "savepoint",
                 "savepoint_schedule", "db_failover", "stream_overhead", "fleet_pgbouncer",
                 "fleet", "ceiling"]
"""Started first, so that two at a time end close together (the rest take seconds)."""


def _selected(session: pytest.Session) -> list[str]:
    """The benchmarks whose test this session runs (a tier or -k may leave some out)."""
    names = [item.callspec.params["name"] for item in session.items
             if getattr(item, "originalname", "") == "test_each_benchmark_runs_at_a_tiny_size"]
    return sorted(names, key=lambda n: SLOWEST_FIRST.index(n) if n in SLOWEST_FIRST
                  else len(SLOWEST_FIRST))


@pytest.fixture(scope="module")
def tiny_runs(journal_server: PostgresServer,
              request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every selected benchmark run once at its tiny size, through run_all's own runner
    in this process, two scripts at a time (each still a subprocess, as a person runs
    it; the Spark ones wait on their JVM's start, the others mostly on sleeps and
    servers). The databases they create are dropped after."""
    names = _selected(request.session)
    before = _databases(journal_server.admin_url)
    env = {**SHORT_LIVED_DRIVER, **os.environ, ENV_ADMIN_URL: journal_server.admin_url}
    if LIVE_KAFKA & set(names):  # the session's broker, not one more of its own
        env[ENV_BOOTSTRAP] = request.getfixturevalue("kafka_cluster").bootstrap_servers
    try:
        outcomes = RUN_ALL.run_many(names, RUN_ALL.TINY, jobs=2, env=env, timeout=TIMEOUT)
    finally:
        for database in _databases(journal_server.admin_url) - before:
            journal_server.drop_database(journal_server.url_for(database))
    return {o.name: o for o in outcomes}


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=NEEDS.get(n, ()))
                                  for n in RUN_ALL.TINY])
def test_each_benchmark_runs_at_a_tiny_size(name: str, tiny_runs: dict[str, Any]) -> None:
    done = tiny_runs[name]
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # Its figures: a markdown table with a row of numbers under its header.
    assert re.search(r"^\|---.*\n\|[^\n]*\d", done.stdout, re.M), done.stdout[-3000:]
