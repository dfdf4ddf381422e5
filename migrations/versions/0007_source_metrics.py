"""Each source's metrics, as the connector reports them.

Spark's Kafka connector reports, per batch, how far the query is behind the newest
records (``avgOffsetsBehindLatest``, ``maxOffsetsBehindLatest``,
``minOffsetsBehindLatest``, and ``estimatedTotalBytesBehindLatest`` when asked for):
the consumer lag at each batch, which the journal dropped until now. They are kept in
batch_sources.metrics, as the progress JSON gives them (a map of strings).

Revision ID: 0007_source_metrics
Revises: 0006_spool_losses
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007_source_metrics"
down_revision = "0006_spool_losses"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("batch_sources", sa.Column("metrics", JSONB), schema="offset_journal")
    op.execute("COMMENT ON COLUMN offset_journal.batch_sources.metrics IS "
               "'the source''s metrics from the progress (Kafka: offsets behind latest)'")


def downgrade() -> None:
    op.drop_column("batch_sources", "metrics", schema="offset_journal")
