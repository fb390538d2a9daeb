"""The hand-written Metadata encoder is byte-identical to kio's for every version, and fast
for topics with thousands of virtual partitions."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from kafkawire.codec import RequestHeader, encode_response
from kafkawire.metadata_response import TopicMetadata, encode_metadata_response

NODE = 1


def _kio_body(topics: list[TopicMetadata], cluster_ops: int) -> dict[str, Any]:
    nodes = [NODE]
    return {
        "brokers": [{"node_id": NODE, "host": "gw.example", "port": 9092}],
        "cluster_id": "cluster-x",
        "controller_id": NODE,
        "topics": [
            {
                "error_code": t.error_code,
                "name": t.name,
                "topic_id": t.topic_id,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": i,
                        "leader_id": NODE,
                        "leader_epoch": 0,
                        "replica_nodes": nodes,
                        "isr_nodes": nodes,
                    }
                    for i in range(t.partitions)
                ],
            }
            for t in topics
        ],
        "cluster_authorized_operations": cluster_ops,
    }


@pytest.mark.parametrize("version", range(14))
@pytest.mark.parametrize("cluster_ops", [-(2**31), 3320])
def test_matches_kio(version: int, cluster_ops: int) -> None:
    topics = [
        TopicMetadata(0, "orders", 7),
        TopicMetadata(3, "missing", 0),
        TopicMetadata(0, "ünïcode-ok", 1),
        TopicMetadata(0, "empty", 0, uuid.UUID(int=0)),
    ]
    header = RequestHeader(3, version, 42, "c", version >= 9)
    expected = encode_response(header, _kio_body(topics, cluster_ops))
    got = encode_metadata_response(
        42, version, [(NODE, "gw.example", 9092)], "cluster-x", NODE, topics, NODE, cluster_ops
    )
    assert got == expected


def test_five_thousand_partitions_take_a_few_ms() -> None:
    topics = [TopicMetadata(0, "wide", 5000)]
    encode_metadata_response(1, 12, [(NODE, "h", 1)], "c", NODE, topics, NODE)  # warm cache
    started = time.perf_counter()
    for _ in range(10):
        encode_metadata_response(1, 12, [(NODE, "h", 1)], "c", NODE, topics, NODE)
    assert (time.perf_counter() - started) / 10 < 0.005
    cold = time.perf_counter()
    encode_metadata_response(1, 9, [(NODE, "h", 1)], "c", NODE, [TopicMetadata(0, "w", 4999)], NODE)
    assert time.perf_counter() - cold < 0.05
