"""Savepoints: a stateful query's state exported at one journaled batch, recorded beside
the restart plans.

``savepoints`` keeps each savepoint ``offset-journal savepoint create`` (or
``offset_journal.savepoint.create_savepoint``) made: the query name, the run, query id
and batch id whose state it holds (the batch both the old checkpoint's ``commits/`` and
the journal have), the checkpoint it was read from, where it was written, its manifest
(operators, state schemas, row counts, file checksums) and the SHA-256 of that
manifest, and the host and operating-system user that asked. A plan from a savepoint
(``--savepoint ID|DIR``) starts right after that batch and is recorded in
``restart_plans`` at the new position ``savepoint``.

The same treatment as the plan tables: the writer and the planner roles get INSERT of
the columns a savepoint sets (offset_journal.journal.roles), no UPDATE or DELETE; and a history
guard, for every role but the owner: a savepoint row must name a batch the journal holds
(same query name, run, query id and batch id), so no role can record the state of a
batch the journal never had.

``partition_lag`` gives no lag below zero: in real-time mode (``trigger(realTime=...)``)
Spark takes ``latestOffset`` when a batch starts and ends the batch further on.

Revision ID: 0018_savepoints
Revises: 0017_retention_forecasts
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0018_savepoints"
down_revision = "0017_retention_forecasts"
branch_labels = None
depends_on = None

S = "offset_journal"

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
GUARD = """
CREATE FUNCTION offset_journal.savepoints_name_a_journaled_batch() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF offset_journal.is_journal_owner(TG_RELID) THEN
        RETURN NEW;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM offset_journal.batches b
        WHERE b.query_name = NEW.query_name AND b.run_id = NEW.run_id
          AND b.batch_id = NEW.batch_id AND b.query_id = NEW.query_id
    ) THEN
        RAISE insufficient_privilege USING
            MESSAGE = format('a savepoint names a journaled batch: batch %s of run %s of '
                             'query %s is not in the journal', NEW.batch_id, NEW.run_id,
                             NEW.query_name),
            TABLE = 'savepoints', SCHEMA = 'offset_journal';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER savepoints_name_a_journaled_batch
    BEFORE INSERT ON offset_journal.savepoints
    FOR EACH ROW EXECUTE FUNCTION offset_journal.savepoints_name_a_journaled_batch();
"""

# Real-time mode (trigger(realTime=...)) reads latestOffset when a batch starts and ends
# the batch further on: latest < end, and a lag below zero means nothing left behind
# (no latest: no lag, NULL; greatest() would take 0 for it).
LAG = """
CREATE OR REPLACE VIEW offset_journal.partition_lag AS
SELECT b.query_name, b.run_id, b.query_id, b.batch_id, b.id AS batch_pk, b.trigger_at,
       k.source_index, k.topic, k.partition, k.start_offset, k.end_offset, k.latest_offset,
       CASE WHEN NOT k.out_of_range THEN
           CASE WHEN k.latest_offset < k.end_offset THEN 0
                ELSE k.latest_offset - k.end_offset END END AS lag
FROM offset_journal.kafka_partitions k
JOIN offset_journal.batches b ON b.id = k.batch_pk;
"""
LAG_BEFORE = """
CREATE OR REPLACE VIEW offset_journal.partition_lag AS
SELECT b.query_name, b.run_id, b.query_id, b.batch_id, b.id AS batch_pk, b.trigger_at,
       k.source_index, k.topic, k.partition, k.start_offset, k.end_offset, k.latest_offset,
       CASE WHEN NOT k.out_of_range THEN k.latest_offset - k.end_offset END AS lag
FROM offset_journal.kafka_partitions k
JOIN offset_journal.batches b ON b.id = k.batch_pk;
"""

POSITIONS_BEFORE = "position IN ('after', 'at', 'as-of', 'rewind', 'from-time')"
POSITIONS_AFTER = "position IN ('after', 'at', 'as-of', 'rewind', 'from-time', 'savepoint')"


def upgrade() -> None:
    op.create_table(
        "savepoints",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("query_name", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("query_id", sa.Text, nullable=False),
        sa.Column("batch_id", sa.BigInteger, nullable=False),
        sa.Column("checkpoint", sa.Text, nullable=False),
        sa.Column("location", sa.Text, nullable=False),
        sa.Column("manifest_sha256", sa.Text, nullable=False),
        sa.Column("manifest", JSONB, nullable=False),
        sa.Column("host", sa.Text),
        sa.Column("os_user", sa.Text),
        sa.CheckConstraint("manifest_sha256 ~ '^[0-9a-f]{64}$'",
                           name="savepoints_manifest_sha256_check"),
        schema=S,
    )
    op.create_index("savepoints_query_idx", "savepoints", ["query_name", "id"], schema=S)
    op.create_index("savepoints_manifest_idx", "savepoints", ["manifest_sha256"], schema=S)
    op.execute(f"COMMENT ON TABLE {S}.savepoints IS 'stateful queries'' state exported at "
               "a journaled batch (savepoint create), with its manifest'")
    op.execute(GUARD)
    op.drop_constraint("restart_plans_position_check", "restart_plans", schema=S)
    op.create_check_constraint("restart_plans_position_check", "restart_plans",
                               POSITIONS_AFTER, schema=S)
    op.execute(LAG)


# A plan from a savepoint is a decision the audit reads (and a run may be linked to it):
# the downgrade refuses while one exists rather than delete it. In SQL, so the offline
# script (upgrade_sql, `alembic downgrade --sql`) refuses the same way.
REFUSE_DOWNGRADE = """
DO $$
DECLARE
    plans bigint;
BEGIN
    SELECT count(*) INTO plans FROM offset_journal.restart_plans WHERE position = 'savepoint';
    IF plans > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'object_in_use', MESSAGE = format(
            'downgrade below 0018_savepoints refused: %s restart plan(s) start from a '
            'savepoint (restart_plans.position = ''savepoint''), decisions the audit '
            'reads, which the older schema cannot hold; delete them (and their plan_runs) '
            'yourself if they may go, then downgrade', plans);
    END IF;
END
$$;
"""


def downgrade() -> None:
    op.execute(REFUSE_DOWNGRADE)
    op.execute(LAG_BEFORE)
    op.drop_constraint("restart_plans_position_check", "restart_plans", schema=S)
    op.create_check_constraint("restart_plans_position_check", "restart_plans",
                               POSITIONS_BEFORE, schema=S)
    op.execute(f"DROP TRIGGER savepoints_name_a_journaled_batch ON {S}.savepoints")
    op.execute(f"DROP FUNCTION {S}.savepoints_name_a_journaled_batch()")
    op.drop_table("savepoints", schema=S)
