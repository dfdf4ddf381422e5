"""Kafka offsets stored once: a view gives every source's offsets JSON back.

From this revision on, the journal leaves batch_sources.start_offset / end_offset NULL
for a Kafka source whose partition rows give them back exactly (offset_journal.journal
._stored_offsets): the same 10,000 offsets were otherwise written twice per batch, once
as rows and once as JSONB, which cost about a fifth of the batch's write. Rows written
before keep their JSON; this view reads both the same way, for SQL users who want the
offsets as Spark reported them.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
UPGRADE = """
CREATE VIEW offset_journal.source_offsets AS
SELECT s.batch_pk, s.source_index, s.description, s.kind,
       COALESCE(s.start_offset, CASE WHEN s.kind = 'kafka' THEN k.start_offset END)
           AS start_offset,
       COALESCE(s.end_offset, CASE WHEN s.kind = 'kafka' THEN k.end_offset END)
           AS end_offset,
       s.latest_offset, s.num_input_rows, s.problem
FROM offset_journal.batch_sources s
LEFT JOIN LATERAL (
    SELECT jsonb_object_agg(t.topic, t.starts) FILTER (WHERE t.starts IS NOT NULL)
               AS start_offset,
           jsonb_object_agg(t.topic, t.ends) FILTER (WHERE t.ends IS NOT NULL)
               AS end_offset
    FROM (SELECT p.topic,
                 jsonb_object_agg(p.partition::text, p.start_offset)
                     FILTER (WHERE p.start_offset IS NOT NULL) AS starts,
                 jsonb_object_agg(p.partition::text, p.end_offset)
                     FILTER (WHERE p.end_offset IS NOT NULL) AS ends
          FROM offset_journal.kafka_partitions p
          WHERE p.batch_pk = s.batch_pk AND p.source_index = s.source_index
          GROUP BY p.topic) t
) k ON true;

COMMENT ON VIEW offset_journal.source_offsets IS
    'batch_sources with every source''s start and end offsets as JSON: for Kafka sources '
    'rebuilt from kafka_partitions where batch_sources keeps them NULL (revision 0003)';
COMMENT ON COLUMN offset_journal.batch_sources.start_offset IS
    'NULL for a Kafka source whose kafka_partitions rows hold it; see the source_offsets view';
COMMENT ON COLUMN offset_journal.batch_sources.end_offset IS
    'NULL for a Kafka source whose kafka_partitions rows hold it; see the source_offsets view';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    # Revision 0002's code reads start/end offsets from batch_sources only: fill them
    # in from the rows before going back, so that nothing journaled is lost to it.
    op.execute("""
        UPDATE offset_journal.batch_sources s
        SET start_offset = v.start_offset, end_offset = v.end_offset
        FROM offset_journal.source_offsets v
        WHERE v.batch_pk = s.batch_pk AND v.source_index = s.source_index
          AND s.kind = 'kafka' AND (s.start_offset IS NULL OR s.end_offset IS NULL)
    """)
    op.execute("COMMENT ON COLUMN offset_journal.batch_sources.start_offset IS NULL")
    op.execute("COMMENT ON COLUMN offset_journal.batch_sources.end_offset IS NULL")
    op.execute("DROP VIEW offset_journal.source_offsets")
