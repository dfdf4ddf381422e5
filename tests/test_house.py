"""The house: one storage layer, no import cycle, no private name used across modules.

Read from the source with ``ast`` (no import runs): the intra-package import graph,
module-level and inside functions, except type-only imports (``if TYPE_CHECKING:``)."""

from __future__ import annotations

import ast
from pathlib import Path

import offset_journal

ROOT = Path(offset_journal.__file__).parent

SQL_HOMES = ("journal.",)
"""Where SQL may live: the storage layer, and the schema, its roles and the engine."""
SERVICES = ("local.services", "local.kafka", "local.pgbouncer", "local.standby", "local.demo",
            "testing")
"""Starters of local services and the demo: they create databases, not journal SQL."""


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        name = ".".join(["offset_journal", *parts])
        out[name] = ast.parse(path.read_text(), str(path))
    return out


def _package(name: str, tree_is_package: bool) -> str:
    return name if tree_is_package else name.rpartition(".")[0]


def _type_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, tree: ast.Module, is_package: bool, known: set[str]) -> set[str]:
    """The package modules ``name`` imports at run time."""
    found: set[str] = set()
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_only(node):
            skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = _package(name, is_package).split(".")
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    found.add(full)
                elif base in known:
                    found.add(base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    packages = {n for n in mods if (ROOT / Path(*n.split(".")[1:]) / "__init__.py").exists()
                or n == "offset_journal"}
    known = set(mods)
    graph = {n: _imports(n, t, n in packages, known) for n, t in mods.items()}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_no_import_cycle_in_the_package():
    assert _cycle(_graph()) is None


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_sql_lives_in_the_storage_layer():
    """Only the storage layer (and the schema, roles, engine, service starters) import
    SQLAlchemy for anything but its exception types."""
    offenders = []
    for name, tree in _modules().items():
        short = name.removeprefix("offset_journal.")
        if short.startswith(SQL_HOMES) or short in SQL_HOMES or short in SERVICES:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "sa" and node.attr not in ("exc", "Connection",
                                                                     "Engine", "RowMapping"):
                offenders.append(f"{short}: sa.{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("schema") \
                    and any(a.name != "SCHEMA" for a in node.names):
                offenders.append(f"{short}: imports tables from schema")
    assert offenders == []


def test_no_private_name_is_used_across_modules():
    """``from .x import _private`` and ``module._private`` (a module of this package)
    reach into another module."""
    offenders = []
    for name, tree in _modules().items():
        ours = set()  # names bound to this package's modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                offenders += [f"{name}: {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
                ours.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.Import):
                ours.update(a.asname or a.name.split(".")[0] for a in node.names
                            if a.name.startswith("offset_journal"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and isinstance(node.value, ast.Name) \
                    and node.value.id in ours:
                offenders.append(f"{name}: {node.value.id}.{node.attr}")
    assert offenders == []
