"""What a failed Maven run lacked, named in full (no Maven runs here: the quick tier).

The outputs are Maven's own, as it printed them on this machine (``mvn -B -q``, colour
codes included) for artifacts the registry does not serve."""

from __future__ import annotations

from offset_journal.local._maven import coordinate, missing, reason

# `offset-journal jars kafka-connector --version 4.0.4`: the connector's pom resolves, the
# token provider it depends on does not. The artifact missing is 600 characters in.
TOKEN_PROVIDER = (
    "\x1b[0m\x1b[0m[ERROR] Failed to execute goal on project kafka-connector-jars: Could not "
    "resolve dependencies for project io.offsetjournal:kafka-connector-jars:pom:1: Failed to "
    "collect dependencies at org.apache.spark:spark-sql-kafka-0-10_2.13:jar:4.0.4 -> "
    "org.apache.spark:spark-token-provider-kafka-0-10_2.13:jar:4.0.4: Failed to read artifact "
    "descriptor for org.apache.spark:spark-token-provider-kafka-0-10_2.13:jar:4.0.4: Could not "
    "transfer artifact org.apache.spark:spark-token-provider-kafka-0-10_2.13:pom:4.0.4 from/to "
    "gcs-maven-central-mirror (https://maven-central.storage-download.googleapis.com/maven2/): "
    "transfer failed for https://maven-central.storage-download.googleapis.com/maven2/org/"
    "apache/spark/spark-token-provider-kafka-0-10_2.13/4.0.4/spark-token-provider-kafka-0-10_"
    "2.13-4.0.4.pom: Unknown host maven-central.storage-download.googleapis.com: Name or "
    "service not known -> [Help 1]\n"
    "[ERROR] \n"
    "[ERROR] To see the full stack trace of the errors, re-run Maven with the -e switch.\n")

# A version no registry has: the first artifact itself is absent.
ABSENT = (
    "[ERROR] Failed to execute goal on project kafka-connector-jars: Could not resolve "
    "dependencies for project io.offsetjournal:kafka-connector-jars:pom:1: The following "
    "artifacts could not be resolved: org.apache.spark:spark-sql-kafka-0-10_2.13:jar:9.9.9 "
    "(absent): Could not find artifact org.apache.spark:spark-sql-kafka-0-10_2.13:jar:9.9.9 in "
    "central (https://repo.maven.apache.org/maven2) -> [Help 1]\n")

COMPILE = ("[ERROR] COMPILATION ERROR : \n"
           "[ERROR] /src/StateRestore.java:[41,8] cannot find symbol\n"
           "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-compiler-plugin:3.13.0:"
           "compile (default-compile) on project state-restore: Compilation failure\n")


def test_the_missing_dependency_is_named_in_full_with_what_needed_it():
    found = missing(TOKEN_PROVIDER)
    assert found is not None
    assert found.artifact == "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.0.4"
    assert found.needed_by == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.4"
    assert found.reason == (
        "Unknown host maven-central.storage-download.googleapis.com: Name or service not known "
        "(from gcs-maven-central-mirror, "
        "https://maven-central.storage-download.googleapis.com/maven2/)")
    assert reason(TOKEN_PROVIDER) == (
        "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.0.4 (needed by "
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.4) cannot be had: " + found.reason)


def test_an_absent_artifact_is_named_with_the_repository_that_lacks_it():
    assert reason(ABSENT) == (
        "org.apache.spark:spark-sql-kafka-0-10_2.13:9.9.9 cannot be had: not found in central "
        "(https://repo.maven.apache.org/maven2)")


def test_a_failure_that_is_no_missing_artifact_keeps_mavens_line_whole():
    assert missing(COMPILE) is None
    assert reason(COMPILE) == (
        "Failed to execute goal org.apache.maven.plugins:maven-compiler-plugin:3.13.0:compile "
        "(default-compile) on project state-restore: Compilation failure")
    assert reason("") == "no error message"
    assert coordinate("io.delta:delta-spark_2.12:jar:3.2.1") == "io.delta:delta-spark_2.12:3.2.1"
