"""Consumers reading a topic from its start, far beyond the recent-batch memory, get every
record in order while the gateway reads the tier-1 files ahead of them (and answers their
next Fetch from that memory); a Fetch of data only in tier 2 is filled across chunks."""

from __future__ import annotations

import re
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from support.client import (
    RawClient,
    Rec,
    build_record_batch,
    decode_records,
    fetch_request,
    produce_request,
    wait_until,
)
from support.confluent import confluent_consumer, create_topic
from support.scaling import METRICS_ARGS, http

PARTITIONS = 4
PER_PARTITION = 1000
VALUE_BYTES = 500
FETCH_BYTES = 64 << 10  # max.partition.fetch.bytes: many Fetches per partition


def _value(partition: int, i: int) -> bytes:
    return f"{partition}:{i}:".encode().ljust(VALUE_BYTES, b"x")


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384, "acks": "all"}
    )
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            producer.produce(topic, _value(p, i), partition=p)
        if i % 200 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def _expected() -> dict[int, list[bytes]]:
    return {p: [_value(p, i) for i in range(PER_PARTITION)] for p in range(PARTITIONS)}


def _confluent_read(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    consumer = confluent_consumer(bootstrap, **{"max.partition.fetch.bytes": FETCH_BYTES})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        for _ in range(600):
            for message in consumer.consume(500, timeout=0.5):
                assert message.error() is None, message.error()
                got[message.partition()].append(message.value())
            if sum(map(len, got.values())) >= PARTITIONS * PER_PARTITION:
                break
    finally:
        consumer.close()
    return got


def _kafka_python_read(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=FETCH_BYTES,
        consumer_timeout_ms=30_000,
    )
    partitions = [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        for message in consumer:
            got[message.partition].append(message.value)
            if sum(map(len, got.values())) >= PARTITIONS * PER_PARTITION:
                break
    finally:
        consumer.close()
    return got


def _read_ahead_hits(gateway: Any) -> float:
    status, text = http(gateway, "/metrics")
    assert status == 200
    found = re.search(r"^streamgate_tier1_read_ahead_hits_total (\S+)$", text, re.M)
    assert found is not None, text[-2000:]
    return float(found.group(1))


@pytest.mark.gateway_args(
    "--recent-batch-bytes", str(32 << 10), "--read-ahead-bytes", str(256 << 10), *METRICS_ARGS
)
def test_consumers_behind_the_tail_get_every_record_in_order(gateway, topic) -> None:
    create_topic(gateway.bootstrap, topic, PARTITIONS)
    _produce(gateway.bootstrap, topic)  # about 2 MB: 60 times the recent-batch memory
    expected = _expected()
    assert _confluent_read(gateway.bootstrap, topic) == expected
    assert _kafka_python_read(gateway.bootstrap, topic) == expected
    # Fetches were answered from read-ahead memory. (Not asserted per client: on a loaded
    # machine a reader's next Fetch can beat every background read of one pass, and the
    # budget here is small, so one of the two may see none.)
    assert _read_ahead_hits(gateway) > 0


@pytest.mark.gateway_args(
    "--chunk-bytes", str(64 << 10), "--chunk-age-ms", "200", "--local-retain-bytes", "0"
)
def test_a_tier2_fetch_goes_on_into_the_next_chunks(gateway, topic) -> None:
    """With every file trimmed, one Fetch of 1 MiB gets the batches of several chunks (a
    chunk holds 64 KiB here), in order, as Kafka fills a Fetch across its segment files."""
    values = [f"{i:06d}".encode().ljust(1000, b"v") for i in range(400)]
    with RawClient(gateway.bootstrap) as client:
        for start in range(0, len(values), 20):  # 20 KB batches: about 3 to a chunk
            batch = build_record_batch([Rec(v) for v in values[start : start + 20]])
            response = client.request(produce_request(topic, 0, batch))
            assert response.responses[0].partition_responses[0].error_code == 0

    def trimmed() -> bool:
        files = (gateway.data_dir / "streams").rglob("segment-*.log")
        return sum(p.stat().st_size for p in files) == 0

    wait_until(trimmed, timeout=60, interval=0.1)
    with RawClient(gateway.bootstrap) as client:
        fetched = client.request(fetch_request(topic, 0, 0, max_wait_ms=0))
        partition = fetched.responses[0].partitions[0]
        assert partition.error_code == 0
        got = [value for _, _, value in decode_records(partition.records)]
        assert got == values  # about 400 KB: from several chunks in one answer
        # from the middle of a chunk, with a smaller budget: whole batches up to it
        middle = client.request(
            fetch_request(topic, 0, 130, max_wait_ms=0, partition_max_bytes=100_000)
        )
        records = decode_records(middle.responses[0].partitions[0].records)
        assert [offset for offset, _, _ in records] == list(range(120, 200))
