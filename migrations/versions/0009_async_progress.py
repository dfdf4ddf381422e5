"""How Spark executes each run: async progress tracking and its checkpoint interval.

With ``asyncProgressTrackingEnabled`` (Kafka, console, memory and noop sinks) Spark
writes its offset and commit logs asynchronously, at most once per
``asyncProgressTrackingCheckpointIntervalMs`` (1000 by default): the last batches a run
reported may not be in its checkpoint. The progress events do not say so (they look
the same); the query does, in a classic session: its StreamExecution is an
AsyncProgressTrackingMicroBatchExecution. The listener records the execution's class
name and the interval per run, so a restart plan can name the batches whose end offsets
may not be final. NULL: not known (Spark Connect, older releases, imported checkpoints).

Revision ID: 0009_async_progress
Revises: 0008_decisions
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_async_progress"
down_revision = "0008_decisions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("query_runs", sa.Column("execution", sa.Text), schema="offset_journal")
    op.add_column("query_runs", sa.Column("async_interval_ms", sa.BigInteger),
                  schema="offset_journal")
    op.execute("COMMENT ON COLUMN offset_journal.query_runs.execution IS "
               "'Spark''s StreamExecution class (AsyncProgressTrackingMicroBatchExecution: "
               "async progress tracking); NULL: unknown'")
    op.execute("COMMENT ON COLUMN offset_journal.query_runs.async_interval_ms IS "
               "'asyncProgressTrackingCheckpointIntervalMs of an async run'")


def downgrade() -> None:
    op.drop_column("query_runs", "async_interval_ms", schema="offset_journal")
    op.drop_column("query_runs", "execution", schema="offset_journal")
