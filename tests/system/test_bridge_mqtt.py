"""The MQTT bridge end to end: real mosquitto, real gateway, the bridge as a subprocess.

Many devices (hundreds of MQTT connections, QoS 1): every message exactly once, in
per-device order, with its headers; MQTT 3.1.1 and 5; TLS; shared subscriptions; reverse;
clear errors with a non-zero exit for a bad URL, a refused connection, a wrong password and
a TLS failure.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from confluent_kafka import Producer
from support.bridge import Fleet, check_records, read_topic, wait_metric

from harness.bridge import REPO_ROOT, MqttBridge
from harness.gateway import Gateway
from harness.mosquitto import Mosquitto, unavailable_reason
from harness.ports import free_port, wait_port

if unavailable_reason():
    pytest.fail(unavailable_reason() or "", pytrace=False)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("bridge-gw")
    g = Gateway(base / "data", base / "server.log", default_partitions=4)
    g.start_fresh()
    yield g
    g.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    m = Mosquitto(tmp_path_factory.mktemp("mosquitto"), tls=True)
    m.start()
    yield m
    m.close()


def bridge_args(broker_url: str, gw: Gateway, topic: str, tmp: Path, *extra: str) -> list[str]:
    return [
        "--mqtt",
        broker_url,
        "--gateway",
        gw.bootstrap,
        "--map",
        f"plant/+/sensors/#={topic}",
        "--key-level",
        "2",
        "--client-id",
        f"bridge-{uuid.uuid4().hex[:8]}",
        "--spool-dir",
        str(tmp / "spool"),
        *extra,
    ]


def start_bridge(tmp: Path, args: list[str], name: str = "bridge") -> MqttBridge:
    b = MqttBridge(tmp, args, name=name)
    b.start(timeout=30)
    return b


@pytest.mark.parametrize("version", ["5", "3.1.1"])
def test_many_devices_exactly_once_in_order_with_headers(gw, broker, tmp_path, version):
    topic = f"sensors-{uuid.uuid4().hex[:8]}"
    v = 5 if version == "5" else 3
    bridge = start_bridge(
        tmp_path, bridge_args(broker.url, gw, topic, tmp_path, "--mqtt-version", version)
    )
    fleet = Fleet(broker, devices=200 if v == 5 else 50, version=v)
    try:
        for _ in range(10):
            fleet.publish_round(1)
        wait_metric(bridge, "forwarded", lambda x: x >= fleet.total)
        records = read_topic(gw.bootstrap, topic, fleet.total)
        result = check_records(records, fleet)
        assert result.missing == 0
        assert result.duplicates == 0
        assert result.out_of_order == []
        assert len(records) == fleet.total
        # key = device id (level 2), so each device stays in one partition
        parts: dict[bytes, set[int]] = {}
        for r in records:
            parts.setdefault(r.key(), set()).add(r.partition())
        assert all(len(p) == 1 for p in parts.values())
        # headers
        r = records[0]
        dev, seq = r.value().decode().split(":")
        h = dict(r.headers())
        assert r.key() == dev.encode()
        assert h["mqtt.topic"] == f"plant/{dev}/sensors/temp".encode()
        assert h["mqtt.qos"] == b"1"
        assert h["mqtt.retain"] == b"0"
        received_ms = int(h["mqtt.received_ms"])
        assert abs(received_ms - time.time() * 1000) < 600_000
        assert r.timestamp()[1] == received_ms
        if v == 5:
            assert h["mqtt.user.seq"] == seq.encode()
        else:
            assert "mqtt.user.seq" not in h
        m = bridge.metrics()
        assert m["spooled"] == 0 and m["errors"] == 0 and m["dropped_qos0"] == 0
    finally:
        fleet.close()
        assert bridge.stop() == 0


def test_payload_bytes_and_retain_pass_through(gw, broker, tmp_path):
    topic = f"raw-{uuid.uuid4().hex[:8]}"
    prefix = f"raw{uuid.uuid4().hex[:6]}"
    payloads = [bytes(range(256)), b"", b"\x00" * 70_000]
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"raw-{uuid.uuid4().hex[:6]}")
    c.connect("127.0.0.1", broker.port)
    c.loop_start()
    # retained before the bridge subscribes: delivered to it with the retain flag set
    c.publish(f"{prefix}/state", b"on", qos=1, retain=True).wait_for_publish(10)
    bridge = start_bridge(
        tmp_path,
        [
            "--mqtt",
            broker.url,
            "--gateway",
            gw.bootstrap,
            "--map",
            f"{prefix}/#={topic}",
            "--spool-dir",
            str(tmp_path / "sp"),
            "--client-id",
            prefix,
        ],
    )
    try:
        infos = [c.publish(f"{prefix}/blob", p, qos=1) for p in payloads]
        for i in infos:
            i.wait_for_publish(10)
        records = read_topic(gw.bootstrap, topic, 4)
        blobs = [r for r in records if r.key() == f"{prefix}/blob".encode()]
        state = [r for r in records if r.key() == f"{prefix}/state".encode()]
        assert [r.value() or b"" for r in blobs] == payloads  # one key: one partition, in order
        assert [r.value() for r in state] == [b"on"]
        assert dict(state[0].headers())["mqtt.retain"] == b"1"
        assert dict(blobs[0].headers())["mqtt.retain"] == b"0"
        # clear the retained message so later subscribers do not get it
        c.publish(f"{prefix}/state", b"", qos=1, retain=True).wait_for_publish(10)
    finally:
        c.disconnect()
        c.loop_stop()
        bridge.stop()


def test_tls_with_client_certificate(gw, broker, tmp_path):
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    args = bridge_args(
        broker.tls_url,
        gw,
        topic,
        tmp_path,
        "--ca",
        str(broker.ca_pem),
        "--cert",
        str(broker.client_cert_pem),
        "--key",
        str(broker.client_key_pem),
    )
    bridge = start_bridge(tmp_path, args)
    fleet = Fleet(broker, devices=5)
    try:
        fleet.publish_round(4)
        records = read_topic(gw.bootstrap, topic, fleet.total)
        assert check_records(records, fleet).missing == 0
        assert len(records) == fleet.total
    finally:
        fleet.close()
        bridge.stop()


def test_shared_subscription_two_bridges(gw, broker, tmp_path):
    topic = f"shared-{uuid.uuid4().hex[:8]}"
    group = f"g{uuid.uuid4().hex[:6]}"
    common = [
        "--mqtt",
        broker.url,
        "--gateway",
        gw.bootstrap,
        "--key-level",
        "2",
        "--map",
        f"$share/{group}/plant/+/sensors/#={topic}",
    ]
    b1 = start_bridge(
        tmp_path,
        [*common, "--client-id", f"{group}-1", "--spool-dir", str(tmp_path / "s1")],
        name="b1",
    )
    b2 = start_bridge(
        tmp_path,
        [*common, "--client-id", f"{group}-2", "--spool-dir", str(tmp_path / "s2")],
        name="b2",
    )
    fleet = Fleet(broker, devices=40)
    try:
        fleet.publish_round(10)
        records = read_topic(gw.bootstrap, topic, fleet.total)
        result = check_records(records, fleet)
        assert result.missing == 0 and result.duplicates == 0
        n1, n2 = b1.metrics()["forwarded"], b2.metrics()["forwarded"]
        assert n1 + n2 == fleet.total
        assert n1 > 0 and n2 > 0, "both bridges take a share"
    finally:
        fleet.close()
        b1.stop()
        b2.stop()


def test_reverse_publishes_records_and_resumes(gw, broker, tmp_path):
    topic = f"alerts-{uuid.uuid4().hex[:8]}"
    group = f"rev-{uuid.uuid4().hex[:6]}"
    mqtt_topic = f"plant/alerts/{uuid.uuid4().hex[:6]}"
    got: list[bytes] = []
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"sub-{group}")
    sub.on_message = lambda c, u, m: got.append(m.payload)
    sub.connect("127.0.0.1", broker.port)
    sub.subscribe(mqtt_topic, qos=1)
    sub.loop_start()
    producer = Producer({"bootstrap.servers": gw.bootstrap, "enable.idempotence": True})

    def produce(values: list[str]) -> None:
        for v in values:
            producer.produce(topic, v.encode(), key=b"k")
        assert producer.flush(30) == 0

    args = [
        "--mqtt",
        broker.url,
        "--gateway",
        gw.bootstrap,
        "--reverse",
        f"{topic}={mqtt_topic}",
        "--reverse-group",
        group,
        "--client-id",
        group,
    ]
    try:
        produce([f"a{i}" for i in range(20)])
        bridge = start_bridge(tmp_path, args)
        deadline = time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert got[:20] == [f"a{i}".encode() for i in range(20)]
        wait_metric(bridge, "reverse_published", lambda x: x >= 20)
        time.sleep(0.5)  # the commit follows the publish acks
        assert bridge.stop() == 0
        produce([f"b{i}" for i in range(10)])
        bridge = start_bridge(tmp_path, args)
        deadline = time.monotonic() + 60
        while len(got) < 30 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        # resumed from the committed offset: the a* records are not sent again
        assert got == [f"a{i}".encode() for i in range(20)] + [f"b{i}".encode() for i in range(10)]
        bridge.stop()
    finally:
        sub.disconnect()
        sub.loop_stop()


def run_bridge_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "bridge", "mqtt", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_bad_url_refused_wrong_password_tls_failure(gw, tmp_path):
    common = ["--gateway", gw.bootstrap, "--map", "a/#=a", "--spool-dir", str(tmp_path / "sp")]
    r = run_bridge_cli("--mqtt", "http://127.0.0.1:1883", *common)
    assert r.returncode == 2
    assert "bad MQTT URL 'http://127.0.0.1:1883'" in r.stderr

    r = run_bridge_cli("--mqtt", "mqtt://127.0.0.1", "--gateway", gw.bootstrap, "--map", "a/+b=x")
    assert r.returncode == 2 and "'+' must be a whole level" in r.stderr

    port = free_port()
    r = run_bridge_cli("--mqtt", f"mqtt://127.0.0.1:{port}", *common)
    assert r.returncode == 1
    assert f"MQTT broker 127.0.0.1:{port} refused the connection" in r.stderr
    assert "Traceback" not in r.stderr

    secured = Mosquitto(tmp_path / "secured", users={"dev": "right"}, tls=True)
    secured.start()
    try:
        r = run_bridge_cli(
            "--mqtt", secured.url, "--username", "dev", "--password", "wrong", *common
        )
        assert r.returncode == 1
        assert "MQTT broker refused the login" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        # with the right password it runs (and stops on SIGTERM with exit 0)
        ok = MqttBridge(
            tmp_path, ["--mqtt", f"mqtt://dev:right@127.0.0.1:{secured.port}", *common], name="ok"
        )
        ok.start(timeout=30)
        assert ok.stop() == 0
        # TLS without the CA: the server certificate cannot be verified
        r = run_bridge_cli(
            "--mqtt", secured.tls_url, "--username", "dev", "--password", "right", *common
        )
        assert r.returncode == 1
        assert "TLS with localhost:" in r.stderr and "certificate" in r.stderr, r.stderr
        # plain MQTT against the TLS port: no CONNACK ever comes
        r = run_bridge_cli("--mqtt", f"mqtt://127.0.0.1:{secured.tls_port}", *common)
        assert r.returncode == 1
        assert "a TLS port? then use mqtts://" in r.stderr, r.stderr
    finally:
        secured.close()


def test_config_file_and_streamgate_command(gw, broker, tmp_path):
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    cfg = tmp_path / "bridge.toml"
    cfg.write_text(
        f'mqtt = "{broker.url}"\ngateway = "{gw.bootstrap}"\nkey_level = 2\n'
        f'spool_dir = "{tmp_path / "spool"}"\nclient_id = "cfg-{topic}"\n'
        f'map = ["plant/+/sensors/#={topic}", {{ filter = "other/#", topic = "{topic}" }}]\n'
    )
    bridge = start_bridge(tmp_path, ["--config", str(cfg)])
    fleet = Fleet(broker, devices=3)
    try:
        fleet.publish_round(3)
        records = read_topic(gw.bootstrap, topic, fleet.total)
        assert len(records) == fleet.total
    finally:
        fleet.close()
        bridge.stop()
    bad = tmp_path / "bad.toml"
    bad.write_text('mqtt = "mqtt://x"\nnope = 1\n')
    r = run_bridge_cli("--config", str(bad))
    assert r.returncode == 2 and "unknown key 'nope'" in r.stderr


def test_status_line_and_metrics(gw, broker, tmp_path):
    topic = f"status-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "stdout.txt"
    metrics_port = free_port()
    args = bridge_args(
        broker.url,
        gw,
        topic,
        tmp_path,
        "--status",
        "on",
        "--metrics-listen",
        f"127.0.0.1:{metrics_port}",
    )
    with out.open("w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "mqtt", *args],
            cwd=REPO_ROOT,
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert wait_port(metrics_port, 30), "bridge not up"  # served once MQTT is connected
    fleet = Fleet(broker, devices=3)
    try:
        fleet.publish_round(2)
        read_topic(gw.bootstrap, topic, 6)
        time.sleep(1)
    finally:
        fleet.close()
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    text = out.read_text()
    assert "in 6 | forwarded 6 | spooled 0 | lag 0" in text, text
    assert "stopped: mqtt DOWN | in 6 | forwarded 6" in err
