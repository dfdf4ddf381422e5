"""The ``offset-journal`` command: look at the journal and plan restarts from it.

Output meant for programs goes to stdout alone (``starting-offsets`` prints only the
JSON to paste into ``startingOffsets``); warnings and errors go to stderr. Bad input
ends with one line, ``offset-journal: error: ...``, exit status 2 for usage errors and
1 for everything else (``check``: 3 for both, since its 1 and 2 are warning and
critical), and changes nothing. Database URLs are redacted wherever they
may appear.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import re
import shlex
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from ..errors import ConfigError, OffsetJournalError, RestartError
from ..formatting import cell, format_time, from_epoch_ms, one_line, table
from ..redaction import redact
from . import parser as cli_parser
from ._deadline import DeadlineExceeded, alarm_deadline, command_deadline, timed_out_line
from ._losses import cmd_losses_acknowledge, cmd_losses_list  # noqa: F401 (the parser's)
from ._output import write_history
from .parser import PROG, UsageError

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
"""``check``'s exit for every error (bad arguments, no answer): the monitoring plugins'
UNKNOWN, since its 1 and 2 mean warning and critical."""


# --------------------------------------------------------------------------- output


def _out(text: str = "") -> None:
    print(text, file=sys.stdout)


def _err(kind: str, text: str) -> None:
    # One line whatever the text holds: a value with a line break must not split it.
    print(f"{PROG}: {kind}: {cell(redact(text))}", file=sys.stderr)


def _iso(value: datetime | None) -> str:
    """A time in the command's tables and JSON: milliseconds, "" for none."""
    return format_time(value, "milliseconds") or ""


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


# --------------------------------------------------------------------------- commands


def _url(args: argparse.Namespace) -> str:
    from ..journal.db import resolve_url

    return resolve_url(args.database_url)


def _journal(args: argparse.Namespace) -> Any:
    from ..journal import Journal

    return Journal(_url(args))


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from ..journal.db import current_revision, foreign_bindings, upgrade, upgrade_sql

    if args.sql:  # the script for a DBA: no database is read or changed
        sys.stdout.write(upgrade_sql(start=args.start))
        return EXIT_OK
    if args.start:
        raise UsageError("--from goes with --sql (online, the database says where it is)")
    url = _url(args)
    upgrade(url)
    _out(f"journal schema at {current_revision(url)} in {redact(url)}")
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
                _out(f"{statement};")
            return EXIT_OK
        url = _url(args)
        grant(url, args.writer, args.reader, args.planner)
    except ValueError as exc:  # an unusable role name
        raise UsageError(str(exc)) from None
    done = [f"{kind} privileges to {name!r}" for kind, name in
            (("writer", args.writer), ("reader", args.reader), ("planner", args.planner))
            if name]
    _out(f"granted journal {' and '.join(done)} in {redact(url)}")
    return EXIT_OK


def cmd_db_current(args: argparse.Namespace) -> int:
    from alembic.script import ScriptDirectory

    from ..journal.db import alembic_config, current_revision

    url = _url(args)
    current = current_revision(url)
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    if current is None:
        _out(f"none (empty database; head is {head}: run `{PROG} db upgrade`)")
    elif current == head:
        _out(f"{current} (head)")
    else:
        _out(f"{current} (head is {head}: run `{PROG} db upgrade`)")
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    with _journal(args) as journal:
        runs = journal.runs(args.query)
        concurrent = [pair for name in sorted({r.query_name for r in runs})
                      for pair in journal.concurrent_runs(name)]
    if args.query and not runs:
        raise _NotFound(f"no runs journaled for query {args.query!r}")
    if not runs:
        raise _NotFound("the journal holds no runs yet: is a listener writing to this "
                        "database?")
    for a, b in concurrent:
        _err("warning", f"runs {a.run_id} and {b.run_id} of query {a.query_name!r} journaled "
                        "batches at the same time: two jobs run under one name (see "
                        f"`{PROG} plan`)")
    rows = []
    for r in runs:
        state = "failed" if r.exception else "terminated" if r.terminated_at else "no end seen"
        span = (f"{r.first_batch_id}..{r.last_batch_id}" if r.first_batch_id is not None
                else "")
        rows.append([r.query_name, r.run_id, r.query_id, _iso(r.started_at),
                     _iso(r.last_trigger_at), r.batches, span, state])
    _out(table(["QUERY", "RUN ID", "QUERY ID", "STARTED", "LAST TRIGGER", "BATCHES",
                 "BATCH IDS", "STATE"], rows))
    return EXIT_OK


