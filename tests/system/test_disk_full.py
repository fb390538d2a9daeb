"""A full disk fails the unacknowledged appends with KAFKA_STORAGE_ERROR; nothing acked is lost.

The gateway runs under `prlimit --fsize`, so its segment log cannot grow past a few MiB:
writes past that fail with EFBIG just as they would with ENOSPC. Producers must get a clear
error for what could not be written, the server must keep serving, everything acknowledged
must stay readable, and after a restart without the limit the topic takes writes again.
"""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from conftest import Gateway

FILE_SIZE_LIMIT = 3 * 1024 * 1024
VALUE = b"x" * 1024


class SizeLimitedGateway(Gateway):
    def command(self) -> list[str]:
        return ["prlimit", f"--fsize={FILE_SIZE_LIMIT}", "--", *super().command()]


def _produce(bootstrap: str, topic: str, count: int) -> tuple[dict[int, int], list[int]]:
    acked: dict[int, int] = {}
    errors: list[int] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            acked[int(msg.key())] = msg.offset()
        else:
            errors.append(err.code())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "retries": 0,
            "enable.idempotence": False,
            "linger.ms": 5,
            "message.timeout.ms": 20000,
        }
    )
    for i in range(count):
        producer.produce(topic, key=str(i), value=VALUE, partition=0, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    return acked, errors


def _read_all(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "disk-full", "enable.auto.commit": False}
    )
    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    stored: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while len(stored) < high and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            stored[int(msg.key())] = msg.offset()
    consumer.close()
    assert len(stored) == high, "could not read back up to the high watermark"
    return stored


def test_disk_full_fails_cleanly_and_loses_nothing(tmp_path) -> None:
    limited = SizeLimitedGateway(
        tmp_path / "data", tmp_path / "server.log", ("--default-partitions", "1")
    )
    limited.start()
    try:
        acked, errors = _produce(limited.bootstrap, "full", 5000)
        assert acked, "the first records fit and must be acknowledged"
        assert errors, "records past the size limit must fail"
        assert set(errors) == {KafkaError.KAFKA_STORAGE_ERROR}, errors[:5]
        assert limited.is_alive()
        stored = _read_all(limited.bootstrap, "full")
        assert stored == acked, "the readable log must be exactly the acknowledged records"
        limited.stop()
    finally:
        limited.close()

    unlimited = Gateway(tmp_path / "data", tmp_path / "server.log")
    unlimited.port = limited.port
    unlimited.start()
    try:
        assert _read_all(unlimited.bootstrap, "full") == acked
        more, errors = _produce(unlimited.bootstrap, "full", 10)
        assert not errors and sorted(more.values()) == list(range(len(acked), len(acked) + 10))
    finally:
        unlimited.close()
