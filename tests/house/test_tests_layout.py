"""The suite's own layout: its folders mirror the packages, so a newcomer finds a
module's tests where the module is, and each fixture is defined once, so a test's
``cli`` or ``db`` means one thing wherever it is asked for."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
LIBRARY = ROOT / "offset_journal"
# Folders that test something other than one package: the repository's jobs/, and the
# house's own rules (imports, docs, tiers, benchmarks).
NOT_PACKAGES = {"jobs": ROOT / "jobs", "house": ROOT / "tests" / "house"}


def _is_fixture(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr == "fixture"


def test_each_folder_of_tests_is_a_package_of_the_library() -> None:
    folders = {p.parent for p in TESTS.rglob("test_*.py")} - {TESTS}
    assert folders, "the tests live in folders"
    for folder in sorted(folders):
        name = folder.relative_to(TESTS).parts[0]
        real = (LIBRARY / name).is_dir() or (LIBRARY / f"{name}.py").is_file()
        assert real or NOT_PACKAGES.get(name, Path("/nowhere")).is_dir(), (
            f"tests/{name}/ names no package of offset_journal")
        assert (folder / "__init__.py").is_file(), f"tests/{name}/ is not a package"


def test_every_fixture_is_defined_once() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(map(_is_fixture, node.decorator_list)):
                where[node.name].append(str(path.relative_to(ROOT)))
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert not twice, f"fixtures defined more than once: {twice}"
    assert {"cli", "granted", "secure"} <= set(where), "the shared fixtures are found"
