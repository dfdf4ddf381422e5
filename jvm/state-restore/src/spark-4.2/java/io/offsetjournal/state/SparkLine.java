package io.offsetjournal.state;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.streaming.checkpointing.CommitLog;

/**
 * What differs between the Spark minors the helper is compiled for, Spark 4.2's side.
 * Everything else is in {@code src/main/java}, the same for every minor.
 */
final class SparkLine {
    /** The Spark minor this source tree compiles against (any patch release runs it). */
    static final String LINE = "4.2";

    private SparkLine() {
    }

    /** The version of the commit the restore writes: 4.2's commit log default, the
     * state checkpoint format version of the session. */
    static int commitVersion(SparkSession spark, CommitLog log) {
        return log.defaultVersion();
    }
}
