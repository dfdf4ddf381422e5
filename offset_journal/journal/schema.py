"""The journal's tables, as SQLAlchemy Core objects for the storage layer's queries.

The database schema itself is created only by the Alembic migrations in migrations/;
these definitions must match them (tests/journal/test_migrations.py checks that they do).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

SCHEMA = "offset_journal"

metadata = sa.MetaData(schema=SCHEMA)

query_runs = sa.Table(
    "query_runs",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("query_id", sa.Text, nullable=False),
    sa.Column("query_name", sa.Text, nullable=False),
    sa.Column("named", sa.Boolean, nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True)),
    sa.Column("terminated_at", sa.DateTime(timezone=True)),
    sa.Column("exception", sa.Text),
    sa.Column("error_class", sa.Text),
    sa.Column("host", sa.Text),
    sa.Column("pid", sa.Integer),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("execution", sa.Text),  # migration 0009_async_progress
    sa.Column("async_interval_ms", sa.BigInteger),  # migration 0009_async_progress
    sa.Column("kafka_cluster_id", sa.Text),  # migration 0012_kafka_cluster
    sa.Index("query_runs_name_idx", "query_name", "started_at"),
)

batches = sa.Table(
    "batches",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("run_id", sa.Text, sa.ForeignKey(f"{SCHEMA}.query_runs.run_id"), nullable=False),
    sa.Column("query_id", sa.Text, nullable=False),
    sa.Column("query_name", sa.Text, nullable=False),
    sa.Column("batch_id", sa.BigInteger, nullable=False),
    sa.Column("trigger_at", sa.DateTime(timezone=True)),
    sa.Column("batch_duration_ms", sa.BigInteger),
    sa.Column("durations_ms", JSONB),
    sa.Column("num_input_rows", sa.BigInteger),
    sa.Column("input_rows_per_second", sa.Double),
    sa.Column("processed_rows_per_second", sa.Double),
    sa.Column("watermark", sa.DateTime(timezone=True)),
    sa.Column("event_time_min", sa.DateTime(timezone=True)),
    sa.Column("event_time_max", sa.DateTime(timezone=True)),
    sa.Column("event_time_avg", sa.DateTime(timezone=True)),
    sa.Column("state_operators", JSONB),
    sa.Column("sink_description", sa.Text),
    sa.Column("num_output_rows", sa.BigInteger),
    sa.Column("raw_progress", sa.Text),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.UniqueConstraint("run_id", "batch_id", name="batches_run_batch_key"),
    sa.Index("batches_query_latest_idx", "query_name", sa.text("trigger_at DESC"),
             sa.text("batch_id DESC")),
    # The journal's own order (migration 0005_planner): clocks cannot skew it.
    sa.Index("batches_query_order_idx", "query_name", "id"),
    # Where a state-aware plan rewinds to (migration 0016): the batches whose event
    # times pass a threshold, without reading the history before them.
    sa.Index("batches_event_time_idx", "query_name", "query_id", "event_time_max",
             postgresql_where=sa.text("event_time_max IS NOT NULL "
                                      "OR num_input_rows IS DISTINCT FROM 0")),
)

batch_sources = sa.Table(
    "batch_sources",
    metadata,
    sa.Column("batch_pk", sa.BigInteger,
              sa.ForeignKey(f"{SCHEMA}.batches.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("source_index", sa.Integer, primary_key=True),
    sa.Column("description", sa.Text),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("start_offset", JSONB),
    sa.Column("end_offset", JSONB),
    sa.Column("latest_offset", JSONB),
    sa.Column("num_input_rows", sa.BigInteger),
    sa.Column("problem", sa.Text),
    sa.Column("metrics", JSONB),  # migration 0007_source_metrics
    # A Kafka source's offsets (migration 0013_offsets_as_arrays), in the order of its
    # layout: end offsets, end - start and latest - end, the last two in 2 bytes when
    # all of the source's fit, else in 4 (_wide). See the kafka_partitions view.
    sa.Column("kafka_layout", sa.LargeBinary,
              sa.ForeignKey(f"{SCHEMA}.kafka_layouts.layout_id")),
    sa.Column("end_offsets", ARRAY(sa.BigInteger)),
    sa.Column("read_spans", ARRAY(sa.SmallInteger)),
    sa.Column("latest_lags", ARRAY(sa.SmallInteger)),
    sa.Column("read_spans_wide", ARRAY(sa.Integer)),
    sa.Column("latest_lags_wide", ARRAY(sa.Integer)),
    # Flagged sources only (migration 0005_planner): what a restart plan reports.
    sa.Index("batch_sources_problem_idx", "batch_pk",
             postgresql_where=sa.text("problem IS NOT NULL")),
)

kafka_layouts = sa.Table(
    "kafka_layouts",
    metadata,
    sa.Column("layout_id", sa.LargeBinary, primary_key=True),
    sa.Column("topics", ARRAY(sa.Text), nullable=False),
    sa.Column("partitions", ARRAY(sa.Integer), nullable=False),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
)

# One row per partition (the only storage until migration 0013): what the arrays cannot
# hold, and what listeners of older releases write through the view.
kafka_partition_rows = sa.Table(
    "kafka_partition_rows",
    metadata,
    sa.Column("batch_pk", sa.BigInteger, primary_key=True),
    sa.Column("source_index", sa.Integer, primary_key=True),
    sa.Column("topic", sa.Text, primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("start_offset", sa.BigInteger),
    sa.Column("end_offset", sa.BigInteger),
    # The newest offset Spark saw when it planned the batch (migration 0010_partition_latest;
    # lag = latest - end, the partition_lag view).
    sa.Column("latest_offset", sa.BigInteger),
    # No foreign key to batch_sources: statement-level triggers (migration 0002) check
    # that every row has its source and delete rows with their source, once per
    # statement instead of one lookup per row.
    sa.Index("kafka_partition_rows_history_idx", "topic", "partition", "batch_pk"),
)

views = sa.MetaData(schema=SCHEMA)
"""Views (not created by SQLAlchemy, nor compared with the database as tables)."""

kafka_partitions = sa.Table(
    "kafka_partitions",
    views,
    sa.Column("batch_pk", sa.BigInteger),
    sa.Column("source_index", sa.Integer),
    sa.Column("topic", sa.Text),
    sa.Column("partition", sa.Integer),
    sa.Column("start_offset", sa.BigInteger),
    sa.Column("end_offset", sa.BigInteger),
    sa.Column("latest_offset", sa.BigInteger),
    # A row no listener wrote, whose start or latest would not fit a bigint (0015).
    sa.Column("out_of_range", sa.Boolean),
)
"""Every Kafka partition's offsets per batch and source (migration 0013's view: the
batch_sources arrays unnested, and kafka_partition_rows): what readers query."""

rejected_events = sa.Table(
    "rejected_events",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("received_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
)

spool_losses = sa.Table(
    "spool_losses",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("loss_id", sa.Text, nullable=False),
    sa.Column("query_name", sa.Text, nullable=False),
    sa.Column("events", sa.BigInteger, nullable=False),
    sa.Column("run_ids", JSONB, nullable=False),
    sa.Column("batch_id_min", sa.BigInteger),
    sa.Column("batch_id_max", sa.BigInteger),
    sa.Column("first_trigger_at", sa.DateTime(timezone=True)),
    sa.Column("last_trigger_at", sa.DateTime(timezone=True)),
    # [[source_index, topic, partition, lowest start, highest end], ...]
    sa.Column("partitions", JSONB, nullable=False),
    sa.Column("host", sa.Text),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.UniqueConstraint("loss_id", name="spool_losses_loss_id_key"),
    sa.Index("spool_losses_query_idx", "query_name"),
)

# offset-journal retention --record (migration 0017_retention_forecasts).
FORECAST_STATUSES = ("lost", "at-risk", "safe", "caught-up", "unknown", "gone",
                     "beyond-end")

retention_forecasts = sa.Table(
    "retention_forecasts",
    metadata,
    sa.Column("query_name", sa.Text, primary_key=True),
    sa.Column("source_index", sa.Integer, primary_key=True),
    sa.Column("topic", sa.Text, primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
    sa.Column("log_start", sa.BigInteger),
    sa.Column("log_end", sa.BigInteger),
    sa.Column("unread", sa.BigInteger, nullable=False),
    sa.Column("lost", sa.BigInteger, nullable=False),
    sa.Column("first_unread_at", sa.DateTime(timezone=True)),
    sa.Column("loss_earliest", sa.DateTime(timezone=True)),
    sa.Column("loss_latest", sa.DateTime(timezone=True)),
    sa.Column("basis", sa.Text),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.CheckConstraint(
        "status IN ('lost', 'at-risk', 'safe', 'caught-up', 'unknown', 'gone', "
        "'beyond-end')", name="retention_forecasts_status_check"),
    # What check believes of a row: lost records are said with their count and
    # only so; a loss foreseen has a time and a limit; counts are counts.
    sa.CheckConstraint("(status = 'lost') = (lost > 0)",
                       name="retention_forecasts_lost_check"),
    sa.CheckConstraint("status <> 'at-risk' OR (loss_earliest IS NOT NULL "
                       "AND loss_latest IS NOT NULL AND basis IS NOT NULL)",
                       name="retention_forecasts_at_risk_check"),
    sa.CheckConstraint("basis IN ('time', 'size')", name="retention_forecasts_basis_check"),
    sa.CheckConstraint("unread >= 0 AND lost >= 0 AND next_offset >= 0",
                       name="retention_forecasts_counts_check"),
)

# Losses retention --record found, kept until acknowledged (migration 0019_recorded_losses).
retention_losses = sa.Table(
    "retention_losses",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("query_name", sa.Text, nullable=False),
    sa.Column("source_index", sa.Integer, nullable=False),
    sa.Column("topic", sa.Text, nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("first_offset", sa.BigInteger, nullable=False),  # the first record lost
    sa.Column("end_offset", sa.BigInteger, nullable=False),  # the log start seen: exclusive
    sa.Column("anchor_run_id", sa.Text),  # the query's last batch when first recorded
    sa.Column("anchor_batch_id", sa.BigInteger),
    sa.Column("first_recorded_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("last_recorded_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.UniqueConstraint("query_name", "source_index", "topic", "partition", "first_offset",
                        name="retention_losses_key"),
    sa.CheckConstraint("first_offset >= 0 AND end_offset > first_offset",
                       name="retention_losses_range_check"),
)

loss_acknowledgements = sa.Table(
    "loss_acknowledgements",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("loss_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.retention_losses.id"),
              nullable=False),
    sa.Column("end_offset", sa.BigInteger, nullable=False),  # acknowledged up to: exclusive
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("host", sa.Text),
    sa.Column("os_user", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.CheckConstraint("btrim(reason) <> ''", name="loss_acknowledgements_reason_check"),
    sa.Index("loss_acknowledgements_loss_idx", "loss_id"),
)

# Restarts journaled as decisions (migration 0008_decisions).
RECORDED_POSITIONS = ("after", "at", "as-of", "rewind", "from-time", "savepoint")

restart_plans = sa.Table(
    "restart_plans",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("query_name", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("position", sa.Text, nullable=False),
    sa.Column("mode", sa.Text, nullable=False),
    sa.Column("command", sa.Text, nullable=False),
    sa.Column("ok", sa.Boolean, nullable=False),
    sa.Column("anchor_run_id", sa.Text),
    sa.Column("anchor_batch_id", sa.BigInteger),
    sa.Column("request", JSONB, nullable=False),
    sa.Column("options", JSONB, nullable=False),
    # [[source_index, topic, partition, start offset (-2: earliest)], ...]
    sa.Column("kafka_offsets", JSONB, nullable=False),
    sa.Column("checkpoint", sa.Text),
    sa.Column("host", sa.Text),
    sa.Column("os_user", sa.Text),
    sa.CheckConstraint(  # 'savepoint': migration 0018_savepoints
        "position IN (" + ", ".join(f"'{p}'" for p in RECORDED_POSITIONS) + ")",
        name="restart_plans_position_check"),
    sa.Index("restart_plans_query_idx", "query_name", "id"),
)

plan_runs = sa.Table(
    "plan_runs",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("plan_id", sa.BigInteger,
              sa.ForeignKey(f"{SCHEMA}.restart_plans.id", ondelete="CASCADE"), nullable=False),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Index("plan_runs_plan_idx", "plan_id"),
)

# Savepoints: a stateful query's state at one journaled batch (migration 0018_savepoints).
savepoints = sa.Table(
    "savepoints",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("query_name", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("query_id", sa.Text, nullable=False),
    sa.Column("batch_id", sa.BigInteger, nullable=False),
    sa.Column("checkpoint", sa.Text, nullable=False),
    sa.Column("location", sa.Text, nullable=False),
    sa.Column("manifest_sha256", sa.Text, nullable=False),
    sa.Column("manifest", JSONB, nullable=False),
    sa.Column("host", sa.Text),
    sa.Column("os_user", sa.Text),
    sa.CheckConstraint("manifest_sha256 ~ '^[0-9a-f]{64}$'",
                       name="savepoints_manifest_sha256_check"),
    # Migration 0020 (NOT VALID: rows from before it are checked by the code that reads
    # them): a row vouches only for a manifest of its own batch.
    sa.CheckConstraint(" AND ".join(f"(manifest -> '{c}') IS NOT DISTINCT FROM to_jsonb({c})"
                                    for c in ("query_name", "run_id", "query_id", "batch_id",
                                              "checkpoint")),
                       name="savepoints_manifest_names_its_batch"),
    sa.Index("savepoints_query_idx", "query_name", "id"),
    sa.Index("savepoints_manifest_idx", "manifest_sha256"),
)

# Savepoints whose files retention deleted (migration 0022_savepoint_deletions): only
# added to; a guard keeps the newest of a query and any a recorded plan names.
savepoint_deletions = sa.Table(
    "savepoint_deletions",
    metadata,
    sa.Column("savepoint_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.savepoints.id"),
              primary_key=True),
    sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("host", sa.Text),
    sa.Column("os_user", sa.Text),
    sa.CheckConstraint("btrim(reason) <> ''", name="savepoint_deletions_reason_check"),
)
