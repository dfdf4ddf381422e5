"""The journal: query runs, batches, per-source offsets, Kafka partition offsets.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

S = "offset_journal"


def upgrade() -> None:
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {S}")
    op.create_table(
        "query_runs",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("query_id", sa.Text, nullable=False),
        sa.Column("query_name", sa.Text, nullable=False),
        sa.Column("named", sa.Boolean, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("terminated_at", sa.DateTime(timezone=True)),
        sa.Column("exception", sa.Text),
        sa.Column("error_class", sa.Text),
        sa.Column("host", sa.Text),
        sa.Column("pid", sa.Integer),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        schema=S,
    )
    op.create_index("query_runs_name_idx", "query_runs", ["query_name", "started_at"], schema=S)

    op.create_table(
        "batches",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("run_id", sa.Text, sa.ForeignKey(f"{S}.query_runs.run_id"), nullable=False),
        sa.Column("query_id", sa.Text, nullable=False),
        sa.Column("query_name", sa.Text, nullable=False),
        sa.Column("batch_id", sa.BigInteger, nullable=False),
        sa.Column("trigger_at", sa.DateTime(timezone=True)),
        sa.Column("batch_duration_ms", sa.BigInteger),
        sa.Column("durations_ms", JSONB),
        sa.Column("num_input_rows", sa.BigInteger),
        sa.Column("input_rows_per_second", sa.Double),
        sa.Column("processed_rows_per_second", sa.Double),
        sa.Column("watermark", sa.DateTime(timezone=True)),
        sa.Column("event_time_min", sa.DateTime(timezone=True)),
        sa.Column("event_time_max", sa.DateTime(timezone=True)),
        sa.Column("event_time_avg", sa.DateTime(timezone=True)),
        sa.Column("state_operators", JSONB),
        sa.Column("sink_description", sa.Text),
        sa.Column("num_output_rows", sa.BigInteger),
        sa.Column("raw_progress", sa.Text),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        # Replaying a spooled event must not record a batch twice.
        sa.UniqueConstraint("run_id", "batch_id", name="batches_run_batch_key"),
        schema=S,
    )
    # "Last durable offsets of a query name" walks this index backwards from the top.
    op.create_index(
        "batches_query_latest_idx", "batches",
        ["query_name", sa.text("trigger_at DESC"), sa.text("batch_id DESC")], schema=S,
    )

    op.create_table(
        "batch_sources",
        sa.Column("batch_pk", sa.BigInteger,
                  sa.ForeignKey(f"{S}.batches.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("source_index", sa.Integer, primary_key=True),
        sa.Column("description", sa.Text),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("start_offset", JSONB),
        sa.Column("end_offset", JSONB),
        sa.Column("latest_offset", JSONB),
        sa.Column("num_input_rows", sa.BigInteger),
        sa.Column("problem", sa.Text),
        schema=S,
    )

    op.create_table(
        "kafka_partitions",
        sa.Column("batch_pk", sa.BigInteger, primary_key=True),
        sa.Column("source_index", sa.Integer, primary_key=True),
        sa.Column("topic", sa.Text, primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("start_offset", sa.BigInteger),
        sa.Column("end_offset", sa.BigInteger),
        sa.ForeignKeyConstraint(
            ["batch_pk", "source_index"],
            [f"{S}.batch_sources.batch_pk", f"{S}.batch_sources.source_index"],
            ondelete="CASCADE",
        ),
        schema=S,
    )
    # Per-partition history: one topic-partition across batches.
    op.create_index("kafka_partitions_history_idx", "kafka_partitions",
                    ["topic", "partition", "batch_pk"], schema=S)

    op.create_table(
        "rejected_events",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        schema=S,
    )


def downgrade() -> None:
    for table in ("rejected_events", "kafka_partitions", "batch_sources", "batches", "query_runs"):
        op.drop_table(table, schema=S)
