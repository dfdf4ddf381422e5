"""A stateful query upgraded in one call, verified, and rolled back when v2 fails:
:func:`upgrade` (also ``offset_journal.upgrade``).

The steps are the ones a person runs by hand (stop v1, ``savepoint create``, ``state
restore``, start v2, ``audit``), each a small named function in ``_steps.py``, in order
in ``_flow.py``; every outcome is journaled as a decision the audit explains. Its
modules, and where it stands among the packages: docs/architecture.md.

May import: :mod:`offset_journal.restart`, :mod:`offset_journal.state`,
:mod:`offset_journal.savepoint`, :mod:`offset_journal.checkpoint`,
:mod:`offset_journal.journal` and the shared modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .model import (
    OUTCOMES,
    RESULT_COMMAND,
    UPGRADE_COMMAND,
    Outcome,
    Upgrade,
    Verification,
    result_row,
    start_problems,
    upgraded_to,
)

if TYPE_CHECKING:
    from ._flow import upgrade


def __getattr__(name: str) -> Any:
    # The flow loads the journal's and Spark's edges: on first use only.
    if name == "upgrade":
        from ._flow import upgrade

        return upgrade
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OUTCOMES", "RESULT_COMMAND", "UPGRADE_COMMAND", "Outcome", "Upgrade",
           "Verification", "result_row", "start_problems", "upgrade", "upgraded_to"]