def cmd_prune(args: argparse.Namespace) -> int:
    if args.before > datetime.now(timezone.utc):
        raise UsageError(f"--before {_iso(args.before)} is in the future: nothing journaled "
                         "has triggered after it yet")
    from ..savepoint.core import pinning
    from ._savepoints import prune_lines

    with _journal(args) as journal:
        pins, ignored = pinning(journal.savepoints(args.query))
        result = journal.prune(args.before, query_name=args.query, dry_run=args.dry_run,
                               savepoints=pins)
    lines, notes = prune_lines(result, ignored)
    for note in notes:
        _err("note", note)
    verb = "would prune" if args.dry_run else "pruned"
    scope = f"of query {args.query!r} " if args.query else ""
    _out(f"{verb} {result.batches:,} batches {scope}({result.partition_rows:,} Kafka "
         f"partition rows) triggered before {_iso(args.before)}")
    if result.kept_newest:
        _out(f"kept the newest batch of {result.kept_newest} "
             f"quer{'y' if result.kept_newest == 1 else 'ies'} older than that: a new "
             "checkpoint starts from it")
    for line in lines:
        _out(line)
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    """Batches oldest first. Without --limit the history is streamed (Journal.iter_history),
    so a history of any length prints in the memory of one page of batches."""
    with _journal(args) as journal:
        if args.limit is not None:
            batches: Iterable[Any] = journal.history(args.query, limit=args.limit)
        else:
            batches = journal.iter_history(args.query)
        it = iter(batches)
        first = next(it, None)
        if first is None:
            raise _NotFound(f"no journaled batches for query {args.query!r}")
        write_history(sys.stdout, args.format, itertools.chain([first], it))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import write_report

    with _journal(args) as journal:
        path = write_report(journal, args.query, args.output, since=args.since,
                            buckets=args.buckets, top=args.top, audit=not args.no_audit)
    _out(str(path))
    return EXIT_OK


def _plan(args: argparse.Namespace, source: int | None) -> Any:
    from ..restart import MODE_STATE_AWARE, MODE_STATELESS, plan_restart
    from .plan_args import request_from_args

    if getattr(args, "offsets_format", None) == "by-timestamp" and args.from_time is None:
        raise UsageError("--format by-timestamp needs --from-time")
    try:  # the request's own rules, as a usage error before anything is read
        request = request_from_args(
            args, args.query, source=source, bootstrap_servers=args.bootstrap_servers,
            kafka_config=dict(args.kafka_config or []), kafka_timeout=args.kafka_timeout,
            checkpoint=args.checkpoint, output_path=getattr(args, "output_path", None),
            mode=MODE_STATE_AWARE if args.state_aware else MODE_STATELESS,
            window=args.window, subscribe=args.subscribe)
    except RestartError as exc:
        raise UsageError(str(exc)) from None
    # `plan` is a preview unless --record; what starting-offsets prints is what a job
    # starts from: recorded unless --no-record.
    record = getattr(args, "record", None)
    if record and args.no_record:
        raise UsageError("--record and --no-record: give one or the other")
    return plan_restart(_url(args), request,
                        record=record if record is not None else not args.no_record,
                        command=args.command)


def _kafka_source(plan: Any, index: int | None) -> Any:
    """The source ``starting-offsets`` prints: the one asked for, else the only Kafka
    source of the query (the Kafka side of a union). startingOffsets is a Kafka option:
    any other source is one line and exit 1, never a value on stdout."""
    from ..rows import KIND_KAFKA

    if index is not None:
        source = plan.source(index)
        if source.kind != KIND_KAFKA:
            raise _NotFound(f"source {index} of query {plan.query_name!r} is a {source.kind} "
                            "source: startingOffsets applies to Kafka sources only; see "
                            f"`{PROG} plan {shlex.quote(plan.query_name)} --source {index}`")
        return source
    kafka = [s for s in plan.sources if s.kind == KIND_KAFKA]
    if len(kafka) == 1:
        return kafka[0]
    have = ", ".join(f"{s.index} ({s.kind})" for s in plan.sources) or "none"
    if not kafka:
        raise _NotFound(f"query {plan.query_name!r} has no Kafka source (sources: {have}): "
                        f"startingOffsets applies to Kafka sources only; see `{PROG} plan`")
    raise UsageError(f"query {plan.query_name!r} reads {len(kafka)} Kafka sources (sources: "
                     f"{have}): choose one with --source N")


