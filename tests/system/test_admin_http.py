"""The admin HTTP endpoint (`--metrics-listen`) with real HTTP clients: keep-alive, JSON
errors for bad requests, HTTP Basic with the gateway's SASL users and its ACLs, and the
refusal to listen off loopback without authentication."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.gateway import REPO_ROOT, Gateway
from harness.security import SecureListeners, make_certs

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "mallory": "mallory-secret"}
HTTPS: dict[int, ssl.SSLContext] = {}  # admin port -> a client context trusting its CA


def _request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    user: str | None = None,
    password: str | None = None,
) -> tuple[int, dict[str, str], Any]:
    headers = {}
    if user is not None:
        secret = PASSWORDS[user] if password is None else password
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()
    tls = HTTPS.get(port)
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection("127.0.0.1", port, timeout=15, context=tls)
        if tls is not None
        else http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    )
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        content_type = response.getheader("content-type", "")
        value = json.loads(raw) if content_type.startswith("application/json") else raw.decode()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, value
    finally:
        conn.close()


def _produce(bootstrap: str, topic: str, conf: dict[str, Any] | None = None) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **(conf or {})})
    for i in range(20):
        producer.produce(topic, key=str(i).encode(), value=b"v")
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def open_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    base = tmp_path_factory.mktemp("admin-open")
    gw = Gateway(base / "data", base / "server.log", metrics=True, default_partitions=4)
    gw.start_fresh()
    try:
        yield gw
    finally:
        gw.close()


def test_keep_alive_and_routes(open_gateway: Gateway) -> None:
    topic = f"adm-{uuid.uuid4().hex[:6]}"
    _produce(open_gateway.bootstrap, topic)
    assert open_gateway.metrics_port is not None
    conn = http.client.HTTPConnection("127.0.0.1", open_gateway.metrics_port, timeout=15)
    sockets = set()
    for path in ("/streams", f"/streams/{topic}", "/tier", "/compaction", "/metrics"):
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, (path, body)
        assert not response.will_close, path  # the connection stays open
        sockets.add(id(conn.sock))
    assert len(sockets) == 1
    conn.close()
    port = open_gateway.metrics_port
    assert topic in _request(port, "GET", "/streams")[2]["topics"]
    described = _request(port, "GET", f"/streams/{topic}")[2]
    assert described["partitions"] == 4 and described["open_segments"] >= 1
    assert "streamgate_stream_open_segments" in _request(port, "GET", "/metrics")[2]


def test_bad_requests_get_json_errors(open_gateway: Gateway) -> None:
    port = open_gateway.metrics_port
    assert port is not None
    topic = f"adm-{uuid.uuid4().hex[:6]}"
    _produce(open_gateway.bootstrap, topic)
    cases = [
        ("GET", "/nowhere", None, 404),
        ("GET", "/streams/no-such-topic", None, 404),
        ("DELETE", f"/streams/{topic}", None, 405),
        ("GET", f"/streams/{topic}/scale", None, 405),
        ("POST", f"/streams/{topic}/scale", b"{not json", 400),
        ("POST", f"/streams/{topic}/scale", b'{"split": "x"}', 400),
        ("POST", f"/streams/{topic}/scale", b'{"merge": [999, 998]}', 400),
        ("POST", f"/streams/{topic}/scale", b"[]", 400),
        ("POST", f"/streams/{topic}/move", b'{"segment": 1}', 400),
        ("POST", f"/streams/{topic}/scale", b"x" * (1024 * 1024 + 1), 413),
    ]
    for method, path, body, expected in cases:
        status, _, answer = _request(port, method, path, body)
        assert status == expected, (method, path, answer)
        assert isinstance(answer, dict) and answer["error"], (method, path, answer)
    # Garbage instead of HTTP: the connection is dropped, the gateway keeps serving.
    raw = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    raw.connect()
    assert raw.sock is not None
    raw.sock.sendall(b"\x00\x01 not http at all\r\n\r\n")
    raw.sock.recv(1024)
    raw.close()
    assert _request(port, "GET", f"/streams/{topic}")[0] == 200


def test_refuses_non_loopback_without_authentication(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "gateway",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "data"),
        "--metrics-listen",
        "0.0.0.0:0",
    ]
    done = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "--admin-insecure" in line]
    assert len(lines) == 1 and "no credentials" in lines[0], done.stderr
    # Said explicitly, it starts.
    insecure = Gateway(
        tmp_path / "data",
        tmp_path / "insecure.log",
        ["--metrics-listen", "0.0.0.0:0", "--admin-insecure", "true"],
    )
    insecure.start_fresh()
    try:
        assert "admin/metrics HTTP on 0.0.0.0:" in insecure.log_text()
    finally:
        insecure.close()


def _add_user(data_dir: Path, name: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "gateway", "users", "add", name, "--data-dir", str(data_dir)],
        input=PASSWORDS[name] + "\n",
        text=True,
        check=True,
        timeout=60,
        cwd=REPO_ROOT,
    )


def _sasl(bootstrap: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, str, str]]:
    """A gateway with SASL users and ACLs, its admin listener on HTTPS; alice may DESCRIBE
    one topic and nothing else."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    base = tmp_path_factory.mktemp("admin-sasl")
    certs = make_certs(base / "certs")
    listeners = SecureListeners(certs)
    for name in PASSWORDS:
        _add_user(base / "data", name)
    gw = Gateway(
        base / "data",
        base / "server.log",
        [
            *listeners.gateway_args(),
            *("--authorizer", "true", "--super-users", "User:admin", "--admin-tls", "true"),
        ],
        metrics=True,
    )
    gw.start_fresh()
    assert gw.metrics_port is not None
    HTTPS[gw.metrics_port] = ssl.create_default_context(cafile=str(certs.ca))
    try:
        bootstrap = listeners.bootstrap("SASL_PLAINTEXT")
        topic = f"adm-{uuid.uuid4().hex[:6]}"
        admin = AdminClient(_sasl(bootstrap, "admin"))
        for future in admin.create_topics([NewTopic(topic, 4)]).values():
            future.result(timeout=30)
        describe = AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([describe]).values():
            future.result(timeout=30)
        yield gw, bootstrap, topic
    finally:
        gw.close()
        HTTPS.pop(gw.metrics_port or 0, None)


