"""Under Spark Connect the listener is pickled and runs on the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from offset_journal.db import resolve_url

pytestmark = pytest.mark.spark


def test_listener_journals_under_spark_connect(journal_url, tmp_path):
    env = dict(os.environ, OFFSET_JOURNAL_DATABASE_URL=journal_url, PYSPARK_PYTHON=sys.executable)
    job = Path(__file__).with_name("connect_job.py")
    proc = subprocess.Popen([sys.executable, str(job), str(tmp_path / "spool")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    engine = sa.create_engine(resolve_url(journal_url))
    try:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["batches"] == [0, 1, 2]
        # The server-side listener journals asynchronously: wait for the terminated run.
        deadline = time.monotonic() + 60
        rows: list = []
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                rows = conn.execute(sa.text(
                    "select b.batch_id, s.end_offset, r.terminated_at is not null "
                    "from offset_journal.batches b join offset_journal.batch_sources s "
                    "on s.batch_pk = b.id join offset_journal.query_runs r using (run_id) "
                    "where b.query_name = 'connect_q' and b.run_id = :r order by b.batch_id"),
                    {"r": result["run_id"]}).all()
            if len(rows) == 3:
                break
            time.sleep(0.2)
        assert [(r[0], r[1]) for r in rows] == [
            (0, {"logOffset": 0}), (1, {"logOffset": 1}), (2, {"logOffset": 2})]
    finally:
        if proc.poll() is None:
            proc.kill()
        engine.dispose()
