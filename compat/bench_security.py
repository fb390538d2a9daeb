"""What TLS and SASL cost: produce/consume MB/s over SASL_SSL against plaintext, and
connections per second including the TLS handshake and the SASL exchange.

Starts a fresh streamgate with a PLAINTEXT and a SASL_SSL listener (trustme certificates,
a SCRAM user made through AlterUserScramCredentials) and, with --kafka, Apache Kafka 3.5.1
from ../shared/kafka configured alike (a SASL_SSL listener with PLAIN, a PEM keystore).
Throughput uses confluent-kafka (acks=all); connection rates use one sequential Python
client (connect, TLS, SASL, ApiVersions, close). Run it with `streamgate bench run
scenario:security` (`--targets streamgate,kafka`: Kafka too; `--runs N`; `--quick`: 4 MB).

    .venv/bin/python compat/bench_security.py [--mb 64] [--kafka] [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from compat.benchlib.scenario import RunOptions, scenario_args, standalone  # noqa: E402
from harness.gateway import Gateway  # noqa: E402
from harness.ports import free_port  # noqa: E402
from harness.security import Certs, SecureListeners, add_scram_user, make_certs  # noqa: E402

QUICK = ("--mb", "4")
MB = 1024 * 1024
USER, PASSWORD = "bench", "bench-secret"


def client_conf(bootstrap: str, protocol: str, mechanism: str | None, ca: Path) -> dict:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(ca)
    if mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": PASSWORD})
    return conf


def produce_consume(conf: dict, total_mb: int, size: int = 1024) -> dict[str, float]:
    topic = f"bench-sec-{uuid.uuid4().hex[:8]}"
    count = total_mb * MB // size
    payload = b"x" * size
    producer = Producer(
        {**conf, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000, "compression.type": "none"}
    )
    producer.produce(topic, payload)  # creates the topic before the clock starts
    producer.flush(30)
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(300)
    produce_s = time.perf_counter() - start
    assert left == 0, f"{left} records not delivered"
    consumer = Consumer(
        {**conf, "group.id": f"g-{topic}", "enable.auto.commit": False, "fetch.max.bytes": 50 * MB}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < count + 1 and time.perf_counter() < deadline:
        # Never ask for more than is left: consume() waits its timeout for a full batch.
        for msg in consumer.consume(min(10_000, count + 1 - got), 1.0):
            if msg.error() is None:
                got += 1
    consume_s = time.perf_counter() - start
    consumer.close()
    assert got >= count + 1, f"consumed {got} of {count + 1}"
    return {
        "records": count,
        "record_bytes": size,
        "produce_mb_s": round(count * size / MB / produce_s, 1),
        "consume_mb_s": round(count * size / MB / consume_s, 1),
    }


# --- connection rate -------------------------------------------------------------------


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _header(api_key: int, version: int, correlation_id: int) -> bytes:
    client = b"bench"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client


def _recv_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


def _sasl_plain(sock: socket.socket) -> None:
    mechanism = b"PLAIN"
    sock.sendall(_frame(_header(17, 1, 1) + struct.pack(">h", len(mechanism)) + mechanism))
    assert struct.unpack_from(">h", _recv_frame(sock), 4)[0] == 0
    token = b"\x00" + USER.encode() + b"\x00" + PASSWORD.encode()
    sock.sendall(_frame(_header(36, 1, 2) + struct.pack(">i", len(token)) + token))
    assert struct.unpack_from(">h", _recv_frame(sock), 4)[0] == 0, "authentication failed"


def connection_rate(
    bootstrap: str, tls: ssl.SSLContext | None, sasl: bool, seconds: float = 5.0
) -> float:
    """Connections per second: connect, TLS, SASL PLAIN, ApiVersions v0, close."""
    host, port = bootstrap.rsplit(":", 1)
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="127.0.0.1")
        if sasl:
            _sasl_plain(sock)
        sock.sendall(_frame(_header(18, 0, 3)))
        _recv_frame(sock)
        sock.close()
        done += 1
    return round(done / (time.perf_counter() - start), 1)


def measure(
    name: str,
    plain: str,
    secure: str,
    certs: Certs,
    total_mb: int,
    mechanism: str,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`extra`: more listeners to time connections on ({"SSL": bootstrap, ...})."""
    tls = ssl.create_default_context(cafile=str(certs.ca))
    result: dict[str, Any] = {"server": name}
    print(f"{name}: plaintext throughput", flush=True)
    result["plaintext"] = produce_consume(client_conf(plain, "PLAINTEXT", None, certs.ca), total_mb)
    print(f"{name}: SASL_SSL/{mechanism} throughput", flush=True)
    result["sasl_ssl"] = produce_consume(
        client_conf(secure, "SASL_SSL", mechanism, certs.ca), total_mb
    )
    result["sasl_ssl"]["mechanism"] = mechanism
    print(f"{name}: connection rates", flush=True)
    result["connections_per_s"] = {
        "plaintext": connection_rate(plain, None, False),
        "sasl_ssl_plain": connection_rate(secure, tls, True),
    }
    for protocol, bootstrap in (extra or {}).items():
        key = protocol.lower() + ("_plain" if "SASL" in protocol else "")
        result["connections_per_s"][key] = connection_rate(
            bootstrap, tls if "SSL" in protocol else None, "SASL" in protocol
        )
    print(json.dumps(result), flush=True)
    return result


