"""The checks ``state repartition`` makes before it writes: the checkpoint's own first,
then whether the query may be running, as the journal and the session tell (pure); and
the command making those that need no Spark before it starts a session. The
repartition itself runs in tests/state/test_restore_e2e.py."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from offset_journal.checkpoint import Checkpoint, CheckpointBatch
from offset_journal.checkpoint.commits import ROCKSDB_PROVIDER as ROCKSDB
from offset_journal.errors import RestoreError
from offset_journal.state.repartition import check_repartition


def _checkpoint(*, committed: bool = True, provider: str = ROCKSDB) -> Checkpoint:
    conf = {"spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.stateStore.providerClass": provider}
    batches = tuple(CheckpointBatch(i, committed or i == 0, 1, 0, 0, conf, ({"t": {"0": i}},),
                                    (f'{{"t":{{"0":{i}}}}}',)) for i in range(2))
    return Checkpoint("/ck", "qid-1", batches)


def _run(ended: bool) -> SimpleNamespace:
    return SimpleNamespace(query_name="totals", run_id="r1",
                           terminated_at=datetime(2026, 1, 1, tzinfo=UTC) if ended else None)


def test_a_query_id_the_journal_has_no_run_of_needs_assume_stopped() -> None:
    ck = _checkpoint()
    with pytest.raises(RestoreError, match=r"the journal has no run of query id qid-1 "
                                           r"\(/ck's\), so it cannot tell.*--assume-stopped"):
        check_repartition(ck, 4, [])
    assert check_repartition(ck, 4, [], assume_stopped=True) == 2
    assert check_repartition(ck, 4, [_run(ended=True)]) == 2
    with pytest.raises(RestoreError, match="is running on /ck as far as the journal knows"):
        check_repartition(ck, 4, [_run(ended=False)])
    assert check_repartition(ck, 4, [_run(ended=False)], assume_stopped=True) == 2


def test_a_query_running_in_the_session_is_refused_whatever_is_assumed() -> None:
    ck = _checkpoint()
    for runs in ([], [_run(ended=True)], [_run(ended=False)]):
        with pytest.raises(RestoreError, match="runs in this Spark session: stop it first"):
            check_repartition(ck, 4, runs, assume_stopped=True, running_here=True)


def test_the_checkpoints_own_refusals_come_first() -> None:
    with pytest.raises(RestoreError, match="batch 1 did not commit"):
        check_repartition(_checkpoint(committed=False), 4, [])
    with pytest.raises(RestoreError, match="keeps its state on HDFSBackedStateStoreProvider"):
        check_repartition(_checkpoint(provider="x.HDFSBackedStateStoreProvider"), 4, [])
    with pytest.raises(RestoreError, match="runs with 2 partitions already"):
        check_repartition(_checkpoint(), 2, [])


def test_what_needs_no_spark_is_refused_before_a_session_starts(journal_url: str,
                                                                   tmp_path) -> None:
    """The checkpoint and the journal are read before the command starts Spark: a
    credentials URL and a missing checkpoint are refused by them, in one line, and the
    master given (one Spark could not parse) is never reached."""
    import subprocess
    import sys

    from tests.support import one_error_line

    cases = {"s3a://KEY:abc/defSECRET@bucket/ck1": "credentials in a URL are not taken",
             str(tmp_path / "nowhere"): "nowhere"}
    for checkpoint, expected in cases.items():
        done = subprocess.run(
            [sys.executable, "-m", "offset_journal.cli", "--database-url", journal_url,
             "state", "repartition", "--checkpoint", checkpoint, "--partitions", "4",
             "--master", "no-such-master://x"],
            capture_output=True, text=True, timeout=120)
        line = one_error_line(done.returncode, done.stderr)
        assert expected in line and "SECRET" not in line and "master" not in line.lower()
