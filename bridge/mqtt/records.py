"""From an MQTT message to a streamgate record (topic, key, headers, payload) and back to bytes.

Headers: `mqtt.topic`, `mqtt.qos`, `mqtt.retain` ("0"/"1"), `mqtt.received_ms` (receive time,
epoch milliseconds, also the record timestamp) and every MQTT 5 user property as
`mqtt.user.NAME` (repeated names stay repeated). The payload passes through byte for byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from paho.mqtt.client import topic_matches_sub

from bridge.mqtt.config import TopicMap

Header = tuple[str, bytes]

_FIXED = struct.Struct(">QqH")  # seq, timestamp ms, topic length
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_NO_KEY = 0xFFFFFFFF


@dataclass
class Record:
    """One record to produce; `seq` is unique to the message within the bridge's lifetime."""

    seq: int
    topic: str
    key: bytes | None
    value: bytes
    headers: list[Header]
    timestamp_ms: int


class Router:
    """Finds the first map whose filter matches an MQTT topic and builds the record."""

    def __init__(self, maps: list[TopicMap], key_level: int | None) -> None:
        self.maps = maps
        self.key_level = key_level

    def topic_for(self, mqtt_topic: str) -> str | None:
        for m in self.maps:
            if topic_matches_sub(m.match_filter, mqtt_topic):
                return m.topic
        return None

    def key_for(self, mqtt_topic: str) -> bytes:
        if self.key_level is not None:
            levels = mqtt_topic.split("/")
            if self.key_level <= len(levels):
                return levels[self.key_level - 1].encode()
        return mqtt_topic.encode()

    def record(
        self,
        seq: int,
        mqtt_topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        received_ms: int,
        user_properties: list[tuple[str, str]],
    ) -> Record | None:
        topic = self.topic_for(mqtt_topic)
        if topic is None:
            return None
        headers: list[Header] = [
            ("mqtt.topic", mqtt_topic.encode()),
            ("mqtt.qos", str(qos).encode()),
            ("mqtt.retain", b"1" if retain else b"0"),
            ("mqtt.received_ms", str(received_ms).encode()),
        ]
        headers += [(f"mqtt.user.{k}", v.encode()) for k, v in user_properties]
        return Record(seq, topic, self.key_for(mqtt_topic), payload, headers, received_ms)


def encode(rec: Record) -> bytes:
    """The spool's form of a record (framing and checksum are the spool's business)."""
    topic = rec.topic.encode()
    parts = [_FIXED.pack(rec.seq, rec.timestamp_ms, len(topic)), topic]
    if rec.key is None:
        parts.append(_U32.pack(_NO_KEY))
    else:
        parts += [_U32.pack(len(rec.key)), rec.key]
    parts.append(_U16.pack(len(rec.headers)))
    for name, value in rec.headers:
        raw = name.encode()
        parts += [_U16.pack(len(raw)), raw, _U32.pack(len(value)), value]
    parts += [_U32.pack(len(rec.value)), rec.value]
    return b"".join(parts)


def decode(data: bytes) -> Record:
    seq, ts, tlen = _FIXED.unpack_from(data, 0)
    pos = _FIXED.size
    topic = data[pos : pos + tlen].decode()
    pos += tlen
    (klen,) = _U32.unpack_from(data, pos)
    pos += 4
    key: bytes | None = None
    if klen != _NO_KEY:
        key = data[pos : pos + klen]
        pos += klen
    (nheaders,) = _U16.unpack_from(data, pos)
    pos += 2
    headers: list[Header] = []
    for _ in range(nheaders):
        (nlen,) = _U16.unpack_from(data, pos)
        pos += 2
        name = data[pos : pos + nlen].decode()
        pos += nlen
        (vlen,) = _U32.unpack_from(data, pos)
        pos += 4
        headers.append((name, data[pos : pos + vlen]))
        pos += vlen
    (plen,) = _U32.unpack_from(data, pos)
    pos += 4
    value = data[pos : pos + plen]
    if pos + plen != len(data):
        raise ValueError("spool record has trailing bytes")
    return Record(seq, topic, key, value, headers, ts)
