"""What the listener's writer journaled recently, kept on disk until it is safe beyond
the primary: the failover window (see _handover.py and docs/operations.md, "When the
journal's database fails over").

With asynchronous replication, a standby promoted after its primary was lost lacks the
last transactions the primary had acknowledged. So the writer appends every event it
journaled to a segment file of this window, in its spool directory, under the server
it was journaled on (:attr:`offset_journal.journal.server.ServerIdentity.key`). A segment is
deleted once the writer, ``seconds`` or more after the segment's newest event, finds
the same server still there: a standby that replicates with less lag than that has
the events by then. Finding another server, the writer takes the segments of every
server before it (:meth:`RecentWindow.check`) and journals their events again: the
journal keeps a (run, batch) once, so what the new server has is a no-op and what it
lacks is written.

Segments are written without fsync as each transaction's events are appended (one
write to the page cache): they outlive the driver's crash, not the machine's. A
progress event is kept as its JSON text (no encoding on the write path). Each process
writes its own segments, locked while open; a segment a dead process left (its newest
event: the file's mtime) is retired, or journaled again, by the next writer on the
directory, at once when it finds another server.

What is handed over is what can be read: a line that holds no event (cut short, not
UTF-8, not a JSON object) is skipped, named in a warning; a dead process's segment
whose header names no server cannot be told safe or not, and is set aside (renamed
``rejected-recent-...``, out of every scan) for an operator to look at, named in a
warning. Either way their events are counted as unprotected. A segment is rolled
before it passes :attr:`RecentWindow.segment_bytes`, so that ``max_bytes`` holds for
the bytes on disk: past it, the oldest segments are deleted.

The window is a safeguard beside the write path, never on it: a disk error here is
logged (once per kind every :data:`WARN_EVERY`) and the events it concerns are counted
as unprotected (:attr:`RecentWindow.unprotected`), as are those dropped to keep within
``max_bytes``; nothing here raises an OSError but ``keep``'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..formatting import first_line
from ..records import PROGRESS
from ._ownership import Strangers, check_directory
from ._spool import SPOOL_DIR_MODE, SPOOL_FILE_MODE, event_line

log = logging.getLogger(__name__)

SEGMENTS = "recent-*.jsonl"
SET_ASIDE = "rejected-"
"""Put before the name of a segment nothing can hand over: out of every scan, kept for
an operator to look at."""
DEFAULT_SECONDS = 60.0
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
SEGMENT_SHARE = 8
SEGMENT_MIN = 16 * 1024
"""A segment is rolled before it passes an eighth of ``max_bytes`` (SEGMENT_SHARE; at
least SEGMENT_MIN, at most ``max_bytes``): a full window drops its oldest eighth, not
all it holds."""
WARN_EVERY = 30.0
"""Seconds between two warnings of the same kind of disk error in the window."""
LINES_NAMED = 5
"""Lines of one segment skipped that a warning names one by one; the rest are counted."""


@dataclass
class _Segment:
    """One of this process's segment files: open, locked, and written in order."""

    path: Path
    file: IO[str]
    server: str
    first_at: float
    last_at: float
    events: int = 0
    size: int = 0  # bytes on disk, its header's included


@dataclass
class _Found:
    """A segment of another server, read to be handed over."""

    at: float  # this process's: its first event; a dead process's: its mtime
    path: Path
    events: list[dict[str, Any]]
    own: _Segment | None = None


def _line(event: dict[str, Any]) -> str:
    """An event as a segment's line: a progress event as ``P`` and its JSON text as it
    came (compact JSON holds no line break), anything else as ``E`` and its JSON."""
    text = event.get("json")
    if (event.get("type") == PROGRESS and len(event) == 2 and isinstance(text, str)
            and "\n" not in text):
        return f"P{text}\n"
    return "E" + event_line(event)


def _size(text: str) -> int:
    """The bytes ``text`` takes in a segment (UTF-8); ASCII, the common case, at no cost."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _fill(sizes: list[int], first: int, room: int) -> int:
    """Where the lines from ``first`` that fit in ``room`` bytes end (one at least)."""
    last, used = first + 1, sizes[first]
    while last < len(sizes) and used + sizes[last] <= room:
        used += sizes[last]
        last += 1
    return last


def _header(server: str, now: float) -> str:
    """A segment's first line: the server its events were journaled on."""
    return json.dumps({"server": server, "at": now}) + "\n"


