"""The JVM parts: Spark's Kafka connector and a Kafka broker, fetched from Maven Central.

Spark reads Kafka only through its own connector, ``spark-sql-kafka-0-10_2.13``, whose
version must be exactly Spark's. ``spark-submit --packages`` resolves it with Ivy, which
does not see Maven's settings (mirrors, proxies) and fetches again on every new cache.
Here the small Maven projects in ``jvm/`` resolve each set once per version into a cache
outside the repository (``~/.cache/offset-journal/jars/<name>-<version>-<pom digest>/``, or
``$OFFSET_JOURNAL_JARS_DIR``); later calls only list the directory.

* ``kafka-connector``: the connector and the runtime jars PySpark does not already ship,
  for ``spark.jars`` (which also ships them to executors).
* ``kafka-broker``: ``kafka_2.13`` (a KRaft broker, ``kafka.Kafka``), Kafka's tools
  (``kafka-tools``: ConsumerGroupCommand and friends) and the log4j2 binding that Kafka's
  tarball adds and its POM lacks, for :mod:`offset_journal.local.kafka`.
* ``kafka-mirror``: MirrorMaker 2 (``connect-mirror`` with the Connect runtime, the mirror
  client and the JSON converter) at the broker's Kafka version, with the same log4j2
  binding, for :mod:`offset_journal.local.mirror` (MM2 in dedicated mode).
* ``delta``: Delta Lake (``io.delta:delta-spark_<spark binary>_2.13`` with
  ``delta-storage`` and Delta Kernel), at the installed ``delta-spark`` Python package's
  version, for ``spark.jars`` (Delta's own ``configure_spark_with_delta_pip`` uses Ivy).
* ``state-restore``: offset-journal's own small Java helper (``jvm/state-restore``), BUILT
  with Maven against ``spark-sql_2.13`` at the installed PySpark's version (Spark
  itself provided, not shipped), for ``spark.jars``: the savepoint restore and the state
  repartition (:mod:`offset_journal.savepoint.restore`). Cached by the digest of its pom
  and sources.
* ``s3a``: Spark's ``s3a://`` file system, ``hadoop-aws`` at exactly the Hadoop version
  PySpark bundles, with the AWS SDK v2 modules it calls (not the SDK's 686 MB bundle),
  for ``spark.jars``; the session's settings for an endpoint are in
  :mod:`offset_journal.local.s3`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import JarsError

log = logging.getLogger(__name__)

JarSet = Literal["kafka-connector", "kafka-broker", "kafka-mirror", "delta", "state-restore",
                 "s3a"]
JAR_SETS: tuple[JarSet, ...] = ("kafka-connector", "kafka-broker", "kafka-mirror", "delta",
                                "state-restore", "s3a")
STATE_RESTORE_JAR = "state-restore.jar"
ENV_JARS_DIR = "OFFSET_JOURNAL_JARS_DIR"
#: The broker's version: any Kafka 4.x broker serves Spark's connector's clients.
KAFKA_VERSION = "4.1.1"
CONNECTOR_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"
S3A_ARTIFACT = "org.apache.hadoop:hadoop-aws"
#: Delta Lake's release when the delta-spark Python package is not installed (4.4.0 is the
#: newest on Maven Central for Spark 4.2; PyPI's 4.4.1 has no jar there).
DELTA_VERSION = "4.4.0"
#: The session settings Delta Lake needs besides its jars.
DELTA_SPARK_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
_MAVEN_TIMEOUT_S = 600


@dataclass(frozen=True)
class JarSpec:
    """One set of jars: which Maven project resolves it, at which version."""

    name: JarSet
    version: str
    pom: Path
    version_property: str
    properties: tuple[tuple[str, str], ...] = ()
    build: bool = False  # a project of sources built with ``mvn package``, not resolved

    @property
    def directory_name(self) -> str:
        """``<name>-<version>-<digest of the Maven project>``: a changed project (a
        dependency added or pinned, another Spark binary version, a source changed) is
        fetched into a directory of its own, and a set other processes may be running
        from is never replaced under them."""
        hashed = hashlib.sha256(self.pom.read_bytes())
        for key, value in self.properties:
            hashed.update(f"\0{key}={value}".encode())
        sources = self.pom.parent / "src"
        for path in sorted(sources.rglob("*")) if self.build else ():
            if path.is_file():
                hashed.update(f"\0{path.relative_to(sources).as_posix()}\0".encode())
                hashed.update(path.read_bytes())
        return f"{self.name}-{self.version}-{hashed.hexdigest()[:8]}"


def connector_coordinate(spark_version: str) -> str:
    """The ``--packages`` coordinate of Spark's Kafka connector for ``spark_version``."""
    return f"{CONNECTOR_ARTIFACT}:{spark_version}"


