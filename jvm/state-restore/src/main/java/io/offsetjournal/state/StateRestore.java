package io.offsetjournal.state;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.v2.state.metadata.StateMetadataPartitionReader;
import org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeq;
import org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeqMetadata;
import org.apache.spark.sql.execution.streaming.operators.stateful.join.StreamingSymmetricHashJoinExec;
import org.apache.spark.sql.execution.streaming.runtime.IncrementalExecution;
import org.apache.spark.sql.execution.streaming.runtime.SerializedOffset;
import org.apache.spark.sql.execution.streaming.runtime.StreamMetadata;
import org.apache.spark.sql.execution.streaming.runtime.StreamExecution;
import org.apache.spark.sql.execution.streaming.runtime.StreamMetadata$;
import org.apache.spark.sql.execution.streaming.runtime.StreamingQueryCheckpointMetadata;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.OfflineStateRepartitionRunner;
import org.apache.spark.sql.execution.streaming.state.OfflineStateRepartitionUtils$;
import org.apache.spark.sql.execution.streaming.state.OperatorStateMetadata;
import org.apache.spark.sql.execution.streaming.state.OperatorStateMetadataV2;
import org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateSchemaCompatibilityChecker;
import org.apache.spark.sql.execution.streaming.state.StateStore$;
import org.apache.spark.sql.execution.streaming.state.StateStoreColFamilySchema;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetadata;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetadataV2;
import org.apache.spark.sql.execution.streaming.state.StateStoreProviderId;
import org.apache.spark.sql.execution.streaming.runtime.StreamingQueryWrapper;
import org.apache.spark.sql.execution.streaming.utils.StreamingUtils$;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.util.SerializableConfiguration;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The one edge between offset-journal and Spark's internal state classes: operator
 * metadata and state schemas read, a new checkpoint started, the state rewritten
 * ({@link StateWrite}) and repartitioned in place. These classes change between Spark
 * minors, so the helper is compiled once per minor against that Spark's own jars
 * ({@link SparkLine}, from {@code src/spark-<minor>/java}): every entry point refuses
 * a Spark of another minor, so a jar on the wrong Spark fails here in one line, not in a
 * task.
 */
public final class StateRestore {
    private StateRestore() {
    }

    /** The running Spark's version. */
    public static String sparkVersion() {
        return org.apache.spark.package$.MODULE$.SPARK_VERSION();
    }

    /** The Spark minor this jar was compiled for ({@code 4.2}). */
    public static String line() {
        return SparkLine.LINE;
    }

    /**
     * Throws (one line) unless the running Spark is of the minor this jar was compiled
     * for: any patch release, and a vendor's build of one ({@code 4.2.1},
     * {@code 4.2.0-amzn-0}).
     */
    public static void checkVersion() {
        String running = sparkVersion();
        String[] parts = running.split("[^0-9]+", 3);
        String minor = parts.length >= 2 ? parts[0] + "." + parts[1] : running;
        if (!SparkLine.LINE.equals(minor)) {
            throw new IllegalStateException("this state-restore helper is compiled for Spark "
                + SparkLine.LINE + " (any " + SparkLine.LINE + ".x); this is Spark " + running
                + ": use the helper jar offset-journal ships for this Spark's minor");
        }
    }

    static org.apache.spark.sql.classic.SparkSession classic(SparkSession spark) {
        return (org.apache.spark.sql.classic.SparkSession) spark;
    }

    static Configuration hadoopConf(SparkSession spark) {
        return classic(spark).sessionState().newHadoopConf();
    }

    /** The checkpoint location as Spark resolves it (qualified by its file system). */
    public static String resolved(SparkSession spark, String checkpoint) {
        checkVersion();
        return StreamingUtils$.MODULE$.resolvedCheckpointLocation(hadoopConf(spark), checkpoint);
    }

