"""Issue 20 item 6: times no clock reads (-infinity, before 1970) are refused when written
(migration 0011, for every role), and a row written before that, or a plan row no
plan command wrote, is skipped by the readers instead of failing the whole command."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from offset_journal.cli import main
from offset_journal.db import resolve_url
from tests.support import journal_batches, kafka_progress


def _sql(url: str, *statements: str, **params: str) -> None:
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement), params)
    finally:
        engine.dispose()


@pytest.mark.parametrize("when", ["-infinity", "infinity", "1969-12-31T23:59:59Z"])
def test_a_batch_time_no_clock_reads_is_refused(journal_url: str, when: str) -> None:
    journal_batches(journal_url, [kafka_progress(0, None, {"orders": {"0": 10}}, minute=0)])
    with pytest.raises(sa.exc.IntegrityError, match="batches_trigger_at_finite|future"):
        _sql(journal_url, "INSERT INTO offset_journal.batches (run_id, query_id, query_name, "
                          "batch_id, trigger_at) SELECT run_id, query_id, query_name, 9, "
                          "CAST(:when AS timestamptz) FROM offset_journal.batches LIMIT 1",
             when=when)
    with pytest.raises(sa.exc.IntegrityError, match="query_runs_started_at_finite"):
        _sql(journal_url, "UPDATE offset_journal.query_runs SET started_at = '-infinity'")


def test_rows_written_before_the_check_do_not_stop_the_readers(
        journal_url: str, capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    journal_batches(journal_url, [
        kafka_progress(0, None, {"orders": {"0": 10}}, minute=0),
        kafka_progress(1, {"orders": {"0": 10}}, {"orders": {"0": 20}}, minute=1)])
    _sql(journal_url,  # as a journal from before migration 0011 could hold them
         "ALTER TABLE offset_journal.batches DROP CONSTRAINT batches_trigger_at_finite",
         "UPDATE offset_journal.batches SET trigger_at = '-infinity' WHERE batch_id = 0",
         "ALTER TABLE offset_journal.batches ADD CONSTRAINT batches_trigger_at_finite CHECK "
         "(isfinite(trigger_at) AND trigger_at >= '1970-01-01T00:00:00Z') NOT VALID",
         "INSERT INTO offset_journal.restart_plans (query_name, position, mode, command, ok, "
         "request, options, kafka_offsets) VALUES ('orders', 'after', 'stateless', 'plan', "
         """true, '{}', '{}', '[["not", "a plan row"]]')""")
    for argv in (["plan", "orders"], ["starting-offsets", "orders"], ["history", "orders"],
                 ["runs", "orders"], ["audit", "orders"],
                 ["report", "orders", "-o", str(tmp_path / "report.html")]):
        code = main(["--database-url", journal_url, *argv])
        out, err = capsys.readouterr()
        assert code == 0, (argv, out, err)
        assert "Traceback" not in err and "unexpected" not in err, (argv, err)
    assert main(["--database-url", journal_url, "starting-offsets", "orders"]) == 0
    assert capsys.readouterr().out.strip() == '{"orders":{"0":20}}'
