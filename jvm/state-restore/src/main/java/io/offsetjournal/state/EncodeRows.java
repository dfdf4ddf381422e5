package io.offsetjournal.state;

import java.util.Iterator;

import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection$;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.operators.stateful.StatePartitionKeyExtractorFactory$;
import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.TransformWithStateVariableInfo;
import org.apache.spark.sql.execution.streaming.state.StatePartitionKeyExtractor;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.Option;

/**
 * Typed state rows ({@code key} and {@code value} structs) to the state writer's rows:
 * the key's partition key (Spark's extractor for the operator and column family), the key
 * and the value as UnsafeRow bytes (what the state store keeps), the column family.
 *
 * <p>Every partition builds its own projections and extractor: a projection returns the
 * SAME row object each call, over a buffer it reuses, so nothing it returns is shared
 * across rows or tasks; each output is a copy of exactly its own bytes.</p>
 */
final class EncodeRows implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
    private static final long serialVersionUID = 1L;
    private final String operatorName;
    private final String storeName;
    private final String family;
    private final StructType keySchema;
    private final StructType valueSchema;
    private final Integer joinFormat;
    private final TransformWithStateVariableInfo variable;

    EncodeRows(String operatorName, String storeName, String family, StructType keySchema,
               StructType valueSchema, Integer joinFormat, TransformWithStateVariableInfo variable) {
        this.operatorName = operatorName;
        this.storeName = storeName;
        this.family = family;
        this.keySchema = keySchema;
        this.valueSchema = valueSchema;
        this.joinFormat = joinFormat;
        this.variable = variable;
    }

    @Override
    public Iterator<InternalRow> call(Iterator<InternalRow> rows) {
        UnsafeProjection keys = UnsafeProjection$.MODULE$.create(keySchema);
        UnsafeProjection values = UnsafeProjection$.MODULE$.create(valueSchema);
        StatePartitionKeyExtractor extractor = StatePartitionKeyExtractorFactory$.MODULE$.create(
            operatorName, keySchema, storeName, family,
            joinFormat == null ? Option.empty() : Option.apply((Object) joinFormat),
            Option.apply(variable));
        UTF8String cf = UTF8String.fromString(family);
        int nKey = keySchema.fields().length;
        int nValue = valueSchema.fields().length;
        return new Iterator<>() {
            @Override
            public boolean hasNext() {
                return rows.hasNext();
            }

            @Override
            public InternalRow next() {
                InternalRow row = rows.next();
                UnsafeRow key = keys.apply(row.getStruct(0, nKey)).copy();
                UnsafeRow value = values.apply(row.getStruct(1, nValue)).copy();
                UnsafeRow partitionKey = extractor.partitionKey(key).copy();
                return new GenericInternalRow(new Object[] {
                    partitionKey, key.getBytes(), value.getBytes(), cf});
            }
        };
    }
}
