"""The JVM parts: Spark's Kafka connector and a Kafka broker, fetched from Maven Central.

Spark reads Kafka only through its own connector, ``spark-sql-kafka-0-10_<scala>``, whose
version must be Spark's and whose Scala binary version (2.12 or 2.13) must be the one
PySpark's own jars were built for (``scala-library-2.12.18.jar``: 2.12, PySpark 3.5's).
``spark-submit --packages`` resolves it with Ivy, which does not see Maven's settings
(mirrors, proxies) and fetches again on every new cache. Here the small Maven projects
in ``jvm/`` resolve each set once per version into a cache outside the repository
(``~/.cache/offset-journal/jars/<name>-<version>-<digest>/``, or
``$OFFSET_JOURNAL_JARS_DIR``; the digest covers the pom and the settings given to
Maven, the Scala binary version and the PySpark whose jars were left out among them);
later calls only list the directory.

* ``kafka-connector``: the connector and the runtime jars PySpark does not already ship,
  for ``spark.jars`` (which also ships them to executors), at exactly the installed
  PySpark's version; another patch of the same minor only when the user sets
  ``$OFFSET_JOURNAL_CONNECTOR_VERSION`` (a registry may lack a patch; said when used).
* ``kafka-broker``: ``kafka_2.13`` (a KRaft broker, ``kafka.Kafka``), Kafka's tools
  (``kafka-tools``: ConsumerGroupCommand and friends) and the log4j2 binding that Kafka's
  tarball adds and its POM lacks, for :mod:`offset_journal.local.kafka`.
* ``kafka-mirror``: MirrorMaker 2 (``connect-mirror`` with the Connect runtime, the mirror
  client and the JSON converter) at the broker's Kafka version, with the same log4j2
  binding, for :mod:`offset_journal.local.mirror` (MM2 in dedicated mode).
* ``delta``: Delta Lake (``io.delta:delta-spark_<spark binary>_<scala>`` from Delta 4.1,
  ``delta-spark_<scala>`` before, with ``delta-storage`` and Delta Kernel), at the
  installed ``delta-spark`` Python package's version, for ``spark.jars`` (Delta's own
  ``configure_spark_with_delta_pip`` uses Ivy).
* ``state-restore``: offset-journal's own small Java helper (``jvm/state-restore``),
  not fetched: the package ships it prebuilt for each Spark minor the restore runs on
  (:mod:`.helper_jar`), and this set is that one file, for ``spark.jars``: the
  savepoint restore and the state repartition (:mod:`offset_journal.state`).
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
from ..spark_version import default_scala, minor_text, parse
from ._maven import reason as maven_reason
from .helper_jar import shipped_jar

log = logging.getLogger(__name__)

JarSet = Literal["kafka-connector", "kafka-broker", "kafka-mirror", "delta", "state-restore",
                 "s3a"]
JAR_SETS: tuple[JarSet, ...] = ("kafka-connector", "kafka-broker", "kafka-mirror", "delta",
                                "state-restore", "s3a")
ENV_JARS_DIR = "OFFSET_JOURNAL_JARS_DIR"
ENV_CONNECTOR_VERSION = "OFFSET_JOURNAL_CONNECTOR_VERSION"
"""Another patch release of the installed PySpark's minor for Spark's Kafka connector,
when the registry lacks the installed one's: the user's choice, never made here."""
#: The broker's version: any Kafka 4.x broker serves Spark's connector's clients.
KAFKA_VERSION = "4.1.1"
CONNECTOR_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10"
"""Without its Scala suffix: ``_2.12`` or ``_2.13``, PySpark's own (:func:`scala_for`)."""
S3A_ARTIFACT = "org.apache.hadoop:hadoop-aws"
#: Delta Lake's release when the delta-spark Python package is not installed (4.4.0 is the
#: newest on Maven Central for Spark 4.2; PyPI's 4.4.1 has no jar there), for Spark 4.2
#: only: another Spark needs the delta-spark release made for it installed.
DELTA_VERSION = "4.4.0"
DELTA_VERSION_SPARK = (4, 2)
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

    @property
    def directory_name(self) -> str:
        """``<name>-<version>-<digest of the Maven project>``: a changed project (a
        dependency added or pinned, another Spark binary version) is fetched into a
        directory of its own, and a set other processes may be running from is never
        replaced under them."""
        hashed = hashlib.sha256(self.pom.read_bytes())
        for key, value in self.properties:
            hashed.update(f"\0{key}={value}".encode())
        return f"{self.name}-{self.version}-{hashed.hexdigest()[:8]}"


