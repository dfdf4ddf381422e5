package io.offsetjournal.state;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.streaming.checkpointing.CommitLog;
import org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeqBase;
import org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeq;
import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.StateStoreColumnFamilySchemaUtils$;
import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.TransformWithStateOperatorProperties;
import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.TransformWithStateVariableInfo;
import org.apache.spark.sql.execution.streaming.state.OperatorStateMetadata;
import org.apache.spark.sql.execution.streaming.state.OperatorStateMetadataV2;
import org.apache.spark.sql.execution.streaming.state.StateRewriter;
import org.apache.spark.sql.execution.streaming.state.StateStoreColFamilySchema;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetadata;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

/**
 * One rewrite of a checkpoint's state, as Spark's {@code StateRewriter} does it: every
 * store of every operator the checkpoint's metadata lists at the read batch is written
 * afresh as state version {@code writeBatchId + 1}. What a store is written with comes
 * from the sources registered here, each turned into the writer's rows
 * ({@code partition_key, key_bytes, value_bytes, column_family_name}) and hash-partitioned
 * by {@code partition_key} into the checkpoint's shuffle partitions, exactly as Spark's
 * shuffle places a key; a store without a source is written empty. The read and the write
 * batch may be the same: the bootstrap batch's (empty) state is then replaced, so the
 * query's next batch follows it with no gap in batch ids (a file sink's log needs none).
 *
 * <ul>
 * <li>{@link #typed}: rows of two struct columns, {@code key} and {@code value}, in the
 * column family's key and value schemas: encoded here as Spark's state store would
 * (UnsafeRow bytes), the partition key taken from the key by Spark's own extractor for the
 * operator and column family.</li>
 * <li>{@link #raw}: the writer's rows as they are, e.g. another RocksDB checkpoint's read
 * of all its column families.</li>
 * </ul>
 */
public final class StateWrite {
    private final SparkSession spark;
    private final String resolved;
    private final long readBatchId;
    private final long writeBatchId;
    private final int partitions;
    private final Map<String, Family> families = new LinkedHashMap<>();
    private final Map<String, List<JavaRDD<InternalRow>>> sources = new HashMap<>();
    private Option<scala.collection.immutable.Map<Object, String[][]>> ids = Option.empty();
    private boolean ran;

    /** What the writer and the partition-key extractor need of one column family. */
    record Family(String operatorName, String storeName, StateStoreColFamilySchema schema,
                  Integer joinFormat, TransformWithStateVariableInfo variable) {
    }

    StateWrite(SparkSession spark, String resolved, long readBatchId, long writeBatchId,
               int partitions) {
        this.spark = spark;
        this.resolved = resolved;
        this.readBatchId = readBatchId;
        this.writeBatchId = writeBatchId;
        this.partitions = partitions;
        Integer joinFormat = joinFormat();
        for (OperatorStateMetadata op : StateRestore.operators(spark, resolved, readBatchId)) {
            long id = op.operatorInfo().operatorId();
            List<TransformWithStateVariableInfo> variables = new ArrayList<>();
            if (op instanceof OperatorStateMetadataV2 v2 && v2.operatorPropertiesJson() != null
                    && !v2.operatorPropertiesJson().isEmpty()
                    && op.operatorInfo().operatorName().startsWith("transformWithState")) {
                variables.addAll(CollectionConverters.asJava(TransformWithStateOperatorProperties
                    .fromJson(v2.operatorPropertiesJson()).stateVariables()));
            }
            for (StateStoreMetadata store : CollectionConverters.asJava(op.stateStoresMetadata())) {
                for (StateStoreColFamilySchema cf : StateRestore.columnFamilies(spark, resolved,
                        id, store)) {
                    String base = StateStoreColumnFamilySchemaUtils$.MODULE$
                        .getBaseStateName(cf.colFamilyName());
                    TransformWithStateVariableInfo variable = variables.stream()
                        .filter(v -> v.stateName().equals(base)).findFirst().orElse(null);
                    families.put(key(id, store.storeName(), cf.colFamilyName()),
                        new Family(op.operatorInfo().operatorName(), store.storeName(), cf,
                            joinFormat, variable));
                }
            }
        }
    }

    private Integer joinFormat() {
        Option<OffsetSeqBase> seq = StateRestore.checkpointMetadata(spark, resolved).offsetLog()
            .get(writeBatchId);
        if (seq.isDefined() && seq.get() instanceof OffsetSeq s && s.metadataOpt().isDefined()) {
            Option<String> v = s.metadataOpt().get().conf()
                .get("spark.sql.streaming.join.stateFormatVersion");
            if (v.isDefined()) {
                return Integer.valueOf(v.get());
            }
        }
        return null;
    }

    static String key(long operatorId, String store, String family) {
        return operatorId + "/" + store + (family == null ? "" : "/" + family);
    }

    /**
     * Registers {@code rows} (columns {@code key} and {@code value}, structs of the column
     * family's key and value types, names aside) as state of one column family.
     */
    public void typed(long operatorId, String store, String family, Dataset<Row> rows) {
        Family f = families.get(key(operatorId, store, family));
        if (f == null) {
            throw new IllegalArgumentException("the new checkpoint has no column family "
                + key(operatorId, store, family) + " (it has " + families.keySet() + ")");
        }
        StructType schema = rows.schema();
        if (schema.fields().length != 2) {
            throw new IllegalArgumentException("typed state needs two columns, key and value: "
                + schema.simpleString());
        }
        same("key", schema.fields()[0], f.schema().keySchema(), family);
        same("value", schema.fields()[1], f.schema().valueSchema(), family);
        JavaRDD<InternalRow> in = ((org.apache.spark.sql.classic.Dataset<Row>) rows)
            .queryExecution().toRdd().toJavaRDD();
        add(operatorId, store, family, in.mapPartitions(new EncodeRows(f.operatorName(),
            f.storeName(), family, f.schema().keySchema(), f.schema().valueSchema(),
            f.joinFormat(), f.variable())));
    }

