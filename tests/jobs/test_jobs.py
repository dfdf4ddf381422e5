"""The jobs' start decisions, without Spark: a job that cannot start says why in one line
(JobError, which run_job prints and exits 2 with), never with a traceback."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from offset_journal.journal import Journal
from offset_journal.records import batch_from_progress
from tests.jobs_support import load_job
from tests.payloads import kafka_source, progress


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _args(tmp_path: Any, database_url: str, *extra: str) -> Any:
    common = load_job("_common")
    return common.base_parser("test").parse_args([
        "--bootstrap-servers", f"127.0.0.1:{_free_port()}", "--topics", "t",
        "--query-name", "q", "--checkpoint", str(tmp_path / "chk"),
        "--database-url", database_url, "--from-journal", *extra])


def test_unreachable_journal_is_a_job_error(tmp_path):
    common = load_job("_common")
    url = f"postgresql://u:s3cret@127.0.0.1:{_free_port()}/none"
    with pytest.raises(common.JobError) as info:
        common.decide_start(_args(tmp_path, url))
    assert "s3cret" not in str(info.value)


def test_malformed_batch_is_a_job_error(journal_url, tmp_path):
    common = load_job("_common")
    with pytest.raises(common.JobError, match="argument --batch"):
        common.decide_start(_args(tmp_path, journal_url, "--batch", "no-batch-id"))


def test_a_malformed_plan_option_is_one_line_and_exit_2(journal_url, tmp_path, capsys):
    """The jobs take the plan options the command line declares (one declaration), and
    refuse a bad one before Spark starts: one line, exit 2."""
    job = load_job("kafka_to_sink")
    argv = ["--bootstrap-servers", "127.0.0.1:1", "--topics", "t", "--query-name", "q",
            "--checkpoint", str(tmp_path / "chk"), "--database-url", journal_url,
            "--from-journal", "--output", str(tmp_path / "out")]
    assert job.main([*argv, "--batch", "run-without-batch-id"]) == 2
    assert job.main([*argv, "--as-of", "2024-01-01", "--batch", "r:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("kafka_to_sink: error: ") for line in err)
    assert "--batch" in err[0] and "not allowed with" in err[1]


def test_unreachable_kafka_is_a_job_error(journal_url, tmp_path):
    common = load_job("_common")
    with Journal(journal_url) as journal:
        journal.record_batch(batch_from_progress(progress(
            0, name="q", sources=[kafka_source("t", None, {"t": {"0": 5}})])))
    with pytest.raises(common.JobError):
        common.decide_start(_args(tmp_path, journal_url))


def test_window_lengths_read_as_spark_reads_them():
    from datetime import timedelta

    windowed = load_job("windowed_counts")
    assert windowed.parse_duration("500 ms") == timedelta(milliseconds=500)
    assert windowed.parse_duration("250 milliseconds") == timedelta(milliseconds=250)
    assert windowed.parse_duration("1 minute") == timedelta(minutes=1)
    assert windowed.parse_duration("30 seconds") == timedelta(seconds=30)
    assert windowed.parse_duration("10s") == timedelta(seconds=10)
    assert windowed.parse_duration("2 hours") == timedelta(hours=2)
    with pytest.raises(windowed.JobError):
        windowed.parse_duration("a while")


def test_malformed_or_future_from_time_is_a_job_error(journal_url, tmp_path):
    common = load_job("_common")
    with Journal(journal_url) as journal:
        journal.record_batch(batch_from_progress(progress(
            0, name="q", sources=[kafka_source("t", None, {"t": {"0": 5}})])))
    with pytest.raises(common.JobError, match="argument --from-time"):
        common.decide_start(_args(tmp_path, journal_url, "--from-time", "yesterday-ish"))
    with pytest.raises(common.JobError, match="in the future"):
        common.decide_start(_args(tmp_path, journal_url, "--from-time", "2999-01-01T00:00:00Z"))
