"""Old module paths, kept as deprecated aliases for one release (CHANGELOG.md, 0.2.0).

Importing ``offset_journal.jars`` still works, warns (:class:`DeprecationWarning`) and
gives the module at its new path, ``offset_journal.local.jars``: the same module object,
so a setting made through either name is seen through both. The aliases go in 0.3.0.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

MOVED: dict[str, str] = {
    "offset_journal.listener": "offset_journal.capture.listener",
    "offset_journal.writer": "offset_journal.capture.writer",
    "offset_journal.spool": "offset_journal.capture._spool",
    "offset_journal.rejected": "offset_journal.capture.rejected",
    "offset_journal.db": "offset_journal.journal.db",
    "offset_journal.schema": "offset_journal.journal.schema",
    "offset_journal.roles": "offset_journal.journal.roles",
    "offset_journal.journal_rows": "offset_journal.rows",
    "offset_journal.kafka_admin": "offset_journal.kafka.admin",
    "offset_journal.mirror": "offset_journal.kafka.mirror",
    "offset_journal.checkpoint_import": "offset_journal.checkpoint.importing",
    "offset_journal.compare": "offset_journal.restart.compare",
    "offset_journal.plan_args": "offset_journal.cli.plan_args",
    "offset_journal.services": "offset_journal.local.services",
    "offset_journal.local_kafka": "offset_journal.local.kafka",
    "offset_journal.local_mirror": "offset_journal.local.mirror",
    "offset_journal.local_pgbouncer": "offset_journal.local.pgbouncer",
    "offset_journal.local_standby": "offset_journal.local.standby",
    "offset_journal.jars": "offset_journal.local.jars",
    "offset_journal.demo": "offset_journal.cli.demo",
    "offset_journal.savepoint.restore": "offset_journal.state",
    "offset_journal.savepoint.restore._bootstrap": "offset_journal.state._bootstrap",
    "offset_journal.savepoint.restore._frames": "offset_journal.state._frames",
    "offset_journal.savepoint.restore._jvm": "offset_journal.state._jvm",
    "offset_journal.savepoint.restore._nested": "offset_journal.state._nested",
    "offset_journal.savepoint.restore._replay": "offset_journal.state._replay",
    "offset_journal.savepoint.restore._write": "offset_journal.state._write",
    "offset_journal.savepoint.restore.layout": "offset_journal.state.layout",
    "offset_journal.savepoint.restore.matching": "offset_journal.state.matching",
    "offset_journal.savepoint.restore.offsets": "offset_journal.state.offsets",
    "offset_journal.savepoint.restore.recover": "offset_journal.state.recover",
    "offset_journal.savepoint.restore.repartition": "offset_journal.state.repartition",
    "offset_journal.restart.kafka_offsets": "offset_journal.restart.decide.kafka_offsets",
    "offset_journal.restart.translate": "offset_journal.restart.decide.translate",
    "offset_journal.restart.seeding": "offset_journal.restart.decide.seeding",
}
"""Old path -> new path, for the modules a job, a test suite or a script may import. A
package moved is listed with each of its modules: the path finder would otherwise find a
module of the old package through the alias's ``__path__`` and run it a second time,
under its old name (two module objects, two copies of every setting)."""

REMOVED_IN = "0.3.0"


MOVED_NAMES: dict[str, dict[str, str]] = {
    "offset_journal.rows": {
        "QueryFacts": "offset_journal.health_rows.QueryFacts",
        "ForecastFacts": "offset_journal.health_rows.ForecastFacts",
        "RecordedLoss": "offset_journal.health_rows.RecordedLoss",
        "LossAcknowledgement": "offset_journal.health_rows.LossAcknowledgement",
        "SavepointFacts": "offset_journal.health_rows.NewestSavepoint",
    },
}
"""Names that left a module that stayed: module -> old name -> the new module and name."""


def moved_name(module: str, name: str) -> Any:
    """``module``'s old ``name``, from where it moved (a DeprecationWarning says where);
    AttributeError for a name that never was there (a module's ``__getattr__``)."""
    new = MOVED_NAMES.get(module, {}).get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(f"{module}.{name} moved to {new}; the old name goes in {REMOVED_IN}",
                  DeprecationWarning, stacklevel=3)
    where, _, attr = new.rpartition(".")
    return getattr(importlib.import_module(where), attr)


class _Alias(importlib.abc.Loader):
    """Hands out the module at its new path, and leaves it its own spec.

    The import system sets ``__spec__`` on whatever ``create_module`` returns; left as the
    alias's, the real module's relative imports would resolve against the old name
    (``__package__ != __spec__.parent`` warns, ``importlib.reload`` fails). So the spec
    the real module had is put back before the import finishes.
    """

    def __init__(self, new: str) -> None:
        self.new = new
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}; the old name goes in {REMOVED_IN}",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module ran at its new path already: only its own spec is put back."""
        module.__spec__ = self._spec


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Answer the old paths, before the path finder: a module of a moved package imported
    by its old name would otherwise be found through the alias's ``__path__`` and loaded
    again. Only the names in :data:`MOVED` are answered, and none of them exists in the
    tree (a test checks), so no real module is shadowed."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
