"""The journal's own order of a query's batches: an index on (query_name, id).

Trigger times come from the drivers' clocks, and a driver whose clock is off made the
planner pick the wrong batch as a query's last one. The planner now takes the batch
journaled last by the database's own sequence (batches.id, an identity column), then the
highest batch id of that batch's run, and checks that against the offsets
(offset_journal.restart). This index makes "the last id of a query" one backward index
scan, however long the history.

The journal also flags, when it writes a batch, Kafka offsets that do not continue from
the run's previous batch (a gap, or offsets going backwards) in batch_sources.problem; a
partial index on the flagged rows lets a restart plan list a query's flagged problems
without reading its whole history.

Revision ID: 0005_planner
Revises: 0004_history_guard
Create Date: 2026-11-23
"""

from alembic import op

revision = "0005_planner"
down_revision = "0004_history_guard"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS batches_query_order_idx "
               "ON offset_journal.batches (query_name, id)")
    op.execute("CREATE INDEX IF NOT EXISTS batch_sources_problem_idx "
               "ON offset_journal.batch_sources (batch_pk) WHERE problem IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS offset_journal.batch_sources_problem_idx")
    op.execute("DROP INDEX IF EXISTS offset_journal.batches_query_order_idx")
