"""Each feature on the Spark that runs it, and refused in one line on one that does not,
whichever supported PySpark is installed (scripts/spark-venv.sh makes one per release):
a savepoint of a real aggregation read back through ``initial_state`` into PySpark's
``transformWithStateInPandas`` (4.0's) where Spark has the State Data Source; the
refusals where it has not, nothing recorded or written."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal
from offset_journal.errors import ConfigError, RestoreError, SavepointError
from offset_journal.spark_version import available, needs_text, parse
from tests import restore_support as rs
from tests.payloads import sql_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.compat]


def _count_processor() -> Any:
    """v2 of groupBy(grp).count(): a value state seeded from the savepoint (a pandas
    frame per key, as transformWithStateInPandas hands it), counting on."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class Count(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.n = handle.getValueState("n", StructType([StructField("n", LongType())]))

        def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
            self.n.update((int(initialState["count"].iloc[0]),))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            n = (self.n.get()[0] if self.n.exists() else 0) + sum(len(f) for f in rows)
            self.n.update((n,))
            yield pd.DataFrame({"grp": [key[0]], "n": [n]})

        def close(self) -> None:
            pass

    return Count()


def _one_line(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("offset-journal: error: ")
    return lines[0]


def test_savepoint_and_initial_state_where_spark_has_them_refused_in_one_line_below(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    from pyspark import cloudpickle

    from offset_journal.savepoint import initial_state

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    produced = kafka_cluster.produce(kafka_topic, 40, value=rs.amounts)
    v1 = rs.events(spark, servers, kafka_topic).groupBy("grp").count()
    rs.run(v1.writeStream.outputMode("update").format("noop"), "counts", tmp_path / "ck-v1",
           listener)
    sp = tmp_path / "sp"
    code, out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                            "counts", "--checkpoint", str(tmp_path / "ck-v1"), "--to", str(sp))

    if not available("savepoint-create", spark.version):
        line = _one_line(code, err)
        assert "savepoint create needs Spark 4.0 or later" in line, line
        assert f"this is Spark {spark.version}" in line and "--discard-state" in line
        assert sql_rows(journal_url, "SELECT count(*) FROM offset_journal.savepoints") == [(0,)]
        assert not sp.exists() or not any(sp.iterdir())
        with pytest.raises(SavepointError, match=r"^initial_state .* needs Spark 4\.0"):
            initial_state(spark, str(sp), operator=0)
        # the command on its own (no session yet): refused before a JVM is started
        done = subprocess.run(
            [sys.executable, "-m", "offset_journal.cli", "--database-url", journal_url,
             "savepoint", "create", "counts", "--checkpoint", str(tmp_path / "ck-v1"),
             "--to", str(sp)], capture_output=True, text=True, timeout=120)
        assert _one_line(done.returncode, done.stderr) == line
        return

    assert code == 0, err
    (saved,) = Journal(journal_url).savepoints("counts")
    start = rs.ends(journal_url, str(sp))
    produced += kafka_cluster.produce(kafka_topic, 30, start=40, value=rs.amounts)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    seed = initial_state(spark, str(sp), operator=0, expect_sha256=saved.manifest_sha256)
    v2 = rs.events(spark, servers, kafka_topic, starting=start).groupBy(
        "grp").transformWithStateInPandas(_count_processor(), "grp string, n long", "Update",
                                          "None", initialState=seed)
    from offset_journal.savepoint.spark import PROVIDER_CONF, ROCKSDB_PROVIDER, session_conf

    with session_conf(spark, PROVIDER_CONF, ROCKSDB_PROVIDER):
        rs.run(v2.writeStream.outputMode("update").format("noop"), "counts",
               tmp_path / "ck-v2", listener)
    got = {r.key.grp: r.value.n for r in rs.state(spark, tmp_path / "ck-v2",
                                                  stateVarName="n")}
    # every record counted once: v1's by the savepoint, the rest by v2 from its end
    assert got == dict(Counter(v.decode().split(",")[0] for *_x, v in produced))


def test_what_this_spark_lacks_is_refused_in_one_line_before_anything_runs(spark, tmp_path):
    """The state restore and repartition (4.2's internals) and attach() (3.5's listener)
    on the Spark installed: refused in one line where it lacks them, with nothing
    written; the restore's helper jar likewise (the package ships none for this minor)."""
    from offset_journal.local.jars import JarsError, state_restore_jar
    from offset_journal.state._jvm import check_version

    running = spark.version
    for feature in ("state-restore", "state-repartition"):
        if available(feature, running):
            check_version(spark, feature)
            continue
        with pytest.raises(RestoreError) as err:
            check_version(spark, feature)
        assert f"needs {needs_text(feature)}" in str(err.value)
        assert f"this is Spark {running}" in str(err.value) and "\n" not in str(err.value)
    if available("state-restore", running):
        major, minor = parse(running).line
        assert state_restore_jar().name == f"state-restore-spark{major}.{minor}.jar"
    else:
        with pytest.raises(JarsError, match=r"^no state-restore helper for Spark "
                                            rf"{running}: state restore"):
            state_restore_jar()
    assert available("journal", running)  # every supported Spark has the listener

    class Older:  # what attach() reads of a session on a Spark before 3.5
        version = "3.4.3"

    from offset_journal import attach

    with pytest.raises(ConfigError, match=r"^the listener \(attach\) needs Spark 3\.5"):
        attach(Older(), database_url="postgresql://unused/x", spool_dir=str(tmp_path))
    assert not list(Path(tmp_path).iterdir())
