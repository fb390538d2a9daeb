"""Kafka-style listener lists: `PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094`.

A listener's name is its security protocol unless a protocol map names it otherwise
(`INTERNAL:SASL_SSL`, as Kafka's listener.security.protocol.map). Advertised listeners are
matched to listeners by name.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>\d+)$")


class ListenerError(ValueError):
    """A listener list that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    protocol: str
    host: str
    port: int  # 0: any free port

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_protocol_map(spec: str | None) -> dict[str, str]:
    """`NAME:PROTOCOL,...` -> {NAME: PROTOCOL}; every protocol name maps to itself."""
    mapping = {p: p for p in SECURITY_PROTOCOLS}
    for item in filter(None, (part.strip() for part in (spec or "").split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or protocol.upper() not in SECURITY_PROTOCOLS:
            raise ListenerError(
                f"bad protocol map entry {item!r}: expected NAME:PROTOCOL with PROTOCOL one of "
                + ", ".join(SECURITY_PROTOCOLS)
            )
        mapping[name.upper()] = protocol.upper()
    return mapping


def parse_endpoints(spec: str) -> list[tuple[str, str, int]]:
    """`NAME://HOST:PORT,...` -> [(NAME, host, port)], names unique."""
    result: list[tuple[str, str, int]] = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        match = _ENTRY.match(item)
        if match is None:
            raise ListenerError(f"bad listener {item!r}: expected NAME://HOST:PORT")
        name = match["name"].upper()
        if any(name == seen for seen, _, _ in result):
            raise ListenerError(f"listener {name} is listed twice")
        port = int(match["port"])
        if port > 65535:
            raise ListenerError(f"bad port in listener {item!r}")
        result.append((name, match["host"].strip("[]"), port))
    if not result:
        raise ListenerError("no listener given")
    return result


def parse_listeners(spec: str, protocol_map: dict[str, str]) -> list[Listener]:
    listeners = []
    for name, host, port in parse_endpoints(spec):
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ListenerError(
                f"listener {name} has no security protocol: name it after one of "
                f"{', '.join(SECURITY_PROTOCOLS)} or map it with --listener-security-protocol-map"
            )
        listeners.append(Listener(name, protocol, host, port))
    return listeners


def match_advertised(
    listeners: list[Listener], advertised_spec: str | None
) -> dict[str, tuple[str, int]]:
    """Advertised host:port per listener name (only the ones given)."""
    if not advertised_spec:
        return {}
    names = {listener.name for listener in listeners}
    result = {}
    for name, host, port in parse_endpoints(advertised_spec):
        if name not in names:
            raise ListenerError(f"advertised listener {name} matches no listener")
        if not host or port == 0:
            raise ListenerError(f"advertised listener {name} needs a host and a port")
        result[name] = (host, port)
    return result


@dataclass(frozen=True, slots=True)
class ListenerSetup:
    """What a connection on one listener needs: where clients are sent back to, the TLS
    context (SSL, SASL_SSL) and the SASL mechanisms (SASL_*)."""

    listener: Listener
    advertised_host: str
    advertised_port: int
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanisms: tuple[str, ...] = ()