def connector_coordinate(spark_version: str, scala: str | None = None) -> str:
    """The ``--packages`` coordinate of Spark's Kafka connector for ``spark_version``
    (``scala``: default :func:`scala_for` it)."""
    return f"{CONNECTOR_ARTIFACT}_{scala or scala_for(spark_version)}:{spark_version}"


def connector_jar_name(spark_version: str, scala: str | None = None) -> str:
    """``spark-sql-kafka-0-10_2.12-3.5.1.jar``: the connector's jar file."""
    artifact = CONNECTOR_ARTIFACT.split(":")[1]
    return f"{artifact}_{scala or scala_for(spark_version)}-{spark_version}.jar"


def connector_version() -> str:
    """The Kafka connector's version for the installed PySpark: its own, or the patch
    release of the same minor the user set in ``$OFFSET_JOURNAL_CONNECTOR_VERSION``
    (JarsError for another minor: its classes would not match Spark's)."""
    installed = installed_spark_version()
    chosen = os.environ.get(ENV_CONNECTOR_VERSION, "").strip()
    if not chosen or chosen == installed:
        return installed
    checked_version(chosen)
    line = minor_text(parse(installed).line)
    if parse(chosen).line != parse(installed).line:
        raise JarsError(f"{ENV_CONNECTOR_VERSION}={chosen} is not a Spark {line}.x release, "
                        f"and PySpark here is {installed}: the Kafka connector must be of "
                        f"Spark's own minor (unset it, or give a {line}.x release)")
    return chosen


def connector_note(version: str | None = None) -> str | None:
    """A line saying the connector is another patch than PySpark's (the user's choice in
    ``$OFFSET_JOURNAL_CONNECTOR_VERSION``), None when it is PySpark's own."""
    chosen = version or connector_version()
    installed = installed_spark_version()
    if chosen == installed:
        return None
    if parse(chosen).line != parse(installed).line:
        return (f"Spark's Kafka connector {chosen}, as --version asked: not for the PySpark "
                f"here ({installed}), whose Spark it would not run on")
    return (f"Spark's Kafka connector {chosen} for PySpark {installed}: another patch release, "
            f"as {ENV_CONNECTOR_VERSION} or --version chose")


def installed_scala_binary() -> str:
    """The Scala binary version PySpark's jars were built for (``scala-library-2.12.18.jar``:
    2.12): every Scala artifact on its class path must be built for the same."""
    found = sorted(spark_jars_dir().glob("scala-library-*.jar"))
    if not found:
        raise JarsError(f"no scala-library jar in {spark_jars_dir()}: cannot tell which Scala "
                        "PySpark is built for")
    release = found[0].name.removeprefix("scala-library-").removesuffix(".jar")
    return ".".join(release.split(".")[:2])


def scala_for(spark_version: str) -> str:
    """The Scala binary version of artifacts for Spark ``spark_version``: the installed
    PySpark's when it is the same minor (its jars say), else that Spark's default."""
    wanted = parse(spark_version)
    try:
        installed = parse(installed_spark_version())
    except JarsError:
        return default_scala(wanted)
    return installed_scala_binary() if installed.line == wanted.line else default_scala(wanted)


def installed_spark_version() -> str:
    """The installed PySpark's version (the connector must match it exactly)."""
    try:
        import pyspark
    except ImportError as exc:
        raise JarsError("PySpark is not installed: pip install 'offset-journal[spark]'") from exc
    return str(pyspark.__version__)


