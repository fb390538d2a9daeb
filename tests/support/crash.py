"""Read-back and exactly-once checks shared by the SIGKILL tests.

Records are produced with a unique value each; `acked` maps a value to the (partition,
offset) its delivery report gave.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

# client events while a node restarts or a partition's leader moves (several nodes)
_TRANSIENT = {
    KafkaError._TRANSPORT,
    KafkaError._DESTROY_BROKER,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
}

Stored = dict[int, list[tuple[int, str]]]  # partition -> [(offset, value)] in read order


def read_from_start(bootstrap: str, topic: str, partitions: int, timeout: float = 90) -> Stored:
    """Every record of every partition, from offset 0 up to the high watermark."""
    consumer, marks = _consumer_with_watermarks(bootstrap, topic, partitions)
    assert all(low == 0 for low, _high in marks.values()), f"log start moved: {marks}"
    total = sum(high for _low, high in marks.values())
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: Stored = defaultdict(list)
    deadline = time.monotonic() + timeout
    while sum(len(v) for v in records.values()) < total:
        assert time.monotonic() < deadline, "consumer did not read back the whole topic"
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        error = msg.error()
        if error is not None and error.code() in _TRANSIENT:
            continue  # a broker restarting or a leader moving: the client carries on
        assert error is None, error
        records[msg.partition()].append((msg.offset(), msg.value().decode()))
    consumer.close()
    return records


def _new_consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"crash-check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )


def _consumer_with_watermarks(
    bootstrap: str, topic: str, partitions: int, timeout: float = 30
) -> tuple[Consumer, dict[int, tuple[int, int]]]:
    """A consumer and every partition's watermarks. While a partition's leader has just
    moved or restarted (several nodes), librdkafka may call it unknown, get
    NOT_LEADER_OR_FOLLOWER, or be replacing its broker handle, and it keeps the metadata that
    said so: ask again with a new consumer. An error that lasts `timeout` is raised."""
    deadline = time.monotonic() + timeout
    while True:
        consumer = _new_consumer(bootstrap)
        try:
            marks = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in range(partitions)
            }
            return consumer, marks
        except KafkaException:
            consumer.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def check_exactly_once(
    records: Stored, acked: dict[str, tuple[int, int]], sent: set[str] | None = None
) -> None:
    """Dense offsets, no value twice, nothing unsent, every acked value at its acked place."""
    stored: dict[str, tuple[int, int]] = {}
    for partition, items in records.items():
        offsets = [offset for offset, _ in items]
        assert offsets == list(range(len(items))), f"partition {partition}: offsets not dense"
        for offset, value in items:
            assert value not in stored, (
                f"record {value[:12]} stored twice: {stored[value]} and {(partition, offset)}"
            )
            assert sent is None or value in sent, (
                f"record {value[:12]} at {(partition, offset)} never sent"
            )
            stored[value] = (partition, offset)
    lost = [v[:12] for v in acked if v not in stored]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged records lost, e.g. {lost[:5]}"
    moved = [(v[:12], where, stored[v]) for v, where in acked.items() if stored[v] != where]
    assert not moved, f"{len(moved)} records not at their acknowledged offset: {moved[:5]}"
