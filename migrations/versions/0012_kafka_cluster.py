"""Which Kafka cluster each run read: ``query_runs.kafka_cluster_id``.

Offsets are positions in one cluster's logs. A journal that does not know which cluster
a run read can only guess when a plan is made against another one (a disaster-recovery
replica, a rebuilt cluster): its offsets may lie inside the other cluster's logs and
skip or repeat records without a sign. The listener, given the bootstrap servers
(``kafka_bootstrap_servers``), asks the cluster its id once per run, off the stream's
path, and journals it here; a plan against a cluster with another id refuses unless it
is told to translate the offsets (``--translate-from``). NULL: not known (a listener
without bootstrap servers, older releases, imported checkpoints).

The history guard (0004's query_runs_only_complete, as 0009 left it) lets the column be
filled once only: a writer cannot move a run to another cluster after the fact.

Revision ID: 0012_kafka_cluster
Revises: 0011_finite_times
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_kafka_cluster"
down_revision = "0011_finite_times"
branch_labels = None
depends_on = None

# Written out in full (migrations stay frozen): 0009's guard plus the new column.
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
       OR (OLD.execution IS NOT NULL
           AND NEW.execution IS DISTINCT FROM OLD.execution)
       OR (OLD.async_interval_ms IS NOT NULL
           AND NEW.async_interval_ms IS DISTINCT FROM OLD.async_interval_ms)
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

_CLUSTER_GUARD = """OR (OLD.kafka_cluster_id IS NOT NULL
           AND NEW.kafka_cluster_id IS DISTINCT FROM OLD.kafka_cluster_id)"""


def upgrade() -> None:
    op.add_column("query_runs", sa.Column("kafka_cluster_id", sa.Text), schema="offset_journal")
    op.execute("COMMENT ON COLUMN offset_journal.query_runs.kafka_cluster_id IS "
               "'the id of the Kafka cluster the run read (admin API); NULL: not known'")
    op.execute(_GUARD.replace("{extra}", _CLUSTER_GUARD))


def downgrade() -> None:
    op.execute(_GUARD.replace("{extra}", ""))
    op.drop_column("query_runs", "kafka_cluster_id", schema="offset_journal")
