import os
import shutil
import sys

import pytest
from hypothesis import settings

# Property tests check what holds for every example, not how fast one runs: on two
# workers beside Spark's JVMs an example can take seconds, and hypothesis's default
# 200 ms deadline then failed a correct test.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Spark's driver (and every spark-submit a test starts) on loopback: by default it takes
# the first non-loopback interface's address when the host name resolves to 127.0.0.1.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# the shared fixtures (the command line, the secured server) are defined once, in
# tests/support.py, beside the helpers they use
pytest_plugins = ["offset_journal.testing", "tests.support"]

# The real parts a test may need; a test whose fixtures reach none of them (and is not
# marked spark or slow) is in the quick tier: the pure core, in seconds.
REAL_PARTS = frozenset({"spark", "delta_spark", "kafka_cluster", "acl_kafka", "journal_server",
                        "secure", "s3_server", "s3a_spark"})
CHROMIUM = os.environ.get("OFFSET_JOURNAL_CHROMIUM", "/usr/bin/chromium")
PGBOUNCER = os.environ.get("OFFSET_JOURNAL_PGBOUNCER", "/usr/sbin/pgbouncer")
# Debian packages some tests need (marker: binary, what it is for); the README's
# prerequisites name them, and a run that collects such a test stops up front without.
PACKAGES = {
    "chromium": (CHROMIUM, "the HTML report's test needs Debian's chromium"),
    "pgbouncer": (PGBOUNCER, "the pooler tests need Debian's pgbouncer"),
}


def installed_spark() -> str | None:
    """The installed PySpark's version (the suite runs on any supported one), None
    without PySpark."""
    try:
        from pyspark import __version__
    except ImportError:
        return None
    return str(__version__)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--quick", action="store_true",
                     help="run only the quick tier: tests that need no Spark, Kafka broker, "
                          "Postgres or browser (the planner's and the audit's pure core)")


def installed(marker: str) -> bool:
    """The Debian package behind ``marker`` (a key of PACKAGES) is on this machine."""
    return os.access(PACKAGES[marker][0], os.X_OK) or shutil.which(marker) is not None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Run in this one process, not on pyproject's two xdist workers, where a worker
    would gain nothing or could not say why it stops: the quick tier (seconds of pure
    core), and a run on a machine without a Debian package the suite needs (the check
    below stops such a run up front, in one line, from this process)."""
    if hasattr(config, "workerinput") or not getattr(config.option, "tx", None):
        return  # an xdist worker, or a run that is in one process already
    if config.getoption("--quick") or not all(map(installed, PACKAGES)):
        config.option.dist, config.option.tx, config.option.numprocesses = "no", [], 0


def needs_real_parts(item: pytest.Item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    marked = any(item.get_closest_marker(m)
                 for m in ("spark", "slow", "chromium", "pgbouncer", "services"))
    return marked or bool(names & REAL_PARTS)


def _spark_too_old(item: pytest.Item, running: str | None) -> str | None:
    marker = item.get_closest_marker("needs_spark")
    if marker is None or running is None:
        return None
    minor, what = marker.args
    have = tuple(int(x) for x in running.split(".")[:2])
    if have >= tuple(int(x) for x in minor.split(".")):
        return None
    return f"{what} is Spark {minor}'s; this is PySpark {running}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    running = installed_spark()
    for item in items:
        why = _spark_too_old(item, running)
        if why is not None:
            item.add_marker(pytest.mark.skip(reason=why))
    if config.getoption("--quick"):
        slow = [i for i in items if needs_real_parts(i)]
        items[:] = [i for i in items if not needs_real_parts(i)]
        config.hook.pytest_deselected(items=slow)
        return
    for marker, (binary, why) in PACKAGES.items():
        if any(i.get_closest_marker(marker) for i in items) and not installed(marker):
            pytest.exit(f"{why} ({binary} not found): apt-get install -y {marker}, "
                        f"or run with --quick / -m 'not {marker}'", returncode=4)
