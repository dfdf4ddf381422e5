"""Offsets whose derived values do not fit a bigint are refused, and read without error.

Since 0013 a Kafka source's start and latest offsets are derived when read: end - span
and end + lag. One forged row (``end_offsets {-9223372036854775808}``, ``read_spans
{1}``, which the writer role can insert) made every read of its query fail with "bigint
out of range": ``starting-offsets``, ``plan``, ``audit``, ``history``, ``report``, for
good. From this revision:

* the database refuses a source row whose start (end - span) or latest (end + lag)
  would not fit a bigint (batch_sources' statement trigger, for every role), and a
  ``kafka_partition_rows`` row whose differences (end - start, latest - end) would not
  (a CHECK, NOT VALID: rows already there are not rechecked, the readers skip them);
* ``kafka_partitions`` computes no value that overflows: such a start or latest reads as
  NULL, and its new last column ``out_of_range`` says so, so that a reader can skip the
  row (the library skips the batch and says so) instead of taking NULL for "no offset";
  ``partition_lag`` gives no lag for it.

Revision ID: 0015_offsets_that_fit
Revises: 0014_batch_in_one_call
Create Date: 2026-11-25
"""

from alembic import op

revision = "0015_offsets_that_fit"
down_revision = "0014_batch_in_one_call"
branch_labels = None
depends_on = None

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
# Overflow is tested in bigint arithmetic that cannot itself overflow: e - s overflows
# exactly when s < 0 and e > max + s, or s > 0 and e < min + s (likewise e + l).
REFUSE = r"""
CREATE OR REPLACE FUNCTION offset_journal.batch_sources_fit_layout() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM new_rows n
        JOIN offset_journal.kafka_layouts l ON l.layout_id = n.kafka_layout
        WHERE cardinality(l.topics) IS DISTINCT FROM cardinality(n.end_offsets)
    ) THEN
        RAISE check_violation USING
            MESSAGE = 'batch_sources offsets arrays do not match their Kafka layout',
            TABLE = 'batch_sources', SCHEMA = 'offset_journal';
    END IF;
    IF EXISTS (
        SELECT 1 FROM new_rows n
        CROSS JOIN LATERAL unnest(n.end_offsets,
                                  coalesce(n.read_spans::integer[], n.read_spans_wide),
                                  coalesce(n.latest_lags::integer[], n.latest_lags_wide))
            AS u(e, s, l)
        WHERE n.end_offsets IS NOT NULL
          AND ((u.s < 0 AND u.e > 9223372036854775807 + u.s)
               OR (u.s > 0 AND u.e < (-9223372036854775807 - 1) + u.s)
               OR (u.l > 0 AND u.e > 9223372036854775807 - u.l)
               OR (u.l < 0 AND u.e < (-9223372036854775807 - 1) - u.l))
    ) THEN
        RAISE check_violation USING
            MESSAGE = 'batch_sources offsets out of range: a start (end - read span) or '
                      'latest (end + lag) offset would not fit a bigint',
            CONSTRAINT = 'batch_sources_offsets_fit',
            TABLE = 'batch_sources', SCHEMA = 'offset_journal';
    END IF;
    RETURN NULL;
END $$;

ALTER TABLE offset_journal.kafka_partition_rows
    ADD CONSTRAINT kafka_partition_rows_offsets_fit CHECK (
        (start_offset IS NULL OR end_offset IS NULL
         OR end_offset::numeric - start_offset
            BETWEEN -9223372036854775808 AND 9223372036854775807)
        AND (latest_offset IS NULL OR end_offset IS NULL
             OR latest_offset::numeric - end_offset
                BETWEEN -9223372036854775808 AND 9223372036854775807)) NOT VALID;
"""

