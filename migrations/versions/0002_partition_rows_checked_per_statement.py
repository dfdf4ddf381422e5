"""Partition rows: check their batch source once per statement, not once per row.

The foreign key kafka_partitions -> batch_sources made Postgres run one lookup per
partition row: about 57 ms of a 10,000-partition batch's write, more than the COPY of
the rows itself (bench/journal_write.py). It is replaced by statement-level triggers
with transition tables that enforce the same rules set-wise:

* inserting or updating partition rows whose (batch_pk, source_index) has no
  batch_sources row fails with foreign_key_violation (one anti-join per statement);
* deleting batch_sources rows (directly, or through the cascade from batches) deletes
  their partition rows, as ON DELETE CASCADE did; TRUNCATE of batch_sources truncates
  kafka_partitions too;
* changing a batch_sources key that partition rows still use fails, as NO ACTION did.

What the foreign key did and these do not: lock the source row (FOR KEY SHARE) while
partition rows are inserted in another, still open transaction. The journal inserts a
batch's source rows and partition rows in one transaction, so no other session can see
(and delete) the source row before its partitions are committed.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

S = "offset_journal"
FK = "kafka_partitions_batch_pk_source_index_fkey"

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
UPGRADE = """
CREATE FUNCTION offset_journal.kafka_partitions_need_source() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM new_rows n
        WHERE NOT EXISTS (SELECT 1 FROM offset_journal.batch_sources s
                          WHERE s.batch_pk = n.batch_pk AND s.source_index = n.source_index)
    ) THEN
        RAISE foreign_key_violation USING
            MESSAGE = 'kafka_partitions rows without their batch_sources row',
            TABLE = 'kafka_partitions', SCHEMA = 'offset_journal';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER kafka_partitions_need_source_on_insert
    AFTER INSERT ON offset_journal.kafka_partitions REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION offset_journal.kafka_partitions_need_source();
CREATE TRIGGER kafka_partitions_need_source_on_update
    AFTER UPDATE ON offset_journal.kafka_partitions REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION offset_journal.kafka_partitions_need_source();

CREATE FUNCTION offset_journal.batch_sources_delete_partitions() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM offset_journal.kafka_partitions k USING old_rows o
    WHERE k.batch_pk = o.batch_pk AND k.source_index = o.source_index;
    RETURN NULL;
END $$;

CREATE TRIGGER batch_sources_delete_partitions
    AFTER DELETE ON offset_journal.batch_sources REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION offset_journal.batch_sources_delete_partitions();

CREATE FUNCTION offset_journal.batch_sources_keep_keys() RETURNS trigger
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

CREATE TRIGGER batch_sources_keep_keys
    AFTER UPDATE ON offset_journal.batch_sources REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION offset_journal.batch_sources_keep_keys();

CREATE FUNCTION offset_journal.batch_sources_truncate_partitions() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE offset_journal.kafka_partitions;
    RETURN NULL;
END $$;

CREATE TRIGGER batch_sources_truncate_partitions
    AFTER TRUNCATE ON offset_journal.batch_sources
    FOR EACH STATEMENT EXECUTE FUNCTION offset_journal.batch_sources_truncate_partitions();
"""

DOWNGRADE = """
DROP TRIGGER batch_sources_truncate_partitions ON offset_journal.batch_sources;
DROP TRIGGER batch_sources_keep_keys ON offset_journal.batch_sources;
DROP TRIGGER batch_sources_delete_partitions ON offset_journal.batch_sources;
DROP TRIGGER kafka_partitions_need_source_on_update ON offset_journal.kafka_partitions;
DROP TRIGGER kafka_partitions_need_source_on_insert ON offset_journal.kafka_partitions;
DROP FUNCTION offset_journal.batch_sources_truncate_partitions();
DROP FUNCTION offset_journal.batch_sources_keep_keys();
DROP FUNCTION offset_journal.batch_sources_delete_partitions();
DROP FUNCTION offset_journal.kafka_partitions_need_source();
"""


def upgrade() -> None:
    op.drop_constraint(FK, "kafka_partitions", schema=S, type_="foreignkey")
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
    op.create_foreign_key(FK, "kafka_partitions", "batch_sources",
                          ["batch_pk", "source_index"], ["batch_pk", "source_index"],
                          source_schema=S, referent_schema=S, ondelete="CASCADE")
