"""Which Spark runs, and what offset-journal offers on it: decided here, once.

Spark names its release in one string, and not always plainly: ``4.2.0``, a patch
release ``4.2.1``, a vendor's build ``3.5.6-amzn-2`` (EMR) or ``3.5.4.7.3.1.0-197``
(Cloudera), a build from source ``4.1.0-SNAPSHOT``. :func:`parse` keeps the release
numbers for decisions and the string as Spark said it for messages.

Each feature offset-journal has needs some Spark API: :data:`FEATURES` says which, from
which Spark minor it is there and, for the few that call Spark's internal classes, on
which minors alone they are proven (any patch of them). Every gate in the package asks
:func:`problem` (or :func:`require`), so a feature is refused in one line that names the
Spark it needs and what to do instead, and docs/compatibility.md's table is this one
(tests/test_spark_version.py checks it). Pure: no Spark is imported; callers pass
``spark.version`` or ``pyspark.__version__``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .errors import ConfigError, OffsetJournalError

Feature = Literal["journal", "plans", "audit", "check", "retention", "report", "checkpoint",
                  "savepoint-create", "initial-state", "transform-with-state",
                  "state-restore", "state-repartition", "real-time"]
Minor = tuple[int, int]

SUPPORTED: tuple[Minor, ...] = ((3, 5), (4, 0), (4, 1), (4, 2))
"""The Spark minors offset-journal is proven on, each on a real broker."""


@dataclass(frozen=True)
class SparkVersion:
    """A Spark release as numbers, with the string Spark gave (``raw``)."""

    major: int
    minor: int
    patch: int
    raw: str

    @property
    def line(self) -> Minor:
        """``(3, 5)`` for any 3.5.x."""
        return (self.major, self.minor)

    @property
    def release(self) -> str:
        """``3.5.6`` for ``3.5.6-amzn-2``: the Apache release a vendor's build is of."""
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def vendor_build(self) -> bool:
        """The string says more than the Apache release (a vendor's or a snapshot)."""
        return not re.fullmatch(r"\d+\.\d+(\.\d+)?", self.raw)

    def __str__(self) -> str:
        return self.raw


_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:[-+._~][0-9A-Za-z.+_~-]*)?")


def parse(raw: str) -> SparkVersion:
    """``3.5.6-amzn-2`` -> 3.5.6 (raw kept); ConfigError (one line) for what is not a
    Spark version. A missing patch (``4.2``) is read as patch 0."""
    text = str(raw).strip()
    found = _VERSION.fullmatch(text)
    if found is None:
        raise ConfigError(f"not a Spark version: {str(raw)[:60]!r} (expected such as 4.2.0 "
                          "or 3.5.6-amzn-2)")
    major, minor, patch = found.group(1), found.group(2), found.group(3) or "0"
    return SparkVersion(int(major), int(minor), int(patch), text)


def _as_version(version: SparkVersion | str) -> SparkVersion:
    return version if isinstance(version, SparkVersion) else parse(version)


def default_scala(version: SparkVersion | str) -> str:
    """The Scala binary version Spark's own PyPI and Maven builds of ``version`` use by
    default: 2.12 for 3.x (3.5 is built for 2.13 as well), 2.13 from 4.0 (2.13 only)."""
    return "2.12" if _as_version(version).major < 4 else "2.13"


@dataclass(frozen=True)
class Instead:
    """Something to do where a feature is refused, itself available from ``needs``."""

    text: str
    needs: Feature | None = None


@dataclass(frozen=True)
class FeatureSpec:
    """What a feature needs of Spark."""

    feature: Feature
    title: str  # how a message and the docs name it
    since: Minor  # the first minor that has what it needs
    needs: str  # the Spark API, in a few words
    only: tuple[Minor, ...] = ()  # Spark internals: proven on these minors alone
    instead: tuple[Instead, ...] = ()


_DISCARD = Instead("restart without the state (offset-journal plan --discard-state)")
_NO_SAVEPOINT = Instead("plan the restart without a savepoint (offset-journal plan)")
_PYTHON_SEED = Instead("seed the new query in Python from a savepoint (initial_state)",
                       "initial-state")

