"""Kafka offsets stored near their real size: one row per source, not per partition.

Until now every journaled batch wrote one ``kafka_partitions`` row per topic-partition
(24 bytes of heap header, the topic name, the key columns and a primary-key entry
around 16-24 bytes of offsets): about 200 bytes per partition and batch, 180 GiB a day
for a thousand 100-partition jobs (bench/capacity.py). From this revision a Kafka
source's offsets live in its ``batch_sources`` row, as arrays in the order of a
*layout*:

* ``kafka_layouts`` holds each distinct list of (topic, partition) once, keyed by a
  digest of the list (``kafka_layout_id``; a CHECK recomputes it, so a layout cannot be
  stored under another list's key). Layouts change only when partitions are added, and
  jobs reading the same topics share one;
* ``batch_sources.kafka_layout`` names the source's layout; ``end_offsets`` (bigint)
  holds each partition's end, ``read_spans`` (end - start) and ``latest_lags``
  (latest - end) the differences, which per batch are record counts: as 2-byte
  integers when all of a source's fit (about 12 bytes per partition), else in
  ``read_spans_wide``/``latest_lags_wide`` as 4-byte ones (16 bytes). Postgres's own
  compression does not help here: it applies to rows over 2 kB only, and pglz finds
  little to take from offsets;
* the latestOffset JSON a Kafka source row kept is no longer stored when the
  partition values rebuild it exactly (it repeated every partition);
* ``kafka_partitions`` becomes a view with the same columns (the arrays unnested, plus
  the rows below): every query written against the table, the cookbook (docs/cookbook.md)
  included, runs unchanged; so do ``source_offsets`` and ``partition_lag`` over it;
* the old table is kept as ``kafka_partition_rows`` for what the arrays cannot hold (a
  partition without an end offset, a span or lag beyond 2^31) and for listeners of
  the previous release, whose COPY into ``kafka_partitions`` an INSTEAD OF trigger
  sends there: they keep journaling while jobs are upgraded one by one. Its triggers
  (migrations 0002 and 0004) stay with it.

The upgrade converts the journal in place: the rows whose sources the arrays hold
exactly are aggregated into them, and the table is emptied of them by TRUNCATE (no
dead rows left behind). Roles granted on the old table or on batch_sources get the
same grants on the view and on kafka_layouts, so running writers and readers keep
working without a new ``db grant``.

Revision ID: 0013_offsets_as_arrays
Revises: 0012_kafka_cluster
Create Date: 2026-11-25
"""

from alembic import op

revision = "0013_offsets_as_arrays"
down_revision = "0012_kafka_cluster"
branch_labels = None
depends_on = None

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
LAYOUTS = r"""
CREATE FUNCTION offset_journal.kafka_layout_id(topics text[], partitions integer[])
RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT substr(sha256(convert_to(coalesce(string_agg(
               octet_length(convert_to(u.t, 'UTF8'))::text || ':' || u.t || ':' || u.p::text,
               ',' ORDER BY u.n), ''), 'UTF8')), 1, 16)
    FROM unnest(topics, partitions) WITH ORDINALITY AS u(t, p, n)
$$;
COMMENT ON FUNCTION offset_journal.kafka_layout_id(text[], integer[]) IS
    'the key of a Kafka layout: the first 16 bytes of the SHA-256 of its (topic, partition) '
    'list written as <bytes of topic>:<topic>:<partition>, comma-separated, in order';

CREATE TABLE offset_journal.kafka_layouts (
    layout_id bytea PRIMARY KEY,
    topics text[] NOT NULL,
    partitions integer[] NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT kafka_layouts_id_check
        CHECK (layout_id = offset_journal.kafka_layout_id(topics, partitions)),
    CONSTRAINT kafka_layouts_shape_check
        CHECK (cardinality(topics) = cardinality(partitions)
               AND array_position(topics, NULL) IS NULL
               AND array_position(partitions, NULL) IS NULL)
);
COMMENT ON TABLE offset_journal.kafka_layouts IS
    'each distinct (topic, partition) list a Kafka source read, once; batch_sources '
    'offsets arrays follow its order';

ALTER TABLE offset_journal.batch_sources
    ADD COLUMN kafka_layout bytea REFERENCES offset_journal.kafka_layouts (layout_id),
    ADD COLUMN end_offsets bigint[],
    ADD COLUMN read_spans smallint[],
    ADD COLUMN latest_lags smallint[],
    ADD COLUMN read_spans_wide integer[],
    ADD COLUMN latest_lags_wide integer[],
    ADD CONSTRAINT batch_sources_offsets_check CHECK (
        (kafka_layout IS NULL AND end_offsets IS NULL AND read_spans IS NULL
         AND latest_lags IS NULL AND read_spans_wide IS NULL AND latest_lags_wide IS NULL)
        OR (kafka_layout IS NOT NULL AND end_offsets IS NOT NULL
            AND array_position(end_offsets, NULL) IS NULL
            AND (read_spans IS NULL) <> (read_spans_wide IS NULL)
            AND (latest_lags IS NULL) <> (latest_lags_wide IS NULL)
            AND cardinality(end_offsets) = cardinality(coalesce(read_spans::integer[],
                                                                read_spans_wide))
            AND cardinality(end_offsets) = cardinality(coalesce(latest_lags::integer[],
                                                                latest_lags_wide))));
COMMENT ON COLUMN offset_journal.batch_sources.end_offsets IS
    'per partition of kafka_layout, in its order: the end offset (exclusive)';
COMMENT ON COLUMN offset_journal.batch_sources.read_spans IS
    'per partition: end - start (NULL: the partition appeared in this batch), when every '
    'span of the source fits 2 bytes (else read_spans_wide); see the kafka_partitions view';
COMMENT ON COLUMN offset_journal.batch_sources.latest_lags IS
    'per partition: latest - end, Spark''s latestOffset (NULL: not given), when every lag '
    'of the source fits 2 bytes (else latest_lags_wide)';

-- A source's arrays must match its layout's length (the CHECK above cannot see it).
CREATE FUNCTION offset_journal.batch_sources_fit_layout() RETURNS trigger
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
CREATE TRIGGER batch_sources_fit_layout
    AFTER INSERT ON offset_journal.batch_sources REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION offset_journal.batch_sources_fit_layout();
"""

