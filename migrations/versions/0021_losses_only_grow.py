"""A recorded loss only grows: its end and its last recording time never go back.

0019 grants the planner role UPDATE of ``end_offset`` and ``last_recorded_at`` on
``retention_losses`` so that a later recording can grow a loss it found again. Nothing
kept those columns from going down: ``end_offset = first_offset + 1`` turned a
50-record loss into 1, and the other 49 left ``losses list``, ``check`` and ``audit``
with no acknowledgement; ``last_recorded_at`` moved back took an accepted loss out of
``audit --since``. From this revision on, for every role that is not a member of the
table's owner (as 0004's guards), an UPDATE of a recorded loss is refused
(insufficient_privilege) unless:

* ``end_offset`` stays or grows;
* ``last_recorded_at`` stays, or moves forward to no later than the database's clock
  (a recording stamps ``now()``: a time in the future is no recording);
* every other column stays as recorded (the grants allow no other, this holds for a
  role someone granted more).

The owner (``db upgrade``, restores, a DBA's correction) is not checked: it owns the
table and could drop the trigger anyway. Rows already recorded are not changed.

Revision ID: 0021_losses_only_grow
Revises: 0020_savepoint_rows_match
Create Date: 2026-11-29
"""

from alembic import op

revision = "0021_losses_only_grow"
down_revision = "0020_savepoint_rows_match"
branch_labels = None
depends_on = None

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
# clock_timestamp(), not now(): a recording's now() is its transaction's start, which
# a later statement of the same transaction may compare against.
UPGRADE = """
CREATE FUNCTION offset_journal.recorded_losses_only_grow() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF offset_journal.is_journal_owner(TG_RELID) THEN
        RETURN NEW;
    END IF;
    IF NEW.end_offset < OLD.end_offset
       OR NEW.last_recorded_at < OLD.last_recorded_at
       OR (NEW.last_recorded_at > OLD.last_recorded_at
           AND NEW.last_recorded_at > clock_timestamp())
       OR NEW.id IS DISTINCT FROM OLD.id
       OR NEW.query_name IS DISTINCT FROM OLD.query_name
       OR NEW.source_index IS DISTINCT FROM OLD.source_index
       OR NEW.topic IS DISTINCT FROM OLD.topic
       OR NEW.partition IS DISTINCT FROM OLD.partition
       OR NEW.first_offset IS DISTINCT FROM OLD.first_offset
       OR NEW.anchor_run_id IS DISTINCT FROM OLD.anchor_run_id
       OR NEW.anchor_batch_id IS DISTINCT FROM OLD.anchor_batch_id
       OR NEW.first_recorded_at IS DISTINCT FROM OLD.first_recorded_at
    THEN
        RAISE insufficient_privilege USING
            MESSAGE = format('a recorded loss only grows: loss %s (offsets %s to %s of %s '
                             'partition %s, last recorded %s) is not shrunk, moved back '
                             'or rewritten; acknowledge it instead (losses acknowledge)',
                             OLD.id, OLD.first_offset, OLD.end_offset, OLD.topic,
                             OLD.partition, OLD.last_recorded_at),
            SCHEMA = 'offset_journal';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER recorded_losses_only_grow
    BEFORE UPDATE ON offset_journal.retention_losses
    FOR EACH ROW EXECUTE FUNCTION offset_journal.recorded_losses_only_grow();
"""

DOWNGRADE = """
DROP TRIGGER recorded_losses_only_grow ON offset_journal.retention_losses;
DROP FUNCTION offset_journal.recorded_losses_only_grow();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
