"""Recorded losses: records retention deleted before a query read them, kept until a
person acknowledges them.

``retention_forecasts`` is replaced at each ``retention --record``: once a job with
``failOnDataLoss=false`` reads on past records retention deleted, the next recording
no longer says they were lost, and no batch shows it either (Spark skips them inside a
batch that starts where the last one ended). So each DATA LOSS a recording finds is
also kept in ``retention_losses``: one row per (query, source, topic, partition, first
offset lost), whose ``end_offset`` grows while later recordings find more deleted
there, with the query's last batch then (``anchor_run_id``, ``anchor_batch_id``: a
restart plan after that batch that accepted data loss, ``--allow-data-loss``, accepts
it). ``check`` and ``audit`` say it until ``loss_acknowledgements`` holds a decision
covering it: who (``host``, ``os_user``), when, why (``reason``), and up to which offset
(``end_offset``), written by ``offset-journal losses acknowledge``.

The writer role only reads both: a job cannot record or acknowledge a loss. The planner
role inserts (and grows a loss's end); nobody but the owner updates a decision or
deletes either (offset_journal.journal.roles). The lost rows already recorded are kept
as losses.

Revision ID: 0019_recorded_losses
Revises: 0018_savepoints
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_recorded_losses"
down_revision = "0018_savepoints"
branch_labels = None
depends_on = None

S = "offset_journal"

KEEP_RECORDED = """
INSERT INTO offset_journal.retention_losses (query_name, source_index, topic, partition,
                                            first_offset, end_offset, first_recorded_at,
                                            last_recorded_at)
SELECT query_name, source_index, topic, partition, next_offset, next_offset + lost,
       recorded_at, recorded_at
FROM offset_journal.retention_forecasts WHERE status = 'lost' AND lost > 0
"""


def upgrade() -> None:
    op.create_table(
        "retention_losses",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("query_name", sa.Text, nullable=False),
        sa.Column("source_index", sa.Integer, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("first_offset", sa.BigInteger, nullable=False),
        sa.Column("end_offset", sa.BigInteger, nullable=False),
        sa.Column("anchor_run_id", sa.Text),
        sa.Column("anchor_batch_id", sa.BigInteger),
        sa.Column("first_recorded_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("last_recorded_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.UniqueConstraint("query_name", "source_index", "topic", "partition",
                            "first_offset", name="retention_losses_key"),
        sa.CheckConstraint("first_offset >= 0 AND end_offset > first_offset",
                           name="retention_losses_range_check"),
        schema=S,
    )
    op.create_table(
        "loss_acknowledgements",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("loss_id", sa.BigInteger,
                  sa.ForeignKey(f"{S}.retention_losses.id"), nullable=False),
        sa.Column("end_offset", sa.BigInteger, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("host", sa.Text),
        sa.Column("os_user", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.CheckConstraint("btrim(reason) <> ''", name="loss_acknowledgements_reason_check"),
        sa.Index("loss_acknowledgements_loss_idx", "loss_id"),
        schema=S,
    )
    op.execute(f"COMMENT ON TABLE {S}.retention_losses IS 'Records retention deleted before "
               "the query read them, as offset-journal retention --record found them'")
    op.execute(f"COMMENT ON TABLE {S}.loss_acknowledgements IS 'Who acknowledged a recorded "
               "loss, when and why (offset-journal losses acknowledge)'")
    op.execute(KEEP_RECORDED)


REFUSE_DOWNGRADE = """
DO $$
DECLARE
    losses bigint;
BEGIN
    SELECT count(*) INTO losses FROM offset_journal.retention_losses;
    IF losses > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'object_in_use', MESSAGE = format(
            'downgrade below 0019_recorded_losses refused: %s data loss(es) recorded '
            '(retention_losses, with their acknowledgements), which check and the audit '
            'report and the older schema cannot hold; delete them yourself if they may '
            'go, then downgrade', losses);
    END IF;
END
$$;
"""


def downgrade() -> None:
    op.execute(REFUSE_DOWNGRADE)
    op.drop_table("loss_acknowledgements", schema=S)
    op.drop_table("retention_losses", schema=S)
