"""Whose the spool directory and the files in it are.

Whatever the spool and the failover window find in their directory is journaled with
the writer's rights. So only a directory this user owns, that no other user may write
to, is used (another user could plant a forged batch of any query there, or delete the
events waiting); an existing directory that is not is refused, never changed (it may
be a shared path such as ``/tmp``). In a directory that passes, a file this user did
not make (one planted while the directory was open, or placed by root) is skipped:
said once in a WARNING, counted, never read, and left for a person to look at.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)


def directory_refusal(directory: Path) -> str | None:
    """Why an existing spool directory must not be used; None when it may, when it does
    not exist yet (the spool creates it 0700), and when it is no directory one can use
    at all (not one, or out of reach: the spool says so, and counts what it loses, when
    it is to be written)."""
    try:
        st = os.stat(directory)
    except OSError:
        return None
    uid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        return None
    if st.st_uid != uid:
        return (f"spool directory {directory} belongs to uid {st.st_uid}, not to this "
                f"user (uid {uid}): whoever owns it could plant events the job would "
                "journal; name a directory of this user's (spool_dir)")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "other users" if st.st_mode & stat.S_IWOTH else "its group"
        return (f"spool directory {directory} is writable by {who} (mode "
                f"{stat.S_IMODE(st.st_mode):04o}): they could plant events the job would "
                f"journal; `chmod go-w {directory}`, or name a directory of this user's "
                "(spool_dir)")
    return None


def check_directory(directory: Path) -> None:
    """Raise PermissionError (the spool is then unusable, as on a disk error) when the
    directory exists and must not be used."""
    why = directory_refusal(directory)
    if why is not None:
        raise PermissionError(errno.EACCES, why)


def is_foreign(st: os.stat_result) -> bool:
    """A spool file (its ``lstat``) not to be read: not this user's, or not a regular
    file (a symlink could point anywhere)."""
    return not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()


class Strangers:
    """What a spool or failover window skipped: files this user did not make (each said
    once, in a WARNING), and a refused directory (said once per reason, at ERROR)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.skipped: set[Path] = set()
        self._refusal: str | None = None

    @property
    def count(self) -> int:
        """Files skipped so far."""
        return len(self.skipped)

    def refused(self, directory: Path) -> bool:
        """Whether the directory must not be read now (said at ERROR when it turns so)."""
        why = directory_refusal(directory)
        if why is not None and why != self._refusal:
            log.error("offset-journal %s: nothing in it is read or journaled: %s",
                      self.what, why)
        self._refusal = why
        return why is not None

    def look(self, path: Path) -> os.stat_result | None:
        """``path``'s ``lstat`` when it may be read; None when it is gone or foreign."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return st if self.ours(path, st) else None

    def ours(self, path: Path, st: os.stat_result) -> bool:
        """Whether ``path`` (its ``lstat``) may be read; a foreign file is said once."""
        if not is_foreign(st):
            return True
        if path not in self.skipped:
            self.skipped.add(path)
            why = (f"owned by uid {st.st_uid}" if stat.S_ISREG(st.st_mode)
                   else "not a regular file")
            log.warning("offset-journal %s: skipping %s (%s; this user is uid %d): never "
                        "journaled; look at it and remove it [%d skipped]",
                        self.what, path, why, os.geteuid(), len(self.skipped))
        return False
