"""Round trips through the gateway with aiokafka (run with asyncio.run per test)."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from support.client import DEFAULT_PARTITIONS, unique_topic

TIMEOUT = 20.0


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=90))


def producer_for(bootstrap: str, **extra) -> AIOKafkaProducer:
    return AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=15000, **extra)


def consumer_for(bootstrap: str, **extra) -> AIOKafkaConsumer:
    conf = {
        "bootstrap_servers": bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": "none",
        "request_timeout_ms": 15000,
    }
    conf.update(extra)
    return AIOKafkaConsumer(**conf)


async def send_all(producer: AIOKafkaProducer, topic: str, messages: list[dict]) -> list:
    futures = [await producer.send(topic, **m) for m in messages]
    return list(await asyncio.gather(*futures))


async def consume(consumer: AIOKafkaConsumer, count: int, timeout: float = TIMEOUT) -> list:
    records: list = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        batch = await consumer.getmany(timeout_ms=200)
        for tp in sorted(batch):
            records.extend(batch[tp])
    return records


async def read_all(bootstrap: str, topic: str, count: int, partitions: int) -> list:
    consumer = consumer_for(bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records = await consume(consumer, count)
        records += await consume(consumer, 1, 0.5)
        return records
    finally:
        await consumer.stop()


# ----------------------------------------------------------------- metadata / admin


async def partition_ids(admin: AIOKafkaAdminClient, topic: str) -> list[int]:
    (desc,) = await admin.describe_topics([topic])
    assert desc["error_code"] == 0, desc
    return sorted(p["partition"] for p in desc["partitions"])


def test_list_metadata(shared_gateway, topic):
    async def main():
        producer = producer_for(shared_gateway.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"x")
        finally:
            await producer.stop()
        consumer = consumer_for(shared_gateway.bootstrap)
        await consumer.start()
        try:
            assert topic in await consumer.topics()
        finally:
            await consumer.stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=shared_gateway.bootstrap)
        await admin.start()
        try:
            assert topic in await admin.list_topics()
            assert await partition_ids(admin, topic) == list(range(DEFAULT_PARTITIONS))
        finally:
            await admin.close()

    run(main())


def test_create_and_delete_topic(shared_gateway):
    topic = unique_topic("aio-admin")

    async def main():
        admin = AIOKafkaAdminClient(bootstrap_servers=shared_gateway.bootstrap)
        await admin.start()
        try:
            resp = await admin.create_topics([NewTopic(topic, 6, 1)])
            assert [(t[0], t[1]) for t in resp.topic_errors] == [(topic, 0)]
            assert await partition_ids(admin, topic) == list(range(6))

            again = await admin.create_topics([NewTopic(topic, 1, 1)])
            assert [(t[0], t[1]) for t in again.topic_errors] == [(topic, 36)]  # already exists

            deleted = await admin.delete_topics([topic])
            assert [(t[0], t[1]) for t in deleted.topic_error_codes] == [(topic, 0)]
            for _ in range(50):
                if topic not in await admin.list_topics():
                    break
                await asyncio.sleep(0.2)
            assert topic not in await admin.list_topics()
        finally:
            await admin.close()

    run(main())


def test_auto_create_on_produce(shared_gateway, topic):
    async def main():
        producer = producer_for(shared_gateway.bootstrap)
        await producer.start()
        try:
            meta = await producer.send_and_wait(topic, b"first", partition=1)
        finally:
            await producer.stop()
        assert (meta.topic, meta.partition, meta.offset) == (topic, 1, 0)
        admin = AIOKafkaAdminClient(bootstrap_servers=shared_gateway.bootstrap)
        await admin.start()
        try:
            assert await partition_ids(admin, topic) == list(range(DEFAULT_PARTITIONS))
        finally:
            await admin.close()

    run(main())


# ------------------------------------------------------------------- produce paths


def test_keyed_unkeyed_headers_roundtrip(shared_gateway, topic):
    sent = [
        {"key": b"k1", "value": b"keyed"},
        {"value": b"unkeyed"},
        {"key": b"k2", "value": None},
        {"value": b"with-headers", "headers": [("h1", b"v1"), ("h2", b""), ("h1", b"again")]},
    ]

    async def main():
        producer = producer_for(shared_gateway.bootstrap)
        await producer.start()
        try:
            metas = await send_all(producer, topic, [dict(m, partition=2) for m in sent])
        finally:
            await producer.stop()
        assert [m.offset for m in metas] == list(range(len(sent)))
        return await read_all(shared_gateway.bootstrap, topic, len(sent), DEFAULT_PARTITIONS)

    records = run(main())
    assert [(r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records] == [
        (2, 0, b"k1", b"keyed", []),
        (2, 1, None, b"unkeyed", []),
        (2, 2, b"k2", None, []),
        (2, 3, None, b"with-headers", [("h1", b"v1"), ("h2", b""), ("h1", b"again")]),
    ]


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_compression_roundtrip(shared_gateway, codec):
    topic = unique_topic(f"aio-{codec}")
    n = 120
    sent = [
        {
            "key": f"key-{i % 6}".encode(),
            "value": (f"v{i}|" * (i % 9 + 1)).encode(),
            "headers": [("i", str(i).encode())],
        }
        for i in range(n)
    ]

    async def main():
        producer = producer_for(shared_gateway.bootstrap, compression_type=codec, linger_ms=50)
        await producer.start()
        try:
            metas = await send_all(producer, topic, sent)
        finally:
            await producer.stop()
        records = await read_all(shared_gateway.bootstrap, topic, n, DEFAULT_PARTITIONS)
        return metas, records

    metas, records = run(main())
    assert len(records) == n
    expected = {
        (m.partition, m.offset): (s["key"], s["value"]) for m, s in zip(metas, sent, strict=True)
    }
    assert {(r.partition, r.offset): (r.key, r.value) for r in records} == expected
    assert sorted(int(r.headers[0][1]) for r in records) == list(range(n))
    parts: dict[int, list[int]] = defaultdict(list)
    for r in records:
        parts[r.partition].append(r.offset)
    for p, offsets in parts.items():
        assert offsets == list(range(len(offsets))), p


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(shared_gateway, acks):
    topic = unique_topic(f"aio-acks-{acks}")
    n = 20

    async def main():
        producer = producer_for(shared_gateway.bootstrap, acks=acks)
        await producer.start()
        try:
            metas = await send_all(
                producer, topic, [{"value": f"a{i}".encode(), "partition": 0} for i in range(n)]
            )
        finally:
            await producer.stop()
        records = await read_all(shared_gateway.bootstrap, topic, n, DEFAULT_PARTITIONS)
        return metas, records

    metas, records = run(main())
    if acks != 0:
        assert [m.offset for m in metas] == list(range(n))
    assert [(r.partition, r.offset, r.value) for r in records] == [
        (0, i, f"a{i}".encode()) for i in range(n)
    ]


def test_idempotent_producer(shared_gateway, topic):
    n = 60

    async def main():
        producer = producer_for(shared_gateway.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            metas = await send_all(
                producer,
                topic,
                [{"key": f"k{i % 4}".encode(), "value": str(i).encode()} for i in range(n)],
            )
        finally:
            await producer.stop()
        records = await read_all(shared_gateway.bootstrap, topic, n, DEFAULT_PARTITIONS)
        return metas, records

    metas, records = run(main())
    expected = {(m.partition, m.offset): str(i).encode() for i, m in enumerate(metas)}
    assert {(r.partition, r.offset): r.value for r in records} == expected
    assert len(records) == n


def test_consume_earliest_latest_specific_and_offsets(shared_gateway, topic):
    base = int(time.time() * 1000) - 30_000
    stamps = [base + 1000 * i for i in range(4)]

    async def main():
        producer = producer_for(shared_gateway.bootstrap)
        await producer.start()
        tp = TopicPartition(topic, 1)
        consumers = [consumer_for(shared_gateway.bootstrap) for _ in range(3)]
        try:
            await send_all(
                producer,
                topic,
                [
                    {"value": f"old{i}".encode(), "partition": 1, "timestamp_ms": ts}
                    for i, ts in enumerate(stamps)
                ],
            )
            for c in consumers:
                await c.start()
                c.assign([tp])
            earliest, latest, specific = consumers
            await earliest.seek_to_beginning(tp)
            await latest.seek_to_end(tp)
            specific.seek(tp, 3)
            assert await latest.position(tp) == 4
            assert await earliest.position(tp) == 0

            tp0 = TopicPartition(topic, 0)
            assert await earliest.beginning_offsets([tp, tp0]) == {tp: 0, tp0: 0}
            assert await earliest.end_offsets([tp, tp0]) == {tp: 4, tp0: 0}
            found = await earliest.offsets_for_times({tp: base + 1500})
            assert (found[tp].offset, found[tp].timestamp) == (2, stamps[2])
            assert (await earliest.offsets_for_times({tp: stamps[-1] + 1}))[tp] is None

            await send_all(producer, topic, [{"value": b"new", "partition": 1}])
            return (
                await consume(earliest, 5),
                await consume(specific, 2),
                await consume(latest, 1) + await consume(latest, 1, 0.5),
            )
        finally:
            await producer.stop()
            for c in consumers:
                await c.stop()

    got_earliest, got_specific, got_latest = run(main())
    values = [f"old{i}".encode() for i in range(4)] + [b"new"]
    assert [(r.offset, r.value) for r in got_earliest] == list(enumerate(values))
    assert [(r.offset, r.value) for r in got_specific] == [(3, b"old3"), (4, b"new")]
    assert [(r.offset, r.value) for r in got_latest] == [(4, b"new")]
    assert [r.timestamp for r in got_earliest[:4]] == stamps
