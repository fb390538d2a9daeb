"""A native Spark source for streamgate: `spark.read.format("streamgate")` reads a topic's
history straight from tier 2 and only the tail through the Kafka protocol (docs/spark.md).

    from spark_source import register
    register(spark)   # once per SparkSession
"""

from __future__ import annotations

from typing import Any

from .errors import StreamgateSourceError

__all__ = ["StreamgateSourceError", "register"]


def register(spark: Any) -> None:
    """Make `format("streamgate")` known to this SparkSession."""
    from .source import StreamgateDataSource

    spark.dataSource.register(StreamgateDataSource)
