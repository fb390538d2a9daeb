"""Helpers for the scaling tests: the admin HTTP endpoint, keyed sequence producers, and a
full read-back check (dense offsets, per-key order, nothing missing or doubled)."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

METRICS_ARGS = ("--metrics-listen", "127.0.0.1:0")


def admin_url(gateway: Any) -> str:
    """The admin endpoint of the gateway's current run (port 0: read from its log)."""
    ports = re.findall(r"admin/metrics HTTP on 127\.0\.0\.1:(\d+)", gateway.log_text())
    assert ports, "gateway started without --metrics-listen"
    return f"http://127.0.0.1:{ports[-1]}"


def http(gateway: Any, path: str, payload: Any = None) -> tuple[int, Any]:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        admin_url(gateway) + path, data=data, method="GET" if data is None else "POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read(), exc.code
    if path == "/metrics":
        return status, body.decode()
    return status, json.loads(body)


def describe(gateway: Any, topic: str) -> dict[str, Any]:
    status, body = http(gateway, f"/streams/{topic}")
    assert status == 200, body
    return body


def open_segments(gateway: Any, topic: str) -> list[dict[str, Any]]:
    return [s for s in describe(gateway, topic)["segments"] if s["state"] == "open"]


def scale(gateway: Any, topic: str, request: dict[str, Any]) -> dict[str, Any]:
    status, body = http(gateway, f"/streams/{topic}/scale", request)
    assert status == 200, body
    return body


class KeyedProducer(threading.Thread):
    """A thread producing `key -> 0, 1, 2, ...` sequences (idempotent, acks=all) for its
    keys, round-robin, until `stop` is set or `limit` records were sent."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        keys: list[str],
        stop: threading.Event,
        limit: int = 10**9,
        value_bytes: int = 0,
        pause: float = 0.002,
    ) -> None:
        super().__init__(daemon=True)
        self.topic, self.keys, self.stop, self.limit = topic, keys, stop, limit
        self.pad = b"." * value_bytes
        self.pause = pause
        self.sent: dict[str, int] = dict.fromkeys(keys, 0)
        self.acked: dict[tuple[str, int], tuple[int, int]] = {}
        self.errors: list[str] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60000,
            }
        )

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        key = msg.key().decode()
        seq = int(msg.value().split(b"|")[0])
        self.acked[(key, seq)] = (msg.partition(), msg.offset())

    def run(self) -> None:
        total = 0
        while not self.stop.is_set() and total < self.limit:
            for key in self.keys:
                seq = self.sent[key]
                value = f"{seq}|".encode() + self.pad
                self.producer.produce(self.topic, key=key, value=value, on_delivery=self._delivered)
                self.sent[key] = seq + 1
                total += 1
            self.producer.poll(0)
            time.sleep(self.pause)
        self.producer.flush(60)
        if len(self.producer):
            self.errors.append(f"{len(self.producer)} records never delivered")


def run_producers(
    bootstrap: str, topic: str, count: int, keys_each: int = 8, prefix: str = "", **kwargs: Any
) -> tuple[list[KeyedProducer], threading.Event]:
    """Start `count` producer threads with `keys_each` keys each (named prefix + p<i>-k<j>)."""
    stop = threading.Event()
    producers = [
        KeyedProducer(
            bootstrap, topic, [f"{prefix}p{i}-k{j}" for j in range(keys_each)], stop, **kwargs
        )
        for i in range(count)
    ]
    for producer in producers:
        producer.start()
    return producers, stop


def finish(producers: list[KeyedProducer], stop: threading.Event) -> dict[str, int]:
    """Stop and join the producers; assert no produce error; return key -> records sent."""
    stop.set()
    for producer in producers:
        producer.join(90)
        assert not producer.is_alive(), "producer did not finish"
    errors = [e for p in producers for e in p.errors]
    assert not errors, f"produce errors: {errors[:5]}"
    sent: dict[str, int] = {}
    for producer in producers:
        sent.update(producer.sent)
        assert len(producer.acked) == sum(producer.sent.values())
    return sent


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0):
    """Every record of every partition from the beginning: partition -> [(offset, key, seq)]."""
    admin_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "scaling-check"})
    ends = {}
    for p in range(partitions):
        _low, high = admin_consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        ends[p] = high
    admin_consumer.close()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "scaling-check",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign(
        [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions) if ends[p] > 0]
    )
    records: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
    total = sum(ends.values())
    got = 0
    deadline = time.monotonic() + timeout
    while got < total and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            continue
        seq = int(msg.value().split(b"|")[0])
        records[msg.partition()].append((msg.offset(), msg.key().decode(), seq))
        got += 1
    consumer.close()
    assert got == total, f"read {got} of {total} records"
    return records, ends


def check_complete(
    records: dict[int, list[tuple[int, str, int]]],
    ends: dict[int, int],
    sent: dict[str, int],
    acked: dict[tuple[str, int], tuple[int, int]] | None = None,
) -> None:
    """Dense offsets per partition, each key in one partition in sequence order 0..n-1,
    exactly the records sent, and each acknowledged record at its acknowledged offset."""
    seen: dict[str, list[int]] = defaultdict(list)
    where: dict[str, int] = {}
    for partition, rows in records.items():
        offsets = [offset for offset, _k, _s in rows]
        assert offsets == list(range(ends[partition])), f"partition {partition} offsets"
        for offset, key, seq in rows:
            assert where.setdefault(key, partition) == partition, f"{key} in two partitions"
            seen[key].append(seq)
            if acked is not None and (key, seq) in acked:
                assert acked[(key, seq)] == (partition, offset), f"{key}/{seq} moved"
    assert set(seen) == {k for k, n in sent.items() if n}, "keys missing"
    for key, n in sent.items():
        assert seen.get(key, []) == list(range(n)), f"{key}: order, gap or duplicate"