RENAME = """
ALTER TABLE offset_journal.kafka_partitions RENAME TO kafka_partition_rows;
ALTER INDEX offset_journal.kafka_partitions_pkey RENAME TO kafka_partition_rows_pkey;
ALTER INDEX offset_journal.kafka_partitions_history_idx
    RENAME TO kafka_partition_rows_history_idx;
COMMENT ON TABLE offset_journal.kafka_partition_rows IS
    'Kafka offsets one row per partition: what batch_sources arrays cannot hold, and '
    'what listeners of releases before 0013 write; read kafka_partitions';

-- 0002's functions name the table: they follow it.
CREATE OR REPLACE FUNCTION offset_journal.batch_sources_delete_partitions() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM offset_journal.kafka_partition_rows k USING old_rows o
    WHERE k.batch_pk = o.batch_pk AND k.source_index = o.source_index;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION offset_journal.batch_sources_keep_keys() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM old_rows o
        WHERE NOT EXISTS (SELECT 1 FROM offset_journal.batch_sources s
                          WHERE s.batch_pk = o.batch_pk AND s.source_index = o.source_index)
          AND EXISTS (SELECT 1 FROM offset_journal.kafka_partition_rows k
                      WHERE k.batch_pk = o.batch_pk AND k.source_index = o.source_index)
    ) THEN
        RAISE foreign_key_violation USING
            MESSAGE = 'batch_sources key still used by kafka_partition_rows rows',
            TABLE = 'batch_sources', SCHEMA = 'offset_journal';
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION offset_journal.batch_sources_truncate_partitions() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE offset_journal.kafka_partition_rows;
    RETURN NULL;
END $$;
"""

