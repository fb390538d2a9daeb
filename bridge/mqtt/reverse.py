"""`--reverse TOPIC=MQTT_TOPIC`: records of streamgate topics published to MQTT.

A Kafka consumer group (`--reverse-group`) so a restart resumes where it stopped; offsets
are committed only after the broker acknowledged the publications (QoS 1/2): at least once.
A new group starts at the earliest record. `{key}` in the MQTT topic is the record key.
"""

from __future__ import annotations

import logging
import threading
import time

import paho.mqtt.client as mqtt
from confluent_kafka import Consumer, KafkaError, Message

from bridge.mqtt.config import BridgeConfig
from bridge.mqtt.metrics import Stats

log = logging.getLogger("bridge.mqtt.reverse")
BATCH = 500
PUBLISH_TIMEOUT_S = 10.0


class Reverse:
    def __init__(self, cfg: BridgeConfig, stats: Stats, client: mqtt.Client) -> None:
        self.cfg = cfg
        self.stats = stats
        self.client = client
        self.targets = {r.topic: r.mqtt_topic for r in cfg.reverse}
        self.stop = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": cfg.gateway,
                "group.id": cfg.reverse_group,
                "client.id": f"{cfg.client_id}-reverse",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )

    def mqtt_topic(self, topic: str, key: bytes | None) -> str:
        target = self.targets[topic]
        if "{key}" in target:
            target = target.replace("{key}", (key or b"").decode(errors="replace"))
        return target

    def run(self) -> None:
        self.consumer.subscribe(list(self.targets))
        try:
            while not self.stop.is_set():
                msgs = self.consumer.consume(BATCH, timeout=0.2)
                records = []
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            log.warning("reverse consumer: %s", err)
                        continue
                    records.append(m)
                # A batch that timed out goes again as a whole (at least once, in order).
                while records and not self.stop.is_set():
                    if self._publish_all(records):
                        self.consumer.commit(asynchronous=False)
                        break
        finally:
            self.consumer.close()

    def _publish_all(self, records: list[Message]) -> bool:
        """Publish in order and wait for the broker's acks; retry while disconnected."""
        pending = []
        for m in records:
            topic = self.mqtt_topic(m.topic() or "", m.key())
            while True:
                info = self.client.publish(topic, m.value(), qos=self.cfg.reverse_qos)
                if info.rc == mqtt.MQTT_ERR_SUCCESS:
                    pending.append(info)
                    break
                if self.stop.wait(0.5):
                    return False
        deadline = time.monotonic() + PUBLISH_TIMEOUT_S
        for info in pending:
            while not info.is_published():
                if self.stop.is_set() or time.monotonic() > deadline:
                    # Not committed: they go out again after a restart (at least once).
                    return False
                time.sleep(0.005)
            self.stats.reverse_published += 1
        return True