VIEWS = r"""
CREATE OR REPLACE VIEW offset_journal.kafka_partitions AS
SELECT s.batch_pk, s.source_index, p.topic, p.partition, p.start_offset, p.end_offset,
       p.latest_offset, p.out_of_range
FROM offset_journal.batch_sources s
CROSS JOIN LATERAL (
    SELECT u.topic, u.partition,
           CASE WHEN NOT ((u.read_span < 0 AND u.end_offset > 9223372036854775807 + u.read_span)
                          OR (u.read_span > 0
                              AND u.end_offset < (-9223372036854775807 - 1) + u.read_span))
                THEN u.end_offset - u.read_span END AS start_offset,
           u.end_offset,
           CASE WHEN NOT ((u.latest_lag > 0
                           AND u.end_offset > 9223372036854775807 - u.latest_lag)
                          OR (u.latest_lag < 0
                              AND u.end_offset < (-9223372036854775807 - 1) - u.latest_lag))
                THEN u.end_offset + u.latest_lag END AS latest_offset,
           coalesce((u.read_span < 0 AND u.end_offset > 9223372036854775807 + u.read_span)
                    OR (u.read_span > 0
                        AND u.end_offset < (-9223372036854775807 - 1) + u.read_span)
                    OR (u.latest_lag > 0
                        AND u.end_offset > 9223372036854775807 - u.latest_lag)
                    OR (u.latest_lag < 0
                        AND u.end_offset < (-9223372036854775807 - 1) - u.latest_lag),
                    false) AS out_of_range
    FROM offset_journal.kafka_layouts l
    CROSS JOIN LATERAL unnest(l.topics, l.partitions, s.end_offsets,
                              coalesce(s.read_spans::integer[], s.read_spans_wide),
                              coalesce(s.latest_lags::integer[], s.latest_lags_wide))
        AS u(topic, partition, end_offset, read_span, latest_lag)
    WHERE l.layout_id = s.kafka_layout
    UNION ALL
    SELECT r.topic, r.partition, r.start_offset, r.end_offset, r.latest_offset,
           coalesce((r.start_offset < 0
                     AND r.end_offset > 9223372036854775807 + r.start_offset)
                    OR (r.start_offset > 0
                        AND r.end_offset < (-9223372036854775807 - 1) + r.start_offset)
                    OR (r.end_offset < 0
                        AND r.latest_offset > 9223372036854775807 + r.end_offset)
                    OR (r.end_offset > 0
                        AND r.latest_offset < (-9223372036854775807 - 1) + r.end_offset),
                    false)
    FROM offset_journal.kafka_partition_rows r
    WHERE r.batch_pk = s.batch_pk AND r.source_index = s.source_index
) p;
COMMENT ON COLUMN offset_journal.kafka_partitions.out_of_range IS
    'true for a row no listener wrote: a start or latest offset, or a difference of two, '
    'that would not fit a bigint (that start or latest reads as NULL); skip it';

CREATE OR REPLACE VIEW offset_journal.partition_lag AS
SELECT b.query_name, b.run_id, b.query_id, b.batch_id, b.id AS batch_pk, b.trigger_at,
       k.source_index, k.topic, k.partition, k.start_offset, k.end_offset, k.latest_offset,
       CASE WHEN NOT k.out_of_range THEN k.latest_offset - k.end_offset END AS lag
FROM offset_journal.kafka_partitions k
JOIN offset_journal.batches b ON b.id = k.batch_pk;
"""