def installed_spark_version() -> str:
    """The installed PySpark's version (the connector must match it exactly)."""
    try:
        import pyspark
    except ImportError as exc:
        raise JarsError("PySpark is not installed: pip install 'offset-journal[spark]'") from exc
    return str(pyspark.__version__)


def installed_delta_version() -> str:
    """The installed delta-spark Python package's version (its jars must match it), else
    :data:`DELTA_VERSION`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("delta-spark")
    except PackageNotFoundError:
        return DELTA_VERSION


def installed_hadoop_version() -> str:
    """The Hadoop version PySpark bundles (``hadoop-client-api-3.5.0.jar``: 3.5.0 for
    PySpark 4.2.0); ``hadoop-aws`` must be exactly this version."""
    found = sorted(_spark_jars_dir().glob("hadoop-client-api-*.jar"))
    if not found:
        raise JarsError(f"no hadoop-client-api jar in {_spark_jars_dir()}: cannot tell the "
                        "Hadoop version PySpark bundles (give the s3a set's version)")
    return found[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def spark_binary_version() -> str:
    """``4.2`` for PySpark 4.2.0: the Spark part of Delta's artifact name."""
    return ".".join(installed_spark_version().split(".")[:2])


def jvm_dir() -> Path:
    """The Maven projects: packaged in a wheel, or the repository's jvm/."""
    package = Path(__file__).resolve().parent.parent  # offset_journal/
    for candidate in (package / "_jvm", package.parent / "jvm"):
        if (candidate / "kafka-connector" / "pom.xml").is_file():
            return candidate
    raise JarsError("offset-journal's Maven projects (jvm/) are not installed")


def cache_root() -> Path:
    """Where jar sets are kept: $OFFSET_JOURNAL_JARS_DIR, else ~/.cache/offset-journal/jars."""
    configured = os.environ.get(ENV_JARS_DIR)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "offset-journal" / "jars"


_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z_+-]*(\.[0-9A-Za-z_+-]+)*")
"""A Maven version as a cache directory may be named after it: no path separators,
no "..", nothing Maven would read as a property or a range."""


def checked_version(version: str) -> str:
    """``version`` when it is a plain Maven version, else a :class:`JarsError`: it names
    a directory under the cache and is passed to Maven."""
    if not _VERSION.fullmatch(version):
        raise JarsError(f"not a version: {version!r} (expected digits, letters and single "
                        "dots, such as 4.2.0)")
    return version


def spec_for(name: JarSet, version: str | None = None) -> JarSpec:
    """The jar set ``name`` at ``version`` (default: the installed PySpark's, or the
    broker's pinned Kafka version, which MirrorMaker 2 shares)."""
    if version is not None:
        checked_version(version)
    if name == "kafka-connector":
        return JarSpec(name, version or installed_spark_version(),
                       jvm_dir() / "kafka-connector" / "pom.xml", "spark.version")
    if name == "kafka-broker":
        return JarSpec(name, version or KAFKA_VERSION,
                       jvm_dir() / "kafka-broker" / "pom.xml", "kafka.version")
    if name == "kafka-mirror":
        return JarSpec(name, version or KAFKA_VERSION,
                       jvm_dir() / "kafka-mirror" / "pom.xml", "kafka.version")
    if name == "state-restore":
        return JarSpec(name, version or installed_spark_version(),
                       jvm_dir() / "state-restore" / "pom.xml", "spark.version", build=True)
    if name == "delta":
        return JarSpec(name, version or installed_delta_version(),
                       jvm_dir() / "delta" / "pom.xml", "delta.version",
                       (("spark.binary.version", spark_binary_version()),))
    if name == "s3a":
        return JarSpec(name, version or installed_hadoop_version(),
                       jvm_dir() / "s3a" / "pom.xml", "hadoop.version")
    raise JarsError(f"unknown jar set {name!r}: use one of {', '.join(JAR_SETS)}")