def run_streamgate(base: Path, certs: Certs, total_mb: int) -> dict[str, Any]:
    listeners = SecureListeners(certs, client_auth="none")
    gw = Gateway(base / "sg-data", base / "sg.log", listeners.gateway_args(), default_partitions=1)
    gw.start_fresh()
    try:
        add_scram_user(gw.bootstrap, USER, PASSWORD)
        return measure(
            "streamgate",
            gw.bootstrap,
            listeners.bootstrap("SASL_SSL"),
            certs,
            total_mb,
            "PLAIN",
            {p: listeners.bootstrap(p) for p in ("SSL", "SASL_PLAINTEXT")},
        )
    finally:
        gw.close()


def run_kafka(base: Path, certs: Certs, total_mb: int) -> dict[str, Any]:
    from harness.kafka import KafkaBroker

    broker = KafkaBroker(base / "kafka")
    sasl_port = free_port()
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{USER}="{PASSWORD}";'
    )
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
            f"CONTROLLER://127.0.0.1:{broker.controller_port},"
            f"SASL_SSL://127.0.0.1:{sasl_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
            f"SASL_SSL://127.0.0.1:{sasl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
            "SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server_pkcs8),
        }
    )
    broker.start()
    try:
        return measure(
            "kafka-3.5.1", broker.bootstrap, f"127.0.0.1:{sasl_port}", certs, total_mb, "PLAIN"
        )
    finally:
        broker.stop()


def summarize(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per server, the median of every figure over the runs."""
    by_server: dict[str, dict[str, list[float]]] = {}
    for result in results:
        figures = by_server.setdefault(result["server"], {})
        for section in ("plaintext", "sasl_ssl", "connections_per_s"):
            for key, value in result[section].items():
                if isinstance(value, float):
                    figures.setdefault(f"{section}.{key}", []).append(value)
    return {
        server: {key: statistics.median(values) for key, values in figures.items()}
        for server, figures in by_server.items()
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=64, help="MB produced per run (default 64)")
    parser.add_argument("--kafka", action="store_true", help="also measure Kafka 3.5.1 alike")
    parser.add_argument("--repeat", type=int, default=1, help="runs per server (default 1)")
    return parser


def run(options: RunOptions) -> dict[str, Any]:
    args = scenario_args(
        build_parser(), options, quick=QUICK, runs="--repeat", with_kafka="--kafka"
    )
    results = []
    # Alternating runs: the shared machine's noise hits both servers alike.
    for round_ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bench-security-") as tmp:
            base = Path(tmp)
            certs = make_certs(base / "certs")
            results.append({"run": round_, **run_streamgate(base, certs, args.mb)})
            if args.kafka:
                results.append({"run": round_, **run_kafka(base, certs, args.mb)})
    report = {
        "benchmark": "security",
        "median": summarize(results),
        "results": results,
    }
    return report


def main(argv: list[str] | None = None) -> int:
    return standalone("security", argv)


if __name__ == "__main__":
    sys.exit(main())
