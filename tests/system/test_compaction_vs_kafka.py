"""The same key sequence compacted by Apache Kafka 3.5.1 (fast cleaner) and by streamgate:
the same records survive at the same offsets (latest value of every key, tombstones kept
within delete.retention.ms), read back with confluent-kafka from both."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.client import unique_topic, wait_until
from support.compaction import (
    FAST_TIER_ARGS,
    check_compacted,
    produce,
    read_confluent,
    wait_compacted,
)
from support.confluent import create_topic

from harness.gateway import Gateway
from harness.kafka import KafkaBroker, unavailable_reason

CONFIGS = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "600000",
    "segment.ms": "500",
}


def _sequence() -> list[tuple[int, bytes, bytes | None]]:
    items: list[tuple[int, bytes, bytes | None]] = []
    for r in range(4):
        for i in range(80):
            value = None if (i % 9 == 0 and r == 3) else b"%d:%d" % (i, r)
            if i % 5 == 0 and r > 0:
                continue  # keys with a single version
            items.append((0, b"key-%d" % i, value))
    return items


def test_same_survivors_as_kafka(tmp_path: Path) -> None:
    if unavailable_reason() is not None:
        pytest.skip(f"Kafka side needs ../shared/kafka: {unavailable_reason()}")
    topic = unique_topic("vskafka")
    broker = KafkaBroker(tmp_path / "kafka", {"log.cleaner.backoff.ms": "200"})
    broker.start()
    try:
        create_topic(broker.bootstrap, topic, 1, CONFIGS)
        kafka_acked = produce(broker.bootstrap, topic, _sequence())
        time.sleep(1.0)  # past segment.ms: the next append rolls the segment
        kafka_acked[0].update(produce(broker.bootstrap, topic, [(0, b"end", b"end")])[0])
        cleaner_log = tmp_path / "kafka" / "logs" / "log-cleaner.log"
        wait_until(
            lambda: cleaner_log.exists() and f"cleaned log {topic}-0" in cleaner_log.read_text(),
            timeout=90,
            interval=0.5,
        )
        kafka_rows = read_confluent(broker.bootstrap, topic, 0)
    finally:
        broker.stop()

    gw = Gateway(tmp_path / "sg", tmp_path / "server.log", FAST_TIER_ARGS, metrics=True)
    gw.start_fresh()
    try:
        create_topic(gw.bootstrap, topic, 1, CONFIGS)
        acked = produce(gw.bootstrap, topic, _sequence())
        acked[0].update(produce(gw.bootstrap, topic, [(0, b"end", b"end")])[0])
        assert acked == kafka_acked, "both assign the same offsets"
        wait_compacted(gw.admin_url, topic, {0: max(acked[0]) + 1})
        rows = read_confluent(gw.bootstrap, topic, 0)
    finally:
        gw.close()

    end = max(acked[0])
    check_compacted(acked[0], rows, end + 1, tombstones_gone=False)
    # Kafka never cleans its active segment (here only "end"): compare everything before.
    check_compacted(kafka_acked[0], kafka_rows, end, tombstones_gone=False)
    assert [r for r in rows if r[0] < end] == [r for r in kafka_rows if r[0] < end]
    assert len(rows) < len(acked[0]) // 2
