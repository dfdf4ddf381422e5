"""A local append-only spool for events the database could not take yet.

Each process appends JSON lines to a file of its own and holds an advisory lock on it
while it does, so a replay (by this process later, or by the next start after a crash)
never reads a file another live process is still writing. A line cut short by a crash,
or one that holds no event, is skipped on replay (named in a warning); every other line
is replayed, and replaying twice is harmless because the journal ignores a (run id,
batch id) it already has.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from ..journal.db import database_identity
from ..records import PROGRESS, batch_from_progress, journal_name
from ._ownership import Strangers, check_directory

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

    Keyed by a hash of the database's identity without the password (never the URL
    itself, and never a hash of the password: that would let anyone test a guess), so
    two jobs on one host journaling into different databases never replay into each
    other's. A directory named the old way (a hash of the whole URL) is renamed.
    """
    base = os.environ.get(ENV_SPOOL_DIR)
    if base:
        root = Path(base)
    else:
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(
            os.path.expanduser("~"), ".local", "state"
        )
        root = Path(state) / "offset-journal" / "spool"
    new = root / hashlib.sha256(database_identity(database_url).encode()).hexdigest()[:16]
    legacy = root / hashlib.sha256(database_url.encode()).hexdigest()[:16]
    if legacy != new and legacy.is_dir() and not new.exists():
        try:
            os.rename(legacy, new)
            log.info("offset-journal: spool directory %s renamed to %s", legacy.name, new.name)
        except OSError:
            return legacy  # its events must not be stranded
    return new


SPOOL_FILE_MODE = 0o600
SPOOL_DIR_MODE = 0o700
LOSSES_FILE = "losses.json"
ROOM_FACTOR = 0.9
"""A full spool drops down to this share of its cap, so that the next appends fit
without rewriting the spool each time."""


_LINE = json.JSONEncoder(separators=(",", ":"), default=str)
"""One encoder for every line: json.dumps with options makes a new one each call."""


def event_line(event: dict[str, Any]) -> str:
    """An event as one line of a spool file (or of the writer's failover window)."""
    return _LINE.encode(event) + "\n"


def _query_key(event: dict[str, Any]) -> str:
    try:
        data = json.loads(event.get("json") or "")
        return journal_name(data.get("name"), str(data.get("id")))[0]
    except (ValueError, TypeError, AttributeError, RecursionError):
        return ""


