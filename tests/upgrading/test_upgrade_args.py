"""``offset_journal.upgrade``'s arguments checked before v1 is touched: a mistake in them
(a v2 checkpoint that is not new, as a rolled-back v2's is; two of the three places
one; a savepoint location that cannot be written; no time to wait) is said in one line
with nothing stopped, nothing written and nothing journaled. Postgres (the journal), no
Spark: the checks come before anything Spark does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from offset_journal import Journal, OffsetJournalError


def _no_build(spark: Any, checkpoint: str, starting: Any) -> Any:
    raise AssertionError("nothing is built when the arguments are refused")


def _upgrade(journal: Journal, tmp_path: Path, **kw: Any) -> Any:
    from offset_journal import upgrade

    args: dict[str, Any] = {"checkpoint": str(tmp_path / "ck-v1"),
                            "savepoint_to": str(tmp_path / "sp"), "timeout_s": 30.0}
    args.update(kw)
    new = args.pop("new_checkpoint", str(tmp_path / "ck-v2"))
    return upgrade(None, None, _no_build, new, journal=journal, build_v1=_no_build,
                   query_name="totals", **args)


def test_bad_arguments_are_refused_before_v1_is_touched(journal_url, tmp_path):
    (tmp_path / "ck-v1" / "offsets").mkdir(parents=True)
    (tmp_path / "ck-v1" / "metadata").write_text('{"id":"q"}\n')
    left_over = tmp_path / "ck-v2-rolled-back" / "commits"
    left_over.mkdir(parents=True)  # a rolled-back v2's checkpoint
    (tmp_path / "a-file").write_text("x")
    cases = {
        "the new checkpoint .* is not new .*remove it, or give another":
            {"new_checkpoint": str(tmp_path / "ck-v2-rolled-back")},
        r"v1's checkpoint \(.*\) and the new checkpoint \(.*\) are one place":
            {"new_checkpoint": str(tmp_path / "ck-v1") + "/"},
        r"the new checkpoint \(.*\) and savepoint_to \(.*\) are one place":
            {"savepoint_to": str(tmp_path / "ck-v2" / "sp")},
        "the savepoint location .* is not writable":
            {"savepoint_to": str(tmp_path / "a-file" / "sp")},
        "v1's checkpoint .*/ck-v0 is missing or empty": {"checkpoint": str(tmp_path / "ck-v0")},
        "timeout_s=0: give the bound on each wait": {"timeout_s": 0},
        "batches=0: verify at least 1 batch": {"batches": 0},
    }
    with Journal(journal_url) as journal:
        for message, kw in cases.items():
            with pytest.raises(OffsetJournalError, match=message) as refused:
                _upgrade(journal, tmp_path, **kw)
            assert "\n" not in str(refused.value), message
        assert journal.recorded_plans("totals") == []
    assert sorted(p.name for p in (tmp_path / "ck-v1").iterdir()) == ["metadata", "offsets"]
    assert list(left_over.parent.iterdir()) == [left_over]
    assert not (tmp_path / "sp").exists() and not (tmp_path / "ck-v2").exists()


def test_the_jobs_upgrade_refuses_bad_arguments_in_one_line(journal_url, tmp_path):
    """jobs/stateful_counts.py --upgrade-from: the same checks, before any Spark work, as
    the one line the job prints (an OffsetJournalError, which run_job says in a line)."""
    from tests.jobs_support import load_job

    job = load_job("stateful_counts")
    (tmp_path / "ck-v1" / "offsets").mkdir(parents=True)
    common = ["--bootstrap-servers", "localhost:9", "--topics", "t", "--query-name",
              "totals-job", "--database-url", journal_url, "--output", str(tmp_path / "out"),
              "--savepoint-to", str(tmp_path / "sp")]
    cases = {
        "timeout_s=0.0: give the bound": ["--checkpoint", str(tmp_path / "ck-v2"),
                                           "--upgrade-from", str(tmp_path / "ck-v1"),
                                           "--verify-timeout", "0"],
        "v1's checkpoint .*/ck-typo is missing or empty": [
            "--checkpoint", str(tmp_path / "ck-v2"), "--upgrade-from", str(tmp_path / "ck-typo")],
        "v1's checkpoint .* and the new checkpoint .* are one place": [
            "--checkpoint", str(tmp_path / "ck-v1"), "--upgrade-from", str(tmp_path / "ck-v1")],
    }
    for message, argv in cases.items():
        with pytest.raises(OffsetJournalError, match=message) as refused:
            job.build_query(None, job.parser().parse_args([*common, *argv]))
        assert "\n" not in str(refused.value), message
    with Journal(journal_url) as journal:
        assert journal.recorded_plans("totals-job") == []


SCRIPT = """
import sys
from pyspark.sql import SparkSession
from offset_journal import Journal, OffsetJournalError, upgrade

url, base = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .getOrCreate())  # no spark.jars: no state-restore helper

def build(spark, checkpoint, starting):
    raise AssertionError("nothing is built when the session cannot restore")

with Journal(url) as journal:
    try:
        done = upgrade(spark, None, build, base + "/ck-v2", journal=journal, build_v1=build,
                       savepoint_to=base + "/sp", checkpoint=base + "/ck-v1",
                       query_name="totals", timeout_s=30)
    except OffsetJournalError as exc:
        print("REFUSED:", exc)
    else:
        print("NOT REFUSED:", " ".join(done.explain().split()))
spark.stop()
"""


@pytest.mark.spark
def test_a_session_that_cannot_restore_is_refused_before_v1_is_touched(journal_url, tmp_path):
    """A driver without the restore's helper jar (a notebook started without
    ``offset-journal jars state-restore``) is told so before v1 is stopped and a
    savepoint taken for nothing. Its own Spark session, in a process of its own."""
    import os
    import subprocess
    import sys

    (tmp_path / "ck-v1" / "offsets").mkdir(parents=True)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-c", SCRIPT, journal_url, str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "REFUSED: offset-journal's state-restore helper is not on this session's class " \
        "path" in out.stdout, out.stdout
    with Journal(journal_url) as journal:
        assert journal.recorded_plans("totals") == []
    assert not (tmp_path / "sp").exists() or not any((tmp_path / "sp").iterdir())
