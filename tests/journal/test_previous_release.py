"""A listener of the previous release keeps journaling into a journal
upgraded to 0013 (offsets as arrays), with the grants it was given before the upgrade,
and nothing it writes is lost or read differently.

The previous release is the repository at PREVIOUS (the last commit before 0013),
exported from git and imported in a child process: this needs the clone's history (a
shallow clone fails here, in one line, rather than skip the check).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import sqlalchemy as sa
from alembic import command

from offset_journal.journal import Journal
from offset_journal.journal.db import alembic_config, resolve_url, upgrade
from offset_journal.records import PROGRESS, STARTED, batch_from_progress
from tests.payloads import kafka_source, progress, sql_rows

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = "79f8003"  # offset-journal before migration 0013

_OLD_WRITER = """
import json, sys
import offset_journal
from offset_journal.writer import Writer, WriterConfig  # the previous release's path
assert offset_journal.__file__.startswith(sys.argv[4]), offset_journal.__file__
w = Writer(WriterConfig(sys.argv[1], sys.argv[2]))
w.start()
for event in json.loads(sys.argv[3]):
    w.submit(event)
ok = w.flush(timeout=60)
stats = w.stats()
w.close()
print(json.dumps({"ok": ok, "rejected": stats.rejected, "lost": stats.lost}))
"""


def _previous_release(tmp: Path) -> Path:
    tree = tmp / "previous"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS],
                             capture_output=True, check=False)
    assert archive.returncode == 0, (
        f"the previous release {PREVIOUS} is not in this clone's history: "
        f"{archive.stderr.decode().strip()} (a shallow clone? `git fetch --unshallow`)")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def _run_previous(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # cwd: ``-m``/``-c`` put it first on sys.path, before PYTHONPATH
    return subprocess.run([sys.executable, *args], env=env, cwd=tree, capture_output=True,
                          text=True, timeout=180, check=False)


def _events(run: str, batches: range) -> list[dict[str, object]]:
    out: list[dict[str, object]] = [{"type": STARTED, "query_id": "q-prev", "run_id": run,
                                     "name": "prev_q", "timestamp": "2026-11-01T00:00:00.000Z"}]
    for i in batches:
        out.append({"type": PROGRESS, "json": _progress(run, i)})
    return out


def _progress(run: str, i: int) -> str:
    start = {"t": {str(p): 10 * i + p for p in range(3)}}
    end = {"t": {str(p): 10 * (i + 1) + p for p in range(3)}}
    return progress(i, run_id=run, query_id="q-prev", name="prev_q",
                    timestamp=f"2026-11-01T00:00:{i:02d}.000Z",
                    sources=[kafka_source("t", start, end)])


def test_a_listener_of_the_previous_release_keeps_journaling_after_the_upgrade(
        empty_database_url: str, tmp_path: Path) -> None:
    url = empty_database_url
    tree = _previous_release(tmp_path)
    # The journal as the previous release left it: its schema and its writer grants.
    command.upgrade(alembic_config(url), "0012_kafka_cluster")
    role = f"oj_prev_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(resolve_url(url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
    engine.dispose()
    grant = _run_previous(tree, "-c", "import sys; from offset_journal.cli import main; "
                          "sys.exit(main(sys.argv[1:]))", "--database-url", url, "db",
                          "grant", "--writer", role)
    assert grant.returncode == 0, grant.stderr
    writer_url = sa.engine.make_url(resolve_url(url)).set(username=role).render_as_string(
        hide_password=False)
    run = str(uuid.uuid4())
    first = _run_previous(tree, "-c", _OLD_WRITER, writer_url, str(tmp_path / "spool-1"),
                          json.dumps(_events(run, range(0, 2))), str(tree))
    assert json.loads(first.stdout) == {"ok": True, "rejected": 0, "lost": 0}, first.stderr

    upgrade(url)  # 0013, while the old listener's role and grants stay as they were

    second = _run_previous(tree, "-c", _OLD_WRITER, writer_url, str(tmp_path / "spool-2"),
                           json.dumps(_events(run, range(2, 4))), str(tree))
    assert json.loads(second.stdout) == {"ok": True, "rejected": 0, "lost": 0}, second.stderr
    # The old rows were converted to arrays; the old listener's new rows are kept as rows.
    assert sql_rows(url, "SELECT count(*) FROM offset_journal.kafka_partition_rows") == [(6,)]
    # The new release continues the same run: continuity across both storages.
    with Journal(url) as j:
        assert j.record_batch(batch_from_progress(_progress(run, 4)))
        assert [s.end_offset for s in j.last_offsets("prev_q")] == [
            {"t": {"0": 50, "1": 51, "2": 52}}]
    rows = sql_rows(url, "SELECT b.batch_id, k.partition, k.start_offset, k.end_offset, "
                         "s.problem FROM offset_journal.kafka_partitions k JOIN "
                         "offset_journal.batches b ON b.id = k.batch_pk JOIN "
                         "offset_journal.batch_sources s ON s.batch_pk = k.batch_pk "
                         "ORDER BY 1, 2")
    assert rows == [(i, p, 10 * i + p, 10 * (i + 1) + p, None)
                    for i in range(5) for p in range(3)]