def test_credentials_required(secured: tuple[Gateway, str, str]) -> None:
    gw, _, topic = secured
    port = gw.metrics_port
    assert port is not None
    for path in ("/streams", f"/streams/{topic}", "/metrics", "/tier"):
        status, headers, answer = _request(port, "GET", path)
        assert status == 401 and answer["error"], path
        assert headers["www-authenticate"].startswith("Basic"), path
    status, _, answer = _request(port, "GET", f"/streams/{topic}", user="alice", password="nope")
    assert status == 401 and "invalid" in answer["error"]
    status, _, _ = _request(port, "GET", f"/streams/{topic}", user="nobody", password="x")
    assert status == 401
    # HTTPS, and HTTP/2 offered through ALPN
    assert "admin/metrics HTTPS on" in gw.log_text()
    context = ssl.create_default_context(cafile=str(Path(gw.data_dir).parent / "certs" / "ca.pem"))
    context.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.selected_alpn_protocol() == "h2"


def test_acl_allows_reading_but_not_scaling(secured: tuple[Gateway, str, str]) -> None:
    gw, _, topic = secured
    port = gw.metrics_port
    assert port is not None
    status, _, described = _request(port, "GET", f"/streams/{topic}", user="alice")
    assert status == 200 and described["partitions"] == 4
    assert _request(port, "GET", "/streams", user="alice")[2]["topics"] == [topic]
    segment = described["segments"][0]["segment_id"]
    split = json.dumps({"split": segment, "parts": 2}).encode()
    status, _, answer = _request(port, "POST", f"/streams/{topic}/scale", split, user="alice")
    assert status == 403 and "ALTER" in answer["error"]
    assert _request(port, "GET", "/metrics", user="alice")[0] == 403  # no cluster DESCRIBE
    assert _request(port, "GET", f"/streams/{topic}", user="mallory")[0] == 403
    assert _request(port, "GET", "/streams", user="mallory")[2]["topics"] == []
    # The super user may do everything.
    status, _, answer = _request(port, "POST", f"/streams/{topic}/scale", split, user="admin")
    assert status == 200 and answer["kind"] == "split", answer
    assert _request(port, "GET", "/metrics", user="admin")[0] == 200


