"""How ``state restore`` spells what a restore declares: a refusal raised in the restore's
pure core names this command's flag (``--map-field 0:customer=k``), not the Python
API's ``Rules(...)``."""

from __future__ import annotations

from ..state.layout import Spelling


class CommandFlags(Spelling):
    """The declarations as ``offset-journal state restore`` takes them."""

    def rename(self, operator_id: int, new: str, old: str) -> str:
        return f"--map-field {operator_id}:{new}={old}"

    def into_state(self, operator_id: int, name: str) -> str:
        return f"--into-state {operator_id}:{name}"

    def discard(self, operator_id: int) -> str:
        return "--discard-state"

    def matched(self, operator_id: int, value: bool) -> str:
        return f"--assume-matched {operator_id}:{'true' if value else 'false'}"

    def time_zone(self) -> str:
        return "--time-zone ZONE, the new query's spark.sql.session.timeZone"
