"""History guard: a role that is not the journal's owner cannot rewrite history.

The writer role (docs/security.md) may INSERT journal rows. Without this guard it could
add source rows and Kafka partition rows to batches journaled long ago (changing the
offsets a restart starts from), and change any column of a finished run. From this
revision on, for every role that is not a member of the table's owner:

* ``batch_sources`` and ``kafka_partitions`` rows may only be inserted for a batch
  inserted by the same transaction (the listener and ``checkpoint import`` write a
  batch with its sources and partitions in one transaction). A row counts as this
  transaction's when its xmin is a transaction still in progress: a row visible to us
  whose inserter is still running can only be ours (the top transaction or one of its
  savepoints, which a plain ``xmin = pg_current_xact_id()::xid`` would miss). Anything
  else fails with insufficient_privilege.
* a ``query_runs`` row only gains what it lacked: run_id and query_id never change,
  started_at, terminated_at, exception, error_class, host and pid go from NULL to a
  value once (replaying the same event changes nothing), and the name may change only
  while the run is journaled under its id (``named`` false), ``named`` only to true.

* a batch triggered more than a day after the database's clock is refused
  (check_violation: the writer keeps the event as rejected): no driver's clock is
  that wrong, and such a batch would be the 'last' one for ever (``prune`` keeps
  each query's newest batch). A plan flags one that got in (restart.py).

The owner (``db upgrade``, ``prune``, restores) is not checked: it owns the tables and
could drop the triggers anyway. Column-level grants (offset_journal.journal.roles) keep the
writer from setting ``recorded_at`` and identity columns.

Revision ID: 0004_history_guard
Revises: 0003
Create Date: 2026-11-23
"""

from alembic import op

revision = "0004_history_guard"
down_revision = "0003"
branch_labels = None
depends_on = None

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
UPGRADE = """
CREATE FUNCTION offset_journal.inserted_by_this_transaction(x xid) RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    -- x's 64-bit id, taken as the one nearest to this transaction's own id (its
    -- savepoints' ids come after it); then: is that transaction still running?
    SELECT CASE WHEN full_xid < 3 THEN false
                ELSE pg_xact_status(full_xid::text::xid8) IS NOT DISTINCT FROM 'in progress'
           END
    FROM (SELECT top + (CASE WHEN d >= 2147483648 THEN d - 4294967296 ELSE d END)
                 AS full_xid
          FROM (SELECT top, (x::text::bigint - (top % 4294967296) + 4294967296)
                            % 4294967296 AS d
                FROM (SELECT pg_current_xact_id()::text::bigint AS top) s
               ) t
         ) u
$$;

CREATE FUNCTION offset_journal.is_journal_owner(tbl oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_has_role(current_user, c.relowner, 'MEMBER') FROM pg_class c WHERE c.oid = tbl
$$;

CREATE FUNCTION offset_journal.rows_need_a_new_batch() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF offset_journal.is_journal_owner(TG_RELID) THEN
        RETURN NULL;
    END IF;
    IF EXISTS (
        SELECT 1 FROM (SELECT DISTINCT batch_pk FROM new_rows) n
        LEFT JOIN offset_journal.batches b ON b.id = n.batch_pk
        WHERE b.id IS NULL OR NOT offset_journal.inserted_by_this_transaction(b.xmin)
    ) THEN
        RAISE insufficient_privilege USING
            MESSAGE = format('%s rows may only be added to a batch journaled in the same '
                             'transaction: journaled history is not rewritten', TG_TABLE_NAME),
            TABLE = TG_TABLE_NAME, SCHEMA = 'offset_journal';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER batch_sources_need_a_new_batch
    AFTER INSERT ON offset_journal.batch_sources REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION offset_journal.rows_need_a_new_batch();
CREATE TRIGGER kafka_partitions_need_a_new_batch
    AFTER INSERT ON offset_journal.kafka_partitions REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION offset_journal.rows_need_a_new_batch();

CREATE FUNCTION offset_journal.batches_not_from_the_future() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.trigger_at > now() + interval '1 day'
       AND NOT offset_journal.is_journal_owner(TG_RELID) THEN
        RAISE check_violation USING
            MESSAGE = format('batch %s of run %s triggered at %s, more than a day after the '
                             'database''s clock: not a real batch', NEW.batch_id, NEW.run_id,
                             NEW.trigger_at),
            TABLE = 'batches', SCHEMA = 'offset_journal';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER batches_not_from_the_future
    BEFORE INSERT ON offset_journal.batches
    FOR EACH ROW EXECUTE FUNCTION offset_journal.batches_not_from_the_future();

CREATE FUNCTION offset_journal.query_runs_only_complete() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF offset_journal.is_journal_owner(TG_RELID) THEN
        RETURN NEW;
    END IF;
    IF NEW.run_id IS DISTINCT FROM OLD.run_id OR NEW.query_id IS DISTINCT FROM OLD.query_id
       OR NEW.recorded_at IS DISTINCT FROM OLD.recorded_at
       OR (OLD.started_at IS NOT NULL AND NEW.started_at IS DISTINCT FROM OLD.started_at)
       OR (OLD.terminated_at IS NOT NULL
           AND NEW.terminated_at IS DISTINCT FROM OLD.terminated_at)
       OR (OLD.exception IS NOT NULL AND NEW.exception IS DISTINCT FROM OLD.exception)
       OR (OLD.error_class IS NOT NULL AND NEW.error_class IS DISTINCT FROM OLD.error_class)
       OR (OLD.host IS NOT NULL AND NEW.host IS DISTINCT FROM OLD.host)
       OR (OLD.pid IS NOT NULL AND NEW.pid IS DISTINCT FROM OLD.pid)
       OR (OLD.named AND (NEW.query_name IS DISTINCT FROM OLD.query_name OR NOT NEW.named))
    THEN
        RAISE insufficient_privilege USING
            MESSAGE = 'a journaled run only gains what it lacked: its recorded values are '
                      'not rewritten',
            TABLE = 'query_runs', SCHEMA = 'offset_journal';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER query_runs_only_complete
    BEFORE UPDATE ON offset_journal.query_runs
    FOR EACH ROW EXECUTE FUNCTION offset_journal.query_runs_only_complete();
"""

DOWNGRADE = """
DROP TRIGGER query_runs_only_complete ON offset_journal.query_runs;
DROP TRIGGER batches_not_from_the_future ON offset_journal.batches;
DROP TRIGGER kafka_partitions_need_a_new_batch ON offset_journal.kafka_partitions;
DROP TRIGGER batch_sources_need_a_new_batch ON offset_journal.batch_sources;
DROP FUNCTION offset_journal.query_runs_only_complete();
DROP FUNCTION offset_journal.batches_not_from_the_future();
DROP FUNCTION offset_journal.rows_need_a_new_batch();
DROP FUNCTION offset_journal.is_journal_owner(oid);
DROP FUNCTION offset_journal.inserted_by_this_transaction(xid);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