_ALL = (3, 5)
FEATURES: tuple[FeatureSpec, ...] = (
    FeatureSpec("journal", "the listener (attach)", _ALL,
                "the Python StreamingQueryListener with onQueryIdle"),
    FeatureSpec("plans", "restart plans (plan, starting-offsets)", _ALL,
                "nothing of Spark: the journal, the checkpoint's files, the broker"),
    FeatureSpec("audit", "audit", _ALL, "nothing of Spark: the journal"),
    FeatureSpec("check", "check", _ALL, "nothing of Spark: the journal and the broker"),
    FeatureSpec("retention", "retention", _ALL, "nothing of Spark: the journal and the broker"),
    FeatureSpec("report", "report", _ALL, "nothing of Spark: the journal"),
    FeatureSpec("checkpoint", "checkpoint commands (inspect, compare, import)", _ALL,
                "the checkpoint's files (offsets, commits, sink logs)"),
    FeatureSpec("savepoint-create", "savepoint create", (4, 0),
                "Spark's State Data Source (format statestore and state-metadata)",
                instead=(_DISCARD, _NO_SAVEPOINT)),
    FeatureSpec("initial-state", "initial_state (a savepoint seeding a new query in Python)",
                (4, 0), "PySpark's transformWithStateInPandas(initialState=...) (4.0; "
                "transformWithState(initialState=...) from 4.1)",
                instead=(_DISCARD, _NO_SAVEPOINT)),
    FeatureSpec("transform-with-state", "the stateful job's transformWithState engine "
                "(jobs/stateful_counts.py --engine transform-with-state)", (4, 1),
                "PySpark's row-based GroupedData.transformWithState",
                instead=(Instead("run the job's built-in aggregation (--engine builtin)"),)),
    FeatureSpec("state-restore", "state restore (a savepoint written into a new checkpoint)",
                (4, 2), "Spark's internal state writer (StateRewriter, new in 4.2)",
                only=((4, 2), (4, 3)),
                instead=(_PYTHON_SEED, _DISCARD)),
    FeatureSpec("state-repartition", "state repartition", (4, 2),
                "Spark 4.2's internal OfflineStateRepartitionRunner", only=((4, 2),),
                instead=(Instead("keep the checkpoint's partition count"),
                         Instead("restore a savepoint into a new checkpoint with another "
                                 "partition count (offset-journal state restore)",
                                 "state-restore"),
                         _PYTHON_SEED)),
    FeatureSpec("real-time", "real-time mode (journaled and planned)", (4, 1),
                "Spark's RealTimeTrigger (PySpark's trigger(realTime=...) from 4.2)"),
)
_BY_NAME = {f.feature: f for f in FEATURES}


def spec(feature: Feature) -> FeatureSpec:
    """The feature's needs; ConfigError for a name that is not one."""
    found = _BY_NAME.get(feature)
    if found is None:
        raise ConfigError(f"unknown feature {feature!r}: use one of "
                          f"{', '.join(_BY_NAME)}")
    return found


def minor_text(line: Minor) -> str:
    """``4.2`` for (4, 2)."""
    return f"{line[0]}.{line[1]}"


def needs_text(feature: Feature) -> str:
    """``Spark 4.0 or later`` or ``Spark 4.2 (any 4.2.x)``: the versions a feature runs
    on, in words."""
    found = spec(feature)
    if found.only:
        lines = " or ".join(minor_text(m) for m in found.only)
        patches = ", ".join(f"{minor_text(m)}.x" for m in found.only)
        return f"Spark {lines} (any {patches})"
    return f"Spark {minor_text(found.since)} or later"


def available(feature: Feature, version: SparkVersion | str) -> bool:
    """The feature runs on this Spark."""
    found, running = spec(feature), _as_version(version)
    if found.only:
        return running.line in found.only
    return running.line >= found.since


def problem(feature: Feature, version: SparkVersion | str) -> str | None:
    """Why the feature is refused on this Spark, in one line naming the Spark it needs
    and what to do instead (only what this Spark offers); None when it runs here."""
    running = _as_version(version)
    if available(feature, running):
        return None
    found = spec(feature)
    what = f"{found.title} needs {needs_text(feature)}: {found.needs}"
    return f"{what}; this is Spark {running.raw}{_instead(found, running)}"


def require(feature: Feature, version: SparkVersion | str,
            error: type[OffsetJournalError] = ConfigError) -> SparkVersion:
    """The parsed version when the feature runs on it, else ``error`` with
    :func:`problem`'s line."""
    running = _as_version(version)
    found = problem(feature, running)
    if found is not None:
        raise error(found)
    return running


def supported(version: SparkVersion | str) -> bool:
    """A minor offset-journal is proven on."""
    return _as_version(version).line in SUPPORTED


def table(lines: tuple[Minor, ...] = SUPPORTED) -> list[tuple[FeatureSpec, list[bool]]]:
    """Each feature, with whether it runs on each of ``lines``: the compatibility page's
    table."""
    return [(f, [available(f.feature, f"{a}.{b}.0") for a, b in lines]) for f in FEATURES]


INTERNALS: tuple[Feature, ...] = tuple(f.feature for f in FEATURES if f.only)
"""The features that call Spark's internal classes (the state restore's helper)."""
DATABRICKS_CONF = "spark.databricks.clusterUsageTags.sparkVersion"
"""The setting Databricks Runtime gives every cluster's Spark (``17.3.x-scala2.13``); its
driver also has ``DATABRICKS_RUNTIME_VERSION`` in the environment."""


def runtime_problem(feature: Feature, version: SparkVersion | str,
                    databricks: str | None) -> str | None:
    """Why ``feature`` is refused on a vendor's runtime whose Spark internals are its
    own (``databricks``: the Databricks Runtime version, None elsewhere), whatever
    version its Spark reports; None when it runs there. Only the features that call
    Spark's internal classes are refused: the rest use Spark's public API."""
    if feature not in INTERNALS or not databricks:
        return None
    running = _as_version(version)
    found = spec(feature)
    line = (f"{found.title} calls Apache Spark's internal classes ({found.needs}), and "
            f"Databricks Runtime {databricks} builds its Spark {running.raw} with its own; "
            "refused before anything is written")
    return line + _instead(found, running)


def _instead(found: FeatureSpec, running: SparkVersion) -> str:
    """``: instead, A, or B``: what a refusal offers, only what this Spark has; empty
    when it has none of them."""
    options = [i.text for i in found.instead if i.needs is None or available(i.needs, running)]
    return ": instead, " + ", or ".join(options) if options else ""
