"""Read-back and exactly-once checks shared by the SIGKILL tests.

Records are produced with a unique value each; `acked` maps a value to the (partition,
offset) its delivery report gave.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

Stored = dict[int, list[tuple[int, str]]]  # partition -> [(offset, value)] in read order


def read_from_start(bootstrap: str, topic: str, partitions: int, timeout: float = 90) -> Stored:
    """Every record of every partition, from offset 0 up to the high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"crash-check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    marks = {p: _watermarks(consumer, TopicPartition(topic, p)) for p in range(partitions)}
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
        assert msg.error() is None, msg.error()
        records[msg.partition()].append((msg.offset(), msg.value().decode()))
    consumer.close()
    return records


def _watermarks(consumer: Consumer, tp: TopicPartition, timeout: float = 30) -> tuple[int, int]:
    """The partition's watermarks, asked again on the errors a client retries: a partition
    whose leader just moved (several nodes) answers NOT_LEADER_OR_FOLLOWER, or is unknown
    to librdkafka, until its metadata refresh finds the new leader."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            marks: tuple[int, int] = consumer.get_watermark_offsets(tp, timeout=10)
            return marks
        except KafkaException as exc:
            error = exc.args[0]
            retriable = error.retriable() or error.code() in (
                KafkaError._UNKNOWN_PARTITION,
                KafkaError.NOT_LEADER_FOR_PARTITION,
            )
            if not retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


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
