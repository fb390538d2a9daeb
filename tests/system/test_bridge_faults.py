"""The MQTT bridge under faults: the gateway down for longer than the MQTT keepalive, the
bridge SIGKILLed (while forwarding directly and while spooling), a full spool.

Every test checks every message the broker acknowledged to a device: none missing, each
device's first occurrences in order; duplicates are counted (0 expected except after a
bridge SIGKILL, where QoS 1 allows the records that were in flight)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from support.bridge import Fleet, Publisher, check_records, read_topic, wait_metric

from harness.bridge import MqttBridge
from harness.gateway import Gateway
from harness.mosquitto import Mosquitto, unavailable_reason

if unavailable_reason():
    pytest.fail(unavailable_reason() or "", pytrace=False)

KEEPALIVE_S = 2
RECEIVE_MAXIMUM = 100


@pytest.fixture
def gw(tmp_path: Path):
    g = Gateway(tmp_path / "data", tmp_path / "server.log", default_partitions=4)
    g.start_fresh()
    yield g
    g.close()


@pytest.fixture
def broker(tmp_path: Path):
    m = Mosquitto(tmp_path / "mosquitto")
    m.start()
    yield m
    m.close()


def make_bridge(tmp: Path, broker: Mosquitto, gw: Gateway, topic: str, *extra: str) -> MqttBridge:
    args = [
        "--mqtt",
        broker.url,
        "--gateway",
        gw.bootstrap,
        "--key-level",
        "2",
        "--map",
        f"plant/+/sensors/#={topic}",
        "--client-id",
        f"bridge-{topic}",
        "--spool-dir",
        str(tmp / "spool"),
        "--keepalive-s",
        str(KEEPALIVE_S),
        "--spool-after-ms",
        "500",
        "--receive-maximum",
        str(RECEIVE_MAXIMUM),
        *extra,
    ]
    return MqttBridge(tmp, args)


def wait_idle(bridge: MqttBridge, timeout: float = 90.0) -> dict[str, float]:
    """Until the bridge holds nothing (spool empty, nothing in flight) and has received
    nothing new for 2 s (the devices stopped, the broker handed over the session's queue)."""
    deadline = time.monotonic() + timeout
    m: dict[str, float] = {}
    stable_since, last = time.monotonic(), -1.0
    while time.monotonic() < deadline:
        m = bridge.metrics()
        idle = m["spool_records"] == 0 and m["inflight"] == 0 and m["spooling"] == 0
        if m["received"] != last or not idle:
            stable_since, last = time.monotonic(), m["received"]
        elif time.monotonic() - stable_since > 2:
            return m
        time.sleep(0.2)
    raise TimeoutError(f"bridge not idle: {m}")


def test_gateway_down_longer_than_keepalive(gw, broker, tmp_path):
    topic = f"down-{uuid.uuid4().hex[:8]}"
    bridge = make_bridge(tmp_path, broker, gw, topic)
    bridge.start()
    fleet = Fleet(broker, devices=50)
    publisher = Publisher(fleet)
    try:
        publisher.start()
        wait_metric(bridge, "forwarded", lambda x: x >= 200)
        gw.stop()
        wait_metric(bridge, "spooled", lambda x: x >= 200)
        time.sleep(3 * KEEPALIVE_S)  # the MQTT side must stay connected meanwhile
        during = bridge.metrics()
        assert during["spooling"] == 1
        assert during["mqtt_disconnects"] == 0, "paho's thread was blocked"
        gw.start()
        time.sleep(2)
        publisher.stop()
        m = wait_idle(bridge)
        records = read_topic(gw.bootstrap, topic, fleet.total)
        result = check_records(records, fleet)
        print(
            f"gateway down: {fleet.total} published, {m['spooled']:.0f} spooled, "
            f"{result.duplicates} duplicates"
        )
        assert result.missing == 0
        assert result.out_of_order == []
        assert result.duplicates == 0
        assert m["errors"] == 0 and m["mqtt_disconnects"] == 0
    finally:
        publisher.stop()
        fleet.close()
        bridge.close()


@pytest.mark.parametrize("mode", ["direct", "spooling"])
def test_bridge_sigkill_loses_nothing(gw, broker, tmp_path, mode):
    topic = f"kill-{mode}-{uuid.uuid4().hex[:8]}"
    bridge = make_bridge(tmp_path, broker, gw, topic)
    bridge.start()
    fleet = Fleet(broker, devices=50)
    publisher = Publisher(fleet)
    try:
        publisher.start()
        wait_metric(bridge, "forwarded", lambda x: x >= 300)
        if mode == "spooling":
            gw.stop()
            wait_metric(bridge, "spooled", lambda x: x >= 300)
        bridge.kill()
        time.sleep(1)  # devices keep publishing; the broker keeps them for the session
        bridge.start()
        if mode == "spooling":
            assert bridge.metrics()["spooling"] == 1  # the spool survived the crash
            time.sleep(1)
            gw.start()
        time.sleep(2)
        publisher.stop()
        m = wait_idle(bridge)
        records = read_topic(gw.bootstrap, topic, fleet.total)
        result = check_records(records, fleet)
        print(
            f"bridge SIGKILL ({mode}): {fleet.total} published, {result.duplicates} "
            f"duplicates, after restart: {m}"
        )
        assert result.missing == 0
        assert result.out_of_order == []
        # QoS 1: only what was unacknowledged at the kill can come twice: at most the
        # broker's window of unacked messages, plus the spool records between two commits.
        assert result.duplicates <= RECEIVE_MAXIMUM + 20_000
    finally:
        publisher.stop()
        fleet.close()
        bridge.close()


def test_full_spool_holds_acks_and_loses_nothing(gw, broker, tmp_path):
    topic = f"full-{uuid.uuid4().hex[:8]}"
    limit = 64 * 1024
    bridge = make_bridge(tmp_path, broker, gw, topic, "--spool-max-bytes", str(limit))
    bridge.start()
    gw.stop()
    fleet = Fleet(broker, devices=20)
    qos0 = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"q0-{topic}")
    qos0.connect("127.0.0.1", broker.port)
    qos0.loop_start()
    try:
        for _ in range(40):  # 800 messages of ~450 bytes on disk: far more than 64 KiB
            fleet.publish_round(1, payload_size=200)
        wait_metric(bridge, "spool_bytes", lambda x: x > limit - 2000)
        time.sleep(2)
        stalled = bridge.metrics()
        assert stalled["spool_bytes"] <= limit
        assert stalled["spooling"] == 1
        # Acks stop at what is durable in the spool; the rest waits unacknowledged (with the
        # broker, or in the bridge's memory when the broker ignores the receive maximum, as
        # mosquitto 2.0.11 does here), none dropped.
        assert stalled["mqtt_acks"] == stalled["spooled"]
        assert stalled["spooled"] < fleet.total
        time.sleep(1)
        again = bridge.metrics()
        assert again["mqtt_acks"] == stalled["mqtt_acks"]
        assert again["dropped_qos0"] == 0
        # QoS 0 while saturated: dropped and counted (QoS 1 never is)
        for i in range(50):
            qos0.publish("plant/qos0dev/sensors/temp", f"q0:{i}".encode(), qos=0)
        wait_metric(bridge, "dropped_qos0", lambda x: x > 0, timeout=20)
        gw.start()
        m = wait_idle(bridge)
        records = read_topic(gw.bootstrap, topic, fleet.total)
        result = check_records(records, fleet)
        assert result.missing == 0
        assert result.out_of_order == []
        assert result.duplicates == 0
        assert m["errors"] == 0
    finally:
        qos0.disconnect()
        qos0.loop_stop()
        fleet.close()
        bridge.close()