    /** The operators of a checkpoint at a batch, with every store's column families. */
    static List<OperatorStateMetadata> operators(SparkSession spark, String resolvedCheckpoint,
                                                 long batchId) {
        StateMetadataPartitionReader reader = new StateMetadataPartitionReader(
            resolvedCheckpoint, new SerializableConfiguration(hadoopConf(spark)), batchId);
        List<OperatorStateMetadata> out = new ArrayList<>();
        for (OperatorStateMetadata op : reader.allOperatorStateMetadata()) {
            out.add(op);
        }
        return out;
    }

    /** The column families of one store, as the state schema files describe them (with
     * the key encoder Spark derives for a store whose metadata predates them). */
    static List<StateStoreColFamilySchema> columnFamilies(SparkSession spark,
            String resolvedCheckpoint, long operatorId, StateStoreMetadata store) {
        List<Path> files = new ArrayList<>();
        if (store instanceof StateStoreMetadataV2 v2) {
            for (String p : CollectionConverters.asJava(v2.stateSchemaFilePaths())) {
                files.add(new Path(p));
            }
        }
        String root = new Path(resolvedCheckpoint, "state").toString();
        StateStoreId storeId = new StateStoreId(root, operatorId,
            StateStore$.MODULE$.PARTITION_ID_TO_CHECK_SCHEMA(), store.storeName());
        StateSchemaCompatibilityChecker checker = new StateSchemaCompatibilityChecker(
            new StateStoreProviderId(storeId, UUID.randomUUID()), hadoopConf(spark),
            CollectionConverters.asScala(files).toList(), Option.empty(), false);
        List<StateStoreColFamilySchema> out = new ArrayList<>();
        for (StateStoreColFamilySchema cf : CollectionConverters.asJava(checker.readSchemaFile())) {
            if (cf.keyStateEncoderSpec().isEmpty()) {
                KeyStateEncoderSpec spec = store.numColsPrefixKey() > 0
                    ? new PrefixKeyScanStateEncoderSpec(cf.keySchema(), store.numColsPrefixKey())
                    : new NoPrefixKeyStateEncoderSpec(cf.keySchema());
                cf = cf.copy(cf.colFamilyName(), cf.keySchemaId(), cf.keySchema(),
                    cf.valueSchemaId(), cf.valueSchema(), Option.apply(spec),
                    cf.userKeyEncoderSchema());
            }
            out.add(cf);
        }
        return out;
    }

    /**
     * Every stateful operator of {@code checkpoint} at {@code batchId} as JSON: id, name,
     * metadata version, properties (transformWithState's), and per store its partitions,
     * prefix-key columns and column families (name, key and value schemas, key encoder).
     */
    public static String describe(SparkSession spark, String checkpoint, long batchId) {
        checkVersion();
        String resolved = resolved(spark, checkpoint);
        Json.Array ops = new Json.Array();
        for (OperatorStateMetadata op : operators(spark, resolved, batchId)) {
            Json.Array stores = new Json.Array();
            for (StateStoreMetadata store : CollectionConverters.asJava(op.stateStoresMetadata())) {
                Json.Array cfs = new Json.Array();
                for (StateStoreColFamilySchema cf : columnFamilies(spark, resolved,
                        op.operatorInfo().operatorId(), store)) {
                    cfs.add(new Json.Members()
                        .put("name", cf.colFamilyName())
                        .raw("key_schema", cf.keySchema().json())
                        .raw("value_schema", cf.valueSchema().json())
                        .raw("key_encoder", cf.keyStateEncoderSpec().get().json()));
                }
                stores.add(new Json.Members()
                    .put("name", store.storeName())
                    .put("partitions", store.numPartitions())
                    .put("prefix_key_columns", store.numColsPrefixKey())
                    .put("column_families", cfs));
            }
            Json.Members entry = new Json.Members()
                .put("id", op.operatorInfo().operatorId())
                .put("name", op.operatorInfo().operatorName())
                .put("version", op.version())
                .put("stores", stores);
            if (op instanceof OperatorStateMetadataV2 v2) {
                entry.raw("properties", v2.operatorPropertiesJson());
            }
            ops.add(entry);
        }
        return ops.toString();
    }