def cmd_starting_offsets(args: argparse.Namespace) -> int:
    plan = _plan(args, args.source)
    source = _kafka_source(plan, args.source)
    _record_warning(plan)
    for warning in plan.plan_warnings + [f"source {source.index}: {w}" for w in source.warnings]:
        _err("warning", warning)
    if plan.event_time_cutoff is not None:
        _err("note", f"event_time_cutoff {_iso(plan.event_time_cutoff)}: drop windows ending "
                     "at or before it in the new job")
    errors = plan.plan_errors + [f"source {source.index}: {e}" for e in source.errors]
    for error in errors:
        _err("error", error)
    if errors and not args.force:
        return EXIT_RUNTIME
    from ._savepoints import savepoint_note, starting_offsets_json

    if args.offsets_format == "json":
        _out(starting_offsets_json(plan, source))
        return EXIT_OK
    note = savepoint_note(plan)
    if note is not None:
        _err("note", note)
    if args.offsets_format == "by-timestamp":
        options = source.by_timestamp_options()
        _err("note", "pass it as startingOffsetsByTimestamp with "
                     "startingOffsetsByTimestampStrategy=latest (partitions without a record "
                     "at or after the time start at their end; Spark's default fails)")
        _out(options.get("startingOffsetsByTimestamp", "{}"))
        return EXIT_OK
    _out(source.starting_offsets())
    return EXIT_OK


def _record_warning(plan: Any) -> None:
    if plan.record_problem:
        _err("warning", plan.record_problem)
    elif plan.plan_id is not None:
        log.info("restart plan recorded as plan %s", plan.plan_id)


def cmd_plan(args: argparse.Namespace) -> int:
    plan = _plan(args, args.source)
    _record_warning(plan)
    if args.format == "json":
        _out(json.dumps(plan.to_dict(), indent=2, default=str))
    else:
        sys.stdout.write(plan.explain())
    return EXIT_OK if plan.ok else EXIT_RUNTIME


def cmd_audit(args: argparse.Namespace) -> int:
    """Exit 0 when every partition is contiguous or discontinuous only where a recorded
    plan said so, 3 when not (a cron job or CI step gates on it)."""
    from ..audit import audit_query, format_json, format_table

    with _journal(args) as journal:
        if not journal.history(args.query, limit=1):
            raise _NotFound(f"no journaled batches for query {args.query!r}")
        report = audit_query(journal, args.query, since=args.since)
    sys.stdout.write(format_json(report) + "\n" if args.format == "json"
                     else format_table(report))
    return int(report.exit_code)


def cmd_checkpoint_inspect(args: argparse.Namespace) -> int:
    from ..checkpoint import kafka_end_offsets, read_checkpoint
    from ..offsets import format_kafka_offsets

    ckpt = read_checkpoint(args.dir)
    if args.all:
        _out(json.dumps(ckpt.to_dict(), indent=2, default=str))
        return EXIT_OK
    last = ckpt.last_committed
    report: dict[str, Any] = {
        "path": ckpt.path, "query_id": ckpt.query_id, "has_offsets": ckpt.has_offsets,
        "batches": len(ckpt.batches), "last_committed": None,
        "problems": list(ckpt.problems),
    }
    if last is not None:
        ts = last.batch_timestamp_ms
        wm = last.batch_watermark_ms
        report["last_committed"] = {
            "batch_id": last.batch_id,
            "timestamp": _iso(from_epoch_ms(ts)) if ts else None,
            "watermark": _iso(from_epoch_ms(wm))
            if wm is not None else None,
            "offsets": list(last.offsets),
            "starting_offsets": {
                str(index): format_kafka_offsets(offsets)
                for index, offsets in kafka_end_offsets(last).items()
            },
        }
    _out(json.dumps(report, indent=2, default=str))
    return EXIT_OK


