"""MkDocs hook: the CLI reference (docs/cli.md), generated from the argparse parser itself.

docs/cli.md holds the marker ``<!-- cli-reference -->``; at build time it is replaced by
every command's and subcommand's usage, description and options (flags, help, default),
walked from the parser ``offset-journal`` parses with, so the page cannot drift from it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- cli-reference -->"
_SPECIAL = re.compile(r"([\\*_{}\[\]<>|#])")


def on_config(config: Any) -> Any:
    # Import the package from this checkout (the one being documented), not whichever
    # copy is installed.
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != "cli.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/cli.md lost its marker {MARKER}")
    return markdown.replace(MARKER, reference())


def reference() -> str:
    """The whole CLI reference as Markdown."""
    os.environ["COLUMNS"] = "100"  # argparse wraps usage to the terminal's width
    from offset_journal.cli import commands

    parser = commands.build_parser()
    out: list[str] = []
    _describe(parser, None, 2, out)
    return "\n".join(out) + "\n"


def _esc(text: str) -> str:
    """Help text as Markdown: `code` kept as code (when the backticks pair up), every
    other character Markdown would read literally."""
    parts = " ".join(text.split()).split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: no code spans
        return _SPECIAL.sub(r"\\\1", " ".join(parts))
    return "`".join(p if i % 2 else _SPECIAL.sub(r"\\\1", p) for i, p in enumerate(parts))


def _anchor(heading: str) -> str:
    """The id MkDocs gives a heading (the toc extension's default slugify)."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    text = action.help or ""
    if "%" in text:
        params = dict(vars(action), prog=parser.prog)
        try:
            text = text % params
        except (KeyError, TypeError, ValueError):
            pass
    return text


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        metavar = action.metavar or action.dest
        return " ".join(metavar) if isinstance(metavar, tuple) else metavar
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = action.metavar
    if metavar is None:
        metavar = ("{" + ",".join(map(str, action.choices)) + "}" if action.choices
                   else action.dest.upper())
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    return ", ".join(f"{flag} {metavar}" for flag in action.option_strings)


def _default(action: argparse.Action) -> str | None:
    if action.nargs == 0 or not action.option_strings:  # switches, positionals
        return None
    default = action.default
    if default in (None, argparse.SUPPRESS, [], ()):
        return None
    return str(default)


def _describe(parser: argparse.ArgumentParser, summary: str | None, level: int,
              out: list[str]) -> None:
    out += [f"{'#' * level} {parser.prog}", ""]
    text = parser.description or summary
    if text:
        out += [_esc(text), ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    subcommands: list[tuple[argparse.ArgumentParser, str | None]] = []
    rows: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    subcommands.append((sub, helps.get(name)))
            rows.append("- `{}`: {}".format(action.metavar or "COMMAND", ", ".join(
                f"[`{name}`](#{_anchor(f'{parser.prog} {name}')})"
                for name in action.choices)))
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._HelpAction) and level > 2:
            continue  # every command has -h; said once, for the top
        line = f"- `{_flags(action)}`"
        text = _help(action, parser)
        if text:
            line += f": {_esc(text)}"
        default = _default(action)
        if default is not None and "default" not in text.lower():
            line += f" (default: `{default}`)"
        rows.append(line)
    if rows:
        out += rows + [""]
    for sub, text in subcommands:
        _describe(sub, text, min(level + 1, 4), out)