    /**
     * Each stream-stream join of a query's last batch as JSON, operator id to join type
     * (its SQL: {@code INNER}, {@code LEFT OUTER}...): the operator metadata does not
     * say it, and an outer join reads its rows' {@code matched} flags where an inner one
     * does not. Empty when the query ran no batch.
     */
    public static String joinTypes(StreamingQuery query) {
        checkVersion();
        StreamingQuery q = query instanceof StreamingQueryWrapper w ? w.streamingQuery() : query;
        Json.Members out = new Json.Members();
        IncrementalExecution last = ((StreamExecution) q).lastExecution();
        if (last != null) {
            joins(last.executedPlan(), out);
        }
        return out.toString();
    }

    private static void joins(SparkPlan plan, Json.Members out) {
        if (plan instanceof StreamingSymmetricHashJoinExec join && join.stateInfo().isDefined()) {
            out.put(String.valueOf(join.stateInfo().get().operatorId()), join.joinType().sql());
        }
        for (SparkPlan child : CollectionConverters.asJava(plan.children())) {
            joins(child, out);
        }
    }

    static StreamingQueryCheckpointMetadata checkpointMetadata(SparkSession spark,
                                                              String resolved) {
        return new StreamingQueryCheckpointMetadata(spark, resolved, false);
    }

