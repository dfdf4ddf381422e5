package io.offsetjournal.state;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointVersionManager$;
import org.apache.spark.sql.execution.streaming.checkpointing.CommitLog;

/**
 * What differs between the Spark minors the helper is compiled for, Spark 4.3's side.
 * Everything else is in {@code src/main/java}, the same for every minor.
 */
final class SparkLine {
    /** The Spark minor this source tree compiles against (any patch release runs it). */
    static final String LINE = "4.3";

    private SparkLine() {
    }

    /** The version of the commit the restore writes. 4.3's commit log has no default
     * version of its own: a query writes the version of its checkpoint's last commit, or
     * the session's commit log format version when there is none (what
     * CheckpointVersionManager resolves), and so does the restore. */
    static int commitVersion(SparkSession spark, CommitLog log) {
        return CheckpointVersionManager$.MODULE$.resolveCommitLogVersion(spark, log.getLatest());
    }
}