# Sources whose rows the arrays hold exactly: every partition has an end, every span
# and lag fits 4 bytes. Ordered by (topic, partition), as the rows' primary key.
CONVERT = """
CREATE TEMP TABLE oj_0013_sources ON COMMIT DROP AS
SELECT k.batch_pk, k.source_index,
       array_agg(k.topic ORDER BY k.topic, k.partition) AS topics,
       array_agg(k.partition ORDER BY k.topic, k.partition) AS partitions,
       array_agg(k.end_offset ORDER BY k.topic, k.partition) AS end_offsets,
       array_agg(CASE WHEN k.end_offset::numeric - k.start_offset
                           BETWEEN -2147483648 AND 2147483647
                      THEN (k.end_offset - k.start_offset)::integer END
                 ORDER BY k.topic, k.partition) AS read_spans,
       array_agg(CASE WHEN k.latest_offset::numeric - k.end_offset
                           BETWEEN -2147483648 AND 2147483647
                      THEN (k.latest_offset - k.end_offset)::integer END
                 ORDER BY k.topic, k.partition) AS latest_lags,
       bool_and(k.latest_offset IS NOT NULL) AS every_latest,
       bool_and(k.start_offset IS NULL
                OR k.end_offset::numeric - k.start_offset BETWEEN -32768 AND 32767)
           AS narrow_spans,
       bool_and(k.latest_offset IS NULL
                OR k.latest_offset::numeric - k.end_offset BETWEEN -32768 AND 32767)
           AS narrow_lags
FROM offset_journal.kafka_partition_rows k
GROUP BY k.batch_pk, k.source_index
HAVING bool_and(
    k.end_offset IS NOT NULL
    AND (k.start_offset IS NULL
         OR k.end_offset::numeric - k.start_offset BETWEEN -2147483648 AND 2147483647)
    AND (k.latest_offset IS NULL
         OR k.latest_offset::numeric - k.end_offset BETWEEN -2147483648 AND 2147483647));

ALTER TABLE oj_0013_sources ADD COLUMN layout_id bytea;
UPDATE oj_0013_sources SET layout_id = offset_journal.kafka_layout_id(topics, partitions);

INSERT INTO offset_journal.kafka_layouts (layout_id, topics, partitions)
SELECT DISTINCT ON (layout_id) layout_id, topics, partitions FROM oj_0013_sources
ON CONFLICT DO NOTHING;

-- The latestOffset JSON goes where the partition values rebuild it exactly.
UPDATE offset_journal.batch_sources s
SET kafka_layout = c.layout_id, end_offsets = c.end_offsets,
    read_spans = CASE WHEN c.narrow_spans THEN c.read_spans::smallint[] END,
    read_spans_wide = CASE WHEN NOT c.narrow_spans THEN c.read_spans END,
    latest_lags = CASE WHEN c.narrow_lags THEN c.latest_lags::smallint[] END,
    latest_lags_wide = CASE WHEN NOT c.narrow_lags THEN c.latest_lags END,
    latest_offset = CASE
        WHEN s.kind = 'kafka' AND c.every_latest AND s.latest_offset = (
            SELECT jsonb_object_agg(t.topic, t.parts) FROM (
                SELECT u.topic, jsonb_object_agg(u.partition::text, u.end_offset + u.lag) AS parts
                FROM unnest(c.topics, c.partitions, c.end_offsets, c.latest_lags)
                     AS u(topic, partition, end_offset, lag)
                GROUP BY u.topic) t)
        THEN NULL ELSE s.latest_offset END
FROM oj_0013_sources c
WHERE s.batch_pk = c.batch_pk AND s.source_index = c.source_index;

CREATE TEMP TABLE oj_0013_kept ON COMMIT DROP AS
SELECT k.* FROM offset_journal.kafka_partition_rows k
WHERE NOT EXISTS (SELECT 1 FROM oj_0013_sources c
                  WHERE c.batch_pk = k.batch_pk AND c.source_index = k.source_index);
TRUNCATE offset_journal.kafka_partition_rows;
INSERT INTO offset_journal.kafka_partition_rows SELECT * FROM oj_0013_kept;
"""

VIEWS = """
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
-- One source row at a time (every partition row has its source row: migration 0002),
-- so that a join on batch_pk reaches batch_sources by its key: a UNION ALL of the two
-- storages at the top would be planned as one subquery scanned whole.
COMMENT ON VIEW offset_journal.kafka_partitions IS
    'per batch, source and Kafka topic-partition: start (inclusive), end (exclusive) and '
    'latest offsets; the batch_sources arrays unnested, and kafka_partition_rows';

-- Writes of listeners from before 0013 (a COPY into kafka_partitions).
CREATE FUNCTION offset_journal.kafka_partitions_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO offset_journal.kafka_partition_rows
        (batch_pk, source_index, topic, partition, start_offset, end_offset, latest_offset)
    VALUES (NEW.batch_pk, NEW.source_index, NEW.topic, NEW.partition, NEW.start_offset,
            NEW.end_offset, NEW.latest_offset);
    RETURN NEW;
END $$;
CREATE TRIGGER kafka_partitions_insert INSTEAD OF INSERT ON offset_journal.kafka_partitions
    FOR EACH ROW EXECUTE FUNCTION offset_journal.kafka_partitions_insert();

CREATE OR REPLACE VIEW offset_journal.source_offsets AS
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

CREATE OR REPLACE VIEW offset_journal.partition_lag AS
SELECT b.query_name, b.run_id, b.query_id, b.batch_id, b.id AS batch_pk, b.trigger_at,
       k.source_index, k.topic, k.partition, k.start_offset, k.end_offset, k.latest_offset,
       k.latest_offset - k.end_offset AS lag
FROM offset_journal.kafka_partitions k
JOIN offset_journal.batches b ON b.id = k.batch_pk;

COMMENT ON COLUMN offset_journal.batch_sources.latest_offset IS
    'NULL for a Kafka source whose partition values rebuild it; see the source_offsets view';
"""

