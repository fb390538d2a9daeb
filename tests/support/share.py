"""Share-group tests: confluent-kafka share consumers and their polling helpers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(timeout=15)


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(15) == 0


def share_consumer(
    bootstrap: str, group: str, topic: str, explicit: bool = False, **extra: Any
) -> Any:
    config = {"bootstrap.servers": bootstrap, "group.id": group, **extra}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    consumer = ShareConsumer(config)
    consumer.subscribe([topic])
    return consumer


def poll_records(
    consumer: Any,
    until: Callable[[list[Any]], bool],
    timeout: float = 20.0,
    ack: Any = None,
) -> list[Any]:
    """Poll until `until(records so far)`; with `ack`, acknowledge each record so (explicit
    mode) and commit after every poll."""
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(records):
        batch = [m for m in consumer.poll(0.5) if m.error() is None]
        records.extend(batch)
        if ack is not None and batch:
            for message in batch:
                consumer.acknowledge(message, ack)
            consumer.commit_sync(15)
    return records


def poll_nothing(consumer: Any, seconds: float) -> list[Any]:
    """Everything delivered within `seconds` (expected: nothing)."""
    out: list[Any] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out.extend(m for m in consumer.poll(0.5) if m.error() is None)
    return out
