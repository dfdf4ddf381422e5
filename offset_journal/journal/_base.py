"""The journal's connection: an engine, opened lazily, and reads that say when the
schema is missing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any, Self

import sqlalchemy as sa

from ..errors import JournalError, JournalSchemaError, JournalUnavailable
from ..formatting import first_line
from ..redaction import redact
from ._arrays import Layout, layout_id
from ._write_state import Ends
from .db import make_engine
from .schema import SCHEMA

log = logging.getLogger("offset_journal.journal")

_REMEMBERED_LAYOUTS = 4096


class JournalBase:
    """The offset journal in one Postgres database.

    ``Journal(url)`` opens no connection until first used. Reading methods answer for a
    *query name*, which stays the same across checkpoints while query ids do not.
    """

    def __init__(self, database_url: str | None = None, *, engine: sa.Engine | None = None,
                 connect_timeout: int = 5) -> None:
        self._engine = engine or make_engine(database_url, connect_timeout=connect_timeout)
        self._ends: dict[str, Ends] = {}
        self._ends_lock = threading.Lock()
        # Kafka layouts (journal/_arrays.py): keys computed, and those a committed
        # transaction of this Journal stored or found, so later batches name them only.
        self._layout_keys: dict[Layout, bytes] = {}
        self._stored_layouts: set[bytes] = set()
        self._sent_layouts: dict[int, set[bytes]] = {}
        sa.event.listen(self._engine, "commit", self._layouts_committed)
        sa.event.listen(self._engine, "rollback", self._layouts_rolled_back)

    def _layout_key(self, layout: Layout) -> bytes:
        key = self._layout_keys.get(layout)
        if key is None:
            if len(self._layout_keys) >= _REMEMBERED_LAYOUTS:
                self._layout_keys.clear()
            key = self._layout_keys[layout] = layout_id(layout)
        return key

    def _layout_stored(self, key: bytes) -> bool:
        return key in self._stored_layouts

    def _layouts_sent(self, conn: sa.Connection, keys: Iterable[bytes]) -> None:
        """Layouts sent in ``conn``'s transaction: stored once it commits."""
        with self._ends_lock:
            self._sent_layouts.setdefault(id(conn), set()).update(keys)

    def _layouts_stored_now(self, keys: Iterable[bytes]) -> None:
        """Layouts a transaction of this Journal's own just committed."""
        with self._ends_lock:
            self._remember_stored(set(keys))

    def _remember_stored(self, keys: set[bytes]) -> None:
        if keys:
            if len(self._stored_layouts) >= _REMEMBERED_LAYOUTS:
                self._stored_layouts.clear()
            self._stored_layouts |= keys

    def _layouts_committed(self, conn: sa.Connection) -> None:
        with self._ends_lock:
            self._remember_stored(self._sent_layouts.pop(id(conn), set()))

    def _layouts_rolled_back(self, conn: sa.Connection) -> None:
        with self._ends_lock:
            self._sent_layouts.pop(id(conn), None)

    def forget_remembered(self) -> None:
        """Forget what this Journal remembers of what it wrote (each run's last ends, the
        layouts stored): the journal is on another server now (a standby promoted after
        a failover), which may lack any of it. Checks read the journal until they have
        written again."""
        with self._ends_lock:
            self._ends.clear()
            self._stored_layouts.clear()

    def _forget_layouts(self) -> None:
        """A layout remembered as stored is not there (the schema was re-created)."""
        with self._ends_lock:
            self._stored_layouts.clear()

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> sa.Connection:
        try:
            return self._engine.connect()
        except sa.exc.OperationalError as exc:
            error = JournalUnavailable(
                f"cannot reach the journal database {redact(self._engine.url)}: "
                f"{redact(first_line(exc))}")
            error.sqlstate = getattr(exc.orig, "sqlstate", None)
            raise error from None

    def _run_read(self, fn: Any) -> Any:
        with self.connect() as conn:
            try:
                return fn(conn)
            except sa.exc.ProgrammingError as exc:
                if "does not exist" in str(exc.orig):
                    raise JournalSchemaError(self._schema_problem()) from None
                raise

    def _schema_problem(self) -> str:
        """What to say when a read names a table or column the database lacks: the
        schema is missing, or older than this release."""
        try:
            with self.connect() as conn:
                revision = conn.execute(sa.text(
                    f"SELECT version_num FROM {SCHEMA}.alembic_version")).scalar()  # noqa: S608
        except (sa.exc.DBAPIError, JournalError):
            revision = None
        if revision is None:
            return "the journal schema is missing: run `offset-journal db upgrade`"
        return (f"the journal schema is older than this release (at {revision}): run "
                "`offset-journal db upgrade`")

