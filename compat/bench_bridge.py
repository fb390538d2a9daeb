"""MQTT bridge end to end: devices -> mosquitto -> bridge -> streamgate -> Kafka consumer.

Starts a gateway, mosquitto and the bridge (`python -m bridge mqtt`) on loopback, then
`--devices` paho clients (QoS 1, `--payload` bytes, each payload starts with its publish
time). Two phases:
- burst: every device publishes `--per-device` messages as fast as the broker acks them;
  messages/s = messages / (first publish -> the consumer saw the last one);
- paced: `--paced-rate` messages/s in total for `--paced-seconds`; latency from MQTT
  publish to the consumer seeing the record, p50/p99 (also reported for the burst).
The consumer runs in its own process (no GIL shared with 1,000 device clients). The result
JSON (with provenance) goes to compat/results/bridge.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import paho.mqtt.client as mqtt  # noqa: E402

from harness.bridge import MqttBridge  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.mosquitto import Mosquitto  # noqa: E402
from harness.provenance import provenance  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "compat" / "results" / "bridge.json"


def consume(bootstrap: str, topic: str, expect: int, out: Any, ready: Any) -> None:
    """Child process: read `expect` records, send back (publish ns, seen ns) pairs."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic], on_assign=lambda cons, parts: ready.set())
    pairs = []
    deadline = time.monotonic() + 600
    while len(pairs) < expect and time.monotonic() < deadline:
        for m in c.consume(1000, timeout=0.2):
            if m.error() is None:
                now = time.time_ns()
                received_ms = int(dict(m.headers() or [])["mqtt.received_ms"])
                pairs.append((int(m.value()[:19]), received_ms * 1_000_000, now))
    c.close()
    out.send(pairs)


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def summary(lat: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(lat, 50), 2),
        "p99_ms": round(percentile(lat, 99), 2),
        "max_ms": round(max(lat), 2),
        "mean_ms": round(statistics.fmean(lat), 2),
    }


def latency_summary(pairs: list[tuple[int, int, int]]) -> dict[str, Any]:
    """Publish -> consumer; and split at the bridge's receive time (ms resolution)."""
    out: dict[str, Any] = summary([(seen - sent) / 1e6 for sent, _, seen in pairs])
    out["publish_to_bridge"] = summary([(got - sent) / 1e6 for sent, got, _ in pairs])
    out["bridge_to_consumer"] = summary([(seen - got) / 1e6 for _, got, seen in pairs])
    return out


class Devices:
    def __init__(self, broker: Mosquitto, n: int, payload: int) -> None:
        self.payload = payload
        self.clients = []
        # Connect in groups of 50 and wait for their CONNACKs: 1,000 clients at once on a
        # busy machine pass paho's connect timeout and reconnect in a storm.
        for first in range(0, n, 50):
            group = []
            for i in range(first, min(n, first + 50)):
                c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-{i}")
                c.connect_timeout = 60
                c.max_inflight_messages_set(1000)
                c.max_queued_messages_set(0)
                c.connect("127.0.0.1", broker.port, keepalive=300)
                c.loop_start()
                group.append(c)
            self.clients += group
            deadline = time.monotonic() + 120
            while not all(c.is_connected() for c in group):
                if time.monotonic() > deadline:
                    raise RuntimeError("devices did not all connect")
                time.sleep(0.05)

    def body(self) -> bytes:
        stamp = b"%019d" % time.time_ns()
        return stamp + b"x" * max(0, self.payload - len(stamp))

    def publish(self, i: int, root: str) -> mqtt.MQTTMessageInfo:
        return self.clients[i].publish(f"{root}/dev{i:05d}/sensors/t", self.body(), qos=1)

    def close(self) -> None:
        for c in self.clients:
            c.disconnect()
            c.loop_stop()


