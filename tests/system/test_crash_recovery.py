"""SIGKILL under load: every acknowledged record is there exactly once after a restart.

A confluent-kafka producer (idempotent, acks=all) writes uniquely numbered records to an
8-partition topic while the gateway is killed with SIGKILL several times and restarted on
the same data dir. Afterwards a consumer reads every partition: each acknowledged record must
be at the offset it was acknowledged with, no value may appear twice, and offsets are dense.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.crash import check_exactly_once, read_from_start

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


def test_sigkill_under_load_loses_no_acknowledged_record(gateway) -> None:
    topic = "crash-recovery"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(10)

    acked = _produce_while_killing(gateway, topic)
    assert len(acked) > 1000

    check_exactly_once(read_from_start(gateway.bootstrap, topic, PARTITIONS), acked)
