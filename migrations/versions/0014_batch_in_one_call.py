"""A batch journaled by one call to a function, and a history guard that plans once.

Journaling a small batch is a handful of round trips in which the database does little,
so what each statement costs to parse and plan counts: the one statement the writer
sent per batch (the run row, any new Kafka layouts, the batch row and its source rows,
written by data-modifying CTEs) was parsed and planned anew for every batch, about as
long as its execution. Prepared statements would keep the plan, but a transaction
pooler (PgBouncer's ``pool_mode = transaction``) does not keep them between
transactions. A PL/pgSQL function keeps the plans of its statements in each server
process, whichever client the pooler hands that process to next: from this revision
the writer calls ``offset_journal.journal_batch`` once per batch, which does what the
statement did, in the same order, with the same checks (the triggers and foreign keys
fire on its INSERTs as on any other; it runs with the caller's rights).

The history guard's helpers (0004), ``is_journal_owner`` and
``inserted_by_this_transaction``, were SQL functions with a ``SET search_path`` clause,
which Postgres never inlines: their one query was planned again on every call, once per
statement for the owner and once per batch row for a writer. They become PL/pgSQL with
the same logic and the same answers, so each server process plans them once.

A role that may add source rows (INSERT on ``batch_sources``) is granted EXECUTE on the
new function, so that a journal where PUBLIC's default EXECUTE was revoked keeps taking
the writers it had without a new ``db grant``. Listeners of earlier releases write
without it, as before.

Revision ID: 0014_batch_in_one_call
Revises: 0013_offsets_as_arrays
Create Date: 2026-11-25
"""

from alembic import op

revision = "0014_batch_in_one_call"
down_revision = "0013_offsets_as_arrays"
branch_labels = None
depends_on = None

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
GUARD_HELPERS = """
CREATE OR REPLACE FUNCTION offset_journal.inserted_by_this_transaction(x xid) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    top bigint;
    d bigint;
    full_xid bigint;
BEGIN
    -- x's 64-bit id, taken as the one nearest to this transaction's own id (its
    -- savepoints' ids come after it); then: is that transaction still running?
    top := pg_current_xact_id()::text::bigint;
    d := (x::text::bigint - (top % 4294967296) + 4294967296) % 4294967296;
    full_xid := top + (CASE WHEN d >= 2147483648 THEN d - 4294967296 ELSE d END);
    IF full_xid < 3 THEN
        RETURN false;
    END IF;
    RETURN pg_xact_status(full_xid::text::xid8) IS NOT DISTINCT FROM 'in progress';
END $$;

CREATE OR REPLACE FUNCTION offset_journal.is_journal_owner(tbl oid) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT pg_has_role(current_user, c.relowner, 'MEMBER')
            FROM pg_class c WHERE c.oid = tbl);
END $$;
"""