def cmd_checkpoint_import(args: argparse.Namespace) -> int:
    from ..checkpoint.importing import import_checkpoint

    result = import_checkpoint(_url(args), args.dir, args.query_name)
    _out(f"imported {result.imported} batches of {result.path} into query "
         f"{result.query_name!r} as run {result.run_id} (query id {result.query_id}); "
         f"{result.already} were already journaled")
    for skipped in result.skipped:
        _err("note", f"skipped {skipped}")
    return EXIT_OK


def cmd_checkpoint_compare(args: argparse.Namespace) -> int:
    from ..checkpoint import kafka_end_offsets, read_checkpoint
    from ..restart import BatchRef
    from ..restart.compare import compare_offsets, comparison_verdict, journal_kafka_offsets

    ckpt = read_checkpoint(args.dir)
    last = ckpt.last_committed
    if last is None:
        raise _NotFound(f"checkpoint {args.dir} has no committed batch")
    with _journal(args) as journal:
        batch = journal.last_batch(args.query)
    if batch is None:
        raise _NotFound(f"no journaled batches for query {args.query!r}")
    rows = compare_offsets(kafka_end_offsets(last), journal_kafka_offsets(batch))
    verdict = comparison_verdict(rows)
    ts = last.batch_timestamp_ms
    ck_when = _iso(from_epoch_ms(ts)) if ts else "unknown time"
    if args.format == "json":
        _out(json.dumps({
            "checkpoint": {"path": ckpt.path, "query_id": ckpt.query_id,
                           "batch_id": last.batch_id, "timestamp": ck_when},
            "journal": BatchRef.of(batch).to_dict(), "verdict": verdict,
            "partitions": [{"source": r.source_index, "topic": r.topic,
                            "partition": r.partition, "checkpoint": r.checkpoint,
                            "journal": r.journal, "ahead": r.ahead} for r in rows],
        }, indent=2))
        return EXIT_OK
    same = "same query id" if ckpt.query_id == batch.query_id else "a different query id"
    _out(f"checkpoint: batch {last.batch_id} (query id {ckpt.query_id}), {ck_when}")
    _out(f"journal:    {BatchRef.of(batch).label()} (query id {batch.query_id}; {same})")
    _out(f"verdict:    {verdict}")
    if rows:
        _out("")
        _out(table(["SOURCE", "TOPIC", "PARTITION", "CHECKPOINT", "JOURNAL", "AHEAD"],
                    [[r.source_index, r.topic, r.partition, r.checkpoint, r.journal, r.ahead]
                     for r in rows]))
    return EXIT_OK


def cmd_rejected_list(args: argparse.Namespace) -> int:
    from ..capture.rejected import list_rejected

    with _journal(args) as journal:
        found = list_rejected(journal, args.query)
    if not found:
        scope = f" of query {args.query!r}" if args.query else ""
        _out(f"no rejected events{scope}")
        return EXIT_OK
    rows = [[e.id, _iso(e.received_at), e.query_name or "", e.what,
             " ".join(e.reason.split())[:100]] for e in found]
    _out(table(["ID", "RECEIVED", "QUERY", "EVENT", "REASON"], rows))
    return EXIT_OK


def cmd_rejected_replay(args: argparse.Namespace) -> int:
    from ..capture.rejected import list_rejected, replay_rejected

    with _journal(args) as journal:
        chosen = list_rejected(journal, args.query, ids=args.id)
        missing = sorted(set(args.id or ()) - {e.id for e in chosen})
        if missing:
            raise _NotFound("no rejected event with id " + ", ".join(map(str, missing))
                            + (f" of query {args.query!r}" if args.query else ""))
        outcomes = replay_rejected(journal, chosen)
    for o in outcomes:
        _out(f"{o.id}: journaled" if o.journaled
             else f"{o.id}: still rejected: {' '.join((o.reason or '').split())[:200]}")
    failed = sum(1 for o in outcomes if not o.journaled)
    _out(f"journaled {len(outcomes) - failed} of {len(outcomes)} rejected event(s)")
    if failed:
        raise _NotFound(f"{failed} event(s) still refused; they stay in rejected_events")
    return EXIT_OK