# 0013's definitions, as they were (written out: migrations stay frozen). The views are
# dropped and created again (a view's column cannot be dropped), so their grants are
# kept aside and given back, with the INSTEAD OF trigger of listeners before 0013.
DOWNGRADE = r"""
CREATE TEMP TABLE oj_0015_grants ON COMMIT DROP AS
SELECT DISTINCT table_name, grantee, privilege_type
FROM information_schema.role_table_grants
WHERE table_schema = 'offset_journal'
  AND table_name IN ('kafka_partitions', 'source_offsets', 'partition_lag')
  AND grantee <> current_user;

DROP VIEW offset_journal.partition_lag;
DROP VIEW offset_journal.source_offsets;
DROP VIEW offset_journal.kafka_partitions;

CREATE VIEW offset_journal.kafka_partitions AS
SELECT s.batch_pk, s.source_index, p.topic, p.partition, p.start_offset, p.end_offset,
       p.latest_offset
FROM offset_journal.batch_sources s
CROSS JOIN LATERAL (
    SELECT u.topic, u.partition, u.end_offset - u.read_span AS start_offset, u.end_offset,
           u.end_offset + u.latest_lag AS latest_offset
    FROM offset_journal.kafka_layouts l
    CROSS JOIN LATERAL unnest(l.topics, l.partitions, s.end_offsets,
                              coalesce(s.read_spans::integer[], s.read_spans_wide),
                              coalesce(s.latest_lags::integer[], s.latest_lags_wide))
        AS u(topic, partition, end_offset, read_span, latest_lag)
    WHERE l.layout_id = s.kafka_layout
    UNION ALL
    SELECT r.topic, r.partition, r.start_offset, r.end_offset, r.latest_offset
    FROM offset_journal.kafka_partition_rows r
    WHERE r.batch_pk = s.batch_pk AND r.source_index = s.source_index
) p;
COMMENT ON VIEW offset_journal.kafka_partitions IS
    'per batch, source and Kafka topic-partition: start (inclusive), end (exclusive) and '
    'latest offsets; the batch_sources arrays unnested, and kafka_partition_rows';
CREATE TRIGGER kafka_partitions_insert INSTEAD OF INSERT ON offset_journal.kafka_partitions
    FOR EACH ROW EXECUTE FUNCTION offset_journal.kafka_partitions_insert();

CREATE VIEW offset_journal.source_offsets AS
SELECT s.batch_pk, s.source_index, s.description, s.kind,
       COALESCE(s.start_offset, CASE WHEN s.kind = 'kafka' THEN k.start_offset END)
           AS start_offset,
       COALESCE(s.end_offset, CASE WHEN s.kind = 'kafka' THEN k.end_offset END)
           AS end_offset,
       COALESCE(s.latest_offset, CASE WHEN s.kind = 'kafka' THEN k.latest_offset END)
           AS latest_offset,
       s.num_input_rows, s.problem
FROM offset_journal.batch_sources s
LEFT JOIN LATERAL (
    SELECT jsonb_object_agg(t.topic, t.starts) FILTER (WHERE t.starts IS NOT NULL)
               AS start_offset,
           jsonb_object_agg(t.topic, t.ends) FILTER (WHERE t.ends IS NOT NULL)
               AS end_offset,
           jsonb_object_agg(t.topic, t.latests) FILTER (WHERE t.latests IS NOT NULL)
               AS latest_offset
    FROM (SELECT p.topic,
                 jsonb_object_agg(p.partition::text, p.start_offset)
                     FILTER (WHERE p.start_offset IS NOT NULL) AS starts,
                 jsonb_object_agg(p.partition::text, p.end_offset)
                     FILTER (WHERE p.end_offset IS NOT NULL) AS ends,
                 jsonb_object_agg(p.partition::text, p.latest_offset)
                     FILTER (WHERE p.latest_offset IS NOT NULL) AS latests
          FROM offset_journal.kafka_partitions p
          WHERE p.batch_pk = s.batch_pk AND p.source_index = s.source_index
          GROUP BY p.topic) t
) k ON true;

CREATE VIEW offset_journal.partition_lag AS
SELECT b.query_name, b.run_id, b.query_id, b.batch_id, b.id AS batch_pk, b.trigger_at,
       k.source_index, k.topic, k.partition, k.start_offset, k.end_offset, k.latest_offset,
       k.latest_offset - k.end_offset AS lag
FROM offset_journal.kafka_partitions k
JOIN offset_journal.batches b ON b.id = k.batch_pk;

COMMENT ON VIEW offset_journal.source_offsets IS
    'batch_sources with every source''s start and end offsets as JSON: for Kafka sources '
    'rebuilt from kafka_partitions where batch_sources keeps them NULL (revision 0003)';
COMMENT ON VIEW offset_journal.partition_lag IS
    'per batch and Kafka partition: end offset, the latest offset Spark saw when it planned '
    'the batch, and lag = latest - end (records left behind; NULL when Spark gave no latest)';

DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT * FROM oj_0015_grants LOOP
        EXECUTE format('GRANT %s ON offset_journal.%I TO %s', g.privilege_type, g.table_name,
                       CASE WHEN g.grantee = 'PUBLIC' THEN 'PUBLIC'
                            ELSE quote_ident(g.grantee) END);
    END LOOP;
END $$;

ALTER TABLE offset_journal.kafka_partition_rows
    DROP CONSTRAINT kafka_partition_rows_offsets_fit;

CREATE OR REPLACE FUNCTION offset_journal.batch_sources_fit_layout() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM new_rows n
        JOIN offset_journal.kafka_layouts l ON l.layout_id = n.kafka_layout
        WHERE cardinality(l.topics) IS DISTINCT FROM cardinality(n.end_offsets)
    ) THEN
        RAISE check_violation USING
            MESSAGE = 'batch_sources offsets arrays do not match their Kafka layout',
            TABLE = 'batch_sources', SCHEMA = 'offset_journal';
    END IF;
    RETURN NULL;
END $$;
"""


def upgrade() -> None:
    op.execute(REFUSE)
    op.execute(VIEWS)


def downgrade() -> None:
    op.execute(DOWNGRADE)
