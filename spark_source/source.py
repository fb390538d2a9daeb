"""The PySpark data source "streamgate" (pyspark.sql.datasource): reads planned on the
driver from the gateway's chunk map, read on the executors straight from tier 2 (the tail
through the Kafka protocol); streaming in stream.py."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from .options import ReadOptions, parse_options
from .plan import ReadTask, plan
from .rows import read_task, schema_ddl


class _Task(InputPartition):
    """A ReadTask as Spark ships it to an executor (pickled)."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task)
        self.task = task


def _arrow_schema(schema: StructType) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)


class StreamgateDataSource(DataSource):
    """`spark.read.format("streamgate")`: a topic with the Kafka source's schema."""

    @classmethod
    def name(cls) -> str:
        return "streamgate"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = parse_options(dict(options))

    def schema(self) -> str:
        return schema_ddl(self.parsed.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return StreamgateReader(self.parsed, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import StreamgateStreamReader

        return StreamgateStreamReader(self.parsed, schema)


class StreamgateReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        tasks = plan(self.opts)
        # Spark needs at least one partition to run a read
        return [_Task(t) for t in tasks] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        task = getattr(partition, "task", None)
        if task is None:
            return iter(())
        return read_task(task, self.opts, _arrow_schema(self.schema))
