"""Counters of the bridge, the Prometheus endpoint (`--metrics-listen`) and the status line."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


@dataclass
class Stats:
    """Plain integers; each is written by one thread only, so reads need no lock."""

    received: int = 0  # MQTT messages taken in (all QoS)
    forwarded: int = 0  # records acknowledged by streamgate
    spooled: int = 0  # records written to the disk spool
    unmapped: int = 0  # messages whose topic matches no map (should not happen)
    errors: int = 0  # records streamgate refused for good (written to rejected.jsonl)
    dropped_qos0: int = 0  # QoS 0 messages dropped because the bridge was saturated
    reverse_published: int = 0  # records published to MQTT by --reverse
    mqtt_acks: int = 0  # QoS 1/2 acknowledgements sent to the MQTT broker
    mqtt_connects: int = 0
    mqtt_disconnects: int = 0
    # gauges, set by the pipeline thread
    spool_bytes: int = 0
    spool_records: int = 0
    inflight: int = 0  # records handed to the producer and not yet acknowledged
    lag: int = 0  # records received and not yet in streamgate (waiting direct + spooled)
    spooling: int = 0  # 1 while new messages go to the spool
    mqtt_connected: int = 0


GAUGES = {"spool_bytes", "spool_records", "inflight", "lag", "spooling", "mqtt_connected"}
HELP = {
    "received": "MQTT messages received",
    "forwarded": "records acknowledged by streamgate",
    "spooled": "records written to the disk spool",
    "unmapped": "MQTT messages matching no map",
    "errors": "records streamgate refused (kept in rejected.jsonl)",
    "dropped_qos0": "QoS 0 messages dropped while saturated",
    "reverse_published": "records published to MQTT by --reverse",
    "mqtt_acks": "QoS 1/2 acknowledgements sent to the MQTT broker",
    "mqtt_connects": "successful MQTT connections",
    "mqtt_disconnects": "MQTT connections lost",
    "spool_bytes": "bytes in the spool folder",
    "spool_records": "records in the spool not yet acknowledged by streamgate",
    "inflight": "records sent to streamgate and not yet acknowledged",
    "lag": "records received and not yet acknowledged by streamgate",
    "spooling": "1 while new messages go to the spool",
    "mqtt_connected": "1 while connected to the MQTT broker",
}


class _StatsCollector(Collector):
    def __init__(self, stats: Stats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        for f in fields(self.stats):
            name = f"streamgate_bridge_{f.name}"
            value = getattr(self.stats, f.name)
            if f.name in GAUGES:
                yield GaugeMetricFamily(name, HELP[f.name], value=value)
            else:
                yield CounterMetricFamily(name, HELP[f.name], value=value)


def serve_metrics(stats: Stats, host: str, port: int) -> None:
    registry = CollectorRegistry()
    registry.register(_StatsCollector(stats))
    start_http_server(port, addr=host, registry=registry)


def status_text(stats: Stats) -> str:
    mode = "spooling" if stats.spooling else "direct"
    conn = "up" if stats.mqtt_connected else "DOWN"
    return (
        f"mqtt {conn} | in {stats.received} | forwarded {stats.forwarded} | "
        f"spooled {stats.spooled} | lag {stats.lag} "
        f"(spool {stats.spool_records} rec, {stats.spool_bytes / 1e6:.1f} MB) | {mode} | "
        f"errors {stats.errors} | dropped qos0 {stats.dropped_qos0}"
    )


def run_status_line(stats: Stats, stop: threading.Event, extra: Callable[[], str]) -> None:
    """A live line on the terminal (rich), refreshed twice a second until `stop`."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    with Live(status_text(stats), console=console, refresh_per_second=4, transient=False) as live:
        while not stop.wait(0.5):
            live.update(status_text(stats) + extra())
        live.update(status_text(stats) + extra())


def rate(stats: Stats) -> Callable[[], str]:
    """A closure giving ' | N msg/s' from the forwarded counter."""
    last = [time.monotonic(), stats.forwarded]

    def text() -> str:
        now, count = time.monotonic(), stats.forwarded
        per_s = (count - last[1]) / max(1e-6, now - last[0])
        last[0], last[1] = now, count
        return f" | {per_s:.0f} msg/s"

    return text
