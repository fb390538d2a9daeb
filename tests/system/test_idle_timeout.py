"""--connections-max-idle-ms: idle and half-sent connections are closed, busy ones are not.

Raw sockets against a real gateway process (the client libraries reconnect on their own and
would hide a close).
"""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Producer
from support.client import (
    RawClient,
    api_versions_request,
    connection_closed,
    fetch_request,
    open_socket,
    unique_topic,
    wait_until,
)

IDLE_MS = 1000
pytestmark = pytest.mark.gateway_args("--connections-max-idle-ms", str(IDLE_MS))


def _idle_closes(gateway) -> list[str]:
    return [line for line in gateway.log_text().splitlines() if "connections.max.idle.ms" in line]


def test_silent_connection_is_closed(gateway) -> None:
    sock = open_socket(gateway.bootstrap)
    started = time.monotonic()
    try:
        assert connection_closed(sock, timeout=IDLE_MS / 1000 * 10)
    finally:
        sock.close()
    assert time.monotonic() - started >= IDLE_MS / 1000 * 0.9
    lines = wait_until(lambda: _idle_closes(gateway))
    assert len(lines) == 1, lines  # one log line per closed connection
    assert "0 bytes of a request pending" in lines[0]


def test_half_a_frame_is_dropped(gateway) -> None:
    sock = open_socket(gateway.bootstrap)
    try:
        # A size prefix announcing 100 bytes, then only 10 of them.
        sock.sendall(struct.pack(">i", 100) + b"x" * 10)
        assert connection_closed(sock, timeout=IDLE_MS / 1000 * 10)
    finally:
        sock.close()
    lines = wait_until(lambda: _idle_closes(gateway))
    assert "14 bytes of a request pending" in lines[0], lines


def test_active_connection_and_long_poll_stay_open(gateway) -> None:
    topic = unique_topic("idle")
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    producer.produce(topic, b"v", partition=0)
    assert producer.flush(15) == 0
    with RawClient(gateway.bootstrap) as client:
        host, port = client.sock.getsockname()[:2]
        # Requests more often than the idle limit, for three times its length.
        deadline = time.monotonic() + 3 * IDLE_MS / 1000
        while time.monotonic() < deadline:
            assert client.request(api_versions_request()).error_code == 0
            time.sleep(IDLE_MS / 1000 / 4)
        # A long poll longer than the idle limit: a request in flight is not idleness.
        response = client.request(fetch_request(topic, 0, 1, max_wait_ms=2 * IDLE_MS))
        assert response.responses[0].partitions[0].error_code == 0
        assert client.request(api_versions_request()).error_code == 0
    # (The producer's and the harness's own connections went idle and were closed.)
    assert not [line for line in _idle_closes(gateway) if f" {host}:{port}:" in line]
