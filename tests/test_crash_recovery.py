"""SIGKILL under load: every acknowledged record is there exactly once after a restart.

A confluent-kafka producer (idempotent, acks=all) writes uniquely numbered records to an
8-partition topic while the gateway is killed with SIGKILL several times and restarted on
the same data dir. Afterwards a consumer reads every partition: each acknowledged record must
be at the offset it was acknowledged with, no value may appear twice, and offsets are dense.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 8
KILL_CYCLES = 5


def _produce_while_killing(gateway, topic: str) -> dict[str, tuple[int, int]]:
    acked: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:
        if err is None:
            with lock:
                acked[msg.value().decode()] = (msg.partition(), msg.offset())

    producer = Producer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 60000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )
    sent = 0
    for _cycle in range(KILL_CYCLES):
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            for _ in range(200):
                producer.produce(
                    topic, key=f"k{sent % 97}", value=f"{sent}", on_delivery=on_delivery
                )
                sent += 1
            producer.poll(0.01)
        gateway.kill()
        producer.poll(0.2)
        gateway.start()
    producer.flush(60)
    assert len(producer) == 0, "every record must be delivered or failed by now"
    return acked


def _consume_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, str]]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "crash-check", "enable.auto.commit": False}
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for p in range(PARTITIONS)
    }
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    records: dict[int, list[tuple[int, str]]] = defaultdict(list)
    deadline = time.monotonic() + 60
    while sum(len(v) for v in records.values()) < sum(ends.values()):
        assert time.monotonic() < deadline, "consumer did not read back the whole topic"
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        records[msg.partition()].append((msg.offset(), msg.value().decode()))
    consumer.close()
    return records


def test_sigkill_under_load_loses_no_acknowledged_record(gateway) -> None:
    topic = "crash-recovery"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(10)

    acked = _produce_while_killing(gateway, topic)
    assert len(acked) > 1000

    records = _consume_all(gateway.bootstrap, topic)
    stored: dict[str, tuple[int, int]] = {}
    for partition, items in records.items():
        assert [offset for offset, _ in items] == list(range(len(items))), "offsets not dense"
        for offset, value in items:
            assert value not in stored, f"record {value} stored twice"
            stored[value] = (partition, offset)
    lost = [v for v in acked if v not in stored]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    moved = [v for v, where in acked.items() if stored[v] != where]
    assert not moved, f"records not at their acknowledged offset: {moved[:5]}"
