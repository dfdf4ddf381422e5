"""Per partition, the latest offset Spark saw: lag and freshness are plain SQL.

Spark's Kafka source reports, with each batch, ``latestOffset``: the newest offset of
every partition when the batch was planned. batch_sources.latest_offset keeps it as one
JSON document per source, which SQL cannot join to a partition's row without unpacking
it. From this revision on kafka_partitions has it too, one bigint per row, written with
the row (the writer's COPY), so that

* ``offset_journal.partition_lag`` gives, per batch and partition, end, latest and
  ``lag = latest - end`` (records the batch left behind it);
* ``offset_journal.batch_freshness`` gives, per batch, its trigger time minus its
  event-time max (how old the newest record was when the batch started).

Rows journaled before keep NULL unless their source's latest_offset JSON gives the
value: the upgrade fills them in from it (one UPDATE; the owner runs migrations, which
the history guard of revision 0004 does not restrict). The guard needs no change: its
statement trigger checks every INSERT into kafka_partitions, whatever its columns, and
the writer has no UPDATE on the table. The writer's INSERT grant is on the whole table
(offset_journal.journal.roles), which covers the new column; the reader's SELECT on all tables
covers the views.

Revision ID: 0010_partition_latest
Revises: 0009_async_progress
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_partition_latest"
down_revision = "0009_async_progress"
branch_labels = None
depends_on = None

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
BACKFILL = """
UPDATE offset_journal.kafka_partitions k
SET latest_offset = (s.latest_offset -> k.topic ->> k.partition::text)::bigint
FROM offset_journal.batch_sources s
WHERE s.batch_pk = k.batch_pk AND s.source_index = k.source_index
  AND jsonb_typeof(s.latest_offset) = 'object'
  AND jsonb_typeof(s.latest_offset -> k.topic) = 'object'
  AND (s.latest_offset -> k.topic ->> k.partition::text) ~ '^-?[0-9]{1,18}$'
"""

VIEWS = """
CREATE VIEW offset_journal.partition_lag AS
SELECT b.query_name, b.run_id, b.query_id, b.batch_id, b.id AS batch_pk, b.trigger_at,
       k.source_index, k.topic, k.partition, k.start_offset, k.end_offset, k.latest_offset,
       k.latest_offset - k.end_offset AS lag
FROM offset_journal.kafka_partitions k
JOIN offset_journal.batches b ON b.id = k.batch_pk;

COMMENT ON VIEW offset_journal.partition_lag IS
    'per batch and Kafka partition: end offset, the latest offset Spark saw when it planned '
    'the batch, and lag = latest - end (records left behind; NULL when Spark gave no latest)';

CREATE VIEW offset_journal.batch_freshness AS
SELECT b.query_name, b.run_id, b.query_id, b.batch_id, b.id AS batch_pk, b.trigger_at,
       b.event_time_max, b.watermark, b.num_input_rows, b.batch_duration_ms,
       b.trigger_at - b.event_time_max AS freshness,
       extract(epoch FROM b.trigger_at - b.event_time_max)::double precision
           AS freshness_seconds
FROM offset_journal.batches b;

COMMENT ON VIEW offset_journal.batch_freshness IS
    'per batch: trigger time minus the newest event time it read (NULL without an event '
    'time column, i.e. without withWatermark)';
COMMENT ON COLUMN offset_journal.kafka_partitions.latest_offset IS
    'the newest offset of the partition when Spark planned the batch (latestOffset)';
"""


def upgrade() -> None:
    op.add_column("kafka_partitions", sa.Column("latest_offset", sa.BigInteger),
                  schema="offset_journal")
    op.execute(BACKFILL)
    op.execute(VIEWS)


def downgrade() -> None:
    op.execute("DROP VIEW offset_journal.batch_freshness")
    op.execute("DROP VIEW offset_journal.partition_lag")
    op.drop_column("kafka_partitions", "latest_offset", schema="offset_journal")
