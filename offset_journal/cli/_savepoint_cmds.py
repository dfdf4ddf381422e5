"""``savepoint create|list|show``: a query's state exported at a journaled batch, and
the savepoints the journal records."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from ._edge import (
    EXIT_OK,
    EXIT_WARNING,
    NotFound,
    complain,
    open_journal,
    say,
)
from .parser import UsageError

log = logging.getLogger(__name__)


def scheduled_create(argv: list[str], index: int | None) -> bool:
    """Whether ``argv`` is ``savepoint create`` with retention (``--keep``,
    ``--max-age``): cron's form, which exits as ``check`` does (read before parsing,
    which may fail)."""
    if index is None or argv[index] != "savepoint" or "create" not in argv[index + 1:]:
        return False
    return any(a in ("--keep", "--max-age") or a.startswith(("--keep=", "--max-age="))
               for a in argv[index + 1:])


def cmd_savepoint_create(args: argparse.Namespace) -> int:
    """Checks first (no Spark: a bad checkpoint or target is one line at once), then the
    export in a local SparkSession (the active one when called in-process)."""
    from ..savepoint.spark import export_savepoint, prepare_savepoint, savepoint_session
    from ._savepoints import manifest_table

    if args.under is not None or args.keep is not None or args.max_age is not None:
        return _create_on_schedule(args)
    with open_journal(args) as journal:
        prepared = prepare_savepoint(journal, args.query, args.checkpoint, args.to)
        for note in prepared.notes:
            complain("note", note)
        spark, own = savepoint_session(args.master,
                                       lambda: _s3a_jars(args.checkpoint, args.to))
        try:
            made = export_savepoint(spark, journal, prepared, record=not args.no_record)
        finally:
            if own:
                spark.stop()
    for warning in made.warnings:
        complain("warning", warning)
    m = made.manifest
    which = f"savepoint {made.id}" if made.id is not None else "savepoint (not recorded)"
    say(f"{which} of query {m.query_name!r}: the state at batch {m.batch_id} of run "
         f"{m.run_id} (query id {m.query_id}), in {made.location}")
    say(manifest_table(m))
    return EXIT_OK


def _create_on_schedule(args: argparse.Namespace) -> int:
    """``--under``/``--keep``/``--max-age``: the savepoint a driver's schedule takes
    (:func:`~offset_journal.savepoint.periodic.take_savepoint`). With retention, exit 1
    (WARNING) when it was taken but something needs a person (not recorded, a savepoint
    not deleted); one not taken is an error (exit 2 then: main)."""
    from ..savepoint.periodic import said, take_savepoint
    from ..savepoint.policy import Retention
    from ..savepoint.spark import savepoint_session
    from ._savepoints import manifest_table

    if args.no_record:
        raise UsageError("--no-record takes no --under, --keep or --max-age: a schedule's "
                         "savepoints are recorded, and its retention reads the records")
    sessions: list[tuple[Any, bool]] = []

    def spark() -> Any:
        sessions.append(savepoint_session(
            args.master, lambda: _s3a_jars(args.checkpoint, args.to or args.under)))
        return sessions[-1][0]

    retention = Retention(args.keep, args.max_age)
    try:
        with open_journal(args) as journal:
            taken = take_savepoint(spark, journal, args.query, args.checkpoint,
                                   under=args.under, to=args.to, retention=retention)
    finally:
        for session, own in sessions:
            if own:
                session.stop()
    for note in taken.notes:
        complain("note", note)
    made = taken.savepoint
    if made is not None:
        m = made.manifest
        which = f"savepoint {made.id}" if made.id is not None else "savepoint (not recorded)"
        say(f"{which} of query {m.query_name!r}: the state at batch {m.batch_id} of run "
            f"{m.run_id} (query id {m.query_id}), in {made.location}")
        say(manifest_table(m))
    for line in said(taken):
        say(line)
    for warning in taken.warnings:
        complain("warning", warning)
    if not retention.bounded:
        return EXIT_OK
    status = "WARNING" if taken.warnings else "OK"
    what = (f"savepoint {made.id} taken at batch {taken.batch_id}" if made is not None
            else f"nothing new at batch {taken.batch_id}")
    say(f"{status}: {what}; {len(taken.pruned.deleted)} deleted, "
        f"{len(taken.pruned.kept)} kept in {taken.scope}")
    return EXIT_WARNING if taken.warnings else EXIT_OK


def _s3a_jars(*paths: str) -> str | None:
    """hadoop-aws for a session of our own when a path is on S3 (fetched once)."""
    from ..local.jars import s3a_spark_jars_value
    from ..values import on_s3

    return s3a_spark_jars_value() if on_s3(*paths) else None


def cmd_savepoint_list(args: argparse.Namespace) -> int:
    from ._savepoints import listed

    with open_journal(args) as journal:
        found = journal.savepoints(args.query)
    if not found:
        raise NotFound(f"no savepoint recorded for query {args.query!r}")
    text, notes = listed(found)
    for note in notes:
        complain("note", note)
    say(text)
    return EXIT_OK


def cmd_savepoint_show(args: argparse.Namespace) -> int:
    """A savepoint checked (manifest, journal record, every file's checksum) and shown."""
    from ..savepoint import load_savepoint
    from ._savepoints import shown

    with open_journal(args) as journal:
        found = load_savepoint(args.savepoint, journal, query_name=args.query,
                               unrecorded=args.unrecorded_savepoint)
    for warning in found.warnings:
        complain("warning", warning)
    say(shown(found, args.format))
    return EXIT_OK

