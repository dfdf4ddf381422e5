"""``state restore --query FILE:FUNCTION``: the new query's function, from a user's file.

Parsing only checks the reference's form (:func:`query_ref`): the file runs when the
command does (:func:`load_function`), first thing, before Spark or the journal is
touched. Run while arguments are parsed, it ran for ``--help`` too, before the other
arguments were checked, and outside the command's deadline; a ``sys.exit(0)`` in it
ended the command with status 0 and nothing done.

Whatever the file does, the command says it in one line, ``argument --query: ...``
(exit 2): a file that is missing, not a regular file (``/dev/zero``, a FIFO, a
directory) or larger than :data:`MAX_BYTES` (read bounded), a syntax error, an
exception or ``sys.exit`` while it loads, no such function. A ``sys.exit`` in the
function itself, once the restore runs it, is a RestoreError (exit 1), never exit 0.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, RestoreError
from ..formatting import first_line

MAX_BYTES = 1 << 20
"""The largest query file read (1 MiB): a query's definition, not data."""
RUN_NAME = "<offset-journal --query>"
"""The module name the file runs under: not ``__main__`` (its ``if __name__ ==
"__main__":`` block stays out), and not in ``sys.modules`` afterwards, so Spark's
cloudpickle ships its functions by value, as with ``runpy.run_path``."""


@dataclass(frozen=True)
class QueryRef:
    """``FILE.py:FUNCTION`` or ``module:FUNCTION``, as given (``text``), not loaded."""

    text: str
    where: str
    name: str

    @property
    def is_file(self) -> bool:
        return self.where.endswith(".py") or os.sep in self.where or "/" in self.where


class _Refused(Exception):
    """Why the file or module gives no function (becomes the one line)."""


def query_ref(text: str) -> QueryRef:
    """The ``--query`` argument's type: its form only (nothing is read or run here)."""
    where, _, name = text.rpartition(":")
    if not where.strip() or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}: use FILE.py:FUNCTION or module:FUNCTION")
    return QueryRef(text, where, name)


def load_function(ref: QueryRef) -> Callable[..., Any]:
    """The function ``ref`` names, its file run (bounded) or its module imported;
    ConfigError ``argument --query: ...`` (one line, exit 2) for anything else. The
    function returned turns a ``sys.exit`` of its own into a RestoreError."""
    try:
        namespace = _run_file(ref.where) if ref.is_file else _import(ref.where)
    except _Refused as exc:
        raise ConfigError(f"argument --query: {ref.text!r}: {exc}") from None
    found = namespace.get(ref.name)
    if not callable(found):
        raise ConfigError(f"argument --query: {ref.text!r}: no function {ref.name!r} there")
    return _no_exit(found, ref)


def _import(module: str) -> dict[str, Any]:
    import importlib

    try:
        return vars(importlib.import_module(module))
    except SystemExit as exc:
        raise _Refused(f"{module} called sys.exit({exc.code!r}) as it was imported: "
                       "nothing was restored") from None
    except Exception as exc:  # the module's own code runs: anything may come out
        raise _Refused(f"importing {module} raised {type(exc).__name__}: "
                       f"{first_line(exc)}") from None


def _run_file(path: str) -> dict[str, Any]:
    """The file's globals once it ran as a module of its own."""
    source = _read(path)
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f", line {exc.lineno}" if exc.lineno else ""
        raise _Refused(f"{path}{where}: {exc.msg}") from None
    except ValueError as exc:  # a NUL byte, on some Pythons
        raise _Refused(f"{path}: {exc}") from None
    module = types.ModuleType(RUN_NAME)
    module.__file__ = path
    namespace = vars(module)
    # Registered while it runs, as an import is (dataclasses and typing look it up).
    sys.modules[RUN_NAME] = module
    try:
        exec(code, namespace)  # noqa: S102 - the user's query file, which they ask to run
    except SystemExit as exc:
        raise _Refused(f"{path} called sys.exit({exc.code!r}) as it was loaded: nothing was "
                       "restored (a query file defines the function)") from None
    except Exception as exc:  # the file's own code: anything may come out
        raise _Refused(f"running {path} raised {type(exc).__name__}: "
                       f"{first_line(exc)}") from None
    finally:
        sys.modules.pop(RUN_NAME, None)
    return namespace


def _read(path: str) -> bytes:
    """The file's bytes: a regular file of at most MAX_BYTES, checked on the open file
    (O_NONBLOCK: a FIFO put in its place does not hang the open)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise _Refused(f"{path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Refused(f"{path} is not a regular file")
        if info.st_size > MAX_BYTES:
            raise _Refused(f"{path} has {info.st_size} bytes: a query file is at most "
                           f"{MAX_BYTES} bytes")
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _Refused(f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        raise _Refused(f"{path} grew past {MAX_BYTES} bytes while it was read")
    return b"".join(chunks)


def _no_exit(function: Callable[..., Any], ref: QueryRef) -> Callable[..., Any]:
    """``function``, with a ``sys.exit`` in it a RestoreError: the restore then removes
    its new checkpoint and the command fails, instead of ending with that status."""
    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except SystemExit as exc:
            raise RestoreError(f"--query {ref.text}: {ref.name}() called sys.exit("
                               f"{exc.code!r}) instead of returning the new query's "
                               "DataStreamWriter") from None
    return call
