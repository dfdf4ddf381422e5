"""The batch in flight on the command line, against a real journal (Postgres): `starting-offsets`
after a sink that holds batches beyond the journal starts after them and journals them;
bad input (a path that is not a sink, another query's sink or checkpoint, a Delta table
with no txn of the old query, offsets/N gone) is one line, a non-zero exit, and nothing
recorded or journaled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offset_journal.journal import Journal
from offset_journal.records import batch_from_progress
from tests.checkpoint.test_sink_logs import delta_log, sink_log
from tests.payloads import QUERY_ID, kafka_source, progress
from tests.restart.test_sink_plan import ends
from tests.support import Cli, count_rows, one_error_line, write_checkpoint


@pytest.fixture
def killed(journal_url: str, tmp_path: Path) -> dict[str, str]:
    """A query killed after its file sink logged batch 5 and before commits/5; the
    journal has batches 0..3 (the listener lost 4's event)."""
    out = tmp_path / "out"
    journal_batches_0_to_3(journal_url, str(out))
    write_checkpoint(tmp_path / "ck-v1", QUERY_ID,
                     [([ends(b)], b <= 4) for b in range(6)],
                     initial={"0": {"orders": {"0": 0, "1": 0}}})
    sink_log(out, range(6))
    return {"url": journal_url, "out": str(out), "ck": str(tmp_path / "ck-v1"),
            "new": str(tmp_path / "ck-v2")}


def journal_batches_0_to_3(url: str, sink: str) -> str:
    """Batches 0..3 of query ``orders`` journaled, its file sink at ``sink``; the query id."""
    with Journal(url) as journal:
        for b in range(4):
            payload = json.loads(progress(b, name="orders", sources=[kafka_source(
                "orders", ends(b - 1) if b else None, ends(b))]))
            payload["sink"]["description"] = f"FileSink[{sink}]"
            assert journal.record_batch(batch_from_progress(json.dumps(payload)))
    return str(payload["id"])


def _start(cli: Cli, k: dict[str, str], *extra: str) -> tuple[int, str, str]:
    return cli("--database-url", k["url"], "starting-offsets", "orders", "--checkpoint",
               k["new"], *extra)


def test_starting_offsets_after_the_sinks_last_batch_journals_what_it_took(cli, killed):
    code, out, err = _start(cli, killed, "--old-checkpoint", killed["ck"])
    assert code == 0, err
    assert out.strip() == '{"orders":{"0":60,"1":120}}'  # after batch 5: offsets/5
    assert count_rows(killed["url"], "batches") == 6 and count_rows(killed["url"],
                                                                    "restart_plans") == 1
    with Journal(killed["url"]) as journal:
        (recorded,) = journal.recorded_plans("orders")
        assert recorded.sink["taken"] == [4, 5] and recorded.anchor_batch_id == 5
        assert [b.batch_id for b in journal.history("orders")] == [0, 1, 2, 3, 4, 5]
    # the journal is complete again: the next plan sees nothing in flight
    code, out, err = cli("--database-url", killed["url"], "plan", "orders",
                         "--old-checkpoint", killed["ck"])
    assert code == 0 and "holds batches up to 5, the journal's last" in " ".join(out.split())


def test_without_the_old_checkpoint_nothing_is_handed_out(cli, killed):
    code, out, err = _start(cli, killed)
    assert code == 1 and out == ""
    assert "give it (--old-checkpoint DIR)" in err
    assert count_rows(killed["url"], "batches") == 4


@pytest.mark.parametrize("case", ["not-a-sink", "another-path", "delta-no-txn",
                                  "another-checkpoint", "offsets-gone"])
def test_bad_sink_input_is_one_line_and_records_nothing(cli, killed, tmp_path, case):
    extra = ["--old-checkpoint", killed["ck"]]
    if case == "not-a-sink":
        (tmp_path / "plain").mkdir()
        extra += ["--sink", str(tmp_path / "plain")]
        said = "is not a sink this plan can read"
    elif case == "another-path":
        extra += ["--sink", str(sink_log(tmp_path / "other", range(9)))]
        said = "another query's sink"
    elif case == "delta-no-txn":
        table, _ = delta_log(tmp_path / "table", 3, {"some-other-query": 0})
        extra += ["--sink", f"delta:{table}"]
        said = "another query's sink"  # the journal names a file sink
    elif case == "another-checkpoint":
        write_checkpoint(tmp_path / "ck-x", "qid-someone-else", [([ends(0)], True)])
        extra = ["--old-checkpoint", str(tmp_path / "ck-x")]
        said = "another query's checkpoint"
    else:
        (Path(killed["ck"]) / "offsets" / "4").unlink()
        said = "offsets/4 of the old checkpoint"
    for command in ("starting-offsets", "plan"):
        code, out, err = cli("--database-url", killed["url"], command, "orders", *extra)
        assert said in one_error_line(code, err) and out == ""
    assert count_rows(killed["url"], "batches") == 4
    assert count_rows(killed["url"], "restart_plans") == 0


def test_a_delta_table_without_the_old_querys_txn_is_refused(cli, journal_url, tmp_path):
    table, _ = delta_log(tmp_path / "table", 3, {"some-other-query": 0})
    with Journal(journal_url) as journal:
        payload = json.loads(progress(0, name="orders",
                                      sources=[kafka_source("orders", None, ends(0))]))
        payload["sink"]["description"] = f"DeltaSink[{table}]"
        journal.record_batch(batch_from_progress(json.dumps(payload)))
    code, out, err = cli("--database-url", journal_url, "starting-offsets", "orders")
    line = one_error_line(code, err)
    assert f"has no txn of the old query (appId {QUERY_ID}; the appIds it has: " \
           "some-other-query)" in line
    assert count_rows(journal_url, "restart_plans") == 0


def test_a_journaled_sink_that_cannot_be_read_is_refused_and_none_skips_it(
        cli, journal_url, monkeypatch):
    """The sink the journal names is read wherever it lives: on S3 with no credentials
    anywhere (botocore says so before sending a request), the plan refuses in one line
    naming what to give; --sink none plans without it."""
    from tests.s3_support import AWS_VARIABLES

    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with Journal(journal_url) as journal:
        payload = json.loads(progress(0, name="orders",
                                      sources=[kafka_source("orders", None, ends(0))]))
        payload["sink"]["description"] = "DeltaSink[s3://bucket/table]"
        journal.record_batch(batch_from_progress(json.dumps(payload)))
    for command in ("plan", "starting-offsets"):
        code, out, err = cli("--database-url", journal_url, command, "orders")
        line = one_error_line(code, err)
        assert out == "" and "the Delta table at s3://bucket/table" in line
        assert "cannot be read: s3://bucket/table: no credentials for the object store" in line
        assert "--sink delta:PATH" in line and "(--sink none)" in line
    assert count_rows(journal_url, "restart_plans") == 0
    code, out, err = cli("--database-url", journal_url, "plan", "orders", "--format", "json",
                         "--sink", "none")
    assert code == 0 and not any("sink" in w for w in json.loads(out)["warnings"])


def test_a_planner_records_the_plan_and_says_it_could_not_journal_the_batches(cli, killed):
    """The planner role may record plans, not write batches: the plan is handed out and
    recorded with the sink's batches (the audit reads the run from it as planned), and a
    warning says the batches were not journaled."""
    import uuid

    import sqlalchemy as sa

    from offset_journal.journal.db import resolve_url
    from offset_journal.journal.roles import grant

    planner = f"oj_plan_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(resolve_url(killed["url"]), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{planner}" LOGIN')
    engine.dispose()
    grant(killed["url"], planner=planner)
    url = sa.engine.make_url(killed["url"]).set(username=planner).render_as_string(False)
    code, out, err = cli("--database-url", url, "starting-offsets", "orders",
                         "--old-checkpoint", killed["ck"])
    assert code == 0 and out.strip() == '{"orders":{"0":60,"1":120}}', err
    assert "batches 4..5 of run" in err and "were not journaled (permission denied" in err
    assert count_rows(killed["url"], "batches") == 4
    with Journal(killed["url"]) as journal:
        (recorded,) = journal.recorded_plans("orders")
    assert recorded.sink["taken"] == [4, 5]