def _event(raw: bytes) -> dict[str, Any] | str:
    """The event a segment's line holds, or why it holds none."""
    if not raw.endswith(b"\n"):
        return "cut short"
    try:
        line = raw[:-1].decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8"
    if line.startswith("P"):
        return {"type": PROGRESS, "json": line[1:]}
    if not line.startswith("E"):
        return "not an event line"
    try:
        event = json.loads(line[1:])
    except (ValueError, RecursionError):
        return "not JSON"
    return event if isinstance(event, dict) else "not a JSON object"


def _events(f: IO[bytes], path: Path) -> tuple[list[dict[str, Any]], int]:
    """The events of a segment's lines after its header, and how many lines were
    skipped (each named in a warning, up to LINES_NAMED a segment)."""
    events: list[dict[str, Any]] = []
    skipped = 0
    for n, raw in enumerate(f, 2):
        event = _event(raw)
        if isinstance(event, dict):
            events.append(event)
            continue
        skipped += 1
        if skipped <= LINES_NAMED:
            log.warning("offset-journal failover window %s: line %d skipped (%s): the "
                        "event it held is not journaled again", path, n, event)
    if skipped > LINES_NAMED:
        log.warning("offset-journal failover window %s: %d more line(s) skipped", path,
                    skipped - LINES_NAMED)
    return events, skipped