def _exported_names(exposition: str) -> set[str]:
    """Every series name a scrape can hold: sample names, and from each `# TYPE` line the
    names its type implies (a counter's _total, a histogram's _bucket/_sum/_count)."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            suffixes = {
                "counter": ["_total", "_created"],
                "histogram": ["_bucket", "_sum", "_count"],
            }.get(kind, [""])
            names.update(name + suffix for suffix in suffixes)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_grafana_dashboard_names_only_exported_metrics(open_gateway: Gateway) -> None:
    from confluent_kafka import Consumer

    topic, group = f"dash-{uuid.uuid4().hex[:6]}", f"dash-{uuid.uuid4().hex[:6]}"
    _produce(open_gateway.bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": open_gateway.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    while consumer.poll(1.0) is None:
        pass
    consumer.commit(asynchronous=False)
    consumer.close()
    assert open_gateway.metrics_port is not None
    status, _, exposition = _request(open_gateway.metrics_port, "GET", "/metrics")
    assert status == 200
    exported = _exported_names(exposition)
    assert "streamgate_group_lag" in exported and "streamgate_wal_commit_seconds_bucket" in exported
    dashboard = json.loads((REPO_ROOT / "dashboards" / "streamgate.json").read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(queries) >= 12
    for query in queries:
        names = set(re.findall(r"\bstreamgate_[a-z0-9_]+", query))
        assert names, f"no streamgate metric in {query!r}"
        assert names <= exported, f"{query!r} names {sorted(names - exported)}, not exported"


def test_console_routes_are_paged(open_gateway: Gateway) -> None:
    port = open_gateway.metrics_port
    assert port is not None
    prefix = f"page-{uuid.uuid4().hex[:6]}"
    for i in range(5):
        _produce(open_gateway.bootstrap, f"{prefix}-{i}")
    status, _, page = _request(port, "GET", f"/api/topics?q={prefix}&offset=1&limit=2")
    assert status == 200 and page["total"] == 5
    assert [t["topic"] for t in page["topics"]] == [f"{prefix}-1", f"{prefix}-2"]
    row = page["topics"][0]
    assert row["partitions"] == 4 and row["open_segments"] == 1 and row["bytes_in"] > 0
    assert _request(port, "GET", "/api/topics?limit=x")[0] == 400
    status, _, history = _request(port, "GET", f"/streams/{prefix}-0/history")
    assert status == 200 and history["segments"][0]["state"] == "open"
    assert _request(port, "GET", "/streams/nope/history")[0] == 404
    status, _, nodes = _request(port, "GET", "/api/nodes")
    assert status == 200 and nodes["cluster"] is False
    status, _, events = _request(port, "GET", "/api/nodes/events?limit=5")
    assert status == 200 and events["events"] == []
    assert _request(port, "GET", "/api/nodes/events?limit=x")[0] == 400
    assert _request(port, "GET", "/api/groups/nope")[0] == 404
    status, headers, html = _request(port, "GET", "/")
    assert status == 200 and "console.js" in html
    assert _request(port, "GET", "/console/console.js")[0] == 200
    assert _request(port, "GET", "/console/..%2fauth.py")[0] == 404


def test_console_needs_credentials_too(secured: tuple[Gateway, str, str]) -> None:
    gw, _, topic = secured
    port = gw.metrics_port
    assert port is not None
    assert _request(port, "GET", "/")[0] == 401
    assert _request(port, "GET", "/api/topics")[0] == 401
    status, _, page = _request(port, "GET", "/api/topics", user="alice")
    assert status == 200 and [t["topic"] for t in page["topics"]] == [topic]
    assert _request(port, "GET", f"/streams/{topic}/history", user="mallory")[0] == 403
    assert _request(port, "GET", "/api/nodes", user="alice")[0] == 403
    assert _request(port, "GET", "/api/nodes/events", user="alice")[0] == 403
    assert _request(port, "GET", "/", user="alice")[0] == 200


def test_streams_command_with_credentials(secured: tuple[Gateway, str, str]) -> None:
    gw, _, topic = secured
    port = gw.metrics_port

    def streams(*args: str, admin: str, env: dict[str, str] | None = None) -> Any:
        command = [sys.executable, "-m", "gateway", "streams", *args, topic, "--admin", admin]
        return subprocess.run(
            command,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, **(env or {})},
        )

    ca = {"SSL_CERT_FILE": str(Path(gw.data_dir).parent / "certs" / "ca.pem")}
    plain = f"https://127.0.0.1:{port}"
    assert streams("describe", admin=plain, env=ca).returncode == 1
    url = f"https://alice:{PASSWORDS['alice']}@127.0.0.1:{port}"
    done = streams("describe", admin=url, env=ca)
    assert done.returncode == 0 and "Partitions: 4" in done.stdout, done.stderr
    env = {"STREAMGATE_ADMIN_USER": "alice", "STREAMGATE_ADMIN_PASSWORD": PASSWORDS["alice"], **ca}
    assert streams("describe", admin=plain, env=env).returncode == 0
    refused = streams("scale", "--merge", "1,2", admin=plain, env=env)
    assert refused.returncode == 1 and "may not ALTER" in refused.stderr