def make_room(events: list[dict[str, Any]], budget: int,
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(kept, dropped): drop the oldest batch events until the lines fit in ``budget``
    bytes, but never a query's newest batch (the offsets a restart needs) nor a run's
    start or end (small, and they complete the run rows)."""
    sizes = [len(event_line(e).encode()) for e in events]
    total = sum(sizes)
    newest: dict[str, int] = {}
    for i, e in enumerate(events):
        if e.get("type") == PROGRESS:
            newest[_query_key(e)] = i
    protected = set(newest.values())
    drop: set[int] = set()
    for i, e in enumerate(events):
        if total <= budget:
            break
        if e.get("type") == PROGRESS and i not in protected:
            drop.add(i)
            total -= sizes[i]
    return ([e for i, e in enumerate(events) if i not in drop],
            [e for i, e in enumerate(events) if i in drop])


def summarize_losses(dropped: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per query name: how many batch events were dropped, of which runs, which batch
    ids and trigger times, and per Kafka topic-partition the offset range they held."""
    out: dict[str, dict[str, Any]] = {}
    for event in dropped:
        try:
            rec = batch_from_progress(event.get("json") or "")
        except (ValueError, TypeError):
            rec = None
        name = rec.query_name if rec is not None else "(unreadable event)"
        entry = out.setdefault(name, new_loss_entry(name))
        entry["events"] += 1
        if rec is None:
            continue
        if rec.run_id not in entry["run_ids"] and len(entry["run_ids"]) < 100:
            entry["run_ids"].append(rec.run_id)
        _widen(entry, "batch_id_min", "batch_id_max", rec.batch_id)
        if rec.trigger_at is not None:
            _widen(entry, "first_trigger_at", "last_trigger_at", rec.trigger_at.isoformat())
        for source in rec.sources:
            for p in source.partitions:
                key = f"{source.index}\t{p.topic}\t{p.partition}"
                have = entry["partitions"].setdefault(key, [p.start, p.end])
                have[0] = min((x for x in (have[0], p.start) if x is not None), default=None)
                have[1] = max((x for x in (have[1], p.end) if x is not None), default=None)
    return out


def new_loss_entry(name: str) -> dict[str, Any]:
    return {"loss_id": uuid.uuid4().hex, "query_name": name, "events": 0, "run_ids": [],
            "batch_id_min": None, "batch_id_max": None, "first_trigger_at": None,
            "last_trigger_at": None, "partitions": {}, "host": socket.gethostname()}


def _widen(entry: dict[str, Any], low: str, high: str, value: Any) -> None:
    entry[low] = value if entry[low] is None else min(entry[low], value)
    entry[high] = value if entry[high] is None else max(entry[high], value)


def merge_losses(into: dict[str, dict[str, Any]], more: dict[str, dict[str, Any]]) -> None:
    for name, add in more.items():
        have = into.get(name)
        if have is None:
            into[name] = add
            continue
        have["events"] += add["events"]
        have["run_ids"] = (have["run_ids"] + [r for r in add["run_ids"]
                                              if r not in have["run_ids"]])[:100]
        for low, high in (("batch_id_min", "batch_id_max"),
                          ("first_trigger_at", "last_trigger_at")):
            for v in (add[low], add[high]):
                if v is not None:
                    _widen(have, low, high, v)
        for key, (start, end) in add["partitions"].items():
            cur = have["partitions"].setdefault(key, [start, end])
            cur[0] = min((x for x in (cur[0], start) if x is not None), default=None)
            cur[1] = max((x for x in (cur[1], end) if x is not None), default=None)


def read_events(f: IO[bytes], path: Path) -> list[dict[str, Any]]:
    """The events of a spool file (read as bytes); a line cut short by a crash, or that
    holds no event (not UTF-8, not JSON, nested past the parser, not a JSON object), is
    skipped and named: one such line never stops the file's replay."""
    events: list[dict[str, Any]] = []
    for n, raw in enumerate(f, 1):
        if not raw.endswith(b"\n"):
            log.warning("offset-journal spool %s: skipping a line cut short at %d",
                        path.name, n)
            continue
        try:
            event = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            event = None
        if not isinstance(event, dict):
            log.warning("offset-journal spool %s: skipping unreadable line %d (no event)",
                        path.name, n)
            continue
        events.append(event)
    return events


class Spool:
    def __init__(self, directory: str | os.PathLike[str], *, max_bytes: int | None = None) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._path: Path | None = None
        self._replaying: Path | None = None
        self.dropped = 0
        self.strangers = Strangers(f"spool {self.directory}")
        """Files here this user did not make: never replayed (see _ownership.py)."""

    # -------------------------------------------------------------- writing

    @property
    def losses_path(self) -> Path:
        return self.directory / LOSSES_FILE

    def _make_dir(self) -> None:
        """The directory, made 0700 if missing; PermissionError when one that exists
        may be written by another user (_ownership.py)."""
        if not self.directory.is_dir():
            self.directory.mkdir(parents=True, exist_ok=True, mode=SPOOL_DIR_MODE)
            os.chmod(self.directory, SPOOL_DIR_MODE)  # whatever the umask (events hold
            # query names, offsets and exception texts: for the job's user only)
        check_directory(self.directory)  # whoever made it: another may have, first

    def _open(self) -> IO[str]:
        if self._file is None:
            self._make_dir()
            stamp = f"{os.getpid()}-{time.time_ns()}-{uuid.uuid4().hex[:8]}"
            name = f"spool-{socket.gethostname()}-{stamp}.jsonl"
            # Locked under a name replay does not list, then renamed into place: a
            # replayer must never lock, find empty and delete a file before its owner
            # holds the lock (the owner's events would then go to a deleted file).
            hidden = self.directory / f".{name}.new"
            fd = os.open(hidden, os.O_WRONLY | os.O_CREAT | os.O_APPEND, SPOOL_FILE_MODE)
            f = open(fd, "a", encoding="utf-8")  # noqa: SIM115 - kept open on purpose
            os.fchmod(fd, SPOOL_FILE_MODE)
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(hidden, self.directory / name)
            self._path = self.directory / name
            self._file = f
        return self._file

    def append(self, events: list[dict[str, Any]]) -> int:
        """Append events durably (flushed and fsynced); returns how many of them were
        written. Raises OSError when the spool cannot be written at all.

        When the spool would grow past ``max_bytes``, this process's spool file is
        rewritten without its oldest batch events (never a query's newest batch), and
        what was dropped is recorded in ``losses.json`` (see :meth:`take_losses`).
        """
        if not events:
            return 0
        lines = "".join(event_line(e) for e in events)
        with self._lock:
            if self.max_bytes is not None and self.size() + len(lines) > self.max_bytes:
                return self._append_full(events)
            self._write(lines)
        return len(events)

    def append_first(self, events: list[dict[str, Any]]) -> int:
        """Append events to be replayed before everything the spool holds now (events
        of a run older than those waiting: journaled in the run's order): in a file of
        their own, dated before the oldest one. Not cut to ``max_bytes``. Raises
        OSError when the spool cannot be written."""
        if not events:
            return 0
        with self._lock:
            oldest = min((st.st_mtime for _, st in self._stats()), default=None)
            self._rotate()
            self._write("".join(event_line(e) for e in events))
            if oldest is not None and self._path is not None:
                os.utime(self._path, (oldest - 1, oldest - 1))
            self._rotate()  # replayable now; what comes next goes to a newer file
        return len(events)

    def _write(self, lines: str) -> None:
        f = self._open()
        f.write(lines)
        f.flush()
        os.fsync(f.fileno())

    def _append_full(self, events: list[dict[str, Any]]) -> int:
        """Make room for ``events`` in every spool file this process may rewrite: its
        own, the ones it rotated out (each replay attempt in an outage starts a new
        file) and those no live process holds. Their events and the new ones, oldest
        first, are cut to the budget by :func:`make_room` and written to one new file;
        files another live driver holds count against the cap but are not touched."""
        taken = self._take_files()
        own = self._file  # holds the lock on its file until the new one is written
        try:
            old: list[dict[str, Any]] = []
            for path, f in taken:
                old += read_events(f, path)
            mine = sum(path.stat().st_size for path, _ in taken)
            assert self.max_bytes is not None
            budget = int((self.max_bytes - (self.size() - mine)) * ROOM_FACTOR)
            kept, dropped = make_room(old + events, budget)
            dropped_ids = {id(e) for e in dropped}
            self._record_losses(summarize_losses(dropped))
            self._file = self._path = None
            self._write("".join(event_line(e) for e in kept))  # a new file, then the old go
            for path, _ in taken:
                path.unlink(missing_ok=True)
        finally:
            for _, f in taken:
                f.close()
            if own is not None and own is not self._file:
                own.close()
        self.dropped += len(dropped)
        log.warning("offset-journal spool %s is full (%d bytes): dropped the %d oldest batch "
                    "event(s), kept each query's newest; recorded in %s", self.directory,
                    self.max_bytes, len(dropped), LOSSES_FILE)
        return sum(1 for e in events if id(e) not in dropped_ids)

    def _take_files(self) -> list[tuple[Path, IO[bytes]]]:
        """The spool files this process may rewrite, oldest first, each open and locked
        (its own current file through its own handle's lock)."""
        if self._file is not None:
            self._file.flush()
        taken: list[tuple[Path, IO[bytes]]] = []
        for path in self.files():
            if path == self._replaying:
                continue  # being replayed right now: counts as another's
            try:
                f = open(path, "rb")  # noqa: SIM115 - closed by the caller
            except FileNotFoundError:
                continue
            if path != self._path:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    f.close()
                    continue  # another live writer owns it
            taken.append((path, f))
        return taken

    # -------------------------------------------------------------- losses

    @contextlib.contextmanager
    def _losses_lock(self) -> Iterator[None]:
        self._make_dir()
        fd = os.open(self.directory / ".losses.lock", os.O_RDWR | os.O_CREAT, SPOOL_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read_losses(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.losses_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError:
            log.error("offset-journal spool %s: %s is unreadable; kept aside",
                      self.directory, LOSSES_FILE)
            os.replace(self.losses_path, self.losses_path.with_suffix(f".bad-{time.time_ns()}"))
            return {}
        return dict(data.get("losses") or {})

    def _record_losses(self, losses: dict[str, dict[str, Any]]) -> None:
        """Merge into losses.json, rewritten atomically (a new file, fsynced, renamed)."""
        if not losses:
            return
        with self._losses_lock():
            have = self._read_losses()
            merge_losses(have, losses)
            tmp = self.directory / f".{LOSSES_FILE}.{os.getpid()}.new"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SPOOL_FILE_MODE)
            with open(fd, "w", encoding="utf-8") as f:
                json.dump({"losses": have}, f, default=str)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.losses_path)

    def has_losses(self) -> bool:
        """Whether a losses.json of this user's waits (another's is skipped, said)."""
        return (self.losses_path.exists() and not self.strangers.refused(self.directory)
                and self.strangers.look(self.losses_path) is not None)

    def losses(self) -> list[dict[str, Any]]:
        """What a full spool dropped and the journal does not know yet, per query."""
        with self._losses_lock():
            return list(self._read_losses().values())

    def take_losses(self, sink: Callable[[list[dict[str, Any]]], None]) -> int:
        """Hand the recorded losses to ``sink`` (which journals them), then forget them;
        if ``sink`` raises they stay. Entries carry a loss id: journaling one twice
        keeps it once."""
        if not self.has_losses():
            return 0
        with self._losses_lock():
            if not self.has_losses():  # replaced since: see has_losses()
                return 0
            entries = list(self._read_losses().values())
            if entries:
                sink(entries)
            self.losses_path.unlink(missing_ok=True)
        return len(entries)

    def _rotate(self) -> None:
        """Close this process's file so that it can be replayed and removed."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self._path = None

    # -------------------------------------------------------------- reading

    def _stats(self) -> list[tuple[Path, os.stat_result]]:
        """Spool files with their stat, in replay order. A file another driver's replay
        removed between listing and stat is gone, not an error. Nothing in a directory
        another user may write to, nor files this user did not make (_ownership.py)."""
        if not self.directory.is_dir() or self.strangers.refused(self.directory):
            return []
        found = []
        for path in self.directory.glob("spool-*.jsonl"):
            st = self.strangers.look(path)
            if st is not None:
                found.append((path, st))
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
                    f = open(path, "rb")  # noqa: SIM115 - closed below
                except FileNotFoundError:
                    continue
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    f.close()
                    continue  # another live writer owns it
                if not self.strangers.ours(path, os.fstat(f.fileno())):
                    f.close()  # swapped since it was listed
                    continue
                self._replaying = path
            try:
                events = read_events(f, path)
                for i in range(0, len(events), chunk):
                    sink(events[i:i + chunk])
                path.unlink(missing_ok=True)
            finally:
                with self._lock:
                    f.close()
                    self._replaying = None
            done += len(events)
        return done

    def close(self) -> None:
        with self._lock:
            self._rotate()
