"""The README's main command: the demo runs the upgrade story and proves it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobs_support import SHORT_LIVED_DRIVER

pytestmark = [pytest.mark.spark, pytest.mark.slow]


EXE = Path(sys.executable).with_name("offset-journal")


def _demo_env() -> dict[str, str]:
    """The demo's environment: this interpreter's workers, a short-lived driver's JIT,
    and no journal URL of the caller's (the demo's own defaults, or what it is given)."""
    env = {k: v for k, v in os.environ.items() if k != "OFFSET_JOURNAL_DATABASE_URL"}
    return {**SHORT_LIVED_DRIVER, **env, "PYSPARK_PYTHON": sys.executable}


def test_demo_proves_every_record_exactly_once(tmp_path):
    env = _demo_env()
    out = subprocess.run([str(EXE), "demo", "--records", "120", "--workdir", str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout
    assert "records produced     : 240" in lines
    assert "records in the output: 240" in lines
    assert "missing (gaps)       : 0" in lines and "written twice        : 0" in lines
    assert "RESULT: every record exactly once" in lines
    assert "2 runs journaled under 'demo-orders-to-lake', on 2 checkpoints." in lines
    assert "startingOffsets" in lines  # the restart plan was shown
    # ... held against what v1's file sink committed
    assert re.search(r"Sink: the file sink at \S+checkpoint=\w+ holds batches",
                     " ".join(lines.split())), lines
    # What a user does next, shown: the audit (clean) and the report.
    assert "$ offset-journal audit demo-orders-to-lake" in lines
    assert "OK: every partition contiguous" in lines
    assert f"wrote {tmp_path / 'report.html'}" in lines
    assert "<html" in (tmp_path / "report.html").read_text(encoding="utf-8")[:200].lower()
    # The new run's first batch shows where its plan started it, not a blank start.
    history = lines.split("Offset history of partition 0 in SQL", 1)[1].split("runs journaled")[0]
    assert " (plan " in history, history
    # One number for one upgrade. The plan shown before v2 starts is a
    # preview, not recorded; v2 starts from the plan its --from-journal records and links
    # (plan 1, with the offsets shown), and the history names that one.
    said = " ".join(lines.split())
    assert "Not recorded in the journal: a preview." in said
    assert "started from plan 1, which its --from-journal recorded and linked to the run: " \
           "the offsets shown above" in said
    assert " (plan 1)" in history
    assert set(re.findall(r"\bplan (\d+)", lines)) == {"1"}, re.findall(r".*plan \d+.*", lines)
    # Progress while Spark starts is one line per change, not a line
    # every half second with the same count.
    counts = re.findall(r"v1 batches so far: (\d+)", lines)
    assert counts and len(counts) == len(set(counts)) and int(counts[-1]) >= 3, counts


def test_demo_given_a_broker_that_is_still_starting_waits_for_it(journal_url, tmp_path):
    """docker-compose up -d, then the demo at once: the broker answers some seconds later
    (here a real broker started 12 s after the demo, on the port it was given: later
    than a first metadata request's 10 s)."""
    import threading

    from offset_journal.local.kafka import start_local_kafka
    from offset_journal.local.services import free_port

    port = free_port()
    brokers = []
    starter = threading.Timer(12, lambda: brokers.append(start_local_kafka(port=port)))
    starter.start()
    env = _demo_env()
    try:
        out = subprocess.run([str(EXE), "demo", "--records", "40", "--workdir", str(tmp_path),
                              "--database-url", journal_url,
                              "--bootstrap-servers", f"127.0.0.1:{port}"],
                             env=env, capture_output=True, text=True, timeout=600)
    finally:
        starter.join()
        for broker in brokers:
            broker.stop()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"waiting for Kafka at 127.0.0.1:{port} to answer (up to 60 s)" in out.stdout
    assert "RESULT: every record exactly once" in out.stdout
    assert brokers  # it was the late broker the demo used


def test_demo_stateful_carries_every_groups_totals_across_the_upgrade(
        journal_url, kafka_cluster, tmp_path):
    """``demo --stateful``: v1's running totals, a savepoint, records
    for old and new groups while it is down, v2 (transformWithState, 4 partitions) on a
    new checkpoint with the state restored: every group's totals are those over all
    records, and the audit is clean with v2's bootstrap run started from the plan.
    (On the session's Postgres and broker: the embedded ones are the first test's.)"""
    env = _demo_env()
    out = subprocess.run([str(EXE), "demo", "--stateful", "--records", "60", "--workdir",
                          str(tmp_path), "--database-url", journal_url,
                          "--bootstrap-servers", kafka_cluster.bootstrap_servers],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout
    assert "records produced          : 120" in lines and "groups                    : 16" \
        in lines, lines[-2000:]
    assert "groups whose totals match : 16" in lines
    assert "RESULT: every group's totals carried across the upgrade" in lines
    assert "savepoint 1 at " in lines and "--savepoint --restore" in lines
    assert "(1 started from a recorded plan); findings: 0 unexplained" in lines
    assert "OK: every partition contiguous" in lines
    assert re.search(r"plan\s+1 \(savepoint, (recorded|matched)\)", lines), lines[-2000:]
