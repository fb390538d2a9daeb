"""The MQTT client (paho-mqtt 2.x): persistent session, manual acks, TLS, clear errors.

paho runs its own network thread (`loop_start`), which also reconnects after a lost
connection; the first connection is made synchronously so a bad URL, a refused connection,
bad credentials or a TLS failure end the command with one clear line.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from bridge.mqtt.config import BridgeConfig
from bridge.mqtt.metrics import Stats

log = logging.getLogger("bridge.mqtt")
CONNACK_TIMEOUT_S = 10.0


class ConnectFailed(RuntimeError):
    """The first connection failed; the message is one line for the user."""


def _connect_properties(cfg: BridgeConfig) -> Properties:
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = cfg.session_expiry_s
    # How many unacknowledged QoS 1/2 messages the broker may send us at once.
    props.ReceiveMaximum = cfg.receive_maximum
    return props


def make_client(cfg: BridgeConfig, client_id: str) -> mqtt.Client:
    v5 = cfg.mqtt_version == 5
    client = mqtt.Client(
        callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
        # 3.1.1: a persistent session (5 uses clean_start=False + session expiry instead).
        clean_session=None if v5 else False,
        manual_ack=True,
    )
    if cfg.username is not None:
        client.username_pw_set(cfg.username, cfg.password)
    if cfg.mqtt.tls:
        client.tls_set(ca_certs=cfg.ca, certfile=cfg.cert, keyfile=cfg.key)
        if cfg.insecure:
            client.tls_insecure_set(True)
    client.reconnect_delay_set(min_delay=1, max_delay=10)
    return client


def connect(client: mqtt.Client, cfg: BridgeConfig) -> None:
    """TCP/TLS connect with errors turned into one line."""
    where = f"{cfg.mqtt.host}:{cfg.mqtt.port}"
    kwargs: dict[str, Any] = {}
    if cfg.mqtt_version == 5:
        kwargs = {"clean_start": False, "properties": _connect_properties(cfg)}
    try:
        client.connect(cfg.mqtt.host, cfg.mqtt.port, keepalive=cfg.keepalive_s, **kwargs)
    except socket.gaierror as e:
        raise ConnectFailed(f"cannot resolve MQTT host {cfg.mqtt.host!r}: {e.strerror}") from None
    except ConnectionRefusedError:
        raise ConnectFailed(f"MQTT broker {where} refused the connection") from None
    except ssl.SSLCertVerificationError as e:
        raise ConnectFailed(f"TLS with {where} failed: {e.verify_message or e.reason}") from None
    except ssl.SSLError as e:
        raise ConnectFailed(f"TLS with {where} failed: {e.reason or e}") from None
    except TimeoutError:
        raise ConnectFailed(f"MQTT broker {where} did not answer (timeout)") from None
    except OSError as e:
        raise ConnectFailed(f"cannot connect to MQTT broker {where}: {e.strerror or e}") from None


class MqttSide:
    """Subscribes to the maps' filters and hands every message to `on_message`."""

    def __init__(
        self, cfg: BridgeConfig, stats: Stats, on_message: Callable[[mqtt.MQTTMessage], None]
    ) -> None:
        self.cfg = cfg
        self.stats = stats
        self.on_message = on_message
        self.client = make_client(cfg, cfg.client_id)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self._first = threading.Event()
        self._first_error: str | None = None
        self._closed_early = False
        self._ack_lock = threading.Lock()

    def _on_connect(
        self,
        client: mqtt.Client,
        userdata: Any,
        flags: mqtt.ConnectFlags,
        reason: ReasonCode,
        properties: Properties | None,
    ) -> None:
        if reason.is_failure:
            self._first_error = str(reason)
            self._first.set()
            log.error("MQTT broker refused the connection: %s", reason)
            return
        self.stats.mqtt_connects += 1
        self.stats.mqtt_connected = 1
        log.info(
            "connected to MQTT %s:%d (session present: %s)",
            self.cfg.mqtt.host,
            self.cfg.mqtt.port,
            flags.session_present,
        )
        if self.cfg.maps:
            client.subscribe([(m.mqtt_filter, self.cfg.qos) for m in self.cfg.maps])
        self._first.set()

    def _on_disconnect(
        self,
        client: mqtt.Client,
        userdata: Any,
        flags: mqtt.DisconnectFlags,
        reason: ReasonCode,
        properties: Properties | None,
    ) -> None:
        if not self._first.is_set():
            self._closed_early = True
            self._first.set()
        if self.stats.mqtt_connected:
            self.stats.mqtt_disconnects += 1
            log.warning("MQTT connection lost (%s): reconnecting", reason)
        self.stats.mqtt_connected = 0

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        self.on_message(msg)

    def start(self) -> None:
        """Connect (raising ConnectFailed with a clear line) and start paho's thread."""
        connect(self.client, self.cfg)
        self.client.loop_start()
        hint = "" if self.cfg.mqtt.tls else " (a TLS port? then use mqtts://)"
        where = f"{self.cfg.mqtt.host}:{self.cfg.mqtt.port}"
        if not self._first.wait(CONNACK_TIMEOUT_S):
            self.client.loop_stop()
            raise ConnectFailed(
                f"no answer (CONNACK) from MQTT broker {self.cfg.mqtt.host}:{self.cfg.mqtt.port}"
                f" within {CONNACK_TIMEOUT_S:.0f} s{hint}"
            )
        if self._closed_early:
            self.client.loop_stop()
            raise ConnectFailed(f"MQTT broker {where} closed the connection before answering{hint}")
        if self._first_error is not None:
            self.client.loop_stop()
            self.client.disconnect()
            raise ConnectFailed(f"MQTT broker refused the login: {self._first_error}")

    def ack(self, mid: int, qos: int) -> None:
        if qos > 0:
            self.client.ack(mid, qos)
            with self._ack_lock:  # called from the pipeline and the producer's poll thread
                self.stats.mqtt_acks += 1

    def stop(self) -> None:
        # Disconnect without a will; the persistent session keeps what arrives meanwhile.
        self.client.disconnect()
        deadline = time.monotonic() + 5
        while self.stats.mqtt_connected and time.monotonic() < deadline:
            time.sleep(0.02)
        self.client.loop_stop()
