"""Segment log files rolled often while producers keep several requests in flight: every
acknowledged record reads back whole, in order, with its content.

Small log files (`--chunk-bytes`) make the flusher open a new file every few hundred
requests, on a flush thread that goes on with what queued meanwhile, while requests ending
beside it send their appends to the native writer: the two must never write the same place.
Four producers and librdkafka's CRC check on every batch it reads make a mix-up visible.
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Producer, TopicPartition
from support.confluent import confluent_consumer, create_topic

from harness.kafka import run_tool, unavailable_reason

_PARTITIONS = 8
_PER_PRODUCER = 8_000
_PRODUCERS = 4
_TOPIC = "rolls"


def _value(producer: int, i: int) -> bytes:
    return f"{producer}:{i:06d}:".encode() * 100  # ~1 KB, its own content


def _produce(bootstrap: str, producer_id: int, acked: dict[tuple[int, int], int]) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,  # as many requests in flight as it may: the queue never empties
            "batch.size": 16384,
            "enable.idempotence": True,
        }
    )
    lock = threading.Lock()

    def delivered(err, msg) -> None:
        assert err is None, err
        with lock:
            acked[(msg.partition(), msg.offset())] = int(msg.key())

    for i in range(_PER_PRODUCER):
        key = producer_id * _PER_PRODUCER + i
        producer.produce(
            _TOPIC,
            _value(producer_id, i),
            key=str(key).encode(),
            partition=i % _PARTITIONS,
            on_delivery=delivered,
        )
        producer.poll(0)
    assert producer.flush(60) == 0


@pytest.mark.gateway_args("--chunk-bytes", "1048576")
def test_every_acked_record_reads_back_across_many_rolls(gateway) -> None:
    create_topic(gateway.bootstrap, _TOPIC, _PARTITIONS)
    acked: dict[tuple[int, int], int] = {}
    threads = [
        threading.Thread(target=_produce, args=(gateway.bootstrap, p, acked))
        for p in range(_PRODUCERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(acked) == _PRODUCERS * _PER_PRODUCER

    consumer = confluent_consumer(gateway.bootstrap, **{"check.crcs": True})
    consumer.assign([TopicPartition(_TOPIC, p, 0) for p in range(_PARTITIONS)])
    read: dict[tuple[int, int], int] = {}
    try:
        for _ in range(600):
            for message in consumer.consume(1000, timeout=0.5):
                assert message.error() is None, message.error()
                key = int(message.key())
                producer_id, i = divmod(key, _PER_PRODUCER)
                assert message.value() == _value(producer_id, i), (key, message.offset())
                read[(message.partition(), message.offset())] = key
            if len(read) >= len(acked):
                break
    finally:
        consumer.close()
    assert read == acked
    for p in range(_PARTITIONS):  # dense offsets, nothing missing or extra
        offsets = sorted(o for part, o in read if part == p)
        assert offsets == list(range(len(offsets)))


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
@pytest.mark.gateway_args("--chunk-bytes", str(2 << 20))
def test_kafkas_perf_producer_across_many_rolls_reads_back_whole(gateway) -> None:
    """Kafka's own perf producer (five requests in flight, the queue never empty) is the
    load that once found a native send landing where a flush thread was writing."""
    records = 150_000
    create_topic(gateway.bootstrap, "perf-rolls", _PARTITIONS)
    out = run_tool(
        "kafka-producer-perf-test.sh",
        [
            "--topic",
            "perf-rolls",
            "--num-records",
            str(records),
            "--record-size",
            "1024",
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={gateway.bootstrap}",
            "acks=all",
        ],
        timeout=180,
    )
    assert out.returncode == 0 and f"{records} records sent" in out.stdout, out.stderr[-2000:]
    # Read back by Kafka's consumer (it checks every batch's CRC and fails on a corrupt one;
    # librdkafka's consumer aborts the process on some, pytest with it).
    out = run_tool(
        "kafka-consumer-perf-test.sh",
        [
            "--bootstrap-server",
            gateway.bootstrap,
            "--topic",
            "perf-rolls",
            "--messages",
            str(records),
            "--timeout",
            "60000",
        ],
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "exception" not in (out.stdout + out.stderr).lower(), out.stdout + out.stderr[-2000:]
    header, values = (line.split(", ") for line in out.stdout.strip().splitlines()[-2:])
    assert int(dict(zip(header, values, strict=True))["data.consumed.in.nMsg"]) == records