def jars(name: JarSet, version: str | None = None) -> list[Path]:
    """The jar files of set ``name``, fetched once per version into the cache."""
    spec = spec_for(name, version)
    target = cache_root() / spec.directory_name
    if not _complete(target):
        # One lock for every set: fetches of two sets at once (two test workers) would
        # run two Mavens on one local repository.
        with _lock(cache_root() / ".fetch.lock"):
            if not _complete(target):
                _fetch(spec, target)
    found = sorted(target.glob("*.jar"))
    if name == "kafka-connector":
        _check_connector(found, spec.version)
    if name == "delta":
        _check_delta(found, spec)
    if name == "s3a" and not any(p.name == f"hadoop-aws-{spec.version}.jar" for p in found):
        raise JarsError(f"hadoop-aws-{spec.version}.jar is missing from {target}: expected "
                        f"{S3A_ARTIFACT}:{spec.version}")
    return found


def spark_jars_value(version: str | None = None) -> str:
    """The ``spark.jars`` value for Spark's Kafka connector (comma-separated paths)."""
    return ",".join(str(p) for p in jars("kafka-connector", version))


def state_restore_jar(version: str | None = None) -> Path:
    """The state-restore helper's jar, built once per Spark version and source digest."""
    found = [p for p in jars("state-restore", version) if p.name == STATE_RESTORE_JAR]
    if not found:
        raise JarsError(f"{STATE_RESTORE_JAR} is missing from {cache_root()}")
    return found[0]


def delta_spark_jars_value(version: str | None = None) -> str:
    """The ``spark.jars`` value for Delta Lake (comma-separated paths); the session also
    needs :data:`DELTA_SPARK_CONF`."""
    return ",".join(str(p) for p in jars("delta", version))


def s3a_spark_jars_value(version: str | None = None) -> str:
    """The ``spark.jars`` value for ``s3a://`` (comma-separated paths)."""
    return ",".join(str(p) for p in jars("s3a", version))


def classpath(name: JarSet, version: str | None = None) -> str:
    """The jars of ``name`` as a Java class path."""
    return os.pathsep.join(str(p) for p in jars(name, version))


