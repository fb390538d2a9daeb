"""The native Spark source as a stream: `spark.readStream.format("streamgate")` across
CreatePartitions, a segment split and a restart of the query, exactly once.

About a minute on two busy cores, so not part of `make test`: `make test-spark-source` runs
it (STREAMGATE_SPARK_STREAM_TESTS=1) with tests/system/test_spark_source.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from support.client import unique_topic
from support.confluent import create_topic
from support.spark import add_partitions, http, open_segments, parquet_rows, produce, wait_for
from test_spark_source import admin_address, source, tier_gateway

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        os.environ.get("STREAMGATE_SPARK_STREAM_TESTS") != "1",
        reason="a long Spark streaming test: make test-spark-source",
    ),
]
__all__ = ["source", "tier_gateway"]  # fixtures shared with the batch tests


def test_stream_across_create_partitions_split_and_restart(
    source, tier_gateway, tmp_path: Path
) -> None:
    topic = unique_topic("native-stream")
    bootstrap = tier_gateway.bootstrap
    create_topic(bootstrap, topic, 2)
    produced = [b"a%d" % i for i in range(300)]
    produce(bootstrap, topic, [(None, v, i % 2) for i, v in enumerate(produced)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start() -> Any:
        df = (
            source.readStream.format("streamgate")
            .option("gateway", bootstrap)
            .option("admin", admin_address(tier_gateway))
            .options(topic=topic, startingOffsets="earliest", maxRecordsPerTrigger="100")
            .load()
        )
        return (
            df.selectExpr("value", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="1 second")
            .start()
        )

    def seen(count: int) -> list[Any] | None:
        rows = parquet_rows(source, out)
        return rows if len(rows) >= count else None

    query = start()
    try:
        wait_for(lambda: seen(300), timeout=240)
        add_partitions(bootstrap, topic, 4)
        segment = open_segments(tier_gateway, topic)[0]["segment_id"]
        http(tier_gateway, f"/streams/{topic}/scale", {"split": segment, "parts": 2})
        more = [b"b%d" % i for i in range(200)]
        produce(bootstrap, topic, [(None, v, i % 4) for i, v in enumerate(more)])
        produced += more
        wait_for(lambda: seen(500), timeout=240)
        # the first batch is not bounded (Spark 4.0 tells a Python source nothing of where
        # it starts); each after it is
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert max(sizes[1:]) <= 100 and len(sizes) >= 3, sizes
    finally:
        query.stop()
    last = [b"c%d" % i for i in range(100)]
    produce(bootstrap, topic, [(None, v, i % 4) for i, v in enumerate(last)])
    produced += last
    query = start()
    try:
        rows = wait_for(lambda: seen(600), timeout=240)
        time.sleep(2)  # a duplicate would show up by now
        rows = parquet_rows(source, out)
    finally:
        query.stop()
    assert sorted(bytes(r.value) for r in rows) == sorted(produced)  # exactly once
    assert len({(r.partition, r.offset) for r in rows}) == 600
