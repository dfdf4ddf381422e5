"""``savepoint create|list|show``: a query's state exported at a journaled batch, and
the savepoints the journal records."""

from __future__ import annotations

import argparse
import logging

from ._edge import (
    EXIT_OK,
    NotFound,
    complain,
    open_journal,
    say,
)

log = logging.getLogger(__name__)


def cmd_savepoint_create(args: argparse.Namespace) -> int:
    """Checks first (no Spark: a bad checkpoint or target is one line at once), then the
    export in a local SparkSession (the active one when called in-process)."""
    from ..savepoint.spark import export_savepoint, prepare_savepoint, savepoint_session
    from ._savepoints import manifest_table

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