def cmd_commit_group(args: argparse.Namespace) -> int:
    """The journal's offsets are one cluster's: refused on another, as plans are."""
    from ..kafka.admin import commit_group
    from ..restart import BatchRef
    from ..restart.compare import group_offsets
    from ..restart.edge import clusters_of
    from ..restart.translate import refuse_other_cluster

    with _journal(args) as journal:
        batch = journal.last_batch(args.query)
        if batch is None:
            raise _NotFound(f"no journaled batches for query {args.query!r}")
        offsets = group_offsets(batch, args.source)
        clusters = clusters_of(journal, args.bootstrap_servers, batch.run_id,
                               timeout=args.kafka_timeout,
                               config=dict(args.kafka_config or []))
    refuse_other_cluster(clusters, None, accepted=args.accept_cluster, translatable=False)
    if not args.dry_run:
        commit_group(args.bootstrap_servers, args.group, offsets,
                     config=dict(args.kafka_config or []), timeout=args.kafka_timeout)
    verb = "would commit" if args.dry_run else "committed"
    _out(f"{verb} the end offsets of {BatchRef.of(batch).label()} for group {args.group!r}:")
    _out(table(["TOPIC", "PARTITION", "OFFSET"],
                [[t, p, o] for t in sorted(offsets) for p, o in sorted(offsets[t].items())]))
    return EXIT_OK


def cmd_jars(args: argparse.Namespace) -> int:
    from ..local import jars

    if args.packages:
        if args.set == "delta":
            _out(jars.delta_coordinate(jars.spec_for("delta", args.jar_version)))
            return EXIT_OK
        if args.set != "kafka-connector":
            raise UsageError("--packages is for kafka-connector and delta only")
        _out(jars.connector_coordinate(args.jar_version or jars.installed_spark_version()))
        return EXIT_OK
    paths = jars.jars(args.set, args.jar_version)
    if args.format == "list":
        for path in paths:
            _out(str(path))
    else:
        _out((",".join if args.format == "spark-jars" else os.pathsep.join)(map(str, paths)))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """The demo (offset_journal/cli/demo.py) gets the arguments after "demo"; it checks its
    own requirements (the ``demo`` extra) and says in one line what is missing."""
    import importlib

    demo = importlib.import_module(".demo", __package__)  # sys.modules first, as imports do
    return int(demo.main(list(args.demo_args)) or 0)


def _kafka_access(args: argparse.Namespace) -> Any:
    from ..health.edge import RATE_WINDOW, KafkaAccess

    return KafkaAccess(args.bootstrap_servers, dict(args.kafka_config or []),
                       args.kafka_timeout, getattr(args, "rate_window", None) or RATE_WINDOW)


def _names(args: argparse.Namespace, given: list[str]) -> list[str] | None:
    """The queries asked about (None: --all)."""
    if args.all and given:
        raise UsageError("name queries or --all, not both")
    if not args.all and not given:
        raise UsageError("name a query, or --all")
    return None if args.all else given


def cmd_retention(args: argparse.Namespace) -> int:
    """Exit 1 when ``plan`` would refuse a query (lost records, offsets beyond the log
    end), or a query could not be forecast (the others are, and recorded)."""
    from ..health.edge import fleet_names, forecasts_for
    from ..health.forecast import sentence

    names = _names(args, [args.query] if args.query else [])
    if names is not None and (args.exclude or args.active_within):
        raise UsageError("--exclude and --active-within narrow --all, not a named query")
    with _journal(args) as journal:
        asked = (fleet_names(journal, args.exclude or (), args.active_within)
                 if names is None else names)
        found = forecasts_for(journal, asked, _kafka_access(args), missing_ok=names is None)
        if args.record:
            journal.record_forecasts([n for n in asked if n not in found.missing],
                                     [f.row() for f in found.forecasts], found.anchors)
    now = found.now_ms
    losses, failed = found.errors, [f"query {name}: its retention could not be forecast "
                                    f"({why})" for name, why in sorted(found.failed.items())]
    code = EXIT_RUNTIME if losses or failed else EXIT_OK
    if args.format == "json":
        _out(json.dumps({"now": _iso(from_epoch_ms(now)),
                         "topics": {t: c.to_dict() for t, c in sorted(found.topics.items())},
                         "partitions": [f.to_dict(now) for f in found.forecasts],
                         "data_loss": losses, "not_forecast": dict(found.failed)}, indent=2))
        return code
    from ..health.forecast import duration

    rows = []
    for f in found.forecasts:
        left = f.seconds_left(now)
        rows.append([f.query_name, f.source_index, f.topic, f.partition, f.next_offset,
                     cell(f.log_start), cell(f.log_end), f.unread, f.lost or "",
                     _iso(from_epoch_ms(f.first_unread_ms)),
                     duration(left) if left is not None and f.status == "at-risk" else "",
                     f.basis, f.status])
    _out(table(["QUERY", "SOURCE", "TOPIC", "PARTITION", "NEXT", "LOG START", "LOG END",
                "UNREAD", "LOST", "FIRST UNREAD AT", "LOSS IN", "BY", "STATUS"], rows))
    for error in losses + failed:
        _err("error", error)
    for f in found.forecasts:
        if f.status == "at-risk":
            _out(sentence(f, now))
    if args.record:
        _out(f"recorded {len(found.forecasts)} partition forecasts")
    return code


