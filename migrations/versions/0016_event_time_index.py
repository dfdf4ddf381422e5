"""A state-aware plan finds where to rewind by index, however long the history.

A state-aware restart rewinds to the first batch of the checkpoint that may hold a
record of a window still open: the first, in journal order, whose event time max is
at or after the threshold (the cutoff minus the window), or that read records without
journaling event times. Searched in journal order, Postgres stopped at the first such
batch only, which for a restart after the last batch lies near the end: it read the
whole history (999,339 rows discarded at 10^6 batches, bench/restart_planning.py).

This index holds each batch's event time max under its query name and checkpoint, so
the planner gathers the batches past the threshold (a few hundred, the ones the plan
reads again) and orders those. Batches that read nothing and report no event time
(no-data batches, which a watermarked query runs when its watermark moves) are left
out: they can hold no record of a window, and a quiet stream has one after most
others. The predicate is written as the planner's query writes it
(``Queries.first_may_be_open``), so that Postgres proves the query is covered by it.

Building it reads the batches table once (3 s for 10^6 batches here) and makes
writers wait meanwhile: a listener's writer whose statement waits past its timeout (30 s
by default) spools the batch and retries, as during any outage.

Revision ID: 0016_event_time_index
Revises: 0015_offsets_that_fit
Create Date: 2026-11-26
"""

from alembic import op

revision = "0016_event_time_index"
down_revision = "0015_offsets_that_fit"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS batches_event_time_idx "
               "ON offset_journal.batches (query_name, query_id, event_time_max) "
               "WHERE event_time_max IS NOT NULL OR num_input_rows IS DISTINCT FROM 0")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS offset_journal.batches_event_time_idx")