def _complete(target: Path) -> bool:
    return (target / ".complete").is_file()


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """Serialize fetches of one set across processes (test workers, jobs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _fetch(spec: JarSpec, target: Path) -> None:
    """Resolve ``spec`` with Maven into a fresh directory, then move it into place."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError(_advice(spec, "Maven (mvn) is not installed: install it "
                                      "(apt-get install maven)"))
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.directory_name}-", dir=target.parent))
    try:
        if spec.build:
            _build_with_maven(mvn, spec, staging)
        else:
            _run_maven(mvn, spec, staging)
        if spec.name in ("kafka-connector", "delta", "s3a"):
            _drop_jars_spark_ships(staging)
        (staging / ".complete").write_text(f"{spec.name} {spec.version}\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("fetched %s %s into %s", spec.name, spec.version, target)


def _run_maven(mvn: str, spec: JarSpec, out: Path) -> None:
    cmd = [mvn, "-B", "-q", "-f", str(spec.pom), "dependency:copy-dependencies",
           "-DincludeScope=runtime", f"-D{spec.version_property}={spec.version}",
           *(f"-D{key}={value}" for key, value in spec.properties),
           f"-DoutputDirectory={out}"]
    log.info("fetching %s %s with Maven (once per version)", spec.name, spec.version)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise JarsError(_advice(spec, f"Maven did not finish in {_MAVEN_TIMEOUT_S} s")) from exc
    if done.returncode != 0:
        raise JarsError(_advice(spec, f"Maven could not resolve it ({_maven_reason(done.stdout)})"))


def _build_with_maven(mvn: str, spec: JarSpec, out: Path) -> None:
    """``mvn package`` of a project of sources, built outside the repository (its build
    directory under ``out``), keeping only the jar it makes."""
    build = out / "build"
    cmd = [mvn, "-B", "-q", "-f", str(spec.pom), "package",
           f"-D{spec.version_property}={spec.version}", f"-Dout.dir={build}"]
    log.info("building %s for Spark %s with Maven (once per version and source)", spec.name,
             spec.version)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise JarsError(_advice(spec, f"Maven did not finish in {_MAVEN_TIMEOUT_S} s")) from exc
    jar = build / f"{spec.name}.jar"
    if done.returncode != 0 or not jar.is_file():
        raise JarsError(_advice(spec, f"Maven could not build it ({_maven_reason(done.stdout)})"))
    jar.rename(out / jar.name)
    shutil.rmtree(build, ignore_errors=True)


def _maven_reason(output: str) -> str:
    """The most telling line of a failed Maven run, without its colour codes."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    lines = [ln.removeprefix("[ERROR]").strip() for ln in plain.splitlines()
             if ln.startswith("[ERROR]") and ln.removeprefix("[ERROR]").strip()]
    for ln in lines:
        found = re.search(r"(\S+ was not found in \S+)", ln)
        if found:
            return found.group(1)
    for ln in lines:
        if "Could not" in ln or "Missing" in ln or "resolve" in ln or "Failed" in ln:
            return ln[:300]
    return lines[0][:300] if lines else "no error message"


def _advice(spec: JarSpec, reason: str) -> str:
    if spec.name == "kafka-connector":
        return (f"cannot fetch Spark's Kafka connector {connector_coordinate(spec.version)}: "
                f"{reason}; or start Spark with --packages "
                f"{connector_coordinate(spec.version)}")
    if spec.name == "delta":
        return f"cannot fetch Delta Lake {delta_coordinate(spec)}: {reason}"
    if spec.name == "state-restore":
        return (f"cannot build offset-journal's state-restore helper against Spark "
                f"{spec.version} (org.apache.spark:spark-sql_2.13:{spec.version}): {reason}")
    if spec.name == "s3a":
        return f"cannot fetch {S3A_ARTIFACT}:{spec.version} for s3a://: {reason}"
    if spec.name == "kafka-mirror":
        return (f"cannot fetch MirrorMaker 2 org.apache.kafka:connect-mirror:{spec.version}: "
                f"{reason}")
    return f"cannot fetch the Kafka broker org.apache.kafka:kafka_2.13:{spec.version}: {reason}"


def delta_coordinate(spec: JarSpec) -> str:
    """``io.delta:delta-spark_4.2_2.13:4.4.0`` for a delta spec."""
    binary = dict(spec.properties).get("spark.binary.version", "")
    return f"io.delta:delta-spark_{binary}_2.13:{spec.version}"


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)?\.jar$", "", jar)


def _drop_jars_spark_ships(directory: Path) -> None:
    """Leave out jars PySpark already has (Hadoop, Scala, compression codecs): two
    versions of one library on a class path is a bug waiting to happen."""
    shipped = {_artifact(p.name) for p in _spark_jars_dir().glob("*.jar")}
    for jar in directory.glob("*.jar"):
        if _artifact(jar.name) in shipped:
            jar.unlink()


def _spark_jars_dir() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise JarsError("PySpark is not installed: pip install 'offset-journal[spark]'") from exc
    return Path(pyspark.__file__).resolve().parent / "jars"


def _check_connector(found: list[Path], version: str) -> None:
    """The connector jar of exactly ``version`` must be there."""
    expected = f"spark-sql-kafka-0-10_2.13-{version}.jar"
    if not any(p.name == expected for p in found):
        raise JarsError(f"Spark's Kafka connector {expected} is missing from "
                        f"{cache_root()}: expected {connector_coordinate(version)}")


def _check_delta(found: list[Path], spec: JarSpec) -> None:
    """Delta's jar of exactly the spec's version and Spark binary version must be there."""
    binary = dict(spec.properties).get("spark.binary.version", "")
    expected = f"delta-spark_{binary}_2.13-{spec.version}.jar"
    if not any(p.name == expected for p in found):
        raise JarsError(f"Delta Lake's {expected} is missing from {cache_root()}: "
                        f"expected {delta_coordinate(spec)}")


def check_connector_matches(spark_version: str, jar_paths: list[str]) -> None:
    """Raise when the ``spark.jars`` given hold a Kafka connector of another Spark
    version than the one running (Spark fails much later, with a NoSuchMethodError)."""
    names = [Path(p).name for p in jar_paths]
    connectors = [n for n in names if n.startswith("spark-sql-kafka-0-10_2.13-")]
    expected = f"spark-sql-kafka-0-10_2.13-{spark_version}.jar"
    if not connectors:
        raise JarsError("Spark's Kafka connector is not on spark.jars: expected "
                        f"{connector_coordinate(spark_version)}")
    if expected not in connectors:
        raise JarsError(f"Spark's Kafka connector {connectors[0]} does not match Spark "
                        f"{spark_version}: expected {connector_coordinate(spark_version)}")
