"""The native Spark source (spark_source/) on three active nodes sharing one PostgreSQL and
one tier-2 folder, a topic's three partitions led by the three nodes (least-loaded
placement): the chunk map from any node covers every partition, the tail is read from
each partition's leader whichever node `gateway` names, and a read equals Spark's Kafka
connector record for record (planned from a node, and from PostgreSQL). About 25 s on a quiet
machine, a minute on a busy one, so, like the streaming test, it runs in `make
test-spark-source` (STREAMGATE_SPARK_STREAM_TESTS=1), not in `make test`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.client import wait_until
from support.nodes import gateway_args, pg_url, postgres, requires_postgres, running  # noqa: F401
from support.spark import http, kafka_options, produce, skip_without_spark

from harness.gateway import Gateway

pytestmark = [
    requires_postgres,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        os.environ.get("STREAMGATE_SPARK_STREAM_TESTS") != "1",
        reason="a long Spark test on three nodes: make test-spark-source",
    ),
]
TIER_ARGS = ("--chunk-bytes", "65536", "--chunk-age-ms", "200", "--local-retain-bytes", "0")
TOPIC = "spread"
PARTITIONS = 3
RECORDS = 1200


@pytest.fixture
def nodes(tmp_path: Path, pg_url: str) -> Iterator[list[Gateway]]:  # noqa: F811
    skip_without_spark()
    cluster = [
        Gateway(
            tmp_path / f"n{i}",
            tmp_path / f"n{i}.log",
            [
                *gateway_args(pg_url, i, multi_node=True),
                *("--tier2", str(tmp_path / "t2"), *TIER_ARGS),
            ],
            metrics=True,
            env={"STREAMGATE_PLACEMENT": "least-loaded"},
        )
        for i in (1, 2, 3)
    ]
    with running(cluster):
        yield cluster


def _leaders(bootstrap: str) -> dict[int, int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
    t = meta.topics[TOPIC]
    return {} if t.error else {p.id: p.leader for p in t.partitions.values()}


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (r.partition, r.offset, bytes(r.key), bytes(r.value), r.timestamp) for r in df.collect()
    )


def test_a_topic_led_by_three_nodes_reads_like_the_kafka_connector(
    spark: Any,
    nodes: list[Gateway],
    pg_url: str,  # noqa: F811
) -> None:
    from core.recordbatch import decode_records
    from spark_source import register
    from spark_source.access import Access
    from spark_source.kafka import fetch_range

    register(spark)
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    wait_until(lambda: set(admin.list_topics(timeout=10).brokers) == {1, 2, 3}, 15)
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)])[TOPIC].result(10)
    for node in nodes:
        wait_until(lambda n=node: set(_leaders(n.bootstrap).values()) == {1, 2, 3}, 15)
    leaders = _leaders(nodes[0].bootstrap)
    produce(
        nodes[1].bootstrap,
        TOPIC,
        [(b"k%d" % i, b"%d|" % i + b"v" * 300, None) for i in range(RECORDS)],
    )

    def covered(node: Gateway, node_id: int) -> bool:
        """Every partition in tier 2, flagged led here or not as Metadata says (each node's
        view of the leaders follows the database within a sync)."""
        parts = http(node, f"/streams/{TOPIC}/chunks")["partitions"]
        return (
            sum(p["tier2_end"] for p in parts) == RECORDS
            and all(p["slices"] for p in parts)
            and {p["partition"]: p["leader"] for p in parts}
            == {p: leader == node_id for p, leader in leaders.items()}
        )

    # the chunk map of every node covers every partition
    for node_id, node in enumerate(nodes, start=1):
        wait_until(lambda n=node, i=node_id: covered(n, i), 30)

    # the Kafka-protocol read (of the tail) through node 1 of a partition node 3 leads
    far = next(p for p, leader in leaders.items() if leader == 3)
    end = http(nodes[0], f"/streams/{TOPIC}/chunks")["partitions"][far]["high_watermark"]
    batches = fetch_range(nodes[0].bootstrap, TOPIC, far, 0, end, False, 10.0, Access())
    offsets = [r.offset for b in batches for r in decode_records(b)]
    assert offsets == list(range(end))

    kafka = spark.read.format("kafka").options(**kafka_options(nodes[2], subscribe=TOPIC)).load()
    theirs = _rows(kafka)
    assert len(theirs) == RECORDS
    node = nodes[1]  # planned on a node that leads one partition of three
    df = (
        spark.read.format("streamgate")
        .options(gateway=node.bootstrap, admin=node.admin_url.removeprefix("http://"))
        .option("topic", TOPIC)
        .load()
    )
    assert _rows(df) == theirs
    # planned from PostgreSQL, every partition from tier 2
    df = (
        spark.read.format("streamgate")
        .options(gateway=nodes[0].bootstrap, metadata=pg_url, topic=TOPIC)
        .option("tier2.folder", str(nodes[0].data_dir.parent / "t2"))
        .load()
    )
    assert _rows(df) == theirs
