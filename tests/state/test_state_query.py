"""``state restore --query FILE:FUNCTION`` on every bad file or module: one line,
``argument --query: ...``, exit 2, before Spark or the journal is touched (the journal's
URL here answers nothing: were it opened, the error would be another). The restore
itself runs in tests/state/test_restore_e2e.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from offset_journal.errors import RestoreError
from tests.support import Cli, one_error_line

NOWHERE = "postgresql://nobody@127.0.0.1:9/nothing"
"""A journal that is never reached: the --query checks come first."""

FILES = {
    "syntax.py": ("def v2(spark, checkpoint, starting:\n", "syntax.py, line 1: "),
    "raises.py": ("import json\nTOTAL = 1 / 0\n\ndef v2(*a):\n    pass\n",
                  "raises.py raised ZeroDivisionError: division by zero"),
    "exits.py": ("import sys\nsys.exit(0)\n\ndef v2(*a):\n    pass\n",
                 "called sys.exit(0) as it was loaded: nothing was restored"),
    "raises_exit.py": ("raise SystemExit(0)\n", "called sys.exit(0) as it was loaded"),
    "exits_none.py": ("import sys\nsys.exit()\n", "called sys.exit(None) as it was loaded"),
    "nul.py": ("x = 1\x00\n", "nul.py: source code"),
    "fine.py": ("def v2(*a):\n    pass\n", "no function 'v3' there"),
}


def _restore(cli: Cli, tmp_path: Path, ref: str) -> str:
    """``state restore`` with ``--query ref``: its one error line (exit 2, nothing made)."""
    code, out, err = cli("--database-url", NOWHERE, "state", "restore", "1",
                         "--to", str(tmp_path / "new-ck"), "--query", ref)
    line = one_error_line(code, err)
    assert code == 2 and out == "", line
    assert line.startswith("offset-journal: error: argument --query: "), line
    assert not (tmp_path / "new-ck").exists()
    return line


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_bad_query_file_is_one_line_and_exit_2(cli: Cli, tmp_path: Path, name: str) -> None:
    text, said = FILES[name]
    (tmp_path / name).write_text(text)
    function = "v3" if name == "fine.py" else "v2"
    assert said in _restore(cli, tmp_path, f"{tmp_path / name}:{function}")


def test_what_is_not_a_query_file_is_one_line_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "a-directory.py").mkdir()
    assert "is not a regular file" in _restore(cli, tmp_path,
                                               f"{tmp_path / 'a-directory.py'}:v2")
    assert "No such file or directory" in _restore(cli, tmp_path, f"{tmp_path / 'gone.py'}:v2")
    huge = tmp_path / "huge.py"
    huge.write_text("# " + "x" * (1 << 20) + "\ndef v2(*a):\n    pass\n")
    assert "a query file is at most 1048576 bytes" in _restore(cli, tmp_path, f"{huge}:v2")
    for ref in (f"{huge}:", f"{huge}:not a name", "v2"):
        assert "use FILE.py:FUNCTION or module:FUNCTION" in _restore(cli, tmp_path, ref)


def test_a_bad_module_is_one_line_and_exit_2(cli: Cli, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "oj_exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "oj_fails_on_import.py").write_text("import no_such_module_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "oj_exits_on_import called sys.exit(3) as it was imported" in _restore(
        cli, tmp_path, "oj_exits_on_import:v2")
    assert "importing oj_fails_on_import raised ModuleNotFoundError" in _restore(
        cli, tmp_path, "oj_fails_on_import:v2")
    assert "no function 'nope' there" in _restore(cli, tmp_path, "json:nope")
    for name in ("oj_exits_on_import", "oj_fails_on_import"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("what", ["/dev/zero", "fifo"])
def test_a_device_or_a_fifo_is_refused_without_reading_it(tmp_path: Path, what: str) -> None:
    """The console script, bounded: reading /dev/zero never ends, opening a FIFO with
    no writer waits forever."""
    path = what
    if what == "fifo":
        path = str(tmp_path / "query.py")
        os.mkfifo(path)
    done = subprocess.run(
        [sys.executable, "-m", "offset_journal.cli", "--database-url", NOWHERE, "state",
         "restore", "1", "--to", str(tmp_path / "new-ck"), "--query", f"{path}:v2"],
        capture_output=True, text=True, timeout=120, check=False)
    line = one_error_line(done.returncode, done.stderr)
    assert done.returncode == 2 and f"argument --query: '{path}:v2': {path} is not a " \
        "regular file" in line, line


def test_the_file_does_not_run_while_arguments_are_parsed(cli: Cli, tmp_path: Path) -> None:
    """--help, or another argument wrong: the file is not run."""
    marker = tmp_path / "ran"
    query = tmp_path / "marks.py"
    query.write_text(f"open({str(marker)!r}, 'w').close()\n\ndef v2(*a):\n    pass\n")
    code, out, _err = cli("state", "restore", "1", "--to", str(tmp_path / "ck"),
                          "--query", f"{query}:v2", "--help")
    assert code == 0 and "--query FILE:FUNCTION" in out
    code, _out, err = cli("state", "restore", "1", "--to", str(tmp_path / "ck"),
                          "--query", f"{query}:v2", "--partitions", "0")
    assert code == 2 and "--partitions" in one_error_line(code, err)
    assert not marker.exists()


def test_a_function_that_exits_is_an_error_not_an_exit(tmp_path: Path) -> None:
    """(The restore calls the function: end to end in tests/state/test_restore_e2e.py.)"""
    from offset_journal.cli._query_file import load_function, query_ref

    (tmp_path / "q.py").write_text("def v2(spark, checkpoint, starting):\n"
                                   "    return (spark, checkpoint, starting)\n")
    assert load_function(query_ref(f"{tmp_path / 'q.py'}:v2"))(1, 2, 3) == (1, 2, 3)
    exits = load_function(query_ref("sys:exit"))
    with pytest.raises(RestoreError, match=r"exit\(\) called sys.exit\(0\) instead of "
                                           "returning the new query's DataStreamWriter"):
        exits(0)