JOURNAL_BATCH = """
CREATE FUNCTION offset_journal.journal_batch(
    p_run_id text, p_query_id text, p_query_name text, p_named boolean,
    p_batch_id bigint, p_trigger_at timestamptz, p_batch_duration_ms bigint,
    p_durations_ms jsonb, p_num_input_rows bigint,
    p_input_rows_per_second double precision, p_processed_rows_per_second double precision,
    p_watermark timestamptz, p_event_time_min timestamptz, p_event_time_max timestamptz,
    p_event_time_avg timestamptz, p_state_operators jsonb, p_sink_description text,
    p_num_output_rows bigint, p_raw_progress text, p_sources jsonb, p_layouts jsonb,
    p_check_next boolean,
    OUT new_batch_pk bigint, OUT next_journaled boolean)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- The run row, in case the run's start event was lost.
    IF NOT EXISTS (SELECT 1 FROM offset_journal.query_runs r WHERE r.run_id = p_run_id) THEN
        INSERT INTO offset_journal.query_runs (run_id, query_id, query_name, named)
        VALUES (p_run_id, p_query_id, p_query_name, p_named)
        ON CONFLICT (run_id) DO NOTHING;
    END IF;
    -- The Kafka layouts the caller does not know to be stored.
    IF p_layouts IS NOT NULL THEN
        INSERT INTO offset_journal.kafka_layouts (layout_id, topics, partitions)
        SELECT l.layout_id, l.topics, l.partitions
        FROM jsonb_to_recordset(p_layouts)
             AS l(layout_id bytea, topics text[], partitions integer[])
        ON CONFLICT (layout_id) DO NOTHING;
    END IF;
    -- A batch whose successor in the run is journaled (replayed late from a spool) is
    -- not written: the caller checks that pair first, then asks again without the check.
    next_journaled := p_check_next AND EXISTS (
        SELECT 1 FROM offset_journal.batches b
        WHERE b.run_id = p_run_id AND b.batch_id = p_batch_id + 1);
    IF next_journaled THEN
        RETURN;
    END IF;
    INSERT INTO offset_journal.batches (
        run_id, query_id, query_name, batch_id, trigger_at, batch_duration_ms, durations_ms,
        num_input_rows, input_rows_per_second, processed_rows_per_second, watermark,
        event_time_min, event_time_max, event_time_avg, state_operators, sink_description,
        num_output_rows, raw_progress)
    VALUES (
        p_run_id, p_query_id, p_query_name, p_batch_id, p_trigger_at, p_batch_duration_ms,
        p_durations_ms, p_num_input_rows, p_input_rows_per_second,
        p_processed_rows_per_second, p_watermark, p_event_time_min, p_event_time_max,
        p_event_time_avg, p_state_operators, p_sink_description, p_num_output_rows,
        p_raw_progress)
    ON CONFLICT ON CONSTRAINT batches_run_batch_key DO NOTHING
    RETURNING id INTO new_batch_pk;
    IF new_batch_pk IS NULL THEN  -- journaled already
        RETURN;
    END IF;
    INSERT INTO offset_journal.batch_sources (
        batch_pk, source_index, description, kind, start_offset, end_offset, latest_offset,
        num_input_rows, problem, metrics, kafka_layout, end_offsets, read_spans,
        latest_lags, read_spans_wide, latest_lags_wide)
    SELECT new_batch_pk, s.source_index, s.description, s.kind, s.start_offset,
           s.end_offset, s.latest_offset, s.num_input_rows, s.problem, s.metrics,
           s.kafka_layout, s.end_offsets, s.read_spans, s.latest_lags, s.read_spans_wide,
           s.latest_lags_wide
    FROM jsonb_to_recordset(p_sources) AS s(
        source_index integer, description text, kind text, start_offset jsonb,
        end_offset jsonb, latest_offset jsonb, num_input_rows bigint, problem text,
        metrics jsonb, kafka_layout bytea, end_offsets bigint[], read_spans smallint[],
        latest_lags smallint[], read_spans_wide integer[], latest_lags_wide integer[]);
END $$;
COMMENT ON FUNCTION offset_journal.journal_batch IS
    'journal one batch: its run row if missing, new Kafka layouts, the batch row and its '
    'source rows; returns the new batch''s id (NULL: journaled already, or its successor '
    'is and p_check_next asked) and whether its successor is journaled';

DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
             WHERE table_schema = 'offset_journal' AND table_name = 'batch_sources'
               AND privilege_type = 'INSERT' AND grantee <> current_user
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION offset_journal.journal_batch TO %s',
                       CASE WHEN g.grantee = 'PUBLIC' THEN 'PUBLIC'
                            ELSE quote_ident(g.grantee) END);
    END LOOP;
END $$;
"""

# 0004's helpers, as they were (written out: migrations stay frozen).
OLD_GUARD_HELPERS = """
CREATE OR REPLACE FUNCTION offset_journal.inserted_by_this_transaction(x xid) RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
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

CREATE OR REPLACE FUNCTION offset_journal.is_journal_owner(tbl oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_has_role(current_user, c.relowner, 'MEMBER') FROM pg_class c WHERE c.oid = tbl
$$;
"""


def upgrade() -> None:
    op.execute(GUARD_HELPERS)
    op.execute(JOURNAL_BATCH)


def downgrade() -> None:
    op.execute("DROP FUNCTION offset_journal.journal_batch")
    op.execute(OLD_GUARD_HELPERS)
