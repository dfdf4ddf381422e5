"""The service starters live in the library (offset_journal.local.services), not in the pytest
plugin: the demo uses them on an install without pytest, and says in one line what to
install on a core install (no extras)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from offset_journal.journal.db import resolve_url
from offset_journal.local.services import start_kafka, start_postgres

# Starts a broker, a Postgres or Maven of its own: not in the quick tier.
pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("offset-journal")
# What a core install (`pip install offset-journal`) lacks, or a part of it.
CORE_LACKS = ("pytest", "_pytest", "pyspark", "pgserver", "confluent_kafka", "testcontainers")
HINT = "pip install 'offset-journal[demo]'"


def _blocking(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment whose interpreters cannot import ``modules`` (a sitecustomize
    that refuses them), as if they were not installed; no journal URL."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(textwrap.dedent(f"""
        import sys

        class _NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {set(modules)!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, _NotInstalled())
    """))
    env = {k: v for k, v in os.environ.items() if k != "OFFSET_JOURNAL_DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env


def test_services_and_the_demo_import_without_pytest(tmp_path):
    code = ("import sys, offset_journal.local.services, offset_journal.cli.demo; "
            "import offset_journal.cli; "
            "assert 'pytest' not in sys.modules; print('imported')")
    out = subprocess.run([sys.executable, "-c", code], env=_blocking(tmp_path, "pytest", "_pytest"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "imported"
    # and the blocker works: the plugin itself needs pytest
    plugin = subprocess.run([sys.executable, "-c", "import offset_journal.testing"],
                            env=_blocking(tmp_path, "pytest", "_pytest"),
                            capture_output=True, text=True, timeout=120)
    assert plugin.returncode != 0 and "No module named 'pytest'" in plugin.stderr


def test_demo_on_a_core_install_says_what_to_install_in_one_line(tmp_path):
    out = subprocess.run([str(EXE), "demo", "--workdir", str(tmp_path / "work")],
                         env=_blocking(tmp_path, *CORE_LACKS), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1, out.stderr
    assert out.stdout == ""
    assert out.stderr == ("offset-journal: error: the demo needs pyspark, confluent-kafka, "
                          f"pgserver, not installed here: {HINT}\n")
    assert not (tmp_path / "work").exists()  # nothing was started


def test_demo_given_a_database_does_not_ask_for_the_embedded_one(tmp_path):
    out = subprocess.run([str(EXE), "demo", "--database-url", "postgresql://u@nohost/db"],
                         env=_blocking(tmp_path, "pyspark", "pgserver"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr == (f"offset-journal: error: the demo needs pyspark, not installed here: "
                          f"{HINT}\n")


def test_the_demo_extra_installs_what_the_demo_needs():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def resolve(extra: str) -> set[str]:
        names: set[str] = set()
        for req in extras[extra]:
            if req.startswith("offset-journal["):
                for sub in req[len("offset-journal["):-1].split(","):
                    names |= resolve(sub)
            else:
                names.add(req.split("[")[0].split("=")[0].split(">")[0].split("<")[0])
        return names

    assert {"pyspark", "confluent-kafka", "pgserver"} <= resolve("demo")
    assert "pytest" not in resolve("demo")
    assert "pyspark==4.2.0" in extras["demo"]  # the version Maven Central has a connector for
    assert HINT in (ROOT / "README.md").read_text()


def test_start_postgres_embedded_keeps_a_given_datadir(tmp_path):
    kept = start_postgres(datadir=tmp_path / "pg", docker=False)
    owned = start_postgres(docker=False)
    owned_dir = None
    try:
        assert (kept.kind, owned.kind) == ("pgserver", "pgserver")
        for server in (kept, owned):
            url = server.create_database("oj_services")
            engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
            with engine.connect() as conn:
                assert conn.execute(sa.text("SELECT current_database()")).scalar_one() == \
                    sa.engine.make_url(url).database
            engine.dispose()
            server.drop_database(url)
        owned_dir = Path(sa.engine.make_url(owned.admin_url).query["host"])
    finally:
        kept.stop()
        owned.stop()
    assert (tmp_path / "pg" / "PG_VERSION").is_file()  # the caller's data stays
    assert owned_dir is not None and not owned_dir.exists()  # a temp dir is removed


def test_start_kafka_with_servers_uses_them_and_leaves_them_running(kafka_cluster, kafka_topic):
    cluster = start_kafka(kafka_cluster.bootstrap_servers)
    assert (cluster.kind, cluster.broker) == ("external", None)
    acked = cluster.produce(kafka_topic, 8)
    assert len(acked) == 8 and cluster.partitions(kafka_topic) == 4
    cluster.stop()
    assert kafka_cluster.watermarks(kafka_topic) == {p: (0, 2) for p in range(4)}


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_demo_takes_verbose_flags_after_its_name_too(tmp_path):
    """The demo's error line says "-vv for details": -vv works after "demo" as before it."""
    url = f"postgresql://journal:journal@127.0.0.1:{_closed_port()}/journal"
    env = {k: v for k, v in os.environ.items() if k != "OFFSET_JOURNAL_DATABASE_URL"}
    runs = {}
    for name, argv in {"after": ["demo", "-vv"], "before": ["-vv", "demo"],
                       "split": ["-v", "demo", "--verbose"], "none": ["demo"]}.items():
        runs[name] = subprocess.run([str(EXE), *argv, "--database-url", url, "--workdir",
                                     str(tmp_path / name)], env=env, capture_output=True,
                                    text=True, timeout=120)
    for name, out in runs.items():
        assert out.returncode == 1, (name, out.stderr)
        last = out.stderr.splitlines()[-1]
        assert last.startswith("offset-journal: error: ") and "connect" in last, (name, last)
        assert ("Traceback" in out.stderr) == (name != "none"), (name, out.stderr)


@pytest.mark.parametrize("value", ["abc", "-5", "0"])
def test_a_bad_demo_argument_is_one_line(value):
    out = subprocess.run([str(EXE), "demo", "--kafka-wait", value], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"offset-journal demo: error: argument --kafka-wait: bad timeout '{value}': "
        + ("not a number of seconds" if value == "abc" else
           "use seconds above 0, at most 86400")]


def test_the_demo_waits_for_a_given_kafka_within_a_bound_then_says_so_in_one_line(
        journal_url, tmp_path):
    servers = f"127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items() if k != "OFFSET_JOURNAL_DATABASE_URL"}
    started = time.monotonic()
    out = subprocess.run([str(EXE), "demo", "--database-url", journal_url,
                          "--bootstrap-servers", servers, "--kafka-wait", "3",
                          "--workdir", str(tmp_path / "work")],
                         env=env, capture_output=True, text=True, timeout=120)
    waited = time.monotonic() - started
    assert out.returncode == 1, out.stderr
    assert out.stderr == (f"offset-journal: error: Kafka at {servers} did not answer (a broker "
                          "and a controller) within 3 s\n")
    assert f"waiting for Kafka at {servers} to answer (up to 3 s)" in out.stdout
    assert 3 <= waited < 60
