"""A lost local log is reported, and offsets never go back (core/stream/reservations.py).

One gateway: an idempotent confluent-kafka producer gets acknowledgements, a group commits
an offset; the gateway is SIGKILLed and the topic's local files are removed (the metadata
and tier 2 stay). After the restart an ERROR line names the lost range, the partition
starts at or after the old high watermark, the same producer goes on with offsets past it,
and the group's consumer, positioned inside the lost range, resets (auto.offset.reset) and
reads only the new records.
"""

from __future__ import annotations

import re
import shutil
import threading

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

RECORDS = 3000


def _remove_local_logs(gateway) -> None:
    for folder in (gateway.data_dir / "streams").iterdir():
        shutil.rmtree(folder)


def test_lost_local_log_moves_log_start_past_acknowledged_offsets(gateway, topic) -> None:
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(10)
    acked: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:
        with lock:
            if err is None:
                acked[msg.value().decode()] = msg.offset()
            else:
                errors.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )
    for n in range(RECORDS):
        producer.produce(topic, value=f"old-{n}", partition=0, on_delivery=on_delivery)
        if n % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert len(acked) == RECORDS and not errors
    old_end = max(acked.values()) + 1
    group = f"{topic}-g"
    committer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, old_end // 2)], asynchronous=False)
    committer.close()

    gateway.kill()
    _remove_local_logs(gateway)
    gateway.start()

    lost = re.findall(
        rf"topic {re.escape(topic)} partition 0: lost offsets \[(\d+), (\d+)\)", gateway.log_text()
    )
    assert len(lost) == 1, gateway.log_tail()
    first_lost, new_start = map(int, lost[0])
    assert first_lost < old_end <= new_start

    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert low >= old_end and high >= old_end
        assert (low, high) == (new_start, new_start)

        # the same producer goes on: its sequence state on the node is gone with the log
        new = [f"new-{n}" for n in range(20)]
        for value in new:
            producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
        assert producer.flush(30) == 0
        assert not errors
        assert all(acked[v] >= new_start for v in new)

        consumer.subscribe([topic])
        got: list[str] = []
        for _ in range(300):
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                assert msg.offset() >= new_start
                got.append(msg.value().decode())
            if len(got) >= len(new):
                break
        assert got == new
    finally:
        consumer.close()

    # a second restart (the log is there now) reports nothing more and keeps the offsets
    gateway.kill()
    gateway.start()
    assert len(re.findall(r"lost offsets", gateway.log_text())) == 1
    probe = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": f"{group}-probe"})
    try:
        low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (new_start, new_start + len(new))
    finally:
        probe.close()
