"""The commands over the journal itself: its schema (``db``), its runs, history, audit,
report and pruning, the events it set aside (``rejected``), and the jars and the demo."""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from ..errors import ConfigError
from ..formatting import table
from ..redaction import redact
from ._edge import (
    EXIT_OK,
    NotFound,
    complain,
    database_url,
    iso,
    open_journal,
    say,
)
from ._output import write_history
from .parser import PROG, UsageError

log = logging.getLogger(__name__)


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from ..journal.db import current_revision, foreign_bindings, upgrade, upgrade_sql

    if args.sql:  # the script for a DBA: no database is read or changed
        sys.stdout.write(upgrade_sql(start=args.start))
        return EXIT_OK
    if args.start:
        raise UsageError("--from goes with --sql (online, the database says where it is)")
    url = database_url(args)
    upgrade(url)
    say(f"journal schema at {current_revision(url)} in {redact(url)}")
    bound = foreign_bindings(url)
    if bound:
        raise ConfigError(
            f"{len(bound)} of the journal's objects use code outside pg_catalog and its "
            "schema, which a role that may create there could have planted: "
            + "; ".join(f"{what} uses {uses}" for what, uses in bound[:5])
            + (f" and {len(bound) - 5} more" if len(bound) > 5 else "")
            + " (see docs/security.md, 'the search path')")
    return EXIT_OK


def cmd_db_grant(args: argparse.Namespace) -> int:
    from ..journal.roles import grant, grant_statements

    if not args.writer and not args.reader and not args.planner:
        raise UsageError("name a --writer role, a --reader role, a --planner role, or several")
    try:
        if args.dry_run:
            for statement in grant_statements(args.writer, args.reader, planner=args.planner):
                say(f"{statement};")
            return EXIT_OK
        url = database_url(args)
        grant(url, args.writer, args.reader, args.planner)
    except ValueError as exc:  # an unusable role name
        raise UsageError(str(exc)) from None
    done = [f"{kind} privileges to {name!r}" for kind, name in
            (("writer", args.writer), ("reader", args.reader), ("planner", args.planner))
            if name]
    say(f"granted journal {' and '.join(done)} in {redact(url)}")
    return EXIT_OK


def cmd_db_current(args: argparse.Namespace) -> int:
    from alembic.script import ScriptDirectory

    from ..journal.db import alembic_config, current_revision

    url = database_url(args)
    current = current_revision(url)
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    if current is None:
        say(f"none (empty database; head is {head}: run `{PROG} db upgrade`)")
    elif current == head:
        say(f"{current} (head)")
    else:
        say(f"{current} (head is {head}: run `{PROG} db upgrade`)")
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    with open_journal(args) as journal:
        runs = journal.runs(args.query)
        concurrent = [pair for name in sorted({r.query_name for r in runs})
                      for pair in journal.concurrent_runs(name)]
    if args.query and not runs:
        raise NotFound(f"no runs journaled for query {args.query!r}")
    if not runs:
        raise NotFound("the journal holds no runs yet: is a listener writing to this "
                        "database?")
    for a, b in concurrent:
        complain("warning", f"runs {a.run_id} and {b.run_id} of query {a.query_name!r} journaled "
                        "batches at the same time: two jobs run under one name (see "
                        f"`{PROG} plan`)")
    rows = []
    for r in runs:
        state = "failed" if r.exception else "terminated" if r.terminated_at else "no end seen"
        span = (f"{r.first_batch_id}..{r.last_batch_id}" if r.first_batch_id is not None
                else "")
        rows.append([r.query_name, r.run_id, r.query_id, iso(r.started_at),
                     iso(r.last_trigger_at), r.batches, span, state])
    say(table(["QUERY", "RUN ID", "QUERY ID", "STARTED", "LAST TRIGGER", "BATCHES",
                 "BATCH IDS", "STATE"], rows))
    return EXIT_OK


