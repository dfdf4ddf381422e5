"""Finite times only: a batch's trigger time and a run's start and end are real instants
from 1970 on.

A writer role could insert ``trigger_at = '-infinity'``: the history guard (0004) refuses
a batch more than a day in the future, which catches ``infinity``, but nothing refused
minus infinity, and such a row made ``plan``, ``audit``, ``report``, ``history`` and
``runs`` fail for its query (no client can read that value as a time). No driver's
clock reads before 1970 either. The checks hold for every role, the owner included,
and are NOT VALID: rows already journaled stay as they are (nothing journaled is
changed); the readers skip what they cannot read.

The writer keeps an event the database refuses this way in ``rejected_events``
(check_violation, SQLSTATE 23514), as for any refused event.

Revision ID: 0011_finite_times
Revises: 0010_partition_latest
Create Date: 2026-11-24
"""

from alembic import op

revision = "0011_finite_times"
down_revision = "0010_partition_latest"
branch_labels = None
depends_on = None

# Written out in full: migrations stay frozen, and SQL is never built from strings.
UPGRADE = (
    "ALTER TABLE offset_journal.batches ADD CONSTRAINT batches_trigger_at_finite CHECK "
    "(isfinite(trigger_at) AND trigger_at >= '1970-01-01T00:00:00Z') NOT VALID",
    "ALTER TABLE offset_journal.query_runs ADD CONSTRAINT query_runs_started_at_finite CHECK "
    "(started_at IS NULL OR (isfinite(started_at) "
    "AND started_at >= '1970-01-01T00:00:00Z')) NOT VALID",
    "ALTER TABLE offset_journal.query_runs ADD CONSTRAINT query_runs_terminated_at_finite "
    "CHECK (terminated_at IS NULL OR (isfinite(terminated_at) "
    "AND terminated_at >= '1970-01-01T00:00:00Z')) NOT VALID",
)
DOWNGRADE = (
    "ALTER TABLE offset_journal.query_runs DROP CONSTRAINT query_runs_terminated_at_finite",
    "ALTER TABLE offset_journal.query_runs DROP CONSTRAINT query_runs_started_at_finite",
    "ALTER TABLE offset_journal.batches DROP CONSTRAINT batches_trigger_at_finite",
)


def upgrade() -> None:
    for statement in UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    for statement in DOWNGRADE:
        op.execute(statement)
