"""Old module paths answer for one release, with a DeprecationWarning, and are listed in
the CHANGELOG (pure: imports only, in a fresh interpreter where the import matters)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import offset_journal
from offset_journal._moved import MOVED

ROOT = Path(offset_journal.__file__).parent
CHANGELOG = ROOT.parent / "CHANGELOG.md"


def test_a_moved_name_warns_and_is_the_object_at_its_new_place():
    from offset_journal import health_rows, rows

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = rows.SavepointFacts
        from offset_journal.rows import RecordedLoss
    assert old is health_rows.NewestSavepoint and RecordedLoss is health_rows.RecordedLoss
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        "offset_journal.rows.SavepointFacts moved to offset_journal.health_rows."
        "NewestSavepoint; the old name goes in 0.3.0",
        "offset_journal.rows.RecordedLoss moved to offset_journal.health_rows.RecordedLoss; "
        "the old name goes in 0.3.0"]
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = rows.Nothing  # type: ignore[attr-defined]


RELEASED_NAMES = (
    ("offset_journal.restart.translate", "ClusterFacts", "offset_journal.restart._inputs"),
    ("offset_journal.restart.translate", "refuse_other_cluster",
     "offset_journal.restart.decide.cluster"),
    ("offset_journal.restart.translate", "cluster_findings",
     "offset_journal.restart.decide.cluster"),
    ("offset_journal.restart.kafka_offsets", "kafka_topics", "offset_journal.rows"),
    ("offset_journal.restart.seeding", "carried_state", "offset_journal.restart.decide.carried"),
    ("offset_journal.restart.seeding", "seeded_ids", "offset_journal.restart.decide.carried"),
)
"""Public names of 0.2.0 whose code has moved to another module since: the old module
still gives each (through its alias, with a DeprecationWarning) until 0.3.0."""


@pytest.mark.parametrize(("module", "name", "home"), RELEASED_NAMES)
def test_a_released_name_is_still_found_where_it_was(module: str, name: str,
                                                     home: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = getattr(importlib.import_module(module), name)
    assert old is getattr(importlib.import_module(home), name)


def test_an_old_path_warns_and_is_the_module_at_its_new_path():
    sys.modules.pop("offset_journal.jars", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module("offset_journal.jars")
    new = importlib.import_module("offset_journal.local.jars")
    assert old is new
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        "offset_journal.jars moved to offset_journal.local.jars; the old name goes in 0.3.0"]


def test_from_the_package_import_an_old_name_in_a_fresh_interpreter():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "try:\n    from offset_journal import plan_args\nexcept DeprecationWarning as w:\n"
            "    print('warned:', w)\n"
            "warnings.simplefilter('ignore')\n"
            "from offset_journal.plan_args import add_plan_options\n"
            "from offset_journal.cli.plan_args import add_plan_options as new\n"
            "assert add_plan_options is new; print('same')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "warned: offset_journal.plan_args moved to offset_journal.cli.plan_args; "
        "the old name goes in 0.3.0", "same"]


def test_a_name_that_never_existed_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("offset_journal.no_such_module")


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_alias_is_gone_from_the_tree_and_its_target_exists(old: str):
    rel = Path(*old.split(".")[1:])
    assert not (ROOT / rel).with_suffix(".py").exists() and not (ROOT / rel).is_dir()
    new = Path(*MOVED[old].split(".")[1:])
    assert (ROOT / new).with_suffix(".py").is_file() or (ROOT / new / "__init__.py").is_file()


def test_the_changelog_lists_every_moved_module():
    text = CHANGELOG.read_text()
    missing = [f"{old} -> {new}" for old, new in MOVED.items()
               if f"`{old}`" not in text or f"`{new}`" not in text]
    assert missing == []


def test_an_old_path_leaves_the_real_module_its_own_spec_in_a_fresh_interpreter():
    """Importing an old name must not rename the real module: its ``__spec__`` names its
    own path, so its lazy relative imports do not warn (``__package__ != __spec__.parent``,
    an error under ``-W error``) and ``importlib.reload`` keeps its relative imports."""
    code = ("import warnings, importlib\n"
            "with warnings.catch_warnings():\n"
            "    warnings.simplefilter('ignore', DeprecationWarning)\n"
            "    import offset_journal.db\n"
            "import offset_journal.journal.db as real\n"
            "print(real.__spec__.name)\n"
            "warnings.simplefilter('error')\n"
            "from offset_journal.journal import db\n"
            "assert db is real and offset_journal.db is real\n"
            "exec('from .schema import SCHEMA', vars(real))  # a lazy relative import\n"
            "importlib.reload(real)\n"
            "print(real.__spec__.name, real.__package__)\n")
    out = subprocess.run([sys.executable, "-W", "error::ImportWarning", "-c", code],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["offset_journal.journal.db",
                                       "offset_journal.journal.db offset_journal.journal"]


def test_a_moved_package_and_its_modules_are_one_module_each_in_a_fresh_interpreter():
    """A module of a moved package imported by its old dotted path is the module at its
    new path, not a second copy found through the alias's ``__path__``: a setting made
    through one name is seen through the other."""
    olds = sorted(o for o in MOVED if o.startswith("offset_journal.savepoint.restore."))
    code = ("import importlib, warnings\n"
            "warnings.simplefilter('ignore', DeprecationWarning)\n"
            f"olds = {olds!r}\n"
            "import offset_journal.savepoint.restore as pkg\n"
            "import offset_journal.state as new_pkg\n"
            "print(pkg is new_pkg)\n"
            "for old in olds:\n"
            "    a = importlib.import_module(old)\n"
            "    b = importlib.import_module(old.replace('savepoint.restore', 'state'))\n"
            "    print(old, a is b, a.__spec__.name)\n"
            "from offset_journal.savepoint.restore import layout\n"
            "import offset_journal.state.layout as real\n"
            "print(layout is real)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["True", *[
        f"{o} True {o.replace('savepoint.restore', 'state')}" for o in olds], "True"]
    assert len(olds) == len(list((ROOT / "state").glob("[!_]*.py"))) + len(
        list((ROOT / "state").glob("_[!_]*.py")))


def test_an_old_module_path_of_a_moved_package_warns():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "try:\n    import offset_journal.savepoint.restore.matching\n"
            "except DeprecationWarning as w:\n    print('warned:', w)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "warned: offset_journal.savepoint.restore moved to offset_journal.state; "
        "the old name goes in 0.3.0"]


@pytest.mark.parametrize("old", ["offset_journal.restart.kafka_offsets",
                                 "offset_journal.restart.translate",
                                 "offset_journal.restart.seeding"])
def test_a_moved_planner_step_is_one_module_under_both_names(old: str):
    """In a fresh interpreter: the old dotted path (a module of a package that stayed)
    warns and is the very module at its new path, not a second copy."""
    new = MOVED[old]
    code = (f"import warnings\nwith warnings.catch_warnings(record=True) as w:\n"
            f"    warnings.simplefilter('always')\n    import {old} as a\n"
            f"import {new} as b\n"
            f"from {old.rpartition('.')[0]} import {old.rpartition('.')[2]} as c\n"
            f"assert a is b is c, (a, b, c)\n"
            f"print(sum(x.category is DeprecationWarning for x in w))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
