"""The native Spark source as a stream: `spark.readStream.format("streamgate")` across
CreatePartitions, a segment split, a merge, a SIGKILL of the gateway and a restart of the
query, exactly once, with per-partition offsets in the checkpoint; then records past the
checkpoint deleted (failOnDataLoss).

About two minutes on two busy cores, so not part of `make test`: `make test-spark-source`
runs it (STREAMGATE_SPARK_STREAM_TESTS=1) with tests/system/test_spark_source.py. Waits are
for progress (rows committed), never for speed, so a loaded machine only makes it slower.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from support.client import unique_topic
from support.confluent import create_topic
from support.spark import (
    add_partitions,
    delete_records,
    end_offsets,
    http,
    open_segments,
    parquet_rows,
    produce,
    wait_for,
)
from test_spark_source import admin_address, source, tier_gateway

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.environ.get("STREAMGATE_SPARK_STREAM_TESTS") != "1",
        reason="a long Spark streaming test: make test-spark-source",
    ),
]
__all__ = ["source", "tier_gateway"]  # fixtures shared with the batch tests
WAIT = 300  # seconds for a step's rows to be committed (generous: loaded machines)


def _checkpointed(checkpoint: Path) -> dict[str, dict[str, int]]:
    """The source offsets of the last micro-batch in the checkpoint's offset log."""
    logs = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    last = max(logs, key=lambda p: int(p.name))
    return json.loads(last.read_text().splitlines()[-1])


def test_stream_across_partitions_split_merge_kill_and_restart(
    source, tier_gateway, tmp_path: Path
) -> None:
    topic = unique_topic("native-stream")
    bootstrap = tier_gateway.bootstrap
    create_topic(bootstrap, topic, 2)
    produced = [b"a%d" % i for i in range(300)]
    produce(bootstrap, topic, [(None, v, i % 2) for i, v in enumerate(produced)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(**extra: str) -> Any:
        df = (
            source.readStream.format("streamgate")
            .option("gateway", bootstrap)
            .option("admin", admin_address(tier_gateway))
            .options(topic=topic, startingOffsets="earliest", maxRecordsPerTrigger="100")
            .option("timeoutMs", "60000")  # outlives the gateway's restart
            .options(**extra)
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

    def more(prefix: bytes, n: int) -> None:
        values = [prefix + b"%d" % i for i in range(n)]
        produce(bootstrap, topic, [(None, v, i % 4) for i, v in enumerate(values)])
        produced.extend(values)

    query = start()
    try:
        wait_for(lambda: seen(300), timeout=WAIT)
        add_partitions(bootstrap, topic, 4)
        segment = open_segments(tier_gateway, topic)[0]["segment_id"]
        halves = http(tier_gateway, f"/streams/{topic}/scale", {"split": segment, "parts": 2})
        more(b"b", 200)
        wait_for(lambda: seen(500), timeout=WAIT)
        # the first batch is not bounded (Spark 4.0 tells a Python source nothing of where
        # it starts); each after it is
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert max(sizes[1:]) <= 100 and len(sizes) >= 3, sizes
        merged = http(
            tier_gateway,
            f"/streams/{topic}/scale",
            {"merge": [s["segment_id"] for s in halves["successors"]]},
        )
        assert len(merged["successors"]) == 1, merged
        more(b"m", 100)
        wait_for(lambda: seen(600), timeout=WAIT)

        tier_gateway.kill()  # SIGKILL while the query runs
        tier_gateway.start()
        more(b"k", 100)

        def caught_up() -> list[Any] | None:
            nonlocal query
            if not query.isActive:  # a batch that met the gateway down failed: restart it
                print(f"query failed across the gateway's SIGKILL: {query.exception()}")
                query = start()
            return seen(700)

        wait_for(caught_up, timeout=WAIT)
    finally:
        query.stop()
    more(b"c", 100)
    query = start()
    try:
        wait_for(lambda: seen(800), timeout=WAIT)
        time.sleep(2)  # a duplicate would show up by now
        rows = parquet_rows(source, out)
    finally:
        query.stop()
    assert sorted(bytes(r.value) for r in rows) == sorted(produced)  # exactly once
    assert len({(r.partition, r.offset) for r in rows}) == 800
    # the checkpoint holds each partition's next offset, every partition at its end
    ends = end_offsets(bootstrap, topic)
    assert _checkpointed(checkpoint) == {topic: {str(p): o for p, o in ends.items()}}

    # records past the checkpoint deleted before the query resumes: failOnDataLoss
    produce(bootstrap, topic, [(None, b"lost%d" % i, 0) for i in range(10)])
    delete_records(bootstrap, topic, {0: ends[0] + 10})
    query = start()
    try:
        wait_for(lambda: not query.isActive, timeout=WAIT)
        assert "option 'failOnDataLoss' false skips them" in str(query.exception())
    finally:
        query.stop()
    query = start(failOnDataLoss="false")
    try:
        more(b"d", 8)  # partitions 0 to 3, twice
        wait_for(lambda: seen(808), timeout=WAIT)
    finally:
        query.stop()
    assert not [r for r in parquet_rows(source, out) if bytes(r.value).startswith(b"lost")]
