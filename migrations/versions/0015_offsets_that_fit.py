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
* the database refuses an end offset below 0 (in startingOffsets -1 means latest and
  -2 earliest: a forged one would send a restart elsewhere);
* ``kafka_partitions`` computes no value that overflows: such a start or latest reads as
  NULL, and its new last column ``out_of_range`` says so (also for an end or start below
  0), so that a reader can skip the row (the library skips the batch and says so)
  instead of taking NULL for "no offset"; ``partition_lag`` gives no lag for it.

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
#
# What is refused: an end offset below 0 (Kafka's offsets start at 0; a negative one in
# startingOffsets means latest (-1) or earliest (-2), so a forged one would send a
# restart elsewhere), and a start (end - span) or latest (end + lag) that would not fit
# a bigint. Spans and lags are 4 bytes at most, so the latter needs an end within 2^31
# of the largest bigint: `9223372034707292159 < ANY(...)` finds that in C without
# unnesting, and only then is each partition checked, in bigint arithmetic that cannot
# itself overflow (end + lag overflows exactly when lag > 0 and end > max - lag).
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
        WHERE 0 > ANY(n.end_offsets)
           OR (9223372034707292159 < ANY(n.end_offsets) AND EXISTS (
                SELECT 1
                FROM unnest(n.end_offsets,
                            coalesce(n.read_spans::integer[], n.read_spans_wide),
                            coalesce(n.latest_lags::integer[], n.latest_lags_wide))
                     AS u(e, s, l)
                WHERE (u.s < 0 AND u.e > 9223372036854775807 + u.s)
                   OR (u.l > 0 AND u.e > 9223372036854775807 - u.l)))
    ) THEN
        RAISE check_violation USING
            MESSAGE = 'batch_sources offsets out of range: an end offset below 0, or a '
                      'start (end - read span) or latest (end + lag) offset that would '
                      'not fit a bigint',
            CONSTRAINT = 'batch_sources_offsets_fit',
            TABLE = 'batch_sources', SCHEMA = 'offset_journal';
    END IF;
    RETURN NULL;
END $$;

ALTER TABLE offset_journal.kafka_partition_rows
    ADD CONSTRAINT kafka_partition_rows_offsets_fit CHECK (
        (end_offset IS NULL OR end_offset >= 0)
        AND (start_offset IS NULL OR end_offset IS NULL
             OR end_offset::numeric - start_offset
                BETWEEN -9223372036854775808 AND 9223372036854775807)
        AND (latest_offset IS NULL OR end_offset IS NULL
             OR latest_offset::numeric - end_offset
                BETWEEN -9223372036854775808 AND 9223372036854775807)) NOT VALID;
"""

# Each branch computes its flags first (in bigint arithmetic that cannot overflow), and
# only what the flags allow: a flagged row's start and latest read as NULL, its end as
# stored.
VIEWS = r"""
CREATE OR REPLACE VIEW offset_journal.kafka_partitions AS
SELECT s.batch_pk, s.source_index, p.topic, p.partition, p.start_offset, p.end_offset,
       p.latest_offset, p.out_of_range
FROM offset_journal.batch_sources s
CROSS JOIN LATERAL (
    SELECT u.topic, u.partition,
           CASE WHEN NOT f.out THEN u.end_offset - u.read_span END AS start_offset,
           u.end_offset,
           CASE WHEN NOT f.out THEN u.end_offset + u.latest_lag END AS latest_offset,
           f.out AS out_of_range
    FROM offset_journal.kafka_layouts l
    CROSS JOIN LATERAL unnest(l.topics, l.partitions, s.end_offsets,
                              coalesce(s.read_spans::integer[], s.read_spans_wide),
                              coalesce(s.latest_lags::integer[], s.latest_lags_wide))
        AS u(topic, partition, end_offset, read_span, latest_lag)
    CROSS JOIN LATERAL (SELECT coalesce(
        u.end_offset < 0 OR u.read_span > u.end_offset
        OR (u.read_span < 0 AND u.end_offset > 9223372036854775807 + u.read_span)
        OR (u.read_span > 0 AND u.end_offset < (-9223372036854775807 - 1) + u.read_span)
        OR (u.latest_lag > 0 AND u.end_offset > 9223372036854775807 - u.latest_lag)
        OR (u.latest_lag < 0 AND u.end_offset < (-9223372036854775807 - 1) - u.latest_lag),
        false) AS out) f
    WHERE l.layout_id = s.kafka_layout
    UNION ALL
    SELECT r.topic, r.partition, CASE WHEN NOT f.out THEN r.start_offset END, r.end_offset,
           CASE WHEN NOT f.out THEN r.latest_offset END, f.out
    FROM offset_journal.kafka_partition_rows r
    CROSS JOIN LATERAL (SELECT coalesce(
        r.end_offset < 0 OR r.start_offset < 0
        OR (r.start_offset < 0 AND r.end_offset > 9223372036854775807 + r.start_offset)
        OR (r.start_offset > 0 AND r.end_offset < (-9223372036854775807 - 1) + r.start_offset)
        OR (r.end_offset < 0 AND r.latest_offset > 9223372036854775807 + r.end_offset)
        OR (r.end_offset > 0 AND r.latest_offset < (-9223372036854775807 - 1) + r.end_offset),
        false) AS out) f
    WHERE r.batch_pk = s.batch_pk AND r.source_index = s.source_index
) p;
COMMENT ON COLUMN offset_journal.kafka_partitions.out_of_range IS
    'true for a row no listener wrote: an end or start offset below 0, or a start or '
    'latest offset (or a difference of two) that would not fit a bigint; its start and '
    'latest read as NULL. Readers skip it';