    /**
     * Starts a NEW checkpoint: its {@code metadata} (a new query id, returned) and an
     * {@code offsets/0} whose every source's end is {@code ends.get(i)} (the offsets the
     * query starts from), so the first run of the query reads nothing, with the batch
     * watermark {@code watermarkMs} (the old query's). The metadata carries
     * the session's settings, the shuffle partitions included (Spark's own constructor
     * leaves them out). Refused when the checkpoint has a query id already.
     */
    public static String bootstrapOffsets(SparkSession spark, String checkpoint,
                                          List<String> ends, long watermarkMs,
                                          long timestampMs) {
        checkVersion();
        String resolved = resolved(spark, checkpoint);
        Path metadataFile = new Path(resolved, "metadata");
        Configuration conf = hadoopConf(spark);
        if (StreamMetadata$.MODULE$.read(metadataFile, conf).isDefined()) {
            throw new IllegalStateException(checkpoint + " has a query id already: not new");
        }
        String queryId = UUID.randomUUID().toString();
        try {
            metadataFile.getParent().getFileSystem(conf).mkdirs(metadataFile.getParent());
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        StreamMetadata$.MODULE$.write(new StreamMetadata(queryId), metadataFile, conf);
        OffsetSeqMetadata base = OffsetSeqMetadata.apply(watermarkMs, timestampMs, spark.conf());
        String partitions = spark.conf().get("spark.sql.shuffle.partitions");
        OffsetSeqMetadata metadata = base.copy(watermarkMs, timestampMs,
            base.conf().updated("spark.sql.shuffle.partitions", partitions));
        List<Option<Offset>> offsets = new ArrayList<>();
        for (String end : ends) {
            offsets.add(Option.apply(new SerializedOffset(end)));
        }
        OffsetSeq seq = new OffsetSeq(CollectionConverters.asScala(offsets).toSeq(),
            Option.apply(metadata));
        if (!checkpointMetadata(spark, resolved).offsetLog().add(0L, seq)) {
            throw new IllegalStateException(checkpoint + " has offsets/0 already: not new");
        }
        return queryId;
    }

    /**
     * Deletes a checkpoint a restore started and could not finish (it was new: nothing
     * else is in it), on whatever file system Spark writes it to.
     */
    public static boolean remove(SparkSession spark, String checkpoint) {
        Path path = new Path(checkpoint);
        try {
            return path.getFileSystem(hadoopConf(spark)).delete(path, true);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** A rewrite of {@code checkpoint}'s state: see {@link StateWrite}. */
    public static StateWrite write(SparkSession spark, String checkpoint, long readBatchId,
                                   long writeBatchId, int partitions) {
        checkVersion();
        return new StateWrite(spark, resolved(spark, checkpoint), readBatchId, writeBatchId,
            partitions);
    }

    /**
     * Repartitions a stopped query's RocksDB state in place to {@code partitions} shuffle
     * partitions (Spark's offline repartition: a new batch that reads nothing); returns its
     * batch id. When it fails after writing its batch, everything it added to the
     * checkpoint is deleted again: left there, its {@code offsets/N} would be run by the
     * query's next start with N partitions on state still in the old ones. What another
     * writer added meanwhile (a query running after all) is left alone; the error says
     * which of the two it was.
     */
    public static long repartition(SparkSession spark, String checkpoint, int partitions) {
        checkVersion();
        String resolved = resolved(spark, checkpoint);
        Path root = new Path(resolved);
        FileSystem fs = fileSystem(root, hadoopConf(spark));
        Option<Object> last = checkpointMetadata(spark, resolved).offsetLog().getLatestBatchId();
        long batchId = last.isDefined() ? ((Long) last.get()) + 1 : 0L;
        Set<Path> before = tree(fs, root);
        try {
            return new OfflineStateRepartitionRunner(spark, checkpoint, partitions, true).run();
        } catch (Throwable e) {  // Spark's own errors are checked (SparkException)
            throw new IllegalStateException(firstLine(e) + "; "
                + undone(spark, resolved, fs, before, batchId), e);
        }
    }

    /** What became of a failed repartition's writes ({@code batchId}: the batch it adds). */
    private static String undone(SparkSession spark, String resolved, FileSystem fs,
                                 Set<Path> before, long batchId) {
        org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeqLog log =
            checkpointMetadata(spark, resolved).offsetLog();
        if (log.get(batchId).isEmpty()) {
            return "nothing was written";
        }
        if (!OfflineStateRepartitionUtils$.MODULE$.isRepartitionBatch(batchId, log)) {
            return "offsets/" + batchId + " was written by another query meanwhile (one runs on "
                + "the checkpoint): the checkpoint is left as it is";
        }
        try {
            removeAdded(fs, new Path(resolved), before);
        } catch (java.io.IOException e) {
            return "what it wrote could not all be removed (" + firstLine(e) + "): remove "
                + "offsets/" + batchId + " before the query starts again";
        }
        return "what it wrote is removed: the checkpoint is as it was";
    }

    private static FileSystem fileSystem(Path path, Configuration conf) {
        try {
            return path.getFileSystem(conf);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** Every file and directory under {@code root}. */
    private static Set<Path> tree(FileSystem fs, Path root) {
        Set<Path> out = new HashSet<>();
        try {
            walk(fs, root, out);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        return out;
    }

    private static void walk(FileSystem fs, Path dir, Set<Path> out) throws java.io.IOException {
        for (FileStatus status : fs.listStatus(dir)) {
            out.add(status.getPath());
            if (status.isDirectory()) {
                walk(fs, status.getPath(), out);
            }
        }
    }

    /** Deletes what is under {@code dir} and not in {@code before} (new directories whole). */
    private static void removeAdded(FileSystem fs, Path dir, Set<Path> before)
            throws java.io.IOException {
        for (FileStatus status : fs.listStatus(dir)) {
            if (!before.contains(status.getPath())) {
                fs.delete(status.getPath(), true);
            } else if (status.isDirectory()) {
                removeAdded(fs, status.getPath(), before);
            }
        }
    }

    private static String firstLine(Throwable e) {
        String text = e.getMessage() == null ? e.toString() : e.getMessage().strip();
        int end = text.indexOf('\n');
        return end < 0 ? text : text.substring(0, end);
    }
}
