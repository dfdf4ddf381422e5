"""The restart-plan options, declared once for every command line that asks for a plan:
``offset-journal plan`` / ``starting-offsets`` and the jobs' ``--from-journal``.

:func:`add_plan_options` adds where to start (``--as-of`` / ``--batch`` /
``--from-time``, or after a savepoint's batch: ``--savepoint`` with ``--seed`` and
``--discard-state``), what to do when the cluster no longer has what the journal says
(``--allow-data-loss``, ``--restart-recreated-topic``, ``--restart-recreated-table``,
``--accept-cluster``), the translation to a replica (``--translate-from``,
``--replication-policy``), the old query's sink and checkpoint (``--sink``,
``--txn-app-id``, ``--old-checkpoint``; a job passes its own sink) and ``--no-record``;
:func:`request_from_args` turns them, with what the caller knows itself (the query
name, the cluster, the new checkpoint), into one checked
:class:`~offset_journal.restart.PlanRequest`. Values are parsed by argparse, so a
malformed one is the parser's one-line error before anything is read.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import values
from ..kafka.mirror import REPLICATION_POLICIES

if TYPE_CHECKING:
    from ..restart import PlanRequest


def argument_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a library value parser: its ValueError is the one line."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


def _name(what: str) -> Callable[[str], str]:
    return argument_type(lambda text: values.check_name(text, what))


def savepoint_ref(text: str) -> int | str:
    """``--savepoint``: digits are an id in the journal, unless a directory of that name
    exists here (a savepoint named by its date, ``20261125``); anything else a
    directory (``./20261125`` forces the path)."""
    import os

    value = text.strip()
    if not value:
        raise argparse.ArgumentTypeError("give a savepoint id or directory")
    if value.isdigit() and not os.path.isdir(value):
        return int(value)
    return os.path.join(".", value) if value.isdigit() else value


def _seed(text: str) -> int | str:
    """``--seed``: an operator id, or ``all``."""
    value = text.strip()
    if value == "all":
        return value
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"not an operator id: {text!r} (a number, or all)")
    return int(value)


def add_plan_options(parser: argparse.ArgumentParser, *, job: bool = False) -> None:
    """Add the plan options to ``parser``; ``job``: the help says they apply with
    ``--from-journal``."""
    only = "with --from-journal: " if job else ""
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--as-of", type=argument_type(values.parse_time), metavar="TIME",
                      help=f"{only}start after the last batch triggered at or before TIME "
                           "(ISO 8601, naive = UTC; or --as-of=-2h)")
    when.add_argument("--batch", type=argument_type(values.parse_batch_ref),
                      metavar="RUN:BATCH",
                      help=f"{only}start AT this batch (its start offsets): reprocess it "
                           "and after")
    when.add_argument("--from-time", type=argument_type(values.parse_time), metavar="TIME",
                      help=f"{only}record time: start each partition at its first record "
                           "timestamped at or after TIME (as kafka-consumer-groups "
                           "--to-datetime; needs the Kafka cluster)")
    parser.add_argument("--allow-data-loss", action="store_true",
                        help=f"{only}start partitions whose journaled offsets were deleted "
                             "(retention) at their log start, with a warning, instead of "
                             "refusing")
    parser.add_argument("--restart-recreated-topic", metavar="TOPIC", action="append",
                        type=_name("the recreated topic"), dest="recreated_topics",
                        help=f"{only}TOPIC was deleted and created again: read it from "
                             "earliest, with a warning, instead of refusing the journal's "
                             "offsets beyond its log end (repeatable)")
    parser.add_argument("--restart-recreated-table", metavar="PATH", action="append",
                        type=_name("the recreated table's path"), dest="recreated_tables",
                        help=f"{only}the Delta table at PATH (as the source reads it) was "
                             "deleted and created again: read it from its start, with a "
                             "warning, instead of refusing a plan whose table id changed "
                             "(repeatable)")
    parser.add_argument("--translate-from", metavar="ALIAS", type=_name("the MM2 alias"),
                        help=f"{only}the cluster at --bootstrap-servers is a MirrorMaker 2 "
                             "replica of the journaled one, which MM2 calls ALIAS: translate "
                             "the journal's offsets with MM2's offset syncs on the replica "
                             "(offset-syncs.topic.location=target)")
    parser.add_argument("--replication-policy", choices=REPLICATION_POLICIES,
                        help=f"{only}how MM2 names the replica's topics, for --translate-from "
                             "only: default (ALIAS.topic, the default) or identity (the same "
                             "name)")
    parser.add_argument("--accept-cluster", metavar="ID", type=_name("the cluster id"),
                        help=f"{only}the Kafka cluster at --bootstrap-servers, whose id is "
                             "ID, is the one the journal's runs read, although the journal "
                             "says another: overrule the refusal (recorded with the plan)")
    _add_savepoint_options(parser, only)
    _add_sink_options(parser, only, job)


def _add_savepoint_options(parser: argparse.ArgumentParser, only: str) -> None:
    """A plan from a savepoint: which one, and what becomes of its state."""
    parser.add_argument("--savepoint", metavar="ID|DIR", type=savepoint_ref,
                        help=f"{only}start right after a savepoint's batch (its id in the "
                             "journal, or its directory), where its state stands, instead "
                             "of after the journal's last batch; digits are an id unless "
                             "such a directory exists here (./20261125 forces a path)")
    parser.add_argument("--seed", metavar="OPERATOR", action="append", type=_seed,
                        help=f"{only}a plan from --savepoint: the new query seeds a "
                             "transformWithState with this old operator's state "
                             "(initial_state); repeatable, or 'all'")
    parser.add_argument("--restore", action="store_true",
                        help=f"{only}a plan from --savepoint: every old operator's state is "
                             "written straight into the new checkpoint before its first "
                             "batch (the JVM path: built-in operators too, any shuffle "
                             "partitions; checked against the new query's operators there) "
                             "instead of seeded in Python")
    parser.add_argument("--discard-state", action="store_true",
                        help=f"{only}a plan from --savepoint: accept losing the state of the "
                             "operators not seeded (recorded with the plan as its decision) "
                             "instead of refusing")
    parser.add_argument("--unrecorded-savepoint", action="store_true",
                        help=f"{only}a plan from --savepoint DIR: accept a savepoint whose "
                             "manifest the journal did not record (made with --no-record), "
                             "vouched for by its own checksums only (recorded with the plan "
                             "as its decision) instead of refusing")


def _add_sink_options(parser: argparse.ArgumentParser, only: str, job: bool) -> None:
    """The OLD query's sink and checkpoint: the batches its sink committed beyond the
    journal."""
    if not job:  # a job passes its own sink (its --sink and --output)
        parser.add_argument("--sink", metavar="PATH|delta:PATH", dest="sink_spec",
                            type=_name("the sink"),
                            help="the OLD query's sink, whose own commit log says which "
                                 "batches it holds: a file sink's output path "
                                 "(_spark_metadata) or delta:PATH (the txn of the old query, "
                                 "or of --txn-app-id); default: the sink the journal names "
                                 "(FileSink[...], DeltaSink[...]); 'none': no check")
    parser.add_argument("--txn-app-id", metavar="ID", type=_name("the txnAppId"),
                        help=f"{only}the txnAppId the old query's foreachBatch wrote the "
                             "Delta table (--sink delta:PATH) with, txnVersion = batch id")
    parser.add_argument("--old-checkpoint", metavar="DIR",
                        help=f"{only}the OLD query's checkpoint: the end offsets (offsets/N) "
                             "of batches its sink holds beyond the journal, which the plan "
                             "then starts after and journals")
    parser.add_argument("--no-record", action="store_true",
                        help=f"{only}leave this plan unrecorded (restart_plans): the audit then "
                             "cannot tell where a run started from it began")


def _seeds(given: list[int | str] | None) -> tuple[int, ...] | str:
    values = list(given or ())
    if "all" in values:
        return "all"
    return tuple(int(v) for v in values)


def request_from_args(args: argparse.Namespace, query_name: str,
                      **known: Any) -> PlanRequest:
    """The checked plan request: the options :func:`add_plan_options` added, with what
    the caller knows itself (``known``: the cluster, the new checkpoint, the mode...).
    RestartError (one line) when the request makes no sense."""
    from ..restart import PlanRequest

    given: dict[str, Any] = {
        "as_of": args.as_of, "batch": args.batch, "from_time": args.from_time,
        "allow_data_loss": args.allow_data_loss,
        "recreated_topics": tuple(args.recreated_topics or ()),
        "recreated_tables": tuple(args.recreated_tables or ()),
        "translate_from": args.translate_from,
        "replication_policy": args.replication_policy,
        "accept_cluster": args.accept_cluster,
        "savepoint": args.savepoint,
        "seed": _seeds(args.seed),
        "discard_state": args.discard_state,
        "unrecorded_savepoint": args.unrecorded_savepoint,
        "old_sink": getattr(args, "sink_spec", None),
        "txn_app_id": args.txn_app_id, "old_checkpoint": args.old_checkpoint,
        "restore": args.restore,
    }
    given.update(known)
    return PlanRequest(query_name, **given).checked()
