"""A tiny Python streaming source whose offsets have Kafka's shape, for listener tests.

It serves a fixed number of batches over two topics; partition 2 of "events" first
appears in the second batch, as a partition added to a topic mid-stream would.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition


def _offsets(step: int) -> dict:
    out = {"events": {"0": step * 3, "1": step * 2}, "audit": {"0": step}}
    if step >= 2:
        out["events"]["2"] = step - 1
    return out


class _Reader(DataSourceStreamReader):
    def __init__(self, batches: int) -> None:
        self.batches = batches

    def initialOffset(self):
        return _offsets(0) | {"step": {"0": 0}}

    def latestOffset(self):
        return _offsets(self.batches) | {"step": {"0": self.batches}}

    def partitions(self, start, end):
        return [InputPartition((start["step"]["0"], end["step"]["0"]))]

    def read(self, partition):
        lo, hi = partition.value
        for i in range(lo, hi):
            yield (i,)


class _StepReader(_Reader):
    """Advances one step per batch, so there is one batch per step."""

    def __init__(self, batches: int) -> None:
        super().__init__(batches)
        self.current = 0

    def latestOffset(self):
        self.current = min(self.current + 1, self.batches)
        return _offsets(self.current) | {"step": {"0": self.current}}


class KafkaShapedSource(DataSource):
    @classmethod
    def name(cls):
        return "kafka_shaped"

    def schema(self):
        return "n int"

    def streamReader(self, schema):
        return _StepReader(int(self.options.get("batches", "3")))
