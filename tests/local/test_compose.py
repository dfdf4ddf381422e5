"""docker-compose.yml, exercised: Debian's docker-compose (1.29) brings up its Postgres
and Kafka on the host network, jobs/kafka_to_sink.py runs against them across an
upgrade (a new checkpoint, started ``--from-journal``) into the idempotent Postgres sink,
every record lands exactly once, and the project is brought down.

Container mode only (marker ``docker_only``): ``pytest --services=docker``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from offset_journal.journal.db import upgrade
from offset_journal.local.services import KafkaCluster, free_port, wait_for_kafka
from tests.jobs_support import JOBS, load_job

pytestmark = [pytest.mark.docker_only, pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> list[str]:
    found = shutil.which("docker-compose")
    return [found] if found else ["docker", "compose"]


@pytest.fixture
def compose_project(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = dict(os.environ, POSTGRES_PORT=str(free_port()), KAFKA_PORT=str(free_port()),
               KAFKA_CONTROLLER_PORT=str(free_port()))
    for var, key in (("POSTGRES_IMAGE", "OFFSET_JOURNAL_POSTGRES_IMAGE"),
                     ("KAFKA_IMAGE", "OFFSET_JOURNAL_KAFKA_IMAGE")):
        if key in os.environ:
            env.setdefault(var, os.environ[key])
    if os.environ.get("OFFSET_JOURNAL_IMAGES") == "official":
        env.setdefault("POSTGRES_IMAGE", "postgres:16")
        env.setdefault("KAFKA_IMAGE", "apache/kafka:3.8.0")
    # A project of its own: a name used before (a pid comes back in a later session) would
    # bring back that project's containers, and its Postgres with the earlier runs in it.
    project = f"ojtest{os.getpid()}x{uuid.uuid4().hex[:8]}"
    base = [*_compose(), "-f", str(ROOT / "docker-compose.yml"), "-p", project]
    up = subprocess.run([*base, "up", "-d"], env=env, capture_output=True, text=True,
                        timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield env
    finally:
        subprocess.run([*base, "down", "-v"], env=env, capture_output=True, timeout=120)


def _wait_for_postgres(url: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            assert time.monotonic() < deadline, f"compose's Postgres not up within {timeout} s"
            time.sleep(0.25)


def _run_job(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, str(JOBS / "kafka_to_sink.py"), *argv],
                          env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_compose_up_a_job_upgraded_from_the_journal_is_exactly_once_and_down(
        compose_project: dict[str, str], tmp_path: Path) -> None:
    env = compose_project
    libpq = f"postgresql://journal:journal@127.0.0.1:{env['POSTGRES_PORT']}/journal"
    _wait_for_postgres(libpq)
    upgrade(libpq)
    kafka = KafkaCluster(f"127.0.0.1:{env['KAFKA_PORT']}", "external")
    wait_for_kafka(kafka)
    # compose's broker creates topics on first use, with 4 partitions (num.partitions):
    # a producer's metadata request for it is a first use (kafka.partitions() asks as an
    # admin, which never creates a topic)
    kafka.producer().list_topics("orders", timeout=10)
    deadline = time.monotonic() + 30
    while kafka.partitions("orders") != 4:
        assert time.monotonic() < deadline, "topic orders not auto-created with 4 partitions"
        time.sleep(0.2)
    produced: list[Any] = kafka.produce("orders", 120)
    common = ["--bootstrap-servers", kafka.bootstrap_servers, "--topics", "orders",
              "--query-name", "orders-to-sink", "--database-url", libpq, "--sink", "postgres",
              "--sink-table", "records", "--max-offsets-per-trigger", "40",
              "--trigger", "available-now"]
    _run_job([*common, "--checkpoint", str(tmp_path / "ck-v1")])
    produced += kafka.produce("orders", 80, start=120)
    # the upgrade: a new checkpoint, started where the journal says v1 ended
    _run_job([*common, "--checkpoint", str(tmp_path / "ck-v2"), "--from-journal"])

    with psycopg.connect(load_job("kafka_to_sink").libpq_url(libpq)) as conn:
        got = conn.execute('select partition, "offset" from records').fetchall()
        runs = conn.execute("select run_id, query_id, started_at, terminated_at, host "
                            "from offset_journal.query_runs where query_name = 'orders-to-sink' "
                            "order by started_at").fetchall()
    assert sorted(got) == sorted((p, o) for p, o, _k, _v in produced)
    assert len(runs) == 2, runs  # v1 and v2, each one run
    kafka.stop()


def test_compose_then_the_readme_commands_run_the_demo_on_the_fresh_broker(
        compose_project: dict[str, str], tmp_path: Path) -> None:
    """docker-compose.yml's own instructions, at once after `up -d`: `offset-journal db
    upgrade`, then `offset-journal demo --bootstrap-servers ...` on a broker that is
    still starting, and that auto-creates topics when asked about them by name."""
    env = dict(compose_project, PYSPARK_PYTHON=sys.executable, OFFSET_JOURNAL_DATABASE_URL=(
        f"postgresql://journal:journal@127.0.0.1:{compose_project['POSTGRES_PORT']}/journal"))
    _wait_for_postgres(env["OFFSET_JOURNAL_DATABASE_URL"])
    exe = str(Path(sys.executable).with_name("offset-journal"))
    for argv in (["db", "upgrade"], ["demo", "--bootstrap-servers",
                                     f"127.0.0.1:{env['KAFKA_PORT']}", "--records", "40",
                                     "--workdir", str(tmp_path)]):
        done = subprocess.run([exe, *argv], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    assert "RESULT: every record exactly once" in done.stdout
