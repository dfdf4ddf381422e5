"""``offset-journal losses``: the data losses ``retention --record`` recorded, listed and
acknowledged.

A recorded loss stays critical in ``check`` and unexplained in ``audit`` until it is
dealt with: a restart plan that accepted data loss there (``--allow-data-loss``), or a
person's acknowledgement, recorded as a decision with who, when and why.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import JournalError
from ..formatting import cell, format_time, table
from ._edge import EXIT_OK, open_journal


def _offsets(loss: Any, first: int | None = None) -> str:
    return f"{loss.first_offset if first is None else first}..{loss.end_offset - 1}"


def _state(loss: Any, plans: list[Any]) -> str:
    plan = loss.accepted_by(plans)
    if plan is not None:
        return f"accepted by plan {plan.id} (--allow-data-loss)"
    if loss.unacknowledged == 0:
        return loss.acknowledgements[-1].label() if loss.acknowledgements else "acknowledged"
    if loss.acknowledged_end is not None:
        return f"OPEN from {loss.open_from} (acknowledged up to {loss.acknowledged_end - 1})"
    return "OPEN"


def cmd_losses_list(args: argparse.Namespace) -> int:
    """Every loss recorded (of a query, or all), with what became of it."""
    with open_journal(args) as journal:
        losses = journal.recorded_losses(args.query)
        plans = {name: journal.recorded_plans(name) for name in {x.query_name for x in losses}}
    if not losses:
        raise JournalError("no data loss recorded" + (
            f" for query {args.query!r}" if args.query else "") + " by `retention --record`")
    rows = [[x.query_name, x.source_index, f"{x.topic}-{x.partition}", _offsets(x),
             x.end_offset - x.first_offset, format_time(x.first_recorded_at) or "",
             _state(x, plans[x.query_name])] for x in losses]
    print(table(["QUERY", "SOURCE", "PARTITION", "OFFSETS", "RECORDS", "RECORDED", "STATE"],
                rows), file=sys.stdout)
    return EXIT_OK


def cmd_losses_acknowledge(args: argparse.Namespace) -> int:
    """Record that a person has dealt with the query's open losses (up to where each
    ends now): ``check`` and ``audit`` no longer call them unexplained. Exit 1 when
    there is none to acknowledge."""
    from ..audit import open_losses
    from ..origin import host_name, os_user

    with open_journal(args) as journal:
        todo = open_losses(journal.recorded_losses(args.query),
                           journal.recorded_plans(args.query))
        if not todo:
            raise JournalError(f"no open data loss recorded for query {args.query!r}: "
                               "nothing to acknowledge (see `offset-journal losses list`)")
        done = journal.record_acknowledgements([
            {"loss_id": x.id, "end_offset": x.end_offset, "reason": args.reason,
             "host": host_name(), "os_user": os_user()} for x in todo])
    records = sum(x.unacknowledged for x in todo)
    print(cell(f"acknowledged {records:,} record{'' if records == 1 else 's'} lost from "
               f"query {args.query!r} ({len(done)} recorded "
               f"loss{'' if len(done) == 1 else 'es'}), {done[0].label()}"), file=sys.stdout)
    print(table(["PARTITION", "OFFSETS", "RECORDS", "RECORDED"],
                [[f"{x.topic}-{x.partition}", _offsets(x, x.open_from), x.unacknowledged,
                  format_time(x.first_recorded_at) or ""] for x in todo]), file=sys.stdout)
    return EXIT_OK
