"""Idempotent producers through a proxy that cuts connections in the middle of Produce requests.

The gateway advertises the proxy's address, so every client connection (bootstrap, metadata
refreshes, reconnects) goes through ``DroppingProxy``. Some Produce requests reach the server
in full but their responses never reach the client (the server appended the batches; the
client must retry them and the server must answer the retries as duplicates), others are
cut before or in the middle of the request. After producing, the log is read straight from
the gateway with raw Fetch requests and checked for exactly-once: every acknowledged record
is present at the offset it was acknowledged with, no value appears twice, and every
partition's offsets are dense from 0.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from support.client import ERR_NONE, RawClient, decode_records, fetch_request
from support.confluent import create_topic
from support.proxy import DroppingProxy

RECORDS = 5000
PARTITIONS = 4
DROP_EVERY = 5  # every 5th chunk that completes a Produce request is cut
MIN_ACK_LOST = 3  # forwarded Produce requests whose responses never reached the client
MIN_DROPS = 5
PRODUCE_TIMEOUT = 45.0
SMALL_BATCH_BYTES = 256  # aiokafka and kafka-python: many small batches, many requests

# (value, partition, offset) of an acknowledged record
Ack = tuple[bytes, int, int]


@pytest.fixture
def proxy(request: pytest.FixtureRequest):
    """A dropping proxy in front of the ``gateway`` fixture, which advertises the proxy.

    The proxy binds its port first so that the gateway can be started with
    ``--advertised-listener`` pointing at it; request this fixture before ``gateway``.
    """
    proxy = DroppingProxy(drop_every=DROP_EVERY)
    advertised = f"127.0.0.1:{proxy.port}"
    request.node.add_marker(pytest.mark.gateway_args("--advertised-listener", advertised))
    gateway = request.getfixturevalue("gateway")
    if advertised not in gateway.extra_args:
        proxy.close()
        pytest.fail("the gateway fixture was set up before the proxy fixture")
    proxy.start(gateway.port)
    yield proxy
    proxy.close()
    assert not proxy.errors, proxy.errors


def values_for(prefix: str) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(RECORDS)]


def read_log(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes | None]]]:
    """Every (offset, value) of every partition, read with raw Fetch requests."""
    log: dict[int, list[tuple[int, bytes | None]]] = {}
    with RawClient(bootstrap) as client:
        for partition in range(PARTITIONS):
            records: list[tuple[int, bytes | None]] = []
            offset = 0
            while True:
                resp = client.request(fetch_request(topic, partition, offset, max_wait_ms=0))
                part = resp.responses[0].partitions[0]
                assert part.error_code == ERR_NONE, part
                got = [(o, v) for o, _k, v in decode_records(part.records) if o >= offset]
                records.extend(got)
                if got:
                    offset = got[-1][0] + 1
                if offset >= part.high_watermark:
                    break
                assert got, f"no progress reading partition {partition} at {offset}"
            log[partition] = records
    return log


def check_log(
    bootstrap: str, topic: str, sent: list[bytes], acked: list[Ack], exact_offsets: bool = True
) -> Counter[bytes]:
    """Assert at-least-once plus dense offsets; return how often each value is in the log."""
    log = read_log(bootstrap, topic)
    counts: Counter[bytes] = Counter()
    where: dict[bytes, set[tuple[int, int]]] = {}
    for partition, records in log.items():
        offsets = [o for o, _v in records]
        assert offsets == list(range(len(records))), f"partition {partition} offsets not dense"
        for offset, value in records:
            assert value is not None
            counts[value] += 1
            where.setdefault(value, set()).add((partition, offset))
    unknown = set(counts) - set(sent)
    assert not unknown, f"values nobody sent: {sorted(unknown)[:10]}"
    missing = [value for value, _p, _o in acked if value not in counts]
    assert not missing, f"{len(missing)} acknowledged records missing, e.g. {missing[:10]}"
    if exact_offsets:
        wrong = [
            (value, partition, offset, sorted(where[value]))
            for value, partition, offset in acked
            if (partition, offset) not in where[value]
        ]
        assert not wrong, f"{len(wrong)} records acknowledged at another offset: {wrong[:10]}"
    return counts


def assert_exactly_once(
    proxy: DroppingProxy, bootstrap: str, topic: str, sent: list[bytes], acked: list[Ack]
) -> None:
    stats = proxy.summary()
    print(f"\n{topic}: {len(acked)}/{len(sent)} acknowledged; proxy {stats}")
    counts = check_log(bootstrap, topic, sent, acked)
    duplicated = sorted(value for value, n in counts.items() if n > 1)
    assert not duplicated, f"{len(duplicated)} values written twice, e.g. {duplicated[:10]}"
    assert len(acked) == len(sent), f"only {len(acked)} of {len(sent)} records acknowledged"
    # The test must not pass vacuously: requests really were cut, including some that had
    # reached the server in full, and the server really did receive those batches again.
    assert proxy.drops >= MIN_DROPS, stats
    assert stats.get("produce_requests_ack_lost", 0) >= MIN_ACK_LOST, stats
    assert stats["batches_resent"] >= MIN_ACK_LOST, stats


def run_with_drops(
    proxy: DroppingProxy, gateway, topic: str, produce: Callable[[], list[Ack]]
) -> list[Ack]:
    create_topic(gateway.bootstrap, topic, PARTITIONS)
    proxy.dropping = True
    started = time.monotonic()
    try:
        acked = produce()
    finally:
        proxy.dropping = False
    print(f"\nproduced in {time.monotonic() - started:.1f}s")
    return acked


# ------------------------------------------------------------------------------ clients


def confluent_produce(address: str, topic: str, values: list[bytes], **extra) -> list[Ack]:
    conf = {
        "bootstrap.servers": address,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "batch.num.messages": 25,
        "message.timeout.ms": int(PRODUCE_TIMEOUT * 1000),
        "request.timeout.ms": 10000,
        "retry.backoff.ms": 20,
        "retry.backoff.max.ms": 200,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 200,
    }
    conf.update(extra)
    producer = Producer(conf)
    acked: list[Ack] = []
    failed: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.append((msg.value(), msg.partition(), msg.offset()))
        else:
            failed.append(f"{msg.value()!r}: {err}")

    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(
                    topic, value=value, partition=i % PARTITIONS, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(PRODUCE_TIMEOUT)
    assert remaining == 0, f"{remaining} records still queued"
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:5]}"
    return acked


def aiokafka_produce(address: str, topic: str, values: list[bytes]) -> list[Ack]:
    from aiokafka import AIOKafkaProducer

    async def main() -> list[Ack]:
        producer = AIOKafkaProducer(
            bootstrap_servers=address,
            enable_idempotence=True,
            acks="all",
            linger_ms=2,
            max_batch_size=SMALL_BATCH_BYTES,
            request_timeout_ms=10000,
            retry_backoff_ms=20,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value=value, partition=i % PARTITIONS)
                for i, value in enumerate(values)
            ]
            results = await asyncio.gather(*futures, return_exceptions=True)
        finally:
            await producer.stop()
        failed = [(v, r) for v, r in zip(values, results, strict=True) if isinstance(r, Exception)]
        assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:5]}"
        return [(v, r.partition, r.offset) for v, r in zip(values, results, strict=True)]

    return asyncio.run(asyncio.wait_for(main(), timeout=PRODUCE_TIMEOUT + 10))


def kafka_python_produce(address: str, topic: str, values: list[bytes]) -> list[Ack]:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=address,
        enable_idempotence=True,
        acks="all",
        linger_ms=2,
        batch_size=SMALL_BATCH_BYTES,
        delivery_timeout_ms=int(PRODUCE_TIMEOUT * 1000),
        request_timeout_ms=10000,
        retry_backoff_ms=20,
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=200,
    )
    try:
        futures = [
            producer.send(topic, value=value, partition=i % PARTITIONS)
            for i, value in enumerate(values)
        ]
        producer.flush(timeout=PRODUCE_TIMEOUT)
    finally:
        producer.close(timeout=5)
    failed = [(v, f.exception) for v, f in zip(values, futures, strict=True) if f.failed()]
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:5]}"
    acked = []
    for value, future in zip(values, futures, strict=True):
        assert future.succeeded(), f"{value!r} not acknowledged"
        meta = future.value
        acked.append((value, meta.partition, meta.offset))
    return acked


# -------------------------------------------------------------------------------- tests


def test_confluent_idempotent_exactly_once(proxy, gateway, topic):
    values = values_for("cf")
    acked = run_with_drops(
        proxy, gateway, topic, lambda: confluent_produce(proxy.address, topic, values)
    )
    assert_exactly_once(proxy, gateway.bootstrap, topic, values, acked)


def test_aiokafka_idempotent_exactly_once(proxy, gateway, topic):
    values = values_for("aio")
    acked = run_with_drops(
        proxy, gateway, topic, lambda: aiokafka_produce(proxy.address, topic, values)
    )
    assert_exactly_once(proxy, gateway.bootstrap, topic, values, acked)


def test_kafka_python_idempotent_exactly_once(proxy, gateway, topic):
    values = values_for("kp")
    acked = run_with_drops(
        proxy, gateway, topic, lambda: kafka_python_produce(proxy.address, topic, values)
    )
    assert_exactly_once(proxy, gateway.bootstrap, topic, values, acked)


def test_control_without_idempotence_is_only_at_least_once(proxy, gateway, topic):
    """The same drops with idempotence off: retries of appended batches may duplicate.

    Duplicates are not asserted (whether a cut lands on a retried batch is timing), only
    reported; the test checks at-least-once and that the drops happened.
    """
    values = values_for("ctl")
    acked = run_with_drops(
        proxy,
        gateway,
        topic,
        lambda: confluent_produce(
            proxy.address,
            topic,
            values,
            **{"enable.idempotence": False, "retries": 1000, "max.in.flight": 5},
        ),
    )
    stats = proxy.summary()
    counts = check_log(gateway.bootstrap, topic, values, acked, exact_offsets=False)
    duplicated = sum(n - 1 for n in counts.values() if n > 1)
    print(f"\ncontrol (idempotence off): {duplicated} duplicate records in the log; proxy {stats}")
    assert proxy.drops >= MIN_DROPS, stats
    assert stats.get("produce_requests_ack_lost", 0) >= MIN_ACK_LOST, stats
