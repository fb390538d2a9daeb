"""Helpers for the transaction tests: topics, transactional producers and consumers of
several client libraries, all against a real gateway."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

# the transactional producer script tests/system/test_txn_crash.py runs (and SIGKILLs) as a process
CRASH_PRODUCER = Path(__file__).with_name("txn_crash_producer.py")


def create_topic(bootstrap: str, name: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def txn_producer(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra}
    )
    producer.init_transactions(30)
    return producer


def produce_txn(
    producer: Producer, topic: str, values: list[bytes], commit: bool, partition: int = -1
) -> None:
    producer.begin_transaction()
    for value in values:
        if partition >= 0:
            producer.produce(topic, value=value, key=value, partition=partition)
        else:
            producer.produce(topic, value=value, key=value)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def confluent_values(
    bootstrap: str, topic: str, isolation: str, expect: int, timeout: float = 30.0
) -> list[bytes]:
    """Every value of the topic from the beginning, with an assignment (no group)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        quiet_until = 0.0
        while time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is None:
                if len(got) >= expect and time.monotonic() > quiet_until:
                    break
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
            quiet_until = time.monotonic() + 1.5  # a little more, to see any extra record
        return got
    finally:
        consumer.close()


def kafka_python_values(
    bootstrap: str, topic: str, isolation: str, expect: int, timeout: float = 30.0
) -> list[bytes]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level=isolation,
        consumer_timeout_ms=3000,
    )
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = len(got)
            got.extend(record.value for record in consumer)
            if len(got) >= expect and len(got) == before:
                break
        return got
    finally:
        consumer.close()


def aiokafka_values(
    bootstrap: str, topic: str, isolation: str, expect: int, timeout: float = 30.0
) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer

    async def run() -> list[bytes]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            isolation_level=isolation,
        )
        await consumer.start()
        try:
            got: list[bytes] = []
            deadline = time.monotonic() + timeout
            idle = 0
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                new = [r.value for records in batch.values() for r in records]
                got.extend(v for v in new if v is not None)
                idle = 0 if new else idle + 1
                if len(got) >= expect and idle >= 3:
                    break
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())
