"""Draw docs/architecture.svg: the data's way through the package, and the packages in
their import layers, from the arrows ``tests/house/test_house.py`` declares and checks.

    .venv/bin/python scripts/draw_architecture.py          # write docs/architecture.svg
    .venv/bin/python scripts/draw_architecture.py --check  # exit 1 when it is out of date

The picture is generated rather than drawn by hand so that it cannot drift from the
rules the house test enforces: ``tests/house/test_house.py`` compares the committed file
with what this script draws.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "docs" / "architecture.svg"

STAGES: tuple[tuple[str, str, str], ...] = (
    ("Spark event", "progress JSON", "capture/listener.py"),
    ("record", "BatchRecord", "records.py"),
    ("writer", "off the stream's thread", "capture/writer.py"),
    ("journal", "Postgres", "journal/__init__.py"),
    ("gather", "PlanInputs", "restart/gather/__init__.py"),
    ("decide", "RestartPlan (pure)", "restart/decide/plan.py"),
    ("readStream", "startingOffsets", "restart/model.py"),
)
"""The data's way, left to right: (what, what it is, the module that makes it)."""

BRANCHES: tuple[tuple[str, str, str, str], ...] = (
    ("decide", "restore", "state, new checkpoint", "state/_write.py"),
    ("journal", "audit, report", "and check: read it", "audit/__init__.py"),
)
"""Ways off the main line: (from stage, what, what it is, the module)."""

FONT = 'font-family="sans-serif"'
W, BOX_H, GAP = 1000, 46, 18


def arrows() -> dict[str, set[str]]:
    """The declared arrows, read from the house test (one declaration, two readers)."""
    house = ROOT / "tests" / "house" / "test_house.py"
    spec = importlib.util.spec_from_file_location("_house", house)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {k: set(v) for k, v in module.ARROWS.items()}


def levels(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each package's layer: the longest way down to a package that imports none."""
    memo: dict[str, int] = {}

    def level(name: str) -> int:
        if name not in memo:
            memo[name] = 1 + max((level(m) for m in graph.get(name, ())), default=-1)
        return memo[name]

    for name in graph:
        level(name)
    return memo


def reduced(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The arrows no longer way through other arrows already draws (the lines only: a
    package may import exactly what its own arrows name, written in its box)."""

    def reaches(start: str, goal: str, skip: tuple[str, str]) -> bool:
        seen, todo = set(), [start]
        while todo:
            here = todo.pop()
            for nxt in graph.get(here, ()):
                if (here, nxt) == skip or nxt in seen:
                    continue
                if nxt == goal:
                    return True
                seen.add(nxt)
                todo.append(nxt)
        return False

    return {a: {b for b in bs if not reaches(a, b, (a, b))} for a, bs in graph.items()}


def _allowed(name: str, graph: dict[str, set[str]], level: dict[str, int]) -> str:
    below = {n for n in level if level[n] < level[name]}
    mine = graph.get(name, set())
    if not mine:
        return "imports shared modules only"
    if len(mine) <= 4:
        return "-> " + ", ".join(sorted(mine))
    if mine == below:
        return "every package below"
    if mine < below and len(below - mine) == 1:
        return "every package below but " + "".join(below - mine)
    return "-> " + ", ".join(sorted(mine))


def _box(x: float, y: float, w: float, title: str, sub: str, fill: str,
         small: int = 11) -> list[str]:
    return [f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{BOX_H}" rx="8" '
            f'fill="{fill}" stroke="#345"/>',
            f'<text x="{x + w / 2:.0f}" y="{y + 19:.0f}" text-anchor="middle" {FONT} '
            f'font-size="14" font-weight="bold">{escape(title)}</text>',
            f'<text x="{x + w / 2:.0f}" y="{y + 36:.0f}" text-anchor="middle" {FONT} '
            f'font-size="{small}" fill="#333">{escape(sub)}</text>']


def _line(x1: float, y1: float, x2: float, y2: float, colour: str, width: float) -> str:
    return (f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" '
            f'stroke="{colour}" stroke-width="{width}" marker-end="url(#head)"/>')


def _data_way(top: float) -> tuple[list[str], float]:
    """The stages in one row, the branches below the stage they leave from."""
    out = [f'<text x="10" y="{top:.0f}" {FONT} font-size="15" font-weight="bold">'
           "The data's way</text>"]
    y = top + 14
    w = (W - 20 - GAP * (len(STAGES) - 1)) / len(STAGES)
    centre: dict[str, float] = {}
    for i, (title, sub, _module) in enumerate(STAGES):
        x = 10 + i * (w + GAP)
        centre[title] = x + w / 2
        out += _box(x, y, w, title, sub, "#dbe9f6")
        if i:
            out.append(_line(x - GAP, y + BOX_H / 2, x - 2, y + BOX_H / 2, "#345", 1.6))
    below = y + BOX_H + 34
    for origin, title, sub, _module in BRANCHES:
        x = centre[origin] - w / 2
        out += _box(x, below, w, title, sub, "#e8f3e0")
        out.append(_line(centre[origin], y + BOX_H, centre[origin], below - 2, "#345", 1.6))
    return out, below + BOX_H + 36


def _layers(top: float, graph: dict[str, set[str]]) -> tuple[list[str], float]:
    """The packages, highest layer at the top; a line for each declared import."""
    out = [f'<text x="10" y="{top:.0f}" {FONT} font-size="15" font-weight="bold">'
           "Packages in layers: each may import what its box names (lines: the shortest ways)"
           "</text>"]
    level = levels(graph)
    rows = sorted(set(level.values()), reverse=True)
    where: dict[str, tuple[float, float]] = {}
    w = 200.0
    for r, lv in enumerate(rows):
        names = sorted(n for n in level if level[n] == lv)
        step = (W - 20) / len(names)
        for i, name in enumerate(names):
            x = 10 + i * step + (step - w) / 2
            y = top + 20 + r * (BOX_H + 44)
            where[name] = (x + w / 2, y)
            label = "offset_journal" if name == "offset_journal" else f"{name}/"
            out += _box(x, y, w, label, _allowed(name, graph, level), "#f4efe2",
                        small=10)
    lines = reduced(graph)
    for name in sorted(lines):
        for target in sorted(lines[name]):
            (x1, y1), (x2, y2) = where[name], where[target]
            out.insert(1, _line(x1, y1 + BOX_H, x2, y2 - 2, "#9aa7b4", 0.8))
    return out, top + 20 + len(rows) * (BOX_H + 44)


def draw(graph: dict[str, set[str]]) -> str:
    """The whole picture as SVG text (deterministic: the same arrows, the same bytes)."""
    way, next_top = _data_way(24)
    layers, height = _layers(next_top, graph)
    head = ('<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" '
            'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            '<path d="M 0 0 L 10 5 L 0 10 z" fill="#345"/></marker></defs>')
    body = "\n".join([head, *way, *layers])
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height:.0f}" '
            f'width="{W}" height="{height:.0f}" role="img" '
            'aria-label="offset-journal architecture">\n'
            f'<rect width="100%" height="100%" fill="white"/>\n{body}\n</svg>\n')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/architecture.svg is not what this draws")
    args = parser.parse_args(argv)
    text = draw(arrows())
    if args.check:
        if not SVG.exists() or SVG.read_text() != text:
            print(f"{SVG.relative_to(ROOT)} is out of date: run "
                  "scripts/draw_architecture.py", file=sys.stderr)
            return 1
        return 0
    SVG.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