def cmd_check(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from ..health.check import Thresholds
    from ..health.edge import check_fleet

    names = _names(args, list(args.queries))
    if names is not None and (args.exclude or args.active_within):
        raise UsageError("--exclude and --active-within narrow --all, not named queries")
    since = args.since or datetime.now(timezone.utc) - timedelta(days=1)
    limits = Thresholds(args.max_lag, args.max_staleness, args.min_time_to_loss, since,
                        args.max_forecast_age)
    kafka = _kafka_access(args) if args.bootstrap_servers else None
    with _journal(args) as journal:
        result = check_fleet(journal, names, limits, kafka, exclude=args.exclude or (),
                             active_within=args.active_within)
    if args.format == "json":
        _out(result.to_json())
    else:
        for problem in result.problems:
            _out(problem.line())
        _out(result.summary())
    return int(result.exit_code)


def cmd_savepoint_create(args: argparse.Namespace) -> int:
    """Checks first (no Spark: a bad checkpoint or target is one line at once), then the
    export in a local SparkSession (the active one when called in-process)."""
    from ..savepoint.spark import export_savepoint, prepare_savepoint, savepoint_session
    from ._savepoints import manifest_table

    with _journal(args) as journal:
        prepared = prepare_savepoint(journal, args.query, args.checkpoint, args.to)
        for note in prepared.notes:
            _err("note", note)
        spark, own = savepoint_session(args.master,
                                       lambda: _s3a_jars(args.checkpoint, args.to))
        try:
            made = export_savepoint(spark, journal, prepared, record=not args.no_record)
        finally:
            if own:
                spark.stop()
    for warning in made.warnings:
        _err("warning", warning)
    m = made.manifest
    which = f"savepoint {made.id}" if made.id is not None else "savepoint (not recorded)"
    _out(f"{which} of query {m.query_name!r}: the state at batch {m.batch_id} of run "
         f"{m.run_id} (query id {m.query_id}), in {made.location}")
    _out(manifest_table(m))
    return EXIT_OK


def _s3a_jars(*paths: str) -> str | None:
    """hadoop-aws for a session of our own when a path is on S3 (fetched once)."""
    from ..local.jars import s3a_spark_jars_value
    from ..values import url_scheme

    if any(url_scheme(p) in ("s3a", "s3", "s3n") for p in paths):
        return s3a_spark_jars_value()
    return None


def cmd_savepoint_list(args: argparse.Namespace) -> int:
    from ._savepoints import listed

    with _journal(args) as journal:
        found = journal.savepoints(args.query)
    if not found:
        raise _NotFound(f"no savepoint recorded for query {args.query!r}")
    text, notes = listed(found)
    for note in notes:
        _err("note", note)
    _out(text)
    return EXIT_OK


def cmd_savepoint_show(args: argparse.Namespace) -> int:
    """A savepoint checked (manifest, journal record, every file's checksum) and shown."""
    from ..savepoint import load_savepoint
    from ._savepoints import shown

    with _journal(args) as journal:
        found = load_savepoint(args.savepoint, journal, query_name=args.query,
                               unrecorded=args.unrecorded_savepoint)
    for warning in found.warnings:
        _err("warning", warning)
    _out(shown(found, args.format))
    return EXIT_OK


class _NotFound(OffsetJournalError, RuntimeError):
    """Nothing to show (unknown query, empty checkpoint): exit status 1."""


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The ``offset-journal`` parser (its grammar is in parser.py)."""
    return cli_parser.build_parser(sys.modules[__name__])


def _exit_now(seconds: float, code: int = EXIT_RUNTIME) -> None:  # pragma: no cover
    """The last resort: the deadline passed and the command did not stop."""
    _err("error", timed_out_line(seconds))
    sys.stderr.flush()
    os._exit(code)


# --------------------------------------------------------------------------- main


_RUNTIME_ERRORS = (OffsetJournalError, OSError)
"""Bad input or an unavailable service (besides SQLAlchemy's errors): one line, exit 1."""


def _runtime_error(exc: BaseException) -> bool:
    import sqlalchemy as sa

    return isinstance(exc, (*_RUNTIME_ERRORS, sa.exc.SQLAlchemyError))


def _read_only_line(args: argparse.Namespace, exc: BaseException) -> str | None:
    """What to say when a command that writes ran on a read-only server (a standby):
    it needs the primary."""
    from ..journal.db import read_only

    if not read_only(exc):
        return None
    words = [getattr(args, "command", None)]
    words += [getattr(args, f"{words[0]}_command", None)]
    name = " ".join(w for w in words if w)
    return (f"`{PROG} {name}` writes to the journal, and its database is read-only here (a "
            "standby, or default_transaction_read_only): it needs the primary (its URL, or "
            "a multi-host URL with target_session_attrs=read-write)")


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    # basicConfig only: main() also runs in-process (tests, notebooks), where the
    # host's logging setup must be left as it is.
    logging.basicConfig(level=level, stream=sys.stderr,
                        format=f"{PROG}: %(levelname)s: %(name)s: %(message)s")


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
    parser = build_parser()
    console = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    demo_args: list[str] | None = None
    index = _command_index(argv)
    # check's 1 and 2 are warning and critical: its errors are 3, UNKNOWN
    health = index is not None and argv[index] == "check"
    usage = EXIT_UNKNOWN if health else EXIT_USAGE
    runtime = EXIT_UNKNOWN if health else EXIT_RUNTIME
    as_json = health and _asks_json(argv)

    def fail(text: str) -> None:
        """One line on stderr; for ``check --format json`` an object on stdout too, so
        that a machine reading stdout sees UNKNOWN rather than nothing."""
        _err("error", text)
        if as_json:
            _out(json.dumps({"status": "unknown", "exit_code": EXIT_UNKNOWN,
                             "error": cell(redact(text))}, indent=2))
    if index is not None and argv[index] == "demo":
        argv, demo_args = argv[: index + 1], argv[index + 1:]
    try:
        args = parser.parse_args(argv)
        if demo_args is not None:
            # -v/-vv after "demo" too, as every other command takes them
            more = [t for t in demo_args if t == "--verbose" or re.fullmatch(r"-v+", t)]
            args.verbose += sum(1 if t == "--verbose" else len(t) - 1 for t in more)
            args.demo_args = [t for t in demo_args if t not in more]
    except UsageError as exc:
        fail(str(exc))
        return usage
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else usage
    _setup_logging(args.verbose)
    func: Callable[[argparse.Namespace], int] = args.func
    seconds: float | None = None
    try:
        seconds = command_deadline(getattr(args, "timeout", None),
                                   getattr(args, "command", None))
        last: Callable[[float], None] = lambda s: _exit_now(s, runtime)  # noqa: E731
        with alarm_deadline(seconds, last_resort=last if console else None):
            return func(args)
    except DeadlineExceeded:
        fail(timed_out_line(seconds or 0.0))
        return runtime
    except UsageError as exc:
        fail(str(exc))
        return usage
    except ConfigError as exc:
        fail(str(exc))
        return usage
    except KeyboardInterrupt:
        fail("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:
        if _runtime_error(exc):
            if args.verbose >= 2:
                traceback.print_exc()
            fail(_read_only_line(args, exc) or one_line(exc))
            return runtime
        if args.verbose >= 2:
            traceback.print_exc()
        fail(f"unexpected {type(exc).__name__}: {one_line(exc)} (-vv for details)")
        return runtime

