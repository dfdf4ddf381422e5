"""The documentation: the README stays a front door whose commands CI runs, its
links land, and the CLI reference the site generates covers every command the parser
has. The site itself is built with `mkdocs build --strict` by .ci/run."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")

DEMO = ("python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && "
        ".venv/bin/offset-journal demo")
TESTS = ("python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && "
         ".venv/bin/python -m pytest -q")


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_the_readme_is_a_front_door_with_the_two_commands() -> None:
    assert len(README.splitlines()) <= 150
    blocks = _bash_blocks(README)
    assert DEMO in blocks and TESTS in blocks
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert TESTS in ci.splitlines()  # CI runs the README's test command word for word
    assert "mkdocs build --strict" in ci


def test_the_readmes_links_land() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_every_page_is_in_the_site() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in (ROOT / "docs").glob("*.md"):
        assert f": {page.name}\n" in nav, f"{page.name} is not in mkdocs.yml's nav"


def _hook():
    spec = importlib.util.spec_from_file_location(
        "cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_covers_every_command() -> None:
    import argparse

    from offset_journal.cli import commands

    hook = _hook()
    assert hook.MARKER in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    reference = hook.reference()
    sections = dict(re.findall(r"^#+ (offset-journal[^\n]*)\n(.*?)(?=^#|\Z)", reference,
                               flags=re.S | re.M))

    def walk(parser: argparse.ArgumentParser) -> None:
        section = sections[parser.prog]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)
            elif (action.option_strings and action.help != argparse.SUPPRESS
                  and not isinstance(action, argparse._HelpAction)):
                assert f"`{action.option_strings[0]}" in section, (
                    parser.prog, action.option_strings)

    walk(commands.build_parser())
    assert "--from-time TIME" in sections["offset-journal plan"]
