"""docs/restarts.md's "Recover a broken checkpoint", followed as a newcomer would: its
shell block line by line in bash (the console script, ``spark-submit``), with the
restore section's ``totals_v2.py`` as the page shows it, against the real parts. v1
ran journaled beforehand with a savepoint, then its state was deleted while records
kept arriving, as the section begins. The page cannot drift from what works."""

from __future__ import annotations

import re
import runpy
import shutil
from pathlib import Path

import pytest

from tests import restore_support as rs
from tests.state.test_restore_docs import URL, Shell, commands

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RESTARTS = Path(__file__).resolve().parents[2] / "docs" / "restarts.md"
SECTION = "## Recover a broken checkpoint\n"
RESTORE = "### Restore a savepoint into the new checkpoint (the JVM path)\n"


def _between(title: str, end: str) -> str:
    text = RESTARTS.read_text(encoding="utf-8")
    start = text.index(title)
    return text[start:text.index(end, start + len(title))]


def _bash() -> str:
    (block,) = re.findall(r"```bash\n(.*?)```", _between(SECTION, "\n## "), flags=re.S)
    return block


def test_the_section_shows_the_command_line_flow() -> None:
    flow = [c.split()[:3] for c in commands(_bash())]
    assert flow == [["export", f"OFFSET_JOURNAL_DATABASE_URL={URL}"],
                    ["offset-journal", "state", "recover"],
                    ["spark-submit", "--jars", '"$(offset-journal'],
                    ["offset-journal", "audit", "totals"]]


def test_the_sections_flow_recovers_the_state_and_the_query_reads_on(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path):
    """v1 (the page's v2 function on /chk/totals-v1) journaled, a savepoint, more
    batches, its state deleted, records arriving; then the page's block: the recovery,
    the query deployed on the recovered checkpoint, the audit (exit 0). The recovered
    query's state is every key's totals over every record."""
    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    shell = Shell(tmp_path, {URL: journal_url, "kafka:9092": servers,
                             '"orders"': f'"{kafka_topic}"', "/chk/": f"{tmp_path}/chk/",
                             "/lake/": f"{tmp_path}/lake/"})
    (v2_file,) = re.findall(r"```python\n(.*?)```", _between(RESTORE, "\n### "), flags=re.S)
    (tmp_path / "totals_v2.py").write_text(shell.local(v2_file))
    build = runpy.run_path(str(tmp_path / "totals_v2.py"))["v2"]
    v1, r1 = tmp_path / "chk" / "totals-v1", tmp_path / "chk" / "totals-r1"

    produced = kafka_cluster.produce(kafka_topic, 40, value=rs.amounts)
    rs.run(build(spark, str(v1), ["earliest"]), "totals", v1, listener)
    code, _out, err = rs_cli(journal_url, "savepoint", "create", "totals", "--checkpoint",
                             str(v1), "--to", str(tmp_path / "savepoints" / "totals-1"))
    assert code == 0, err
    produced += kafka_cluster.produce(kafka_topic, 30, start=40, value=rs.amounts)
    rs.run(build(spark, str(v1), ["earliest"]), "totals", v1, listener)
    shutil.rmtree(v1 / "state")
    produced += kafka_cluster.produce(kafka_topic, 20, start=70, value=rs.amounts)

    said = []
    for command in commands(_bash()):
        if command.startswith("spark-submit"):
            # the recovered checkpoint's batches: 0 (restore), one per old batch replayed,
            # then the query's own first, which reads the records since
            ran = [p for p in (r1 / "offsets").iterdir() if p.name.isdigit()]
            first = r1 / "commits" / str(len(ran))
            shell.deploy(command, ready=first.exists)
        else:
            said.append(shell.run(command))
    _, recovered, audited = said
    assert "read again into state, not written" in recovered, recovered
    assert "recorded as plan" in recovered, recovered
    assert "OK" in audited, audited
    assert {r.key.grp: tuple(r.value) for r in rs.state(spark, r1)} == rs.reference(produced)


def rs_cli(journal_url: str, *argv: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from offset_journal.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--database-url", journal_url, *argv])
    return code, out.getvalue(), err.getvalue()
