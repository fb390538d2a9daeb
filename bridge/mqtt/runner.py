"""Wires the MQTT side, the pipeline, the reverse direction, metrics and the status line."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from types import FrameType

import paho.mqtt.client as mqtt

from bridge.mqtt.config import BridgeConfig
from bridge.mqtt.metrics import Stats, rate, run_status_line, serve_metrics, status_text
from bridge.mqtt.mqtt_side import MqttSide
from bridge.mqtt.pipeline import Inbound, Pipeline
from bridge.mqtt.reverse import Reverse

log = logging.getLogger("bridge.mqtt")
LOG_STATUS_EVERY_S = 30.0


def _inbound(msg: mqtt.MQTTMessage) -> Inbound:
    props = getattr(msg, "properties", None)
    user = list(getattr(props, "UserProperty", []) or []) if props is not None else []
    return Inbound(
        mid=msg.mid,
        qos=msg.qos,
        topic=msg.topic,
        payload=bytes(msg.payload),
        retain=bool(msg.retain),
        received_ms=time.time_ns() // 1_000_000,
        user_properties=user,
    )


def run(cfg: BridgeConfig) -> int:
    """Runs until SIGTERM/SIGINT; returns the exit code."""
    stats = Stats()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    pipeline: Pipeline | None = None
    side: MqttSide
    if cfg.maps:
        holder: list[Pipeline] = []
        side = MqttSide(cfg, stats, lambda m: holder[0].offer(_inbound(m)))
        pipeline = Pipeline(cfg, stats, side.ack)
        holder.append(pipeline)
    else:
        side = MqttSide(cfg, stats, lambda m: None)
    side.start()  # raises ConnectFailed; messages wait in the pipeline's queue meanwhile
    if cfg.metrics_listen:
        serve_metrics(stats, *cfg.metrics_listen)
    threads: list[threading.Thread] = []
    if pipeline is not None:
        pipeline.open_producer()
        threads += [
            threading.Thread(target=pipeline.poll_loop, name="producer-poll", daemon=True),
            threading.Thread(target=pipeline.run, name="pipeline", daemon=True),
        ]
        for t in threads:
            t.start()
    maps = ", ".join(f"{m.mqtt_filter} -> {m.topic}" for m in cfg.maps)
    rev = ", ".join(f"{r.topic} -> {r.mqtt_topic}" for r in cfg.reverse)
    log.info(
        "bridging MQTT %s:%d <-> streamgate %s: %s%s",
        cfg.mqtt.host,
        cfg.mqtt.port,
        cfg.gateway,
        maps,
        f"; reverse {rev}" if rev else "",
    )
    reverse = Reverse(cfg, stats, side.client) if cfg.reverse else None
    reverse_thread = None
    if reverse is not None:
        reverse_thread = threading.Thread(target=reverse.run, name="reverse", daemon=True)
        reverse_thread.start()
    status_thread = None
    if cfg.status == "on" or (cfg.status == "auto" and sys.stdout.isatty()):
        status_thread = threading.Thread(
            target=run_status_line, args=(stats, stop, rate(stats)), daemon=True
        )
        status_thread.start()
    last_log = time.monotonic()
    code = 0
    while not stop.wait(0.5):
        if pipeline is not None and pipeline.failed:
            code = 1
            break
        if status_thread is None and time.monotonic() - last_log > LOG_STATUS_EVERY_S:
            log.info("%s", status_text(stats))
            last_log = time.monotonic()
    log.info("stopping")
    if reverse is not None and reverse_thread is not None:
        reverse.stop.set()
        reverse_thread.join(timeout=15)  # closing the consumer leaves the group at once
    side.stop()  # no new messages; unacked ones stay with the broker's session
    if pipeline is not None:
        pipeline.stop.set()
        for t in threads:
            t.join(timeout=30)
    if status_thread is not None:
        status_thread.join(timeout=2)
    log.info("stopped: %s", status_text(stats))
    return code
