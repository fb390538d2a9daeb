"""MQTT bridge end to end: devices -> mosquitto -> bridge -> streamgate -> Kafka consumer.

Starts a gateway, mosquitto and the bridge (`python -m bridge mqtt`) on loopback, then
`--devices` paho clients (QoS 1, `--payload` bytes, each payload starts with its publish
time). Two phases:
- burst: every device publishes `--per-device` messages as fast as the broker acks them;
  messages/s = messages / (first publish -> the consumer saw the last one);
- paced: `--paced-rate` messages/s in total for `--paced-seconds`; latency from MQTT
  publish to the consumer seeing the record, p50/p99 (also reported for the burst).
The consumer runs in its own process (no GIL shared with 1,000 device clients). Run it with
`streamgate bench run scenario:bridge` (`--quick`: 100 devices, a 2-second paced phase).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import selectors
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import paho.mqtt.client as mqtt  # noqa: E402

from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from harness.bridge import MqttBridge  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.mosquitto import Mosquitto  # noqa: E402

QUICK = ("--devices", "100", "--per-device", "10", "--paced-rate", "500", "--paced-seconds", "2")


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
    pairs: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + 600
    while len(pairs) < expect and time.monotonic() < deadline:
        for m in c.consume(1000, timeout=0.2):
            if m.error() is None:
                now = time.time_ns()
                received_ms = int(dict(m.headers() or [])["mqtt.received_ms"] or b"0")
                pairs.append((int((m.value() or b"0")[:19]), received_ms * 1_000_000, now))
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
    """`n` paho clients driven by ONE thread through a selector (paho's external loop):
    1,000 `loop_start()` threads on a busy 2-core machine connect and ack far too slowly."""

    def __init__(self, broker: Mosquitto, n: int, payload: int) -> None:
        self.payload = payload
        self.clients: list[mqtt.Client] = []
        self.sel = selectors.DefaultSelector()
        self._last_misc = time.monotonic()
        for i in range(n):
            c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-{i}")
            c.max_inflight_messages_set(0)  # unlimited: the broker paces with its acks
            c.max_queued_messages_set(0)
            c.connect("127.0.0.1", broker.port, keepalive=300)
            sock = c.socket()
            assert sock is not None
            self.sel.register(sock, selectors.EVENT_READ, c)
            self.clients.append(c)
            if i % 50 == 49:
                self.pump(0)
        self.pump_until(lambda: all(c.is_connected() for c in self.clients), 120)

    def pump(self, timeout: float) -> None:
        for key, _ in self.sel.select(timeout):
            key.data.loop_read()
        for c in self.clients:
            if c.want_write():
                c.loop_write()
        now = time.monotonic()
        if now - self._last_misc > 1:
            self._last_misc = now
            for c in self.clients:
                c.loop_misc()

    def pump_until(self, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError("devices: timed out")
            self.pump(0.01)

    def body(self) -> bytes:
        stamp = b"%019d" % time.time_ns()
        return stamp + b"x" * max(0, self.payload - len(stamp))

    def publish(self, i: int, root: str) -> mqtt.MQTTMessageInfo:
        return self.clients[i].publish(f"{root}/dev{i:05d}/sensors/t", self.body(), qos=1)

    def close(self) -> None:
        for c in self.clients:
            c.disconnect()
        self.pump(0.1)


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
            while (delay := start + k * interval - time.monotonic()) > 0:
                devices.pump(min(delay, 0.005))
            infos.append(devices.publish(k % n, "paced"))
    else:
        # every device publishes its messages in order, as fast as the broker acks them
        for _ in range(args.per_device):
            for i in range(n):
                infos.append(devices.publish(i, "burst"))
                if i % 100 == 99:
                    devices.pump(0)
    pending = iter(infos)
    waiting: list[mqtt.MQTTMessageInfo] = []

    def all_published() -> bool:
        # Check the oldest unacked message only; move on as acks come in.
        while True:
            if not waiting:
                nxt = next(pending, None)
                if nxt is None:
                    return True
                waiting.append(nxt)
            if not waiting[0].is_published():
                return False
            waiting.pop()

    devices.pump_until(all_published, 300)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--devices", type=int, default=1000)
    p.add_argument("--per-device", type=int, default=20)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--paced-rate", type=float, default=1000.0)
    p.add_argument("--paced-seconds", type=float, default=10.0)
    p.add_argument("--mqtt-version", default="5")
    return p


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(build_parser(), options, quick=QUICK)
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
    }
    return result


def main(argv: list[str] | None = None) -> int:
    return standalone("bridge", argv)


if __name__ == "__main__":
    sys.exit(main())
