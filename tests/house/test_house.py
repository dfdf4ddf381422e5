"""The house: packages with declared arrows between them, no import cycle, SQL in the
storage layer only, SQLAlchemy and its errors behind the journal's edge, the library's
own errors across package boundaries, no private name used across modules.

Read from the source with ``ast`` (no import runs): the intra-package import graph,
module-level, inside functions and type-only (``if TYPE_CHECKING:``) alike."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import offset_journal

ROOT = Path(offset_journal.__file__).parent

SHARED = ("errors", "values", "offsets", "formatting", "redaction", "origin", "overlap",
          "records", "rows", "health_rows", "wording", "spark_version", "descriptions")
"""The shared modules at the top: pure, importable from anywhere, importing only each other."""

ARROWS: dict[str, set[str]] = {
    "offset_journal": {"capture", "journal", "upgrading"},  # its own __init__: the public API
    "cli": {"offset_journal", "local", "health", "report", "restart", "upgrading", "state",
            "savepoint", "checkpoint", "audit", "capture", "journal", "kafka"},
    "testing": {"local", "capture", "journal"},
    "local": {"capture", "journal", "kafka"},
    "health": {"restart", "capture", "journal", "kafka"},
    "report": {"audit", "journal"},
    "upgrading": {"restart", "state", "savepoint", "checkpoint", "journal"},
    "restart": {"state", "savepoint", "checkpoint", "journal", "kafka"},
    "audit": {"journal"},
    "state": {"savepoint", "checkpoint", "journal"},
    "savepoint": {"checkpoint", "journal"},
    "checkpoint": {"journal"},
    "capture": {"journal", "kafka"},
    "journal": set(),
    "kafka": set(),
}
"""Which package may import which (each may import the shared modules too): declared once
here, drawn in docs/architecture.md. Data flows one way: capture -> journal -> restart,
audit, report -> cli (which imports the root package for its version)."""

SQL_HOMES = ("journal.",)
"""Where SQL may live: the storage layer (with its schema, roles and engine)."""
SERVICES = ("local.services", "local.kafka", "local.pgbouncer", "local.standby", "testing")
"""Starters of local services: they create databases, not journal SQL."""
SQLALCHEMY_HOMES = ("journal", "local")
"""Where SQLAlchemy may be imported at all (its errors included): the journal, which
translates every database error into its own (errors.py's JournalError kinds) at its
edge, and local/'s service helpers, which start and check Postgres themselves."""
PLAIN_ERRORS = frozenset({"ValueError", "KeyError", "RuntimeError", "TypeError"})
"""Builtin exceptions the library does not raise across a package boundary: it raises
its own (errors.py, each keeping such a builtin parent), so one ``except
OffsetJournalError`` catches everything it raises."""
PLAIN_RAISES_ALLOWED = {
    "savepoint._verified": "runs on Spark's executors, which do not import offset-journal",
}
IO_LIBRARIES = ("sqlalchemy", "psycopg", "pyspark", "confluent_kafka", "alembic", "pgserver")


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


def _imports(name: str, tree: ast.Module, is_package: bool, known: set[str]) -> set[str]:
    """The package modules ``name`` imports, at run time or for type checking."""
    found: set[str] = set()
    for node in ast.walk(tree):
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


def _sqlalchemy_imports(tree: ast.Module) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(n == "sqlalchemy" or n.startswith("sqlalchemy.") for n in names):
            lines.append(node.lineno)
    return lines


def test_sqlalchemy_stays_behind_the_journal_s_edge():
    """No module outside journal/ (and local/'s service helpers) imports SQLAlchemy, not
    even for ``sa.exc``: the journal's methods raise its own errors, so a caller tells
    "database away", "read-only", "schema old" and "refused" apart without it."""
    offenders = []
    for name, tree in _modules().items():
        short = name.removeprefix("offset_journal.")
        if short.split(".")[0] in SQLALCHEMY_HOMES:
            continue
        offenders += [f"{short}:{line}" for line in _sqlalchemy_imports(tree)]
    for job in sorted((ROOT.parent / "jobs").glob("*.py")):  # the jobs go through it too
        tree = ast.parse(job.read_text(), str(job))
        offenders += [f"jobs/{job.name}:{line}" for line in _sqlalchemy_imports(tree)]
    assert offenders == []


def test_the_sqlalchemy_check_finds_an_import() -> None:
    for source in ("import sqlalchemy as sa", "from sqlalchemy import exc",
                   "def f():\n    import sqlalchemy.exc\n"):
        assert _sqlalchemy_imports(ast.parse(source)), source
    assert _sqlalchemy_imports(ast.parse("from .journal import Connection")) == []


def _catches(handler: ast.ExceptHandler, name: str) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is None or any(
        isinstance(k, ast.Name) and k.id in (name, "Exception") for k in kinds)


def _plain_raises(tree: ast.Module) -> list[str]:
    """``raise ValueError(...)`` (and the other PLAIN_ERRORS) that may leave the module:
    allowed only inside a ``try`` of the same function that catches it, or in a private
    function (``_name``) of a module that catches it."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    handled = {h_name for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler)
               for h_name in PLAIN_ERRORS if _catches(h, h_name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        called = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if not isinstance(called, ast.Name) or called.id not in PLAIN_ERRORS:
            continue
        caught, at = False, node
        while at in parents and not isinstance(at, (ast.FunctionDef, ast.AsyncFunctionDef)):
            up = parents[at]
            if isinstance(up, ast.Try) and at in up.body \
                    and any(_catches(h, called.id) for h in up.handlers):
                caught = True
            at = up
        private = isinstance(at, ast.FunctionDef) and at.name.startswith("_") \
            and not at.name.startswith("__")
        if not caught and not (private and called.id in handled):
            found.append(f"{node.lineno}: raise {called.id}")
    return found


def test_the_library_raises_its_own_errors_across_package_boundaries():
    """What the library raises for a caller to catch is one of its own errors (errors.py:
    each keeps its builtin parent, ``except ValueError`` still works): a plain
    ValueError/KeyError/RuntimeError/TypeError only where the same module catches it."""
    offenders = []
    for name, tree in _modules().items():
        short = name.removeprefix("offset_journal.")
        if short not in PLAIN_RAISES_ALLOWED:
            offenders += [f"{short}:{where}" for where in _plain_raises(tree)]
    assert offenders == []


def test_the_plain_raise_check_finds_one_that_leaves_its_module() -> None:
    leaves = "def parse(x):\n    raise ValueError('bad')\n"
    assert _plain_raises(ast.parse(leaves)) == ["2: raise ValueError"]
    assert _plain_raises(ast.parse("def _f():\n    raise KeyError(1)\n")) \
        == ["2: raise KeyError"]  # private, but nothing here catches it
    caught = ("def parse(x):\n    try:\n        raise ValueError('bad')\n"
              "    except ValueError:\n        return None\n")
    assert _plain_raises(ast.parse(caught)) == []
    helper = ("def _need(x):\n    raise TypeError(x)\n"
              "def parse(x):\n    try:\n        _need(x)\n    except (TypeError, KeyError):\n"
              "        return None\n")
    assert _plain_raises(ast.parse(helper)) == []


def test_no_private_name_is_used_across_modules():
    """``from .x import _private`` and ``module._private`` (a module of this package)
    reach into another module; a package may import its own private modules
    (``from . import _edge``)."""
    offenders = []
    modules = _modules()
    for name, tree in modules.items():
        ours = set()  # names bound to this package's modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                own = (f"{name}." if node.level == 1 and node.module is None else "\0")
                offenders += [f"{name}: {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")
                              and f"{own}{a.name}" not in modules]
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


def _home(module: str) -> str:
    """The package a module belongs to: its first name under offset_journal, or the
    shared modules' ``shared``."""
    parts = module.split(".")[1:]
    if not parts:
        return "offset_journal"
    if parts == ["_moved"]:  # the deprecated aliases: stdlib only, answered from anywhere
        return "shared"
    return "shared" if parts[0] in SHARED else parts[0]


def _undeclared(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        src = _home(module)
        for target in sorted(targets):
            dst = _home(target)
            if dst == src or (dst == "shared" and src != "shared"):
                continue
            if dst not in ARROWS.get(src, set()):
                out.append(f"{module} -> {target}")
    return out


def test_every_import_between_packages_is_a_declared_arrow():
    assert _undeclared(_graph()) == []


def test_the_arrow_check_finds_an_undeclared_arrow():
    graph = {"offset_journal.journal._write": {"offset_journal.restart.model"},
             "offset_journal.rows": {"offset_journal.journal"},
             "offset_journal.cli.commands": {"offset_journal.restart", "offset_journal.errors"}}
    assert _undeclared(graph) == ["offset_journal.journal._write -> offset_journal.restart.model",
                                  "offset_journal.rows -> offset_journal.journal"]


def test_the_declared_arrows_have_no_circle_and_name_real_packages():
    assert _cycle(ARROWS) is None
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert set(ARROWS) - {"offset_journal", "testing"} == packages
    assert all(targets <= packages | {"offset_journal"} for targets in ARROWS.values())
    assert {p.stem for p in ROOT.glob("*.py")} == {*SHARED, "__init__", "testing", "_moved"}


RESTART_LAYERS = ("base", "decide", "gather", "entry")
"""The planner's layers, lowest first: a module of ``restart/`` imports its own layer or
a lower one. base: the data (request, model, inputs, findings); decide: the pure steps;
gather: ``restart/gather/``, the reads (it may use decide's helpers: the topics a plan
names, a Delta source's path); entry: the planner's entry, the recording, recovery."""
RESTART_BASE = ("model", "request", "_inputs", "_findings", "_delta_log")
RESTART_ENTRY = ("edge", "record", "recovery", "restoring")


def _restart_layer(module: str) -> str | None:
    """The layer of a module of ``restart/`` (None: not one)."""
    parts = module.split(".")
    if parts[:2] != ["offset_journal", "restart"]:
        return None
    rest = parts[2:]
    if not rest or rest[0] in RESTART_ENTRY:
        return "entry"
    if rest[0] in ("gather", "decide"):
        return rest[0]
    return "base" if rest[0] in RESTART_BASE else "decide"


def _restart_upward(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        src = _restart_layer(module)
        for target in sorted(targets):
            dst = _restart_layer(target)
            if src and dst and RESTART_LAYERS.index(dst) > RESTART_LAYERS.index(src):
                out.append(f"{module} -> {target}")
    return out


def test_the_planner_imports_down_its_layers_only():
    """decide never reads (no import of gather/, the entry or the recording); the base
    imports neither; gather never imports the entry."""
    assert _restart_upward(_graph()) == []
    gather = {m for m in _graph() if _restart_layer(m) == "gather"}
    assert {"offset_journal.restart.gather.journal", "offset_journal.restart.gather.kafka",
            "offset_journal.restart.gather.locations", "offset_journal.restart.gather.sink",
            "offset_journal.restart.gather.savepoint"} <= gather


def test_the_layer_check_finds_an_upward_import():
    graph = {"offset_journal.restart.decide.plan": {"offset_journal.restart.gather.kafka"},
             "offset_journal.restart.model": {"offset_journal.restart.decide.translate"},
             "offset_journal.restart.gather.sink": {"offset_journal.restart.model"},
             "offset_journal.restart.edge": {"offset_journal.restart.gather"}}
    assert _restart_upward(graph) == [
        "offset_journal.restart.decide.plan -> offset_journal.restart.gather.kafka",
        "offset_journal.restart.model -> offset_journal.restart.decide.translate"]


def test_every_package_says_its_job_and_what_it_may_import():
    """Short, and pointing to the one map (docs/architecture.md) rather than being
    another: a package's docstring that lists its modules drifts from the code."""
    for init in sorted(ROOT.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc, f"{init.parent.name}/__init__.py"
        assert "docs/architecture.md" in doc, f"{init.parent.name}/__init__.py"
        assert len(doc.splitlines()) <= 16, f"{init.parent.name}/__init__.py"
        may = doc[doc.index("May import"):].split("\n\n")[0]
        named = set(re.findall(r"\b(" + "|".join(ARROWS) + r")\b", may)) - {
            init.parent.name, "offset_journal"}
        assert named == ARROWS[init.parent.name] - {"offset_journal"}, (
            f"{init.parent.name}/__init__.py says it may import {sorted(named)}")


def test_the_shared_modules_are_pure():
    """No database, Spark or Kafka client is imported by a shared module, at any depth."""
    offenders = []
    for name, tree in _modules().items():
        if _home(name) != "shared":
            continue
        for node in ast.walk(tree):
            mods = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                    else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            offenders += [f"{name}: {m}" for m in mods if m.split(".")[0] in IO_LIBRARIES]
    assert offenders == []


def test_no_private_module_is_imported_from_outside_its_package():
    offenders = []
    graph = _graph()
    for module, targets in graph.items():
        for target in targets:
            parent, _, leaf = target.rpartition(".")
            if leaf.startswith("_") and not leaf.startswith("__") \
                    and not (module + ".").startswith(parent + "."):
                offenders.append(f"{module} -> {target}")
    assert offenders == []


def test_the_architecture_page_lists_the_declared_arrows():
    """docs/architecture.md's "Allowed imports" list is ARROWS, word for word."""
    import re

    page = (ROOT.parent / "docs" / "architecture.md").read_text()
    section = page.split("## Allowed imports", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, set[str]] = {}
    for item in re.findall(r"^- (.*?)(?=^- |\Z)", section, re.M | re.S):
        head, _, targets = item.partition("->")
        names = re.findall(r"`(\w+)`", head)
        for name in names:
            listed[name] = set(re.findall(r"`(\w+)`", targets))
    assert listed == ARROWS


def _drawing():
    import importlib.util

    path = ROOT.parent / "scripts" / "draw_architecture.py"
    spec = importlib.util.spec_from_file_location("_draw_architecture", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_architecture_picture_is_drawn_from_the_declared_arrows():
    """docs/architecture.svg is what scripts/draw_architecture.py draws from ARROWS
    (regenerate it after changing them), and the page shows it."""
    drawing = _drawing()
    assert drawing.arrows() == ARROWS
    assert drawing.SVG.read_text() == drawing.draw(ARROWS)
    page = (ROOT.parent / "docs" / "architecture.md").read_text()
    assert "](architecture.svg)" in page


def test_the_picture_draws_a_changed_arrow_differently():
    """The check above can fail: one arrow more is another picture."""
    drawing = _drawing()
    changed = {k: set(v) for k, v in ARROWS.items()}
    changed["audit"].add("kafka")
    assert drawing.draw(changed) != drawing.draw(ARROWS)
    assert "-&gt; journal, kafka" in drawing.draw(changed)


def test_every_stage_of_the_data_s_way_names_a_module_that_exists():
    drawing = _drawing()
    for _title, _what, module in drawing.STAGES:
        assert (ROOT / module).is_file(), module
    for origin, _title, _what, module in drawing.BRANCHES:
        assert (ROOT / module).is_file(), module
        assert origin in {s[0] for s in drawing.STAGES}


MODULE_LINES, FUNCTION_LINES = 600, 60
"""The marks that decide where code goes: a module past the first has grown a second
job; a function past the second hides steps that want names."""


def _too_long(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MODULE_LINES:
            out.append(f"{path.relative_to(root)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    out.append(f"{path.relative_to(root)}:{node.name}: {length} lines")
    return out


def test_no_module_over_its_mark_and_no_function_over_its_own():
    assert _too_long(ROOT) == []


def test_the_length_check_finds_a_long_module_and_a_long_function(tmp_path: Path):
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n" + "\n" * MODULE_LINES)
    assert _too_long(tmp_path) == [f"long.py: {FUNCTION_LINES + 1 + MODULE_LINES} lines",
                                   f"long.py:long: {FUNCTION_LINES + 1} lines"]
