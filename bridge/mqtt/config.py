"""Bridge settings: the MQTT URL, topic maps (`FILTER=TOPIC`), reverse maps, spool, TLS.

Settings come from flags and/or a TOML file (`--config`); a flag wins over the file.
Every problem is a `ConfigError` with one line that says what is wrong.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from paho.mqtt.client import topic_matches_sub

KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
SCHEMES = {"mqtt": (False, 1883), "tcp": (False, 1883), "mqtts": (True, 8883), "ssl": (True, 8883)}


class ConfigError(ValueError):
    """A setting is wrong; the message is one line for the user."""


@dataclass(frozen=True)
class TopicMap:
    """MQTT messages matching `mqtt_filter` become records of the streamgate `topic`."""

    mqtt_filter: str  # as subscribed, maybe `$share/group/...`
    topic: str

    @property
    def match_filter(self) -> str:
        """The filter without its `$share/group/` prefix: what a message's topic matches."""
        if self.mqtt_filter.startswith("$share/"):
            return self.mqtt_filter.split("/", 2)[2]
        return self.mqtt_filter


@dataclass(frozen=True)
class ReverseMap:
    """Records of the streamgate `topic` are published to `mqtt_topic` (`{key}` = record key)."""

    topic: str
    mqtt_topic: str


@dataclass(frozen=True)
class MqttUrl:
    host: str
    port: int
    tls: bool
    username: str | None = None
    password: str | None = None


@dataclass
class BridgeConfig:
    mqtt: MqttUrl
    gateway: str
    maps: list[TopicMap]
    reverse: list[ReverseMap] = field(default_factory=list)
    key_level: int | None = None
    mqtt_version: int = 5  # 3 (3.1.1) or 5
    qos: int = 1
    client_id: str = "streamgate-bridge"
    session_expiry_s: int = 7 * 24 * 3600
    keepalive_s: int = 30
    receive_maximum: int = 1000
    username: str | None = None
    password: str | None = None
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    insecure: bool = False
    spool_dir: Path = Path("./bridge-spool")
    spool_max_bytes: int = 1 << 30
    spool_after_ms: int = 2000
    qos0_queue_max: int = 10000
    metrics_listen: tuple[str, int] | None = None
    reverse_group: str = "streamgate-bridge-reverse"
    reverse_qos: int = 1
    status: str = "auto"  # auto (when stdout is a terminal), on, off
    producer_config: dict[str, str] = field(default_factory=dict)