def cmd_prune(args: argparse.Namespace) -> int:
    if args.before > datetime.now(timezone.utc):
        raise UsageError(f"--before {iso(args.before)} is in the future: nothing journaled "
                         "has triggered after it yet")
    from ..savepoint.core import pinning
    from ._savepoints import prune_lines

    with open_journal(args) as journal:
        pins, ignored = pinning(journal.savepoints(args.query))
        result = journal.prune(args.before, query_name=args.query, dry_run=args.dry_run,
                               savepoints=pins)
    lines, notes = prune_lines(result, ignored)
    for note in notes:
        complain("note", note)
    verb = "would prune" if args.dry_run else "pruned"
    scope = f"of query {args.query!r} " if args.query else ""
    say(f"{verb} {result.batches:,} batches {scope}({result.partition_rows:,} Kafka "
         f"partition rows) triggered before {iso(args.before)}")
    if result.kept_newest:
        say(f"kept the newest batch of {result.kept_newest} "
             f"quer{'y' if result.kept_newest == 1 else 'ies'} older than that: a new "
             "checkpoint starts from it")
    for line in lines:
        say(line)
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    """Batches oldest first. Without --limit the history is streamed (Journal.iter_history),
    so a history of any length prints in the memory of one page of batches."""
    with open_journal(args) as journal:
        if args.limit is not None:
            batches: Iterable[Any] = journal.history(args.query, limit=args.limit)
        else:
            batches = journal.iter_history(args.query)
        it = iter(batches)
        first = next(it, None)
        if first is None:
            raise NotFound(f"no journaled batches for query {args.query!r}")
        write_history(sys.stdout, args.format, itertools.chain([first], it))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import write_report

    with open_journal(args) as journal:
        path = write_report(journal, args.query, args.output, since=args.since,
                            buckets=args.buckets, top=args.top, audit=not args.no_audit)
    say(str(path))
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    """Exit 0 when every partition is contiguous or discontinuous only where a recorded
    plan said so, 3 when not (a cron job or CI step gates on it)."""
    from ..audit import audit_query, format_json, format_table

    with open_journal(args) as journal:
        if not journal.history(args.query, limit=1):
            raise NotFound(f"no journaled batches for query {args.query!r}")
        report = audit_query(journal, args.query, since=args.since)
    sys.stdout.write(format_json(report) + "\n" if args.format == "json"
                     else format_table(report))
    return int(report.exit_code)


def cmd_rejected_list(args: argparse.Namespace) -> int:
    from ..capture.rejected import list_rejected

    with open_journal(args) as journal:
        found = list_rejected(journal, args.query)
    if not found:
        scope = f" of query {args.query!r}" if args.query else ""
        say(f"no rejected events{scope}")
        return EXIT_OK
    rows = [[e.id, iso(e.received_at), e.query_name or "", e.what,
             " ".join(e.reason.split())[:100]] for e in found]
    say(table(["ID", "RECEIVED", "QUERY", "EVENT", "REASON"], rows))
    return EXIT_OK


def cmd_rejected_replay(args: argparse.Namespace) -> int:
    from ..capture.rejected import list_rejected, replay_rejected

    with open_journal(args) as journal:
        chosen = list_rejected(journal, args.query, ids=args.id)
        missing = sorted(set(args.id or ()) - {e.id for e in chosen})
        if missing:
            raise NotFound("no rejected event with id " + ", ".join(map(str, missing))
                            + (f" of query {args.query!r}" if args.query else ""))
        outcomes = replay_rejected(journal, chosen)
    for o in outcomes:
        say(f"{o.id}: journaled" if o.journaled
             else f"{o.id}: still rejected: {' '.join((o.reason or '').split())[:200]}")
    failed = sum(1 for o in outcomes if not o.journaled)
    say(f"journaled {len(outcomes) - failed} of {len(outcomes)} rejected event(s)")
    if failed:
        raise NotFound(f"{failed} event(s) still refused; they stay in rejected_events")
    return EXIT_OK


def cmd_jars(args: argparse.Namespace) -> int:
    from ..local import jars

    if args.packages:
        if args.set == "delta":
            say(jars.delta_coordinate(jars.spec_for("delta", args.jar_version)))
            return EXIT_OK
        if args.set != "kafka-connector":
            raise UsageError("--packages is for kafka-connector and delta only")
        say(jars.connector_coordinate(args.jar_version or jars.connector_version()))
        return EXIT_OK
    paths = jars.jars(args.set, args.jar_version)
    if args.set == "kafka-connector":
        note = jars.connector_note(args.jar_version)
        if note:  # another patch than PySpark's: the user's choice, said where they look
            complain("note", note)
    if args.format == "list":
        for path in paths:
            say(str(path))
    else:
        say((",".join if args.format == "spark-jars" else os.pathsep.join)(map(str, paths)))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """The demo (offset_journal/cli/demo.py) gets the arguments after "demo"; it checks its
    own requirements (the ``demo`` extra) and says in one line what is missing."""
    import importlib

    demo = importlib.import_module(".demo", __package__)  # sys.modules first, as imports do
    return int(demo.main(list(args.demo_args)) or 0)

