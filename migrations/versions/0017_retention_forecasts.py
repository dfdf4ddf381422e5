"""Retention forecasts: when Kafka's retention deletes what each query has not read.

``offset-journal retention --record`` asks the broker, per query and Kafka partition,
where the log starts and ends, the timestamp of the first record the query has not
read and the topic's retention, and keeps its forecast here: one row per (query, source,
topic, partition), replaced at each recording. ``check`` and the Grafana dashboard read
it without a broker; ``loss_earliest`` is a time, so the row stays true as time passes
(``loss_earliest - now()`` is the time left) until the query reads on.

Written by the planner role (and the owner): the listener never writes it.

Revision ID: 0017_retention_forecasts
Revises: 0016_event_time_index
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_retention_forecasts"
down_revision = "0016_event_time_index"
branch_labels = None
depends_on = None

S = "offset_journal"


def upgrade() -> None:
    op.create_table(
        "retention_forecasts",
        sa.Column("query_name", sa.Text, primary_key=True),
        sa.Column("source_index", sa.Integer, primary_key=True),
        sa.Column("topic", sa.Text, primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("next_offset", sa.BigInteger, nullable=False),
        sa.Column("log_start", sa.BigInteger),
        sa.Column("log_end", sa.BigInteger),
        sa.Column("unread", sa.BigInteger, nullable=False),
        sa.Column("lost", sa.BigInteger, nullable=False),
        sa.Column("first_unread_at", sa.DateTime(timezone=True)),
        sa.Column("loss_earliest", sa.DateTime(timezone=True)),
        sa.Column("loss_latest", sa.DateTime(timezone=True)),
        sa.Column("basis", sa.Text),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.CheckConstraint(
            "status IN ('lost', 'at-risk', 'safe', 'caught-up', 'unknown', 'gone', "
            "'beyond-end')", name="retention_forecasts_status_check"),
        # What check believes of a row: lost records are said with their count and
        # only so; a loss foreseen has a time and a limit; counts are counts.
        sa.CheckConstraint("(status = 'lost') = (lost > 0)",
                           name="retention_forecasts_lost_check"),
        sa.CheckConstraint("status <> 'at-risk' OR (loss_earliest IS NOT NULL "
                           "AND loss_latest IS NOT NULL AND basis IS NOT NULL)",
                           name="retention_forecasts_at_risk_check"),
        sa.CheckConstraint("basis IN ('time', 'size')", name="retention_forecasts_basis_check"),
        sa.CheckConstraint("unread >= 0 AND lost >= 0 AND next_offset >= 0",
                           name="retention_forecasts_counts_check"),
        schema=S,
    )
    op.execute(f"COMMENT ON TABLE {S}.retention_forecasts IS 'When Kafka retention deletes "
               "the first record each query has not read (offset-journal retention --record)'")


def downgrade() -> None:
    op.drop_table("retention_forecasts", schema=S)
