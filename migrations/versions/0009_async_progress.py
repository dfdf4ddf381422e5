"""How Spark executes each run: async progress tracking and its checkpoint interval.

With ``asyncProgressTrackingEnabled`` (Kafka, console, memory and noop sinks) Spark
writes its offset and commit logs asynchronously, at most once per
``asyncProgressTrackingCheckpointIntervalMs`` (1000 by default): the last batches a run
reported may not be in its checkpoint. The progress events do not say so (they look
the same); the query does, in a classic session: its StreamExecution is an
AsyncProgressTrackingMicroBatchExecution. The listener records the execution's class
name and the interval per run, so a restart plan can name the batches whose end offsets
may not be final. NULL: not known (Spark Connect, older releases, imported checkpoints).

The history guard (0004's query_runs_only_complete) lets the two columns be filled once
only, as the run's other recorded values: a writer cannot hide async progress tracking
from the planner by clearing them.

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


_GUARD = """
CREATE OR REPLACE FUNCTION offset_journal.query_runs_only_complete() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF offset_journal.is_journal_owner(TG_RELID) THEN
        RETURN NEW;
    END IF;
    IF NEW.run_id IS DISTINCT FROM OLD.run_id OR NEW.query_id IS DISTINCT FROM OLD.query_id
       OR NEW.recorded_at IS DISTINCT FROM OLD.recorded_at
       OR (OLD.started_at IS NOT NULL AND NEW.started_at IS DISTINCT FROM OLD.started_at)
       OR (OLD.terminated_at IS NOT NULL
           AND NEW.terminated_at IS DISTINCT FROM OLD.terminated_at)
       OR (OLD.exception IS NOT NULL AND NEW.exception IS DISTINCT FROM OLD.exception)
       OR (OLD.error_class IS NOT NULL AND NEW.error_class IS DISTINCT FROM OLD.error_class)
       OR (OLD.host IS NOT NULL AND NEW.host IS DISTINCT FROM OLD.host)
       OR (OLD.pid IS NOT NULL AND NEW.pid IS DISTINCT FROM OLD.pid)
       OR (OLD.named AND (NEW.query_name IS DISTINCT FROM OLD.query_name OR NOT NEW.named))
       {extra}
    THEN
        RAISE insufficient_privilege USING
            MESSAGE = 'a journaled run only gains what it lacked: its recorded values are '
                      'not rewritten',
            TABLE = 'query_runs', SCHEMA = 'offset_journal';
    END IF;
    RETURN NEW;
END $$;
"""

_EXECUTION_GUARD = """OR (OLD.execution IS NOT NULL
           AND NEW.execution IS DISTINCT FROM OLD.execution)
       OR (OLD.async_interval_ms IS NOT NULL
           AND NEW.async_interval_ms IS DISTINCT FROM OLD.async_interval_ms)"""


def upgrade() -> None:
    op.add_column("query_runs", sa.Column("execution", sa.Text), schema="offset_journal")
    op.add_column("query_runs", sa.Column("async_interval_ms", sa.BigInteger),
                  schema="offset_journal")
    op.execute("COMMENT ON COLUMN offset_journal.query_runs.execution IS "
               "'Spark''s StreamExecution class (AsyncProgressTrackingMicroBatchExecution: "
               "async progress tracking); NULL: unknown'")
    op.execute("COMMENT ON COLUMN offset_journal.query_runs.async_interval_ms IS "
               "'asyncProgressTrackingCheckpointIntervalMs of an async run'")
    op.execute(_GUARD.replace("{extra}", _EXECUTION_GUARD))


def downgrade() -> None:
    op.execute(_GUARD.replace("{extra}", ""))
    op.drop_column("query_runs", "async_interval_ms", schema="offset_journal")
    op.drop_column("query_runs", "execution", schema="offset_journal")