CREATE OR REPLACE VIEW offset_journal.partition_lag AS
SELECT b.query_name, b.run_id, b.query_id, b.batch_id, b.id AS batch_pk, b.trigger_at,
       k.source_index, k.topic, k.partition, k.start_offset, k.end_offset, k.latest_offset,
       CASE WHEN NOT k.out_of_range THEN k.latest_offset - k.end_offset END AS lag
FROM offset_journal.kafka_partitions k
JOIN offset_journal.batches b ON b.id = k.batch_pk;
"""

# 0013's definitions, as they were (written out: migrations stay frozen). The views are
# dropped and created again (a view's column cannot be dropped), so what others gave
# them is kept aside and given back: grants (with their grant option, and on single
# columns), comments, owner, and the INSTEAD OF trigger of listeners before 0013.
DOWNGRADE = r"""
CREATE TEMP TABLE oj_0015_views ON COMMIT DROP AS
SELECT c.oid, c.relname, c.relowner FROM pg_class c
WHERE c.relnamespace = 'offset_journal'::regnamespace
  AND c.relname IN ('kafka_partitions', 'source_offsets', 'partition_lag');

CREATE TEMP TABLE oj_0015_acl ON COMMIT DROP AS
SELECT v.relname, NULL::name AS attname, a.grantee, a.privilege_type, a.is_grantable
FROM oj_0015_views v JOIN pg_class c ON c.oid = v.oid, aclexplode(c.relacl) a
WHERE a.grantee <> v.relowner
UNION ALL
SELECT v.relname, att.attname, a.grantee, a.privilege_type, a.is_grantable
FROM oj_0015_views v JOIN pg_attribute att ON att.attrelid = v.oid,
     aclexplode(att.attacl) a
WHERE a.grantee <> v.relowner AND att.attname <> 'out_of_range';

CREATE TEMP TABLE oj_0015_comments ON COMMIT DROP AS
SELECT v.relname, att.attname, d.description
FROM oj_0015_views v
JOIN pg_description d ON d.objoid = v.oid AND d.classoid = 'pg_class'::regclass
LEFT JOIN pg_attribute att ON att.attrelid = v.oid AND att.attnum = d.objsubid
WHERE d.objsubid = 0 OR att.attname <> 'out_of_range';

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

DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT * FROM oj_0015_acl LOOP
        EXECUTE format('GRANT %s%s ON offset_journal.%I TO %s%s', g.privilege_type,
                       CASE WHEN g.attname IS NOT NULL
                            THEN ' (' || quote_ident(g.attname) || ')' ELSE '' END,
                       g.relname,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    FOR g IN SELECT * FROM oj_0015_comments LOOP
        EXECUTE format('COMMENT ON %s IS %L', CASE
            WHEN g.attname IS NULL THEN format('VIEW offset_journal.%I', g.relname)
            ELSE format('COLUMN offset_journal.%I.%I', g.relname, g.attname) END,
            g.description);
    END LOOP;
    FOR g IN SELECT * FROM oj_0015_views WHERE relowner <> current_user::regrole::oid LOOP
        EXECUTE format('ALTER VIEW offset_journal.%I OWNER TO %s', g.relname,
                       g.relowner::regrole::text);  -- regrole's text is quoted
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
