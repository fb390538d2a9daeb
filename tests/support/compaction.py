"""Helpers for the compaction tests: keyed produce with acked offsets, full read-backs with
confluent-kafka and kafka-python (gaps allowed), the admin `/compaction` view, and the
key-level expectations every compacted log must meet."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

Row = tuple[int, bytes, bytes | None]  # offset, key, value (None: tombstone)

FAST_TIER_ARGS = (
    "--chunk-bytes",
    "4096",
    "--chunk-age-ms",
    "300",
    "--local-retain-bytes",
    "0",
    "--compaction-interval-ms",
    "300",
)


def produce(
    bootstrap: str,
    topic: str,
    items: Sequence[tuple[int, bytes, bytes | None]],
    extra: dict[str, Any] | None = None,
) -> dict[int, dict[int, tuple[bytes, bytes | None]]]:
    """Send (partition, key, value) in order (acks=all, idempotent); returns every acked
    record: partition -> offset -> (key, value)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 50,
            **(extra or {}),
        }
    )
    acked: dict[int, dict[int, tuple[bytes, bytes | None]]] = {}
    errors: list[Any] = []

    def done(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.setdefault(msg.partition(), {})[msg.offset()] = (msg.key(), msg.value())

    for partition, key, value in items:
        while True:
            try:
                producer.produce(topic, value, key, partition=partition, on_delivery=done)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0, "records left unsent"
    assert not errors, errors[:3]
    return acked


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-marks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in range(partitions)
        }
    finally:
        consumer.close()


def read_confluent(bootstrap: str, topic: str, partition: int, timeout: float = 60.0) -> list[Row]:
    """Every record of the partition from the beginning up to its high watermark."""
    _low, high = watermarks(bootstrap, topic, partition + 1)[partition]
    if high == 0:
        return []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compaction-read",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    rows: list[Row] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            rows.append((msg.offset(), msg.key(), msg.value()))
            if msg.offset() >= high - 1:
                return rows
    finally:
        consumer.close()
    raise AssertionError(f"read up to {rows[-1][0] if rows else None} of {high}")


def read_kafka_python(
    bootstrap: str, topic: str, partition: int, timeout: float = 60.0
) -> list[Row]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = KTopicPartition(topic, partition)
    consumer.assign([tp])
    high = consumer.end_offsets([tp])[tp]
    consumer.seek_to_beginning(tp)
    rows: list[Row] = []
    deadline = time.monotonic() + timeout
    try:
        while high and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                rows.extend((r.offset, r.key, r.value) for r in records)
            if rows and rows[-1][0] >= high - 1:
                return rows
    finally:
        consumer.close()
    if not high:
        return rows
    raise AssertionError(f"kafka-python read up to {rows[-1][0] if rows else None} of {high}")


def compaction_state(admin_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(admin_url + "/compaction", timeout=10) as response:
        return json.loads(response.read())


def wait_compacted(
    admin_url: str, topic: str, ends: dict[int, int], timeout: float = 90.0
) -> dict[str, Any]:
    """Until every partition's compacted end reached `ends` (all data up to the high
    watermark uploaded and cleaned)."""
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        state = compaction_state(admin_url)
        partitions = state["topics"].get(topic, {})
        if all(
            partitions.get(str(p), {}).get("compacted_end", 0) >= end
            for p, end in ends.items()
            if end
        ):
            return state
        time.sleep(0.2)
    raise AssertionError(f"compaction did not reach {ends}: {state}")


def check_compacted(
    produced: dict[int, tuple[bytes, bytes | None]],
    rows: list[Row],
    compacted_end: int,
    tombstones_gone: bool,
    log_start: int = 0,
) -> None:
    """Kafka's guarantees for a log compacted up to `compacted_end`:
    offsets kept and increasing, each record exactly as produced at its offset; the latest
    value of every key there (tombstones until their horizon); below the compacted end one
    record per key at most, and a removed tombstone takes its key's older values along."""
    offsets = [o for o, _k, _v in rows]
    assert offsets == sorted(set(offsets)), "offsets not strictly increasing"
    for offset, key, value in rows:
        assert produced.get(offset) == (key, value), f"offset {offset}: {key!r}={value!r}"
    present = {o for o in offsets}
    latest: dict[bytes, int] = {}
    for offset in sorted(produced):
        latest[produced[offset][0]] = offset
    end = max(produced) if produced else -1
    for key, offset in latest.items():
        if offset < log_start:
            continue
        tombstone = produced[offset][1] is None
        if not tombstone or not tombstones_gone or offset >= compacted_end or offset == end:
            assert offset in present, f"latest {key!r} at {offset} missing"
        else:
            older = [o for o, k, _v in rows if k == key and o < compacted_end]
            assert offset not in present and not older, f"tombstoned {key!r} still there"
    cleaned = [k for o, k, _v in rows if o < compacted_end]
    assert len(cleaned) == len(set(cleaned)), "a key twice below the compacted end"
