"""A local append-only spool for events the database could not take yet.

Each process appends JSON lines to a file of its own and holds an advisory lock on it
while it does, so a replay (by this process later, or by the next start after a crash)
never reads a file another live process is still writing. A line cut short by a crash
is skipped on replay; every complete line is replayed, and replaying twice is harmless
because the journal ignores a (run id, batch id) it already has.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

ENV_SPOOL_DIR = "OFFSET_JOURNAL_SPOOL_DIR"


def _locked_by_another(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            return False
    except FileNotFoundError:
        return False


def default_spool_dir(database_url: str) -> Path:
    """A spool directory per database, stable across restarts of the driver.

    Keyed by a hash of the URL (never the URL itself: it may hold a password), so two
    jobs on one host journaling into different databases never replay into each other's.
    """
    base = os.environ.get(ENV_SPOOL_DIR)
    if base:
        root = Path(base)
    else:
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(
            os.path.expanduser("~"), ".local", "state"
        )
        root = Path(state) / "offset-journal" / "spool"
    return root / hashlib.sha256(database_url.encode()).hexdigest()[:16]


class Spool:
    def __init__(self, directory: str | os.PathLike[str], *, max_bytes: int | None = None) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._path: Path | None = None
        self._replaying: Path | None = None
        self.dropped = 0

    # -------------------------------------------------------------- writing

    def _open(self) -> IO[str]:
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            stamp = f"{os.getpid()}-{time.time_ns()}-{uuid.uuid4().hex[:8]}"
            name = f"spool-{socket.gethostname()}-{stamp}.jsonl"
            # Locked under a name replay does not list, then renamed into place: a
            # replayer must never lock, find empty and delete a file before its owner
            # holds the lock (the owner's events would then go to a deleted file).
            hidden = self.directory / f".{name}.new"
            f = open(hidden, "a", encoding="utf-8")  # noqa: SIM115 - kept open on purpose
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(hidden, self.directory / name)
            self._path = self.directory / name
            self._file = f
        return self._file

    def append(self, events: list[dict[str, Any]]) -> int:
        """Append events durably (flushed and fsynced); returns how many were written."""
        if not events:
            return 0
        lines = "".join(json.dumps(e, separators=(",", ":"), default=str) + "\n" for e in events)
        with self._lock:
            if self.max_bytes is not None and self.size() + len(lines) > self.max_bytes:
                self.dropped += len(events)
                log.error("offset-journal spool %s is full (%d bytes): %d event(s) not kept",
                          self.directory, self.max_bytes, len(events))
                return 0
            f = self._open()
            f.write(lines)
            f.flush()
            os.fsync(f.fileno())
        return len(events)

    def _rotate(self) -> None:
        """Close this process's file so that it can be replayed and removed."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self._path = None

    # -------------------------------------------------------------- reading

    def _stats(self) -> list[tuple[Path, os.stat_result]]:
        """Spool files with their stat, in replay order. A file another driver's replay
        removed between listing and stat is gone, not an error."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.glob("spool-*.jsonl"):
            try:
                found.append((path, path.stat()))
            except FileNotFoundError:
                continue
        return sorted(found, key=lambda ps: (ps[1].st_mtime, ps[0].name))

    def files(self) -> list[Path]:
        return [path for path, _ in self._stats()]

    def size(self) -> int:
        return sum(st.st_size for _, st in self._stats())

    def pending(self) -> bool:
        """True when there is something this process can replay: its own file, or one
        no live process holds (another driver's file in an outage is not ours to wait
        for).

        Under the spool's lock: a file this process has locked cannot be told from
        another process's by flock, so naming a file ours and locking it (or unlocking
        it and dropping the name) happen under that lock too, never in between. Without
        it, flush() could see nothing pending while the events were only in the spool.
        """
        with self._lock:
            for path in self.files():
                if path in (self._path, self._replaying) or not _locked_by_another(path):
                    return True
            return False

    def replay(self, sink: Callable[[list[dict[str, Any]]], None], chunk: int = 500) -> int:
        """Hand every spooled event to ``sink`` in file order, removing each file once
        all its events were taken. Stops at the first failure of ``sink`` (the file
        stays). Files locked by another live process are left alone."""
        with self._lock:
            self._rotate()
        done = 0
        for path in self.files():
            with self._lock:  # see pending()
                try:
                    f = open(path, encoding="utf-8")  # noqa: SIM115 - closed below
                except FileNotFoundError:
                    continue
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    f.close()
                    continue  # another live writer owns it
                self._replaying = path
            try:
                events = self._read(f, path)
                for i in range(0, len(events), chunk):
                    sink(events[i:i + chunk])
                path.unlink(missing_ok=True)
            finally:
                with self._lock:
                    f.close()
                    self._replaying = None
            done += len(events)
        return done

    @staticmethod
    def _read(f: IO[str], path: Path) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for n, line in enumerate(f, 1):
            if not line.endswith("\n"):
                log.warning("offset-journal spool %s: skipping a line cut short at %d",
                            path.name, n)
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                log.warning("offset-journal spool %s: skipping unreadable line %d",
                            path.name, n)
        return events

    def close(self) -> None:
        with self._lock:
            self._rotate()