# Whoever could write or read the partition rows (or add source rows) keeps that on
# what replaces them: a running fleet needs no new `db grant` to go on journaling.
GRANTS = """
DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT grantee, privilege_type FROM information_schema.role_table_grants
             WHERE table_schema = 'offset_journal' AND table_name = 'kafka_partition_rows'
               AND privilege_type IN ('SELECT', 'INSERT') AND grantee <> current_user
    LOOP
        EXECUTE format('GRANT %s ON offset_journal.kafka_partitions TO %s',
                       g.privilege_type, CASE WHEN g.grantee = 'PUBLIC' THEN 'PUBLIC'
                                              ELSE quote_ident(g.grantee) END);
    END LOOP;
    FOR g IN SELECT DISTINCT grantee, privilege_type FROM information_schema.role_table_grants
             WHERE table_schema = 'offset_journal' AND table_name = 'batch_sources'
               AND privilege_type IN ('SELECT', 'INSERT') AND grantee <> current_user
    LOOP
        EXECUTE format('GRANT %s ON offset_journal.kafka_layouts TO %s',
                       g.privilege_type, CASE WHEN g.grantee = 'PUBLIC' THEN 'PUBLIC'
                                              ELSE quote_ident(g.grantee) END);
    END LOOP;
END $$;
"""

DOWNGRADE = """
DROP TRIGGER kafka_partitions_insert ON offset_journal.kafka_partitions;
DROP FUNCTION offset_journal.kafka_partitions_insert();
UPDATE offset_journal.batch_sources s SET latest_offset = o.latest_offset
FROM offset_journal.source_offsets o
WHERE o.batch_pk = s.batch_pk AND o.source_index = s.source_index
  AND s.latest_offset IS NULL AND s.kind = 'kafka';
CREATE TEMP TABLE oj_0013_rows ON COMMIT DROP AS
SELECT * FROM offset_journal.kafka_partitions;
DROP VIEW offset_journal.partition_lag;
DROP VIEW offset_journal.source_offsets;
DROP VIEW offset_journal.kafka_partitions;
TRUNCATE offset_journal.kafka_partition_rows;
INSERT INTO offset_journal.kafka_partition_rows SELECT * FROM oj_0013_rows;
ALTER TABLE offset_journal.kafka_partition_rows RENAME TO kafka_partitions;
ALTER INDEX offset_journal.kafka_partition_rows_pkey RENAME TO kafka_partitions_pkey;
ALTER INDEX offset_journal.kafka_partition_rows_history_idx
    RENAME TO kafka_partitions_history_idx;
COMMENT ON TABLE offset_journal.kafka_partitions IS NULL;

CREATE OR REPLACE FUNCTION offset_journal.batch_sources_delete_partitions() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM offset_journal.kafka_partitions k USING old_rows o
    WHERE k.batch_pk = o.batch_pk AND k.source_index = o.source_index;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION offset_journal.batch_sources_keep_keys() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM old_rows o
        WHERE NOT EXISTS (SELECT 1 FROM offset_journal.batch_sources s
                          WHERE s.batch_pk = o.batch_pk AND s.source_index = o.source_index)
          AND EXISTS (SELECT 1 FROM offset_journal.kafka_partitions k
                      WHERE k.batch_pk = o.batch_pk AND k.source_index = o.source_index)
    ) THEN
        RAISE foreign_key_violation USING
            MESSAGE = 'batch_sources key still used by kafka_partitions rows',
            TABLE = 'batch_sources', SCHEMA = 'offset_journal';
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION offset_journal.batch_sources_truncate_partitions() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE offset_journal.kafka_partitions;
    RETURN NULL;
END $$;

DROP TRIGGER batch_sources_fit_layout ON offset_journal.batch_sources;
DROP FUNCTION offset_journal.batch_sources_fit_layout();
ALTER TABLE offset_journal.batch_sources DROP CONSTRAINT batch_sources_offsets_check,
    DROP COLUMN kafka_layout, DROP COLUMN end_offsets, DROP COLUMN read_spans,
    DROP COLUMN latest_lags, DROP COLUMN read_spans_wide, DROP COLUMN latest_lags_wide;
DROP TABLE offset_journal.kafka_layouts;
DROP FUNCTION offset_journal.kafka_layout_id(text[], integer[]);
"""

# 0003's and 0010's views, as they were (written out: migrations stay frozen).
OLD_VIEWS = """
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

CREATE VIEW offset_journal.partition_lag AS
SELECT b.query_name, b.run_id, b.query_id, b.batch_id, b.id AS batch_pk, b.trigger_at,
       k.source_index, k.topic, k.partition, k.start_offset, k.end_offset, k.latest_offset,
       k.latest_offset - k.end_offset AS lag
FROM offset_journal.kafka_partitions k
JOIN offset_journal.batches b ON b.id = k.batch_pk;
"""


def upgrade() -> None:
    op.execute(LAYOUTS)
    op.execute(RENAME)
    op.execute(CONVERT)
    op.execute(VIEWS)
    op.execute(GRANTS)


def downgrade() -> None:
    op.execute(DOWNGRADE)
    op.execute(OLD_VIEWS)
