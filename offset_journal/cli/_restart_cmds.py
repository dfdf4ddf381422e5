"""The commands that plan a restart (``plan``, ``starting-offsets``), read Spark's
checkpoints (``checkpoint inspect|import|compare``) and commit a journaled batch to a
consumer group (``commit-group``)."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from typing import Any

from ..errors import RestartError
from ..formatting import from_epoch_ms, table
from ._edge import (
    EXIT_OK,
    EXIT_RUNTIME,
    NotFound,
    complain,
    database_url,
    iso,
    open_journal,
    say,
)
from .parser import PROG, UsageError

log = logging.getLogger(__name__)


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
    return plan_restart(database_url(args), request,
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
            raise NotFound(f"source {index} of query {plan.query_name!r} is a {source.kind} "
                            "source: startingOffsets applies to Kafka sources only; see "
                            f"`{PROG} plan {shlex.quote(plan.query_name)} --source {index}`")
        return source
    kafka = [s for s in plan.sources if s.kind == KIND_KAFKA]
    if len(kafka) == 1:
        return kafka[0]
    have = ", ".join(f"{s.index} ({s.kind})" for s in plan.sources) or "none"
    if not kafka:
        raise NotFound(f"query {plan.query_name!r} has no Kafka source (sources: {have}): "
                        f"startingOffsets applies to Kafka sources only; see `{PROG} plan`")
    raise UsageError(f"query {plan.query_name!r} reads {len(kafka)} Kafka sources (sources: "
                     f"{have}): choose one with --source N")


def cmd_starting_offsets(args: argparse.Namespace) -> int:
    plan = _plan(args, args.source)
    source = _kafka_source(plan, args.source)
    _record_warning(plan)
    for warning in plan.plan_warnings + [f"source {source.index}: {w}" for w in source.warnings]:
        complain("warning", warning)
    if plan.event_time_cutoff is not None:
        complain("note", f"event_time_cutoff {iso(plan.event_time_cutoff)}: drop windows ending "
                     "at or before it in the new job")
    errors = plan.plan_errors + [f"source {source.index}: {e}" for e in source.errors]
    for error in errors:
        complain("error", error)
    if errors and not args.force:
        return EXIT_RUNTIME
    from ._savepoints import savepoint_note, starting_offsets_json

    if args.offsets_format == "json":
        say(starting_offsets_json(plan, source))
        return EXIT_OK
    note = savepoint_note(plan)
    if note is not None:
        complain("note", note)
    if args.offsets_format == "by-timestamp":
        options = source.by_timestamp_options()
        complain("note", "pass it as startingOffsetsByTimestamp with "
                     "startingOffsetsByTimestampStrategy=latest (partitions without a record "
                     "at or after the time start at their end; Spark's default fails)")
        say(options.get("startingOffsetsByTimestamp", "{}"))
        return EXIT_OK
    say(source.starting_offsets())
    return EXIT_OK


def _record_warning(plan: Any) -> None:
    if plan.record_problem:
        complain("warning", plan.record_problem)
    elif plan.plan_id is not None:
        log.info("restart plan recorded as plan %s", plan.plan_id)


def cmd_plan(args: argparse.Namespace) -> int:
    plan = _plan(args, args.source)
    _record_warning(plan)
    if args.format == "json":
        say(json.dumps(plan.to_dict(), indent=2, default=str))
    else:
        sys.stdout.write(plan.explain())
    return EXIT_OK if plan.ok else EXIT_RUNTIME


def cmd_checkpoint_inspect(args: argparse.Namespace) -> int:
    from ..checkpoint import kafka_end_offsets, read_checkpoint
    from ..offsets import format_kafka_offsets

    ckpt = read_checkpoint(args.dir)
    if args.all:
        say(json.dumps(ckpt.to_dict(), indent=2, default=str))
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
            "timestamp": iso(from_epoch_ms(ts)) if ts else None,
            "watermark": iso(from_epoch_ms(wm))
            if wm is not None else None,
            "offsets": list(last.offsets),
            "starting_offsets": {
                str(index): format_kafka_offsets(offsets)
                for index, offsets in kafka_end_offsets(last).items()
            },
        }
    say(json.dumps(report, indent=2, default=str))
    return EXIT_OK


def cmd_checkpoint_import(args: argparse.Namespace) -> int:
    from ..checkpoint.importing import import_checkpoint
    from ..journal import Journal

    with Journal(database_url(args)) as journal:
        result = import_checkpoint(journal, args.dir, args.query_name)
    say(f"imported {result.imported} batches of {result.path} into query "
         f"{result.query_name!r} as run {result.run_id} (query id {result.query_id}); "
         f"{result.already} were already journaled")
    for skipped in result.skipped:
        complain("note", f"skipped {skipped}")
    return EXIT_OK


def cmd_checkpoint_compare(args: argparse.Namespace) -> int:
    from ..checkpoint import kafka_end_offsets, read_checkpoint
    from ..restart import BatchRef
    from ..restart.compare import compare_offsets, comparison_verdict, journal_kafka_offsets

    ckpt = read_checkpoint(args.dir)
    last = ckpt.last_committed
    if last is None:
        raise NotFound(f"checkpoint {args.dir} has no committed batch")
    with open_journal(args) as journal:
        batch = journal.last_batch(args.query)
    if batch is None:
        raise NotFound(f"no journaled batches for query {args.query!r}")
    rows = compare_offsets(kafka_end_offsets(last), journal_kafka_offsets(batch))
    verdict = comparison_verdict(rows)
    ts = last.batch_timestamp_ms
    ck_when = iso(from_epoch_ms(ts)) if ts else "unknown time"
    if args.format == "json":
        say(json.dumps({
            "checkpoint": {"path": ckpt.path, "query_id": ckpt.query_id,
                           "batch_id": last.batch_id, "timestamp": ck_when},
            "journal": BatchRef.of(batch).to_dict(), "verdict": verdict,
            "partitions": [{"source": r.source_index, "topic": r.topic,
                            "partition": r.partition, "checkpoint": r.checkpoint,
                            "journal": r.journal, "ahead": r.ahead} for r in rows],
        }, indent=2))
        return EXIT_OK
    same = "same query id" if ckpt.query_id == batch.query_id else "a different query id"
    say(f"checkpoint: batch {last.batch_id} (query id {ckpt.query_id}), {ck_when}")
    say(f"journal:    {BatchRef.of(batch).label()} (query id {batch.query_id}; {same})")
    say(f"verdict:    {verdict}")
    if rows:
        say("")
        say(table(["SOURCE", "TOPIC", "PARTITION", "CHECKPOINT", "JOURNAL", "AHEAD"],
                    [[r.source_index, r.topic, r.partition, r.checkpoint, r.journal, r.ahead]
                     for r in rows]))
    return EXIT_OK


def cmd_commit_group(args: argparse.Namespace) -> int:
    """The journal's offsets are one cluster's: refused on another, as plans are."""
    from ..kafka.admin import commit_group
    from ..restart import BatchRef
    from ..restart.compare import group_offsets
    from ..restart.decide.cluster import refuse_other_cluster
    from ..restart.edge import clusters_of

    with open_journal(args) as journal:
        batch = journal.last_batch(args.query)
        if batch is None:
            raise NotFound(f"no journaled batches for query {args.query!r}")
        offsets = group_offsets(batch, args.source)
        clusters = clusters_of(journal, args.bootstrap_servers, batch.run_id,
                               timeout=args.kafka_timeout,
                               config=dict(args.kafka_config or []))
    refuse_other_cluster(clusters, None, accepted=args.accept_cluster, translatable=False)
    if not args.dry_run:
        commit_group(args.bootstrap_servers, args.group, offsets,
                     config=dict(args.kafka_config or []), timeout=args.kafka_timeout)
    verb = "would commit" if args.dry_run else "committed"
    say(f"{verb} the end offsets of {BatchRef.of(batch).label()} for group {args.group!r}:")
    say(table(["TOPIC", "PARTITION", "OFFSET"],
                [[t, p, o] for t in sorted(offsets) for p, o in sorted(offsets[t].items())]))
    return EXIT_OK

