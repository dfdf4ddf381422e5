"""Which Spark runs and what runs on it, decided in one place (no Spark: the quick tier).

The versions are the strings Spark and the platforms report (``spark.version``); the
features and their minimum versions are Spark's own (its sources and docs): the Python
listener with onQueryIdle 3.5, the State Data Source 4.0, PySpark's
``transformWithStateInPandas(initialState=)`` 4.0, the internal state writer 4.2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from offset_journal.errors import ConfigError, RestoreError, SavepointError
from offset_journal.spark_version import (
    FEATURES,
    SUPPORTED,
    available,
    default_scala,
    needs_text,
    parse,
    problem,
    require,
    table,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("raw", "numbers", "vendor"), [
    ("4.2.0", (4, 2, 0), False),
    ("4.2.1", (4, 2, 1), False),
    ("3.5.6-amzn-2", (3, 5, 6), True),  # EMR 7.x
    ("4.1.0-SNAPSHOT", (4, 1, 0), True),  # a build from source
    ("3.5.4.7.3.1.0-197", (3, 5, 4), True),  # Cloudera 7.3.1
    (" 4.0.2 ", (4, 0, 2), False),
    ("4.2", (4, 2, 0), False),
])
def test_parse_keeps_the_release_numbers_and_the_string_spark_gave(raw, numbers, vendor):
    found = parse(raw)
    assert (found.major, found.minor, found.patch) == numbers
    assert found.raw == raw.strip() and str(found) == raw.strip()
    assert found.vendor_build is vendor
    assert found.release == ".".join(map(str, numbers))


@pytest.mark.parametrize("raw", ["", "four", "4", "v4.2.0", "4.2.0 x", "4..2", "4.2.0\n3.5.1"])
def test_what_is_not_a_spark_version_is_one_line(raw):
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert "\n" not in str(err.value) and str(err.value).startswith("not a Spark version")


def test_each_feature_runs_from_the_spark_that_has_what_it_needs():
    runs = {f.feature: [v for v in ("3.4.3", "3.5.1", "4.0.0", "4.1.1", "4.2.0", "4.2.1",
                                    "4.3.0", "5.0.0") if available(f.feature, v)]
            for f in FEATURES}
    everywhere = ["3.5.1", "4.0.0", "4.1.1", "4.2.0", "4.2.1", "4.3.0", "5.0.0"]
    for feature in ("journal", "plans", "audit", "check", "retention", "report", "checkpoint"):
        assert runs[feature] == everywhere, feature
    assert runs["savepoint-create"] == everywhere[1:]
    assert runs["initial-state"] == everywhere[1:]
    assert runs["real-time"] == everywhere[2:]
    assert runs["transform-with-state"] == everywhere[2:]
    # Spark's internal classes: the minors the helper is compiled for, any patch of them
    assert runs["state-restore"] == ["4.2.0", "4.2.1", "4.3.0"]
    assert runs["state-repartition"] == ["4.2.0", "4.2.1"]


def test_vendor_builds_and_patches_count_as_their_apache_release():
    for raw in ("4.2.1", "4.2.0-amzn-1", "4.2.3-SNAPSHOT", "4.2"):
        assert problem("state-restore", raw) is None, raw
    assert available("savepoint-create", "4.0.2-amzn-0")
    assert not available("savepoint-create", "3.5.6-amzn-2")


def test_a_refusal_names_the_spark_it_needs_and_what_this_spark_can_do_instead():
    line = problem("savepoint-create", "3.5.6-amzn-2")
    assert line == (
        "savepoint create needs Spark 4.0 or later: Spark's State Data Source (format "
        "statestore and state-metadata); this is Spark 3.5.6-amzn-2: instead, restart "
        "without the state (offset-journal plan --discard-state), or plan the restart "
        "without a savepoint (offset-journal plan)")
    # the restore on 4.1 offers the Python seed, which 4.1 has; on 3.5 it does not
    on_41 = problem("state-restore", "4.1.1")
    assert on_41 is not None and on_41.startswith(
        "state restore (a savepoint written into a new checkpoint) needs Spark 4.2 or 4.3 (any "
        "4.2.x, 4.3.x): ")
    assert "this is Spark 4.1.1: instead, seed the new query in Python from a savepoint " \
           "(initial_state), or restart without the state" in on_41
    on_35 = problem("state-restore", "3.5.1")
    assert on_35 is not None and "initial_state" not in on_35 and "--discard-state" in on_35
    assert "needs Spark 4.2 (any 4.2.x)" in (problem("state-repartition", "4.3.0") or "")
    for feature in (f.feature for f in FEATURES):
        for raw in ("3.4.1", "3.5.1", "4.0.0", "4.1.1", "4.3.0"):
            found = problem(feature, raw)
            assert found is None or ("\n" not in found and f"this is Spark {raw}" in found)


def test_require_raises_the_callers_error_with_the_line():
    assert require("state-restore", "4.2.1").release == "4.2.1"
    with pytest.raises(RestoreError, match=r"^state restore .* this is Spark 4\.1\.1"):
        require("state-restore", "4.1.1", RestoreError)
    with pytest.raises(SavepointError, match=r"needs Spark 4\.0 or later"):
        require("initial-state", "3.5.7", SavepointError)
    with pytest.raises(ConfigError, match=r"^the listener \(attach\) needs Spark 3\.5 or later"):
        require("journal", "3.4.1")


def test_needs_text_and_the_default_scala():
    assert needs_text("savepoint-create") == "Spark 4.0 or later"
    assert needs_text("state-restore") == "Spark 4.2 or 4.3 (any 4.2.x, 4.3.x)"
    assert needs_text("state-repartition") == "Spark 4.2 (any 4.2.x)"
    assert [default_scala(v) for v in ("3.5.1", "3.5.7", "4.0.0", "4.2.0")] == [
        "2.12", "2.12", "2.13", "2.13"]
    assert SUPPORTED == ((3, 5), (4, 0), (4, 1), (4, 2))


def test_the_compatibility_page_is_this_table():
    """docs/compatibility.md's feature table is :func:`table`, row for row: the page
    cannot say a feature runs where the code refuses it."""
    page = (ROOT / "docs" / "compatibility.md").read_text()
    section = page.split("## Features by Spark version", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ")]
    header, body = rows[0], rows[1:]
    assert [c.strip() for c in header.strip("|").split("|")][1:] == [
        f"{a}.{b}" for a, b in SUPPORTED]
    listed = []
    for row in body:
        cells = [c.strip() for c in row.strip("|").split("|")]
        listed.append((cells[0], [c.startswith("yes") for c in cells[1:]]))
    expected = [(spec.title, flags) for spec, flags in table()]
    assert [(re.sub(r"`", "", name), flags) for name, flags in listed] == expected
