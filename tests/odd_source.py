"""A Python streaming source with odd offsets, for the listener's bad-input tests.

Python data sources are Spark 4.0's: the tests import this inside themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition


class OddReader(DataSourceStreamReader):
    """One batch per trigger, offsets shaped by ``mode``:

    * ``backwards``: Kafka-shaped, partition 0 of "t" goes back in the second batch;
    * ``unknown``: a shape no source has (nested lists, nulls, quotes);
    * ``wide``: 10,000 partitions of one topic.
    """

    def __init__(self, mode: str, batches: int) -> None:
        self.mode, self.batches, self.current = mode, batches, 0

    def _at(self, step: int) -> dict[str, Any]:
        if self.mode == "backwards":
            t0 = [0, 100, 40, 60, 80][min(step, 4)]
            body: dict[str, Any] = {"t": {"0": t0, "1": step * 5}}
        elif self.mode == "wide":
            body = {"wide": {str(p): step * 10 + p % 3 for p in range(10_000)}}
        else:
            body = {"cursor": {"pos": step, "tags": ["a'b", None, [step]]}, "v": 'x"y'}
        return body | {"step": {"0": step}}

    def initialOffset(self) -> dict[str, Any]:
        return self._at(0)

    def latestOffset(self) -> dict[str, Any]:  # type: ignore[override]  # the no-limit form
        self.current = min(self.current + 1, self.batches)
        return self._at(self.current)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return [InputPartition((start["step"]["0"], end["step"]["0"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        lo, hi = partition.value
        for i in range(lo, hi):
            yield (i,)


class OddSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "odd_offsets"

    def schema(self) -> str:
        return "n int"

    def streamReader(self, schema: Any) -> OddReader:
        options = self.options
        return OddReader(options.get("mode", "unknown"), int(options.get("batches", "3")))