    private static void same(String what, StructField field, StructType want, String family) {
        if (!DataType.equalsStructurally(field.dataType(), want, true)) {
            throw new IllegalArgumentException("the " + what + " of column family " + family
                + " is " + want.simpleString() + ", not " + field.dataType().simpleString());
        }
    }

    /** Registers the writer's own rows for one store (all of its column families). */
    public void raw(long operatorId, String store, Dataset<Row> envelope) {
        JavaRDD<InternalRow> in = ((org.apache.spark.sql.classic.Dataset<Row>) envelope)
            .queryExecution().toRdd().toJavaRDD().map(InternalRow::copy);
        add(operatorId, store, null, in);
    }

    private void add(long operatorId, String store, String family, JavaRDD<InternalRow> rdd) {
        sources.computeIfAbsent(key(operatorId, store, null), k -> new ArrayList<>()).add(rdd);
    }

    /** Runs the rewrite; returns the state checkpoint ids as JSON ({@code null} unless the
     * checkpoint's format is v2). */
    public String run() {
        StateRestore.checkVersion();
        if (ran) {
            throw new IllegalStateException("this state write has run already");
        }
        ran = true;
        // Reading and writing the same batch of one checkpoint (the bootstrap batch's
        // state rewritten as the restored one) is allowed when the read location is named.
        Option<String> readFrom = readBatchId < writeBatchId ? Option.empty()
            : Option.apply(resolved);
        StateRewriter rewriter = new StateRewriter(spark, readBatchId, writeBatchId, resolved,
            StateRestore.hadoopConf(spark), readFrom, Option.apply(new Transform()),
            Option.empty());
        ids = rewriter.run();
        if (ids.isEmpty()) {
            return "null";
        }
        Json.Members out = new Json.Members();
        for (Map.Entry<Object, String[][]> e : CollectionConverters.asJava(ids.get()).entrySet()) {
            Json.Array parts = new Json.Array();
            for (String[] stores : e.getValue()) {
                Json.Array one = new Json.Array();
                for (String s : stores) {
                    one.add(s);
                }
                parts.add(one);
            }
            out.put(String.valueOf(e.getKey()), parts);
        }
        return out.toString();
    }

    /** Writes {@code commits/writeBatchId}, with the state ids of the rewrite (format v2) and
     * the watermark the next batch runs with; {@code replace}: in place of the one the
     * batch's own run wrote (the bootstrap batch's, whose state this write replaced).
     * False when it exists already and is not to be replaced. */
    public boolean commit(long nextBatchWatermarkMs, boolean replace) {
        if (!ran) {
            throw new IllegalStateException("commit before the state write ran");
        }
        CommitLog log = StateRestore.checkpointMetadata(spark, resolved).commitLog();
        // Asked before the batch's own commit goes: on a Spark that takes the version from
        // the checkpoint's last commit, that commit is the one this write replaces.
        int version = SparkLine.commitVersion(spark, log);
        if (replace) {
            Path file = new Path(new Path(resolved, "commits"), String.valueOf(writeBatchId));
            Path crc = new Path(file.getParent(), "." + file.getName() + ".crc");
            try {
                FileSystem fs = file.getFileSystem(StateRestore.hadoopConf(spark));
                fs.delete(file, false);
                fs.delete(crc, false);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        log = StateRestore.checkpointMetadata(spark, resolved).commitLog();
        return log.add(writeBatchId, log.createMetadata(nextBatchWatermarkMs, ids,
            scala.collection.immutable.Map$.MODULE$.empty(), version));
    }

    /** The column families this write knows, as op/store/family (for messages). */
    public String families() {
        return String.join(", ", families.keySet());
    }

    /** Handed to StateRewriter: a store's registered sources in place of its read state. */
    private final class Transform extends AbstractFunction1<Dataset<Row>, Dataset<Row>> {
        @Override
        public Dataset<Row> apply(Dataset<Row> state) {
            Map<String, String> options = options(state);
            String store = options.getOrDefault("storename", "default");
            List<JavaRDD<InternalRow>> mine = sources.get(
                key(Long.parseLong(options.get("operatorid")), store, null));
            if (mine == null) {
                // Nothing restored into this store (a new operator, state discarded): it
                // is written empty, never read and written in one task.
                return state.limit(0).repartition(partitions);
            }
            JavaRDD<InternalRow> all = mine.get(0);
            for (JavaRDD<InternalRow> more : mine.subList(1, mine.size())) {
                all = all.union(more);
            }
            return StateRestore.classic(spark)
                .internalCreateDataFrame(all.rdd(), state.schema(), false)
                .repartition(partitions, functions.col("partition_key"));
        }
    }

    /** The options the state reader was created with (lower-case keys). */
    static Map<String, String> options(Dataset<Row> state) {
        Deque<LogicalPlan> todo = new ArrayDeque<>();
        todo.add(((org.apache.spark.sql.classic.Dataset<Row>) state).queryExecution().analyzed());
        while (!todo.isEmpty()) {
            LogicalPlan plan = todo.poll();
            if (plan instanceof DataSourceV2Relation relation) {
                Map<String, String> out = new HashMap<>();
                relation.options().asCaseSensitiveMap()
                    .forEach((k, v) -> out.put(k.toLowerCase(java.util.Locale.ROOT), v));
                return out;
            }
            todo.addAll(CollectionConverters.asJava(plan.children()));
        }
        throw new IllegalStateException("the state rewriter's read has no data source");
    }
}