def installed_delta_version() -> str:
    """The installed delta-spark Python package's version (its jars must match it), else
    :data:`DELTA_VERSION` on the Spark it is for; JarsError on another Spark."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("delta-spark")
    except PackageNotFoundError:
        spark = installed_spark_version()
        if parse(spark).line != DELTA_VERSION_SPARK:
            raise JarsError(f"delta-spark is not installed: pip install the delta-spark release "
                            f"made for Spark {spark_binary_version()} (PySpark here is "
                            f"{spark}), or give the delta set's version") from None
        return DELTA_VERSION


def delta_artifact(delta_version: str, spark_binary: str, scala: str) -> str:
    """Delta's artifact for a Spark: ``delta-spark_4.2_2.13`` from Delta 4.1 (built for
    several Spark minors), ``delta-spark_2.13`` before (one Spark each)."""
    if parse(delta_version).line >= (4, 1):
        return f"delta-spark_{spark_binary}_{scala}"
    return f"delta-spark_{scala}"


def installed_jackson_version() -> str:
    """The jackson-databind PySpark ships (2.21.2 for 4.2.0, 2.15.2 for 3.5.1): Delta's one
    Jackson module Spark does not ship must be the same release."""
    found = sorted(spark_jars_dir().glob("jackson-databind-*.jar"))
    if not found:
        raise JarsError(f"no jackson-databind jar in {spark_jars_dir()}: cannot tell the "
                        "Jackson release PySpark ships")
    return found[0].name.removeprefix("jackson-databind-").removesuffix(".jar")


def installed_hadoop_version() -> str:
    """The Hadoop version PySpark bundles (``hadoop-client-api-3.5.0.jar``: 3.5.0 for
    PySpark 4.2.0); ``hadoop-aws`` must be exactly this version."""
    found = sorted(spark_jars_dir().glob("hadoop-client-api-*.jar"))
    if not found:
        raise JarsError(f"no hadoop-client-api jar in {spark_jars_dir()}: cannot tell the "
                        "Hadoop version PySpark bundles (give the s3a set's version)")
    return found[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def spark_binary_version() -> str:
    """``4.2`` for PySpark 4.2.0: the Spark part of Delta's artifact name."""
    return minor_text(parse(installed_spark_version()).line)


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
        chosen = version or connector_version()
        # the installed PySpark: its jars decide what the set leaves out
        return JarSpec(name, chosen, jvm_dir() / "kafka-connector" / "pom.xml",
                       "spark.version", (("scala.binary.version", scala_for(chosen)),
                                         ("pyspark.version", installed_spark_version())))
    if name == "kafka-broker":
        return JarSpec(name, version or KAFKA_VERSION,
                       jvm_dir() / "kafka-broker" / "pom.xml", "kafka.version")
    if name == "kafka-mirror":
        return JarSpec(name, version or KAFKA_VERSION,
                       jvm_dir() / "kafka-mirror" / "pom.xml", "kafka.version")
    if name == "state-restore":
        raise JarsError("the state-restore helper is not fetched: offset-journal ships it "
                        "(state_restore_jar())")
    if name == "delta":
        chosen = version or installed_delta_version()
        binary, scala = spark_binary_version(), installed_scala_binary()
        return JarSpec(name, chosen, jvm_dir() / "delta" / "pom.xml", "delta.version",
                       (("delta.artifact", delta_artifact(chosen, binary, scala)),
                        ("jackson.version", installed_jackson_version())))
    if name == "s3a":
        chosen = version or installed_hadoop_version()
        if parse(chosen).line < (3, 4):
            raise JarsError(f"the s3a set is for Hadoop 3.4 and later (AWS SDK v2); Hadoop "
                            f"{chosen} (PySpark's) needs hadoop-aws {chosen} with its SDK v1 "
                            "bundle: give them on spark.jars or --packages")
        return JarSpec(name, chosen, jvm_dir() / "s3a" / "pom.xml", "hadoop.version")
    raise JarsError(f"unknown jar set {name!r}: use one of {', '.join(JAR_SETS)}")


def jars(name: JarSet, version: str | None = None) -> list[Path]:
    """The jar files of set ``name``, fetched once per version into the cache (the
    state-restore helper: the one the package ships for that Spark)."""
    if name == "state-restore":
        return [state_restore_jar(version)]
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
        _check_connector(found, spec)
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
    """The state-restore helper's jar the package ships for Spark ``version`` (default:
    the installed PySpark's; any patch of a minor it is compiled for): nothing to fetch
    or build."""
    return shipped_jar(checked_version(version) if version else installed_spark_version())


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
        raise JarsError(_advice(spec, f"Maven could not resolve it ({maven_reason(done.stdout)})"))


