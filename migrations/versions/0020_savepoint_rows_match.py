"""A savepoints row vouches only for a manifest of its own batch.

A plan from a savepoint directory trusts the directory because a ``savepoints`` row
carries its manifest's SHA-256; the row names a query, run, query id and batch (0018's
guard checks the journal holds that batch), and its manifest names them too. Nothing
tied the two: a role with INSERT on the table (the writer: every job's credentials)
could record a row naming batch 0 of query B with a manifest, and the SHA-256, of query
A's state. The database now refuses a row whose recorded manifest names another query,
run, query id, batch or checkpoint than its columns, for every role.

NOT VALID: rows written before this migration are not checked here (one a writer forged
would stop the upgrade); the code checks every row it reads the same way (a row whose
manifest is not of its batch lists as ignored, pins nothing in ``prune``, and vouches
for no directory).

Revision ID: 0020_savepoint_rows_match
Revises: 0019_recorded_losses
Create Date: 2026-11-28
"""

from alembic import op

revision = "0020_savepoint_rows_match"
down_revision = "0019_recorded_losses"
branch_labels = None
depends_on = None

# Plain text, no formatting: the schema name is written out, as migrations stay frozen.
# A missing key is NULL, and CHECK passes NULL: hence IS NOT DISTINCT FROM.
ADD = """
ALTER TABLE offset_journal.savepoints ADD CONSTRAINT savepoints_manifest_names_its_batch CHECK (
    (manifest -> 'query_name') IS NOT DISTINCT FROM to_jsonb(query_name)
    AND (manifest -> 'run_id') IS NOT DISTINCT FROM to_jsonb(run_id)
    AND (manifest -> 'query_id') IS NOT DISTINCT FROM to_jsonb(query_id)
    AND (manifest -> 'batch_id') IS NOT DISTINCT FROM to_jsonb(batch_id)
    AND (manifest -> 'checkpoint') IS NOT DISTINCT FROM to_jsonb(checkpoint)
) NOT VALID
"""


def upgrade() -> None:
    op.execute(ADD)


def downgrade() -> None:
    op.execute("ALTER TABLE offset_journal.savepoints "
               "DROP CONSTRAINT savepoints_manifest_names_its_batch")
