package ojtest;

import java.util.Collections;
import java.util.Iterator;

import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * flatMapGroupsWithState for tests/test_restore_group_state.py: PySpark has no API for it
 * (only applyInPandasWithState), so the test compiles this and calls {@link #counts}.
 *
 * <p>Per group: how many records and their amounts' sum, kept in the group state; an
 * event-time timeout five seconds after the group's last record (at the watermark at
 * least) closes the group: its state is emitted as "closed" and removed.
 */
public final class GroupCounts {
    static final StructType STATE = new StructType()
        .add("n", DataTypes.LongType, false)
        .add("total", DataTypes.LongType, false);
    static final StructType OUT = new StructType()
        .add("grp", DataTypes.StringType)
        .add("n", DataTypes.LongType, false)
        .add("total", DataTypes.LongType, false)
        .add("status", DataTypes.StringType);
    static final long TIMEOUT_MS = 5_000L;

    private GroupCounts() {
    }

    /** The grouping key: the record's group. */
    public static final class Key implements MapFunction<Row, String> {
        @Override
        public String call(Row row) {
            return row.getAs("grp");
        }
    }

    /** One group's records of a batch, or its timeout. */
    public static final class Count implements FlatMapGroupsWithStateFunction<String, Row, Row, Row> {
        @Override
        public Iterator<Row> call(String key, Iterator<Row> rows, GroupState<Row> state) {
            if (state.hasTimedOut()) {
                Row last = state.get();
                state.remove();
                return one(key, last.getLong(0), last.getLong(1), "closed");
            }
            long n = state.exists() ? state.get().getLong(0) : 0L;
            long total = state.exists() ? state.get().getLong(1) : 0L;
            long latest = 0L;
            while (rows.hasNext()) {
                Row row = rows.next();
                n += 1;
                total += row.<Long>getAs("amount");
                latest = Math.max(latest, row.<Long>getAs("ts_ms"));
            }
            state.update(RowFactory.create(n, total));
            state.setTimeoutTimestamp(Math.max(latest, state.getCurrentWatermarkMs()) + TIMEOUT_MS);
            return one(key, n, total, "open");
        }

        private static Iterator<Row> one(String key, long n, long total, String status) {
            return Collections.singletonList(RowFactory.create(key, n, total, status)).iterator();
        }
    }

    /** {@code events} (grp, amount, ts_ms; a watermark set) counted per group, in update mode. */
    public static Dataset<Row> counts(Dataset<Row> events) {
        return events.groupByKey(new Key(), Encoders.STRING()).flatMapGroupsWithState(
            new Count(), OutputMode.Update(), Encoders.row(STATE), Encoders.row(OUT),
            GroupStateTimeout.EventTimeTimeout());
    }
}
