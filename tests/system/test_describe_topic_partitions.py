"""DescribeTopicPartitions (key 75): the Java admin client 3.9.1 describes topics with it,
one partition per response (the cursor), and raw requests check the paging and errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kio.schema.describe_topic_partitions.v0.request import (
    Cursor,
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from kio.static.primitive import i32
from support.client import RawClient, unique_topic
from support.txn import create_topic
from system.test_txn_java import _java_source_launcher

from core.errors import ErrorCode
from harness import kafka as kafka_harness

SOURCE = Path(__file__).resolve().parents[1] / "support" / "java" / "DescribeTopics.java"


def test_java_admin_describes_topics_page_by_page(shared_gateway) -> None:
    java, reason = _java_source_launcher("3.9.1")
    if reason:
        pytest.skip(reason)
    one, three = unique_topic("dtp1"), unique_topic("dtp3")
    create_topic(shared_gateway.bootstrap, one, partitions=1)
    create_topic(shared_gateway.bootstrap, three, partitions=3)
    run = subprocess.run(
        [*java, str(SOURCE), shared_gateway.bootstrap, one, three],
        capture_output=True,
        text=True,
        timeout=120,
        env=kafka_harness.tool_env(),
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert any(f"topic {three} " in line and "partitions 3 leaders 0:" in line for line in lines)
    assert any(f"topic {one} " in line and "partitions 1 " in line for line in lines)
    assert "missing UnknownTopicOrPartitionException" in lines


def test_paging_and_errors(shared_gateway) -> None:
    first, second = sorted([unique_topic("dtpa"), unique_topic("dtpb")])
    create_topic(shared_gateway.bootstrap, first, partitions=2)
    create_topic(shared_gateway.bootstrap, second, partitions=2)
    wanted = (TopicRequest(name=second), TopicRequest(name=first), TopicRequest(name="dtp-none"))
    with RawClient(shared_gateway.bootstrap) as client:
        page = client.request(
            DescribeTopicPartitionsRequest(topics=wanted, response_partition_limit=i32(3))
        )
        # Sorted by name; the missing topic sorts first ("dtp-" < "dtpa").
        assert [(t.name, t.error_code) for t in page.topics] == [
            ("dtp-none", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            (first, ErrorCode.NONE),
            (second, ErrorCode.NONE),
        ]
        assert [p.partition_index for p in page.topics[1].partitions] == [0, 1]
        assert [p.partition_index for p in page.topics[2].partitions] == [0]
        assert page.topics[1].topic_id is not None
        assert (page.next_cursor.topic_name, page.next_cursor.partition_index) == (second, 1)
        rest = client.request(
            DescribeTopicPartitionsRequest(
                topics=wanted,
                response_partition_limit=i32(3),
                cursor=Cursor(topic_name=second, partition_index=i32(1)),
            )
        )
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in rest.topics] == [
            (second, [1])
        ]
        assert rest.next_cursor is None
