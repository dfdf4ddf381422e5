"""The journal's connection: an engine, opened lazily, and reads that say when the
schema is missing."""

from __future__ import annotations

import logging
import threading
from typing import Any, Self

import sqlalchemy as sa

from ..db import make_engine, redact
from ..errors import JournalError
from ..formatting import first_line
from .write_state import Ends

log = logging.getLogger("offset_journal.journal")


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
            raise JournalError(
                f"cannot reach the journal database {redact(self._engine.url)}: "
                f"{redact(first_line(exc))}"
            ) from None

    def run_read(self, fn: Any) -> Any:
        with self.connect() as conn:
            try:
                return fn(conn)
            except sa.exc.ProgrammingError as exc:
                if "does not exist" in str(exc.orig):
                    raise JournalError(
                        "the journal schema is missing: run `offset-journal db upgrade`"
                    ) from None
                raise