def _server(f: IO[bytes]) -> str | None:
    """The server a segment's header (its first line) names, None when it names none."""
    f.seek(0)
    try:
        head = json.loads(f.readline().decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    server = head.get("server") if isinstance(head, dict) else None
    return server if isinstance(server, str) else None


@contextlib.contextmanager
def _orphan(path: Path) -> Iterator[IO[bytes] | None]:
    """``path`` open and locked when no live process holds it (else None)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield f
    finally:
        f.close()


class RecentWindow:
    """The failover window of one writer (its thread alone uses it)."""

    def __init__(self, directory: str | os.PathLike[str], seconds: float = DEFAULT_SECONDS,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = Path(directory)
        self.seconds = seconds
        self.max_bytes = max_bytes
        self._own: list[_Segment] = []  # oldest first; the last one is written to
        self._scanned_at = float("-inf")
        self._checked_on: str | None = None  # the server of the last complete check
        self._handing = False  # a hand-over stopped short (keep raised): tried again
        self._warned_at: dict[str, float] = {}
        self.strangers = Strangers(f"failover window {self.directory}")
        """Segments here this user did not make: never journaled (see _ownership.py)."""
        self.dropped = 0
        """Events dropped before they were safe, to keep within ``max_bytes``."""
        self.unprotected = 0
        """Events journaled but not kept here (a disk error, dropped to keep within
        ``max_bytes``, a line or a segment nothing can read): a failover of the
        journal's database may lose them."""

    @property
    def enabled(self) -> bool:
        return self.seconds > 0

    @property
    def segment_bytes(self) -> int:
        """The bytes on disk past which a segment is rolled (see SEGMENT_SHARE)."""
        return min(self.max_bytes, max(self.max_bytes // SEGMENT_SHARE, SEGMENT_MIN))

    def holding(self) -> bool:
        """Whether events are kept that are not yet known to be safe: this process's,
        those a hand-over could not move yet, and, before the directory is first looked
        at, any segment another process left (flush() then asks which server it is)."""
        if self._own or self._handing:
            return True
        if self._scanned_at > float("-inf"):
            return False
        try:
            return any(True for _ in self.directory.glob(SEGMENTS))
        except OSError:
            return False

    def due(self) -> float | None:
        """When (time.time()) finding the same server would retire a segment."""
        return min((s.last_at + self.seconds for s in self._own), default=None)

    # -------------------------------------------------------------- writing

    def append(self, events: list[dict[str, Any]], server: str,
               now: float | None = None) -> None:
        """Keep ``events``, just journaled on ``server``: written to its segments' files
        at once (the page cache: the driver's crash does not lose them), a new segment
        whenever one would pass :attr:`segment_bytes`. Room is made first: the oldest
        segments go while the window would pass ``max_bytes`` on disk (an event alone
        past it is not kept). What goes, and on a disk error the events and those of
        the segment it hit, is counted unprotected."""
        if not self.enabled or not events:
            return
        now = time.time() if now is None else now
        lines = [_line(e) for e in events]
        sizes = [_size(text) for text in lines]
        first = 0
        while first < len(lines):
            segment = self._open_segment(server, now, sizes[first])
            header = "" if segment is not None else _header(server, now)
            held = segment.size if segment is not None else _size(header)
            last = _fill(sizes, first, self.segment_bytes - held)
            need = sum(sizes[first:last])
            if held + need > self.max_bytes:  # a line alone past the cap: not kept
                self._dropped(last - first, now)
                first = last
                continue
            self._make_room(need + (0 if segment is not None else held), spare=segment)
            try:
                if segment is None:
                    segment = self._new_segment(server, now, header)
                segment.file.write("".join(lines[first:last]))
                segment.file.flush()
            except OSError as exc:
                if segment is None:
                    self._unprotect(len(lines) - first, "create",
                                    f"cannot create a segment in {self.directory}", exc)
                    return
                # What reached the file may end in half a line: the segment is given up.
                self._abandon(segment)
                self._unprotect(segment.events + len(lines) - first, "write",
                                f"cannot write {segment.path}", exc)
                return
            segment.last_at = now
            segment.events += last - first
            segment.size += need
            first = last

    def _unprotect(self, n: int, kind: str, what: str, exc: OSError) -> None:
        """Count ``n`` events as not kept, and say so once per kind every WARN_EVERY."""
        self.unprotected += n
        self._warn(kind, f"{what}: {n} event(s) journaled are not kept for a failover of "
                         f"the journal's database ({self.unprotected} so far)", exc)

    def _forget(self, segment: _Segment) -> None:
        """A segment of this process out of the window (its file left as it is)."""
        self._own.remove(segment)
        with contextlib.suppress(OSError):
            segment.file.close()

    def _abandon(self, segment: _Segment) -> None:
        """Give up a segment of this process: out of the window, its file deleted."""
        with contextlib.suppress(OSError):
            segment.path.unlink(missing_ok=True)
        self._forget(segment)

    def _open_segment(self, server: str, now: float, need: int) -> _Segment | None:
        """This process's segment to write ``need`` bytes or more to, None for a new one:
        a new one per server, every seconds / 2 (so that the older ones can be retired
        as a whole), and when the last one would pass :attr:`segment_bytes`."""
        if self._own:
            last = self._own[-1]
            if (last.server == server and now - last.first_at < self.seconds / 2
                    and last.size + need <= self.segment_bytes):
                return last
        return None

    def _new_segment(self, server: str, now: float, header: str) -> _Segment:
        """A new segment of this process for ``server``, its ``header`` written."""
        if not self.directory.is_dir():
            self.directory.mkdir(parents=True, exist_ok=True, mode=SPOOL_DIR_MODE)
        check_directory(self.directory)
        name = (f"recent-{socket.gethostname()}-{os.getpid()}-{time.time_ns()}-"
                f"{uuid.uuid4().hex[:8]}.jsonl")
        # Locked with its header written under a name no scan lists, then renamed into
        # place: another writer must never take it for a dead process's.
        hidden = self.directory / f".{name}.new"
        fd = os.open(hidden, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND,
                     SPOOL_FILE_MODE)
        f = open(fd, "a", encoding="utf-8")  # noqa: SIM115 - kept open while ours
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            f.write(header)
            f.flush()
            os.rename(hidden, self.directory / name)
        except OSError:
            with contextlib.suppress(OSError):
                hidden.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                f.close()
            raise
        segment = _Segment(self.directory / name, f, server, now, now, size=_size(header))
        self._own.append(segment)
        return segment

    def _make_room(self, need: int, spare: _Segment | None) -> None:
        """Delete the oldest segments but ``spare`` (the one about to be written) while
        the window and ``need`` more bytes would pass ``max_bytes`` on disk."""
        total = sum(s.size for s in self._own)
        while total + need > self.max_bytes:
            oldest = next((s for s in self._own if s is not spare), None)
            if oldest is None:
                return
            total -= oldest.size
            self._delete(oldest)
            self._dropped(oldest.events, oldest.first_at)

    def _dropped(self, n: int, since: float) -> None:
        """Count ``n`` events journaled since ``since`` as dropped to keep within
        ``max_bytes`` (unprotected), and say so once every WARN_EVERY."""
        self.dropped += n
        self.unprotected += n
        now = time.monotonic()
        if now < self._warned_at.get("full", float("-inf")) + WARN_EVERY:
            return
        self._warned_at["full"] = now
        log.warning("offset-journal: the failover window %s is full (%d bytes, "
                    "failover_window_max_bytes): %d event(s) journaled since %s are no "
                    "longer kept for a failover of the journal's database (%d dropped so "
                    "far, counted in stats().unprotected; said again in %.0fs at most)",
                    self.directory, self.max_bytes, n,
                    time.strftime("%H:%M:%S", time.localtime(since)), self.dropped,
                    WARN_EVERY)

    def _delete(self, segment: _Segment) -> None:
        try:
            segment.path.unlink(missing_ok=True)
        except OSError as exc:  # a dead process's for the next writer: safe, or no one's
            self._warn("delete", f"cannot delete {segment.path}", exc)
        self._forget(segment)

    def _warn(self, kind: str, what: str, exc: OSError) -> None:
        """Say a disk error that loses nothing, once per kind every WARN_EVERY."""
        now = time.monotonic()
        if now < self._warned_at.get(kind, float("-inf")) + WARN_EVERY:
            return
        self._warned_at[kind] = now
        log.warning("offset-journal: failover window: %s (%s; said again in %.0fs at most)",
                    what, exc.strerror or type(exc).__name__, WARN_EVERY)

    # -------------------------------------------------------------- the server seen

    def check(self, server: str, keep: Callable[[list[dict[str, Any]]], None],
              now: float | None = None) -> int:
        """A transaction just ran on ``server`` at ``now``. The events kept for any other
        server (this process's, or a dead one's) go to ``keep`` (which must hold them
        durably, or raise: then they stay here), and their segments are deleted; the
        segments of ``server`` whose newest event is ``seconds`` older are deleted (safe).
        A dead process's segments are looked for every ``seconds`` / 2, and at once on
        the first check and on another server than the last complete check's (what they
        hold goes first there, not up to ``seconds`` / 2 after newer events). Returns how
        many events went to ``keep``."""
        now = time.time() if now is None else now
        arrived = server != self._checked_on
        scan = arrived or now - self._scanned_at >= self.seconds / 2
        if not scan and all(s.server == server and s.last_at + self.seconds > now
                            for s in self._own):
            return 0  # nothing to hand over nor to let go: the common case, cheap
        handed = 0
        if scan or any(s.server != server for s in self._own):
            self._handing = True  # until every segment of another server is handed over
            handed = self._hand_over(server, keep, orphans=scan)
            self._handing = False
        self._checked_on = server  # everything of the servers before is handed over
        for segment in [s for s in self._own
                        if s.server == server and s.last_at + self.seconds <= now]:
            self._delete(segment)
        if scan:
            self._scanned_at = now
            self._retire_orphans(server, now)
        return handed

    def holds_other_than(self, server: str) -> bool:
        """Whether events of another server than ``server`` wait here (handing them over
        failed: keep raised): this process's, or a dead one's."""
        return self._handing or any(s.server != server for s in self._own)

    def _hand_over(self, server: str, keep: Callable[[list[dict[str, Any]]], None], *,
                   orphans: bool) -> int:
        """Every readable segment of another server than ``server`` (this process's, and
        with ``orphans`` a dead one's) to ``keep`` at once, oldest first, then deleted.
        An OSError of ``keep`` (the spool cannot take them) keeps them all here; any
        other error is about something they hold: then one by one."""
        with contextlib.ExitStack() as stack:  # a dead process's stay locked until then
            found = self._own_of_others(server)
            if orphans:
                found += self._orphans_of_others(server, stack)
            if not found:
                return 0
            found.sort(key=lambda one: one.at)
            try:
                keep([e for one in found for e in one.events])
            except OSError:
                raise
            except Exception:  # noqa: BLE001 - which segment? one by one finds it
                return self._one_by_one(found, keep)
            for one in found:
                self._let_go(one)
            return sum(len(one.events) for one in found)

    def _one_by_one(self, found: list[_Found],
                    keep: Callable[[list[dict[str, Any]]], None]) -> int:
        """Each segment alone, newest first (what ``keep`` takes goes ahead of all it
        holds: the order stays); one whose events ``keep`` refuses (not a disk error)
        is set aside, named."""
        handed = 0
        for one in reversed(found):
            try:
                keep(one.events)
            except OSError:
                raise
            except Exception as exc:  # noqa: BLE001 - said, and set aside for a person
                self._set_aside(one.path, f"cannot be handed over ({type(exc).__name__}: "
                                          f"{first_line(exc)})", len(one.events))
                if one.own is not None:
                    self._forget(one.own)
                continue
            self._let_go(one)
            handed += len(one.events)
        return handed

    def _let_go(self, one: _Found) -> None:
        """A segment handed over: deleted (one that stays is journaled again later: a
        no-op where it is)."""
        try:
            one.path.unlink(missing_ok=True)
        except OSError as exc:
            self._warn("delete", f"cannot delete {one.path}", exc)
        if one.own is not None:
            self._forget(one.own)

    def _own_of_others(self, server: str) -> list[_Found]:
        """This process's segments of another server than ``server``, read."""
        found = []
        for segment in [s for s in self._own if s.server != server]:
            try:
                with open(segment.path, "rb") as f:
                    f.readline()  # its header: this process knows its server
                    events, skipped = _events(f, segment.path)
            except OSError as exc:  # never readable again: no use keeping it
                self._abandon(segment)
                self._unprotect(segment.events, "read", f"cannot read {segment.path}", exc)
                continue
            self.unprotected += skipped
            found.append(_Found(segment.first_at, segment.path, events, segment))
        return found

    def _orphans_of_others(self, server: str, stack: contextlib.ExitStack) -> list[_Found]:
        """The segments dead processes left of another server than ``server``, read and
        held locked on ``stack``."""
        found = []
        for path in self._orphans():
            try:
                held = stack.enter_context(_orphan(path))
                if held is None or self._owner(held, path) in (None, server):
                    continue
                events, skipped = _events(held, path)
                self.unprotected += skipped
                found.append(_Found(os.fstat(held.fileno()).st_mtime, path, events))
            except OSError as exc:  # left where it is: tried again on the next scan
                self._warn("orphan", f"cannot read {path}", exc)
        return found

    def _owner(self, f: IO[bytes], path: Path) -> str | None:
        """The server a dead process's segment names. None when it names none: an empty
        file (the machine's crash before its header reached the disk) is deleted, any
        other set aside (whether its events are safe cannot be told)."""
        server = _server(f)
        if server is not None:
            return server
        if os.fstat(f.fileno()).st_size == 0:
            log.info("offset-journal: failover window: %s is empty (a crash before its "
                     "header was written); deleted", path)
            path.unlink(missing_ok=True)
            return None
        self._set_aside(path, "has no header naming a server", sum(1 for _ in f))
        return None

    def _set_aside(self, path: Path, why: str, lines: int) -> None:
        """Rename a segment nothing can hand over out of every scan, for an operator to
        look at; its ``lines`` events are counted unprotected, and it is said."""
        aside = path.with_name(SET_ASIDE + path.name)
        try:
            os.rename(path, aside)
        except OSError as exc:
            self._warn("set aside", f"cannot set {path} aside", exc)
            return
        self.unprotected += lines
        log.warning("offset-journal: failover window: %s %s; set aside as %s for an "
                    "operator to look at (docs/operations.md, \"When the journal's "
                    "database fails over\"): its %d line(s) are not journaled again",
                    path, why, aside.name, lines)

    def _orphans(self) -> list[Path]:
        """Segments of dead processes: this user's only, in a directory no other user
        may write to (_ownership.py)."""
        try:
            if not self.directory.is_dir() or self.strangers.refused(self.directory):
                return []
            own = {s.path for s in self._own}
            return sorted(p for p in self.directory.glob(SEGMENTS)
                          if p not in own and self.strangers.look(p) is not None)
        except OSError as exc:
            self._warn("scan", f"cannot list {self.directory}", exc)
            return []

    def _retire_orphans(self, server: str, now: float) -> None:
        """Delete the segments a dead process left for ``server`` once they are safe."""
        for path in self._orphans():
            try:
                with _orphan(path) as f:
                    if f is None or self._owner(f, path) != server:
                        continue
                    if os.fstat(f.fileno()).st_mtime + self.seconds <= now:
                        path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                self._warn("retire", f"cannot retire {path}", exc)

    def close(self) -> None:
        """Release this process's segments: they stay on disk until a writer on the
        directory finds them safe (or journals them again)."""
        for segment in self._own:
            with contextlib.suppress(OSError):
                segment.file.close()
        self._own.clear()