def run_phase(
    args: argparse.Namespace, gw: Gateway, devices: Devices, topic: str, total: int, kind: str
) -> dict[str, Any]:
    parent, child = mp.Pipe()
    ready = mp.Event()
    proc = mp.Process(target=consume, args=(gw.bootstrap, topic, total, child, ready))
    proc.start()
    ready.wait(60)
    time.sleep(1)
    n = len(devices.clients)
    start = time.monotonic()
    start_ns = time.time_ns()
    infos = []
    if kind == "control":
        # The floor: a plain idempotent producer at the same rate, no MQTT, no bridge.
        from confluent_kafka import Producer

        prod = Producer(
            {
                "bootstrap.servers": gw.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
            }
        )
        interval = 1.0 / args.paced_rate
        for k in range(total):
            delay = start + k * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            now_ms = str(time.time_ns() // 1_000_000).encode()
            prod.produce(
                topic,
                devices.body(),
                key=b"%05d" % (k % len(devices.clients)),
                headers=[("mqtt.received_ms", now_ms)],
            )
            prod.poll(0)
        prod.flush(60)
    elif kind == "paced":
        interval = 1.0 / args.paced_rate
        for k in range(total):
            due = start + k * interval
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            infos.append(devices.publish(k % n, "paced"))
    else:
        # one thread per 100 devices publishes their messages, each device in order
        def worker(first: int, last: int) -> None:
            mine = []
            for _ in range(args.per_device):
                for i in range(first, last):
                    mine.append(devices.publish(i, "burst"))
            for info in mine:
                info.wait_for_publish(300)

        threads = [
            threading.Thread(target=worker, args=(a, min(n, a + 100))) for a in range(0, n, 100)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for info in infos:
        info.wait_for_publish(300)
    published_s = time.monotonic() - start
    pairs = parent.recv()
    proc.join(30)
    elapsed = (max(seen for _, _, seen in pairs) - start_ns) / 1e9
    result = {
        "messages": total,
        "received": len(pairs),
        "publish_seconds": round(published_s, 2),
        "end_to_end_seconds": round(elapsed, 2),
        "messages_per_s": round(len(pairs) / elapsed, 1),
        "latency": latency_summary(pairs),
    }
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--devices", type=int, default=1000)
    p.add_argument("--per-device", type=int, default=20)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--paced-rate", type=float, default=1000.0)
    p.add_argument("--paced-seconds", type=float, default=10.0)
    p.add_argument("--mqtt-version", default="5")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-bridge-"))
    gw = Gateway(base / "data", base / "gw.log", default_partitions=8)
    broker = Mosquitto(base / "mq")
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    paced_topic = f"{topic}-paced"
    control_topic = f"{topic}-control"
    gw.start_fresh()
    broker.start()
    # Topics exist before anyone produces or subscribes: no auto-create or metadata wait.
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    for fut in admin.create_topics(
        [NewTopic(t, 8, 1) for t in (topic, paced_topic, control_topic)]
    ).values():
        fut.result(30)
    bridge = MqttBridge(
        base,
        [
            "--mqtt",
            broker.url,
            "--gateway",
            gw.bootstrap,
            "--key-level",
            "2",
            "--map",
            f"burst/+/sensors/#={topic}",
            "--map",
            f"paced/+/sensors/#={paced_topic}",
            "--spool-dir",
            str(base / "spool"),
            "--mqtt-version",
            args.mqtt_version,
            "--receive-maximum",
            "5000",
        ],
    )
    bridge.start()
    devices = None
    try:
        devices = Devices(broker, args.devices, args.payload)
        burst = run_phase(args, gw, devices, topic, args.devices * args.per_device, "burst")
        print("burst", json.dumps(burst), flush=True)
        paced_total = int(args.paced_rate * args.paced_seconds)
        paced = run_phase(args, gw, devices, paced_topic, paced_total, "paced")
        print("paced", json.dumps(paced), flush=True)
        control = run_phase(args, gw, devices, control_topic, paced_total, "control")
        print("control (producer -> consumer, no bridge)", json.dumps(control), flush=True)
        metrics = bridge.metrics()
    finally:
        if devices is not None:
            devices.close()
        bridge.close()
        broker.close()
        gw.close()
    result = {
        "benchmark": "bridge",
        "setup": {
            "devices": args.devices,
            "per_device": args.per_device,
            "payload_bytes": args.payload,
            "qos": 1,
            "mqtt_version": args.mqtt_version,
            "paced_rate": args.paced_rate,
            "paced_seconds": args.paced_seconds,
            "partitions": 8,
            "note": "gateway, mosquitto, bridge, devices and consumer "
            "on one machine (loopback); streamgate fsyncs before acks=all",
        },
        "burst": burst,
        "paced": paced,
        "control_producer_to_consumer": control,
        "bridge_metrics": metrics,
        "provenance": provenance(),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