def parse_mqtt_url(url: str) -> MqttUrl:
    """`mqtt://[user:pass@]host[:port]` or `mqtts://...` (TLS)."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ConfigError(
            f"bad MQTT URL {url!r}: the scheme must be one of mqtt://, mqtts://, tcp://, ssl://"
        )
    if not parts.hostname:
        raise ConfigError(f"bad MQTT URL {url!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"bad MQTT URL {url!r}: expected scheme://host[:port] only")
    tls, default_port = SCHEMES[parts.scheme]
    try:
        port = parts.port or default_port
    except ValueError:
        raise ConfigError(f"bad MQTT URL {url!r}: bad port") from None
    return MqttUrl(
        host=parts.hostname,
        port=port,
        tls=tls,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
    )


def check_filter(mqtt_filter: str) -> None:
    """MQTT filter rules: `+` is a whole level, `#` only as the whole last level."""
    body = mqtt_filter
    if body.startswith("$share/"):
        pieces = body.split("/", 2)
        if len(pieces) < 3 or not pieces[1] or any(c in pieces[1] for c in "+#"):
            raise ConfigError(f"bad shared subscription {mqtt_filter!r}: use $share/GROUP/FILTER")
        body = pieces[2]
    if not body:
        raise ConfigError(f"bad MQTT filter {mqtt_filter!r}: empty")
    levels = body.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise ConfigError(f"bad MQTT filter {mqtt_filter!r}: '#' must be the whole last level")
        if "+" in level and level != "+":
            raise ConfigError(f"bad MQTT filter {mqtt_filter!r}: '+' must be a whole level")


def check_topic(topic: str, what: str) -> None:
    if not KAFKA_TOPIC.match(topic) or topic in (".", ".."):
        raise ConfigError(f"bad streamgate topic {topic!r} in {what}: use letters, digits, . _ -")


def parse_map(spec: str) -> TopicMap:
    """`plant/+/sensors/#=sensors` (the last `=` splits: Kafka topics have none)."""
    mqtt_filter, sep, topic = spec.rpartition("=")
    if not sep or not mqtt_filter or not topic:
        raise ConfigError(f"bad --map {spec!r}: expected MQTT_FILTER=TOPIC")
    check_filter(mqtt_filter)
    check_topic(topic, f"--map {spec!r}")
    return TopicMap(mqtt_filter, topic)


def parse_reverse(spec: str) -> ReverseMap:
    """`alerts=plant/alerts`: records of streamgate topic `alerts` go to MQTT `plant/alerts`."""
    topic, sep, mqtt_topic = spec.partition("=")
    if not sep or not topic or not mqtt_topic:
        raise ConfigError(f"bad --reverse {spec!r}: expected TOPIC=MQTT_TOPIC")
    check_topic(topic, f"--reverse {spec!r}")
    if "+" in mqtt_topic or "#" in mqtt_topic:
        raise ConfigError(f"bad --reverse {spec!r}: an MQTT topic to publish has no wildcards")
    return ReverseMap(topic, mqtt_topic)


def parse_host_port(value: str, what: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"bad {what} {value!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def load_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"bad config file {path}: {e}") from None
    return data


def _map_items(value: Any, what: str) -> list[str]:
    """TOML maps: a list of "FILTER=TOPIC" strings or of {filter=..., topic=...} tables."""
    if not isinstance(value, list):
        raise ConfigError(f"bad config: {what} must be a list")
    out = []
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and what == "map" and {"filter", "topic"} <= item.keys():
            out.append(f"{item['filter']}={item['topic']}")
        elif (
            isinstance(item, dict) and what == "reverse" and {"topic", "mqtt_topic"} <= item.keys()
        ):
            out.append(f"{item['topic']}={item['mqtt_topic']}")
        else:
            raise ConfigError(f"bad config: an entry of {what} is {item!r}")
    return out


# Flag name (argparse dest) -> type checker for TOML values.
FILE_KEYS: dict[str, type] = {
    "mqtt": str,
    "gateway": str,
    "key_level": int,
    "mqtt_version": str,
    "qos": int,
    "client_id": str,
    "session_expiry_s": int,
    "keepalive_s": int,
    "receive_maximum": int,
    "username": str,
    "password": str,
    "ca": str,
    "cert": str,
    "key": str,
    "insecure": bool,
    "spool_dir": str,
    "spool_max_bytes": int,
    "spool_after_ms": int,
    "metrics_listen": str,
    "reverse_group": str,
    "reverse_qos": int,
    "status": str,
    "qos0_queue_max": int,
}


def build_config(args: dict[str, Any]) -> BridgeConfig:
    """Merge the TOML file (args['config']) under the flags and check everything."""
    merged: dict[str, Any] = {}
    maps: list[str] = []
    reverse: list[str] = []
    producer: dict[str, str] = {}
    if args.get("config"):
        data = load_toml(args["config"])
        for name, value in data.items():
            key = name.replace("-", "_")
            if key == "map":
                maps += _map_items(value, "map")
            elif key == "reverse":
                reverse += _map_items(value, "reverse")
            elif key == "producer" and isinstance(value, dict):
                producer.update({str(k): str(v) for k, v in value.items()})
            elif key in FILE_KEYS:
                if not isinstance(value, FILE_KEYS[key]) and not (
                    FILE_KEYS[key] is str and isinstance(value, int)
                ):
                    raise ConfigError(f"bad config file: {name} = {value!r} has the wrong type")
                merged[key] = value
            else:
                raise ConfigError(f"bad config file {args['config']}: unknown key {name!r}")
    for key, value in args.items():
        if value is not None and key not in ("map", "reverse", "config", "producer"):
            merged[key] = value
    maps += args.get("map") or []
    reverse += args.get("reverse") or []
    for item in args.get("producer") or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"bad --producer {item!r}: expected NAME=VALUE")
        producer[name] = value

    if not merged.get("mqtt"):
        raise ConfigError("no MQTT broker: give --mqtt mqtt://HOST:PORT")
    if not merged.get("gateway"):
        raise ConfigError("no gateway: give --gateway HOST:PORT")
    if not maps and not reverse:
        raise ConfigError("nothing to bridge: give --map 'FILTER=TOPIC' and/or --reverse")
    url = parse_mqtt_url(merged["mqtt"])
    version = str(merged.get("mqtt_version", "5"))
    if version not in ("3", "3.1.1", "311", "5", "5.0"):
        raise ConfigError(f"bad --mqtt-version {version!r}: use 3.1.1 or 5")
    qos = int(merged.get("qos", 1))
    if qos not in (0, 1, 2):
        raise ConfigError(f"bad --qos {qos}: use 0, 1 or 2")
    reverse_qos = int(merged.get("reverse_qos", 1))
    if reverse_qos not in (0, 1, 2):
        raise ConfigError(f"bad --reverse-qos {reverse_qos}: use 0, 1 or 2")
    key_level = merged.get("key_level")
    if key_level is not None and int(key_level) < 1:
        raise ConfigError(f"bad --key-level {key_level}: topic levels count from 1")
    parsed_maps = [parse_map(m) for m in maps]
    parsed_reverse = [parse_reverse(r) for r in reverse]
    for r in parsed_reverse:
        sample = r.mqtt_topic.replace("{key}", "k")
        for m in parsed_maps:
            if topic_matches_sub(m.match_filter, sample):
                raise ConfigError(
                    f"--reverse {r.topic}={r.mqtt_topic} publishes into --map {m.mqtt_filter}: "
                    "a loop"
                )
    status = str(merged.get("status", "auto"))
    if status not in ("auto", "on", "off"):
        raise ConfigError(f"bad --status {status!r}: use auto, on or off")
    for path_key in ("ca", "cert", "key"):
        if merged.get(path_key) and not Path(merged[path_key]).is_file():
            raise ConfigError(f"--{path_key} {merged[path_key]}: no such file")
    if merged.get("key") and not merged.get("cert"):
        raise ConfigError("--key needs --cert (the client certificate)")
    limit = int(merged.get("spool_max_bytes", 1 << 30))
    if limit < 1 << 16:
        raise ConfigError(f"bad --spool-max-bytes {limit}: at least 65536")
    return BridgeConfig(
        mqtt=url,
        gateway=str(merged["gateway"]),
        maps=parsed_maps,
        reverse=parsed_reverse,
        key_level=int(key_level) if key_level is not None else None,
        mqtt_version=3 if version.startswith("3") else 5,
        qos=qos,
        client_id=str(merged.get("client_id", "streamgate-bridge")),
        session_expiry_s=int(merged.get("session_expiry_s", 7 * 24 * 3600)),
        keepalive_s=int(merged.get("keepalive_s", 30)),
        receive_maximum=int(merged.get("receive_maximum", 1000)),
        username=merged.get("username") or url.username,
        password=merged.get("password") or url.password,
        ca=merged.get("ca"),
        cert=merged.get("cert"),
        key=merged.get("key"),
        insecure=bool(merged.get("insecure", False)),
        spool_dir=Path(merged.get("spool_dir", "./bridge-spool")),
        spool_max_bytes=limit,
        spool_after_ms=int(merged.get("spool_after_ms", 2000)),
        qos0_queue_max=int(merged.get("qos0_queue_max", 10000)),
        metrics_listen=(
            parse_host_port(merged["metrics_listen"], "--metrics-listen")
            if merged.get("metrics_listen")
            else None
        ),
        reverse_group=str(merged.get("reverse_group", "streamgate-bridge-reverse")),
        reverse_qos=reverse_qos,
        status=status,
        producer_config=producer,
    )
