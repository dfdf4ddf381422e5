"""Spool losses: what a full spool dropped, recorded so that a restart plan reports it.

A listener's spool is capped by ``spool_max_bytes``. When an outage outlasts it, the
oldest batch events are dropped (never a query's newest), and the spool keeps a small
record per query of what went: how many batch events, of which runs, which batch ids,
and per Kafka topic-partition the offsets they spanned. Once the database answers
again, the writer moves that record here; ``plan`` warns about it.

Revision ID: 0006_spool_losses
Revises: 0005_planner
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006_spool_losses"
down_revision = "0005_planner"
branch_labels = None
depends_on = None

S = "offset_journal"


def upgrade() -> None:
    op.create_table(
        "spool_losses",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("loss_id", sa.Text, nullable=False),
        sa.Column("query_name", sa.Text, nullable=False),
        sa.Column("events", sa.BigInteger, nullable=False),
        sa.Column("run_ids", JSONB, nullable=False),
        sa.Column("batch_id_min", sa.BigInteger),
        sa.Column("batch_id_max", sa.BigInteger),
        sa.Column("first_trigger_at", sa.DateTime(timezone=True)),
        sa.Column("last_trigger_at", sa.DateTime(timezone=True)),
        sa.Column("partitions", JSONB, nullable=False),
        sa.Column("host", sa.Text),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.UniqueConstraint("loss_id", name="spool_losses_loss_id_key"),
        schema=S,
    )
    op.create_index("spool_losses_query_idx", "spool_losses", ["query_name"], schema=S)


def downgrade() -> None:
    op.drop_table("spool_losses", schema=S)
