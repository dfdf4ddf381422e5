"""Restarts journaled as decisions: every restart plan handed out, and the run it started.

``restart_plans`` keeps each plan that ``starting-offsets``, ``plan`` or
``plan_restart`` handed out (unless asked not to): the query name, when (the
database's clock), the position it starts from, the options handed out, the Kafka
start offsets per (source, topic, partition), the checkpoint it was made for, and the
host and operating-system user that asked. ``plan_runs`` links a run to the plan it
started from, when the job says so (``Journal.link_plan``; the jobs in jobs/ do).
Spark reports no start offsets for a new checkpoint's first batch: without these, the
journal cannot know where a new run began (``offset-journal audit``).

Revision ID: 0008_decisions
Revises: 0007_source_metrics
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008_decisions"
down_revision = "0007_source_metrics"
branch_labels = None
depends_on = None

S = "offset_journal"


def upgrade() -> None:
    op.create_table(
        "restart_plans",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("query_name", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("position", sa.Text, nullable=False),
        sa.Column("mode", sa.Text, nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("anchor_run_id", sa.Text),
        sa.Column("anchor_batch_id", sa.BigInteger),
        sa.Column("request", JSONB, nullable=False),
        sa.Column("options", JSONB, nullable=False),
        sa.Column("kafka_offsets", JSONB, nullable=False),
        sa.Column("checkpoint", sa.Text),
        sa.Column("host", sa.Text),
        sa.Column("os_user", sa.Text),
        sa.CheckConstraint(
            "position IN ('after', 'at', 'as-of', 'rewind', 'from-time')",
            name="restart_plans_position_check"),
        schema=S,
    )
    op.create_index("restart_plans_query_idx", "restart_plans", ["query_name", "id"], schema=S)
    op.create_table(
        "plan_runs",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("plan_id", sa.BigInteger,
                  sa.ForeignKey(f"{S}.restart_plans.id", ondelete="CASCADE"), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        schema=S,
    )
    op.create_index("plan_runs_plan_idx", "plan_runs", ["plan_id"], schema=S)
    op.execute(f"COMMENT ON TABLE {S}.restart_plans IS 'every restart plan handed out "
               "(starting-offsets, plan, plan_restart), with where it starts'")
    op.execute(f"COMMENT ON COLUMN {S}.restart_plans.kafka_offsets IS "
               "'[[source_index, topic, partition, start offset (-2: earliest)], ...]'")
    op.execute(f"COMMENT ON TABLE {S}.plan_runs IS 'the run a job started from a plan'")


def downgrade() -> None:
    op.drop_table("plan_runs", schema=S)
    op.drop_table("restart_plans", schema=S)
