"""The ``offset-journal`` command: look at the journal and plan restarts from it.

Output meant for programs goes to stdout alone (``starting-offsets`` prints only the
JSON to paste into ``startingOffsets``); warnings and errors go to stderr. Bad input
ends with one line, ``offset-journal: error: ...``, exit status 2 for usage errors and
1 for everything else (``check``: 3 for both, since its 1 and 2 are warning and
critical), and changes nothing. Database URLs are redacted wherever they
may appear.

This module runs the command line (:func:`main`: parse, a deadline, one line per
error); the commands themselves are in its private modules, one per kind, and the
parser (``parser.py``) points each subcommand at its ``cmd_*`` function through this
module's names: ``_journal_cmds`` (the journal, its schema, history, audit, report,
pruning, rejected events, jars, the demo), ``_restart_cmds`` (plans, checkpoints,
consumer groups), ``_health_cmds`` (retention, check), ``_savepoint_cmds``,
``_losses``, and what they share, ``_edge``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence

from ..errors import ConfigError, OffsetJournalError
from ..formatting import cell, one_line
from ..redaction import redact
from . import parser as cli_parser
from ._deadline import DeadlineExceeded, alarm_deadline, command_deadline, timed_out_line
from ._edge import (
    EXIT_CRITICAL,
    EXIT_OK,
    EXIT_RUNTIME,
    EXIT_UNKNOWN,
    EXIT_USAGE,
    complain,
    say,
)
from ._health_cmds import cmd_check, cmd_retention
from ._journal_cmds import (
    cmd_audit,
    cmd_db_current,
    cmd_db_grant,
    cmd_db_upgrade,
    cmd_demo,
    cmd_history,
    cmd_jars,
    cmd_prune,
    cmd_rejected_list,
    cmd_rejected_replay,
    cmd_report,
    cmd_runs,
)
from ._losses import cmd_losses_acknowledge, cmd_losses_list
from ._restart_cmds import (
    cmd_checkpoint_compare,
    cmd_checkpoint_import,
    cmd_checkpoint_inspect,
    cmd_commit_group,
    cmd_plan,
    cmd_starting_offsets,
)
from ._savepoint_cmds import (
    cmd_savepoint_create,
    cmd_savepoint_list,
    cmd_savepoint_show,
    scheduled_create,
)
from .parser import PROG, UsageError

log = logging.getLogger(__name__)

__all__ = [  # the parser's: each subcommand's function, by name
    "EXIT_OK", "EXIT_RUNTIME", "EXIT_UNKNOWN", "EXIT_USAGE", "cmd_audit", "cmd_check",
    "cmd_checkpoint_compare", "cmd_checkpoint_import", "cmd_checkpoint_inspect",
    "cmd_commit_group", "cmd_db_current", "cmd_db_grant", "cmd_db_upgrade", "cmd_demo",
    "cmd_history", "cmd_jars", "cmd_losses_acknowledge", "cmd_losses_list", "cmd_plan",
    "cmd_prune", "cmd_rejected_list", "cmd_rejected_replay", "cmd_report", "cmd_retention",
    "cmd_runs", "cmd_savepoint_create", "cmd_savepoint_list", "cmd_savepoint_show",
    "cmd_starting_offsets", "main",
]


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The ``offset-journal`` parser (its grammar is in parser.py)."""
    return cli_parser.build_parser(sys.modules[__name__])


def _exit_now(seconds: float, code: int = EXIT_RUNTIME) -> None:  # pragma: no cover
    """The last resort: the deadline passed and the command did not stop."""
    complain("error", timed_out_line(seconds))
    sys.stderr.flush()
    os._exit(code)


# --------------------------------------------------------------------------- main


_RUNTIME_ERRORS = (OffsetJournalError, OSError)
"""Bad input or an unavailable service (the journal's errors among them): one line,
exit 1."""


def _runtime_error(exc: BaseException) -> bool:
    return isinstance(exc, _RUNTIME_ERRORS)


def _read_only_line(args: argparse.Namespace, exc: BaseException) -> str | None:
    """What to say when a command that writes ran on a read-only server (a standby):
    it needs the primary."""
    from ..errors import JournalReadOnly

    if not isinstance(exc, JournalReadOnly):
        return None
    words = [getattr(args, "command", None)]
    words += [getattr(args, f"{words[0]}_command", None)]
    name = " ".join(w for w in words if w)
    return (f"`{PROG} {name}` writes to the journal, and its database is read-only here (a "
            "standby, or default_transaction_read_only): it needs the primary (its URL, or "
            "a multi-host URL with target_session_attrs=read-write)")


