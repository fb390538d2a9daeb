"""Helpers of the MQTT bridge tests: simulated devices (real paho clients through a real
mosquitto) and reading a streamgate topic back with confluent-kafka."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

import paho.mqtt.client as mqtt
from confluent_kafka import Consumer, TopicPartition
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from harness.mosquitto import Mosquitto


def device_client(broker: Mosquitto, client_id: str, version: int = 5) -> mqtt.Client:
    c = mqtt.Client(
        callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311,
    )
    c.max_queued_messages_set(0)
    c.max_inflight_messages_set(100)
    c.connect("127.0.0.1", broker.port, keepalive=60)
    c.loop_start()
    return c


@dataclass
class Fleet:
    """`devices` paho clients that publish `plant/DEVICE/sensors/temp` with payloads
    `DEVICE:SEQ` (QoS 1, user property `seq`); `published` counts broker acks."""

    broker: Mosquitto
    devices: int
    version: int = 5
    prefix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    clients: list[mqtt.Client] = field(default_factory=list)
    next_seq: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def __post_init__(self) -> None:
        for i in range(self.devices):
            self.clients.append(device_client(self.broker, self.name(i), self.version))

    def name(self, i: int) -> str:
        return f"{self.prefix}-d{i:04d}"

    def publish_round(self, per_device: int = 1, payload_size: int = 0, qos: int = 1) -> int:
        """Every device publishes `per_device` messages; waits for all broker acks."""
        infos = []
        for _ in range(per_device):
            for i, c in enumerate(self.clients):
                dev = self.name(i)
                seq = self.next_seq[dev]
                self.next_seq[dev] += 1
                body = f"{dev}:{seq}".encode()
                body += b"x" * max(0, payload_size - len(body))
                props = None
                if self.version == 5:
                    props = Properties(PacketTypes.PUBLISH)
                    props.UserProperty = [("seq", str(seq))]
                infos.append(
                    c.publish(f"plant/{dev}/sensors/temp", body, qos=qos, properties=props)
                )
        for info in infos:
            info.wait_for_publish(timeout=60)
        return len(infos)

    @property
    def total(self) -> int:
        return sum(self.next_seq.values())

    def close(self) -> None:
        for c in self.clients:
            c.disconnect()
            c.loop_stop()


def read_topic(
    bootstrap: str, topic: str, expect: int, timeout: float = 60.0, settle: float = 1.0
) -> list:
    """Every record of `topic` from the beginning: waits for `expect` records, then `settle`
    seconds more to see duplicates beyond the count."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            md = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if md is not None and md.error is None and md.partitions:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} never appeared")
            time.sleep(0.2)
        consumer.assign([TopicPartition(topic, p, 0) for p in md.partitions])
        out = []
        settled_at = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg)
            if len(out) >= expect:
                settled_at = settled_at or time.monotonic()
                if time.monotonic() - settled_at > settle:
                    break
        return out
    finally:
        consumer.close()


@dataclass
class Check:
    """Per-device sequences seen in streamgate."""

    missing: int
    duplicates: int
    out_of_order: list[str]
    by_device: dict[str, list[int]]


def check_records(records: list, fleet: Fleet) -> Check:
    by_device: dict[str, list[int]] = defaultdict(list)
    for r in records:
        dev, seq = r.value().decode().split("x")[0].split(":")
        by_device[dev].append(int(seq))
    missing = duplicates = 0
    out_of_order = []
    for i in range(fleet.devices):
        dev = fleet.name(i)
        seqs = by_device.get(dev, [])
        want = fleet.next_seq[dev]
        missing += len(set(range(want)) - set(seqs))
        duplicates += len(seqs) - len(set(seqs))
        # Order: the first time each sequence number shows up must be ascending (a duplicate
        # re-sends a suffix, as QoS 1 redelivery does, which is allowed).
        firsts = list(dict.fromkeys(seqs))
        if firsts != sorted(firsts):
            out_of_order.append(dev)
    return Check(missing, duplicates, out_of_order, dict(by_device))


def wait_metric(bridge, name: str, predicate, timeout: float = 60.0) -> float:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = bridge.metrics().get(name)
        if value is not None and predicate(value):
            return value
        time.sleep(0.1)
    raise TimeoutError(f"bridge metric {name} = {value} after {timeout}s")


class Publisher(threading.Thread):
    """Publishes rounds in the background until stopped (for fault tests)."""

    def __init__(self, fleet: Fleet, pause: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.fleet = fleet
        self.pause = pause
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.fleet.publish_round(1)
            time.sleep(self.pause)

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=120)