def _advice(spec: JarSpec, reason: str) -> str:
    if spec.name == "kafka-connector":
        return _connector_advice(spec, reason)
    if spec.name == "delta":
        return f"cannot fetch Delta Lake {delta_coordinate(spec)}: {reason}"
    if spec.name == "s3a":
        return f"cannot fetch {S3A_ARTIFACT}:{spec.version} for s3a://: {reason}"
    if spec.name == "kafka-mirror":
        return (f"cannot fetch MirrorMaker 2 org.apache.kafka:connect-mirror:{spec.version}: "
                f"{reason}")
    return f"cannot fetch the Kafka broker org.apache.kafka:kafka_2.13:{spec.version}: {reason}"


def _connector_advice(spec: JarSpec, reason: str) -> str:
    """The connector's failure, and the user's ways on: another patch of the same minor
    (their choice, never made here), or Spark's own --packages."""
    scala = dict(spec.properties).get("scala.binary.version")
    coordinate = connector_coordinate(spec.version, scala)
    line = minor_text(parse(spec.version).line)
    return (f"cannot fetch Spark's Kafka connector {coordinate}: {reason}; to use the "
            f"connector of another Spark {line}.x release (your choice, none is picked for "
            f"you), set {ENV_CONNECTOR_VERSION}={line}.<patch> or give "
            f"`offset-journal jars kafka-connector --version {line}.<patch>`; or start Spark "
            f"with --packages {coordinate}")


def delta_coordinate(spec: JarSpec) -> str:
    """``io.delta:delta-spark_4.2_2.13:4.4.0`` for a delta spec."""
    return f"io.delta:{dict(spec.properties)['delta.artifact']}:{spec.version}"


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)?\.jar$", "", jar)


def _drop_jars_spark_ships(directory: Path) -> None:
    """Leave out jars PySpark already has (Hadoop, Scala, compression codecs): two
    versions of one library on a class path is a bug waiting to happen."""
    shipped = {_artifact(p.name) for p in spark_jars_dir().glob("*.jar")}
    for jar in directory.glob("*.jar"):
        if _artifact(jar.name) in shipped:
            jar.unlink()


def spark_jars_dir() -> Path:
    """The jars of the Spark that runs: ``$SPARK_HOME/jars`` when set (as PySpark itself
    finds Spark; under spark-submit its Python even comes from a zip there), else the
    pyspark package's own. What the jar sets leave out and the state-restore helper is
    compiled against."""
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    try:
        import pyspark
    except ImportError as exc:
        raise JarsError("PySpark is not installed: pip install 'offset-journal[spark]'") from exc
    return Path(pyspark.__file__).resolve().parent / "jars"


def _check_connector(found: list[Path], spec: JarSpec) -> None:
    """The connector jar of exactly the spec's version and Scala must be there."""
    scala = dict(spec.properties).get("scala.binary.version")
    expected = connector_jar_name(spec.version, scala)
    if not any(p.name == expected for p in found):
        raise JarsError(f"Spark's Kafka connector {expected} is missing from "
                        f"{cache_root()}: expected {connector_coordinate(spec.version, scala)}")


def _check_delta(found: list[Path], spec: JarSpec) -> None:
    """Delta's jar of exactly the spec's version, Spark and Scala must be there."""
    expected = f"{dict(spec.properties)['delta.artifact']}-{spec.version}.jar"
    if not any(p.name == expected for p in found):
        raise JarsError(f"Delta Lake's {expected} is missing from {cache_root()}: "
                        f"expected {delta_coordinate(spec)}")


def check_connector_matches(spark_version: str, jar_paths: list[str]) -> None:
    """Raise when the ``spark.jars`` given hold a Kafka connector of another Spark
    version or Scala than the one running (Spark fails much later, with a
    NoSuchMethodError or ClassNotFoundException). Another patch of the same minor passes
    when the user chose it (``$OFFSET_JOURNAL_CONNECTOR_VERSION``)."""
    names = [Path(p).name for p in jar_paths]
    prefix = CONNECTOR_ARTIFACT.split(":")[1] + "_"
    connectors = [n for n in names if n.startswith(prefix)]
    wanted = connector_version() if spark_version == installed_spark_version() \
        else spark_version
    expected = connector_jar_name(wanted)
    if not connectors:
        raise JarsError("Spark's Kafka connector is not on spark.jars: expected "
                        f"{connector_coordinate(wanted)}")
    if expected not in connectors:
        raise JarsError(f"Spark's Kafka connector {connectors[0]} does not match Spark "
                        f"{spark_version}: expected {connector_coordinate(wanted)}")