class _Redacting(logging.Formatter):
    """Every line logged through the command's handler redacted: the libraries' (s3fs's
    calls, botocore's request dumps and signatures at -vv) as well as offset-journal's
    own, whose messages redact what they know of but not what a library prints."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Redacting(f"{PROG}: %(levelname)s: %(name)s: %(message)s"))
    # basicConfig only: main() also runs in-process (tests, notebooks), where the
    # host's logging setup must be left as it is.
    logging.basicConfig(level=level, handlers=[handler])


def _command_index(argv: Sequence[str]) -> int | None:
    """Where the subcommand is in ``argv``, past the global options (None: unclear)."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--database-url":
            i += 2
            continue
        if token == "--timeout":
            i += 2
            continue
        if token.startswith(("--database-url=", "--timeout=")) or token == "--verbose" \
                or re.fullmatch(r"-v+", token):
            i += 1
            continue
        return None if token.startswith("-") else i
    return None


def _asks_json(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for ``--format json`` (read before parsing, which may fail)."""
    return any(a == "--format=json" or (a == "--format" and b == "json")
               for a, b in zip(argv, [*argv[1:], ""], strict=True))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (tests call this in-process)."""
    console = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    index = _command_index(argv)
    # check's 1 and 2 are warning and critical: its errors are 3, UNKNOWN; a scheduled
    # savepoint's too, but one not taken is 2, critical (the state is not saved)
    health = index is not None and argv[index] == "check"
    scheduled = scheduled_create(argv, index)
    how = _Failing(EXIT_UNKNOWN if health or scheduled else EXIT_USAGE,
                   EXIT_UNKNOWN if health else EXIT_CRITICAL if scheduled else EXIT_RUNTIME,
                   health and _asks_json(argv))
    try:
        args = _parsed(build_parser(), argv, index)
    except UsageError as exc:
        how.fail(str(exc))
        return how.usage
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else how.usage
    _setup_logging(args.verbose)
    return _run(args, how, console)


class _Failing:
    """How a command fails: its exit codes for bad usage and at run time, and whether
    it answers ``--format json`` (``check``: an object on stdout too, so that a machine
    reading stdout sees UNKNOWN rather than nothing)."""

    def __init__(self, usage: int, runtime: int, as_json: bool) -> None:
        self.usage, self.runtime, self.as_json = usage, runtime, as_json

    def fail(self, text: str) -> None:
        """One line on stderr (and the JSON object, where asked)."""
        complain("error", text)
        if self.as_json:
            say(json.dumps({"status": "unknown", "exit_code": EXIT_UNKNOWN,
                            "error": cell(redact(text))}, indent=2))


def _parsed(parser: argparse.ArgumentParser, argv: list[str],
            index: int | None) -> argparse.Namespace:
    """The arguments; ``demo``'s own are handed to it as they are (but -v/-vv)."""
    demo_args: list[str] | None = None
    if index is not None and argv[index] == "demo":
        argv, demo_args = argv[: index + 1], argv[index + 1:]
    args = parser.parse_args(argv)
    if demo_args is not None:
        # -v/-vv after "demo" too, as every other command takes them
        more = [t for t in demo_args if t == "--verbose" or re.fullmatch(r"-v+", t)]
        args.verbose += sum(1 if t == "--verbose" else len(t) - 1 for t in more)
        args.demo_args = [t for t in demo_args if t not in more]
    return args


def _run(args: argparse.Namespace, how: _Failing, console: bool) -> int:
    """The command under its deadline; every error one line and its exit code."""
    func: Callable[[argparse.Namespace], int] = args.func
    seconds: float | None = None
    try:
        seconds = command_deadline(getattr(args, "timeout", None),
                                   getattr(args, "command", None))
        last: Callable[[float], None] = lambda s: _exit_now(s, how.runtime)  # noqa: E731
        with alarm_deadline(seconds, last_resort=last if console else None):
            return func(args)
    except DeadlineExceeded:
        how.fail(timed_out_line(seconds or 0.0))
        return how.runtime
    except (UsageError, ConfigError) as exc:
        how.fail(str(exc))
        return how.usage
    except KeyboardInterrupt:
        how.fail("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:
        if args.verbose >= 2:  # a library's exception may quote a secret it was given
            sys.stderr.write(redact(traceback.format_exc()))
        if _runtime_error(exc):
            how.fail(_read_only_line(args, exc) or one_line(exc))
        else:
            how.fail(f"unexpected {type(exc).__name__}: {one_line(exc)} (-vv for details)")
        return how.runtime
