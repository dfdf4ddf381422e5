"""Savepoints pruned: a savepoint whose files retention deleted is recorded as deleted.

A savepoint schedule (``attach(..., savepoints=...)``, or ``savepoint create --keep N
--max-age D`` from cron) deletes old savepoints' files. ``savepoint_deletions`` records
each deletion (the savepoint, when by the database's clock, why, and the host and
operating-system user that deleted it), so that a savepoint whose files are gone is
said to be gone (``savepoint list``, a plan from it, ``check``) rather than found
missing, and ``prune`` no longer keeps batches for it. Its ``savepoints`` row stays:
the history is only added to. The writer (a driver's schedule runs with the listener's
credentials) and the planner get INSERT of the columns a deletion sets, no UPDATE or
DELETE.

A guard, for every role but the owner, refuses to record the deletion of:

* a savepoint a recorded restart plan of its query names (by id, or by its manifest's
  SHA-256 for a plan from its directory): a job may still start from that plan, and
  the audit reads it;
* the newest savepoint of its query that is not deleted: a stateful query keeps a state
  to go back to.

Deletions of one query's savepoints are taken one at a time (an advisory lock per query
name), so two schedules pruning at once cannot each take the other's newest.

Revision ID: 0022_savepoint_deletions
Revises: 0021_losses_only_grow
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0022_savepoint_deletions"
down_revision = "0021_losses_only_grow"
branch_labels = None
depends_on = None

S = "offset_journal"

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
# A BEFORE trigger runs ahead of the foreign key's check: a savepoint that does not
# exist is left to the foreign key to refuse.
GUARD = """
CREATE FUNCTION offset_journal.savepoint_deletions_keep_what_is_needed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sp record;
    plan bigint;
BEGIN
    IF offset_journal.is_journal_owner(TG_RELID) THEN
        RETURN NEW;
    END IF;
    SELECT s.id, s.query_name, s.manifest_sha256 INTO sp
    FROM offset_journal.savepoints s WHERE s.id = NEW.savepoint_id;
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('offset_journal.savepoint_deletions'),
                                  hashtext(sp.query_name));
    SELECT p.id INTO plan FROM offset_journal.restart_plans p
    WHERE p.query_name = sp.query_name
      AND jsonb_typeof(p.request -> 'savepoint') = 'object'
      AND (p.request -> 'savepoint' ->> 'id' = sp.id::text
           OR p.request -> 'savepoint' ->> 'sha256' = sp.manifest_sha256)
    ORDER BY p.id LIMIT 1;
    IF plan IS NOT NULL THEN
        RAISE insufficient_privilege USING
            MESSAGE = format('savepoint %s of query %s is kept: restart plan %s starts '
                             'from it', sp.id, sp.query_name, plan),
            TABLE = 'savepoint_deletions', SCHEMA = 'offset_journal';
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM offset_journal.savepoints s
        WHERE s.query_name = sp.query_name AND s.id > sp.id
          AND NOT EXISTS (SELECT 1 FROM offset_journal.savepoint_deletions d
                          WHERE d.savepoint_id = s.id)
    ) THEN
        RAISE insufficient_privilege USING
            MESSAGE = format('savepoint %s is the newest of query %s: it is kept',
                             sp.id, sp.query_name),
            TABLE = 'savepoint_deletions', SCHEMA = 'offset_journal';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER savepoint_deletions_keep_what_is_needed
    BEFORE INSERT ON offset_journal.savepoint_deletions
    FOR EACH ROW EXECUTE FUNCTION offset_journal.savepoint_deletions_keep_what_is_needed();
"""

# The deletions are history: an older schema would offer the deleted savepoints again,
# their files gone. In SQL, so the offline script (`alembic downgrade --sql`) refuses
# the same way.
REFUSE_DOWNGRADE = """
DO $$
DECLARE
    deleted bigint;
BEGIN
    SELECT count(*) INTO deleted FROM offset_journal.savepoint_deletions;
    IF deleted > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'object_in_use', MESSAGE = format(
            'downgrade below 0022_savepoint_deletions refused: %s savepoint(s) are recorded '
            'as deleted (savepoint_deletions), whose files are gone; the older schema would '
            'offer them again; delete those savepoints rows and their deletions yourself if '
            'they may go, then downgrade', deleted);
    END IF;
END
$$;
"""


def upgrade() -> None:
    op.create_table(
        "savepoint_deletions",
        sa.Column("savepoint_id", sa.BigInteger, sa.ForeignKey(f"{S}.savepoints.id"),
                  primary_key=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("host", sa.Text),
        sa.Column("os_user", sa.Text),
        sa.CheckConstraint("btrim(reason) <> ''", name="savepoint_deletions_reason_check"),
        schema=S,
    )
    op.execute(f"COMMENT ON TABLE {S}.savepoint_deletions IS 'savepoints whose files a "
               "savepoint schedule''s retention deleted (savepoint create --keep/--max-age, "
               "attach(savepoints=...))'")
    op.execute(GUARD)


def downgrade() -> None:
    op.execute(REFUSE_DOWNGRADE)
    op.execute(f"DROP TRIGGER savepoint_deletions_keep_what_is_needed ON {S}.savepoint_deletions")
    op.execute(f"DROP FUNCTION {S}.savepoint_deletions_keep_what_is_needed()")
    op.drop_table("savepoint_deletions", schema=S)
