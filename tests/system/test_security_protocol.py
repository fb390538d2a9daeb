"""The SASL exchange, TLS and malformed requests at the wire level (raw sockets).

Errors as Kafka gives them: UNSUPPORTED_SASL_MECHANISM with the enabled list, ILLEGAL_SASL_STATE
out of order, SASL_AUTHENTICATION_FAILED with one message for a wrong password and an unknown
user; any other request before authentication, a failed v0 exchange or garbage instead of a
TLS handshake closes the connection, and other connections are not disturbed. Null arrays
where a request needs one close the connection with one rate-limited WARNING, no traceback.
"""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import sys

import pytest
from support.client import (
    api_versions_request,
    connection_closed,
    encode_request,
    frame,
    metadata_request,
    open_socket,
    recv_exact,
    recv_frame,
    request_header,
)
from support.security import produce_with_each_mechanism, secure_gateway

from harness.gateway import Gateway
from harness.ports import free_port
from harness.security import CLIENT_CN, CLIENT_OU, SecureListeners

USER, PASSWORD = "bob", "bob-secret-2"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    base = tmp_path_factory.mktemp("secure-proto")
    with secure_gateway(base, USER, PASSWORD) as (gw, listeners):
        yield gw, listeners


def _connect(listeners: SecureListeners, protocol: str) -> socket.socket:
    sock = open_socket(listeners.bootstrap(protocol))
    if "SSL" in protocol:
        context = ssl.create_default_context(cafile=str(listeners.certs.ca))
        sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
    return sock


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _handshake(sock: socket.socket, mechanism: str, version: int = 1) -> tuple[int, list[str]]:
    sock.sendall(frame(request_header(SASL_HANDSHAKE, version, 7) + _string(mechanism)))
    payload = recv_frame(sock)
    correlation_id, error, count = struct.unpack_from(">ihi", payload)
    assert correlation_id == 7
    pos, mechanisms = 10, []
    for _ in range(count):
        (size,) = struct.unpack_from(">h", payload, pos)
        mechanisms.append(payload[pos + 2 : pos + 2 + size].decode())
        pos += 2 + size
    return error, mechanisms


def _authenticate(sock: socket.socket, token: bytes) -> tuple[int, str | None, bytes]:
    """SaslAuthenticate v1: (error code, error message, server token)."""
    body = struct.pack(">i", len(token)) + token
    sock.sendall(frame(request_header(SASL_AUTHENTICATE, 1, 8) + body))
    payload = recv_frame(sock)
    correlation_id, error, size = struct.unpack_from(">ihh", payload)
    assert correlation_id == 8
    pos = 8
    message = None
    if size >= 0:
        message = payload[pos : pos + size].decode()
        pos += size
    (token_size,) = struct.unpack_from(">i", payload, pos)
    return error, message, payload[pos + 4 : pos + 4 + token_size]


def _plain(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def _metadata_brokers(sock: socket.socket) -> list[tuple[int, str, int]]:
    """Metadata v1 (no topics): the brokers it lists."""
    sock.sendall(frame(request_header(3, 1, 9) + struct.pack(">i", 0)))
    payload = recv_frame(sock)
    pos = 4
    (count,) = struct.unpack_from(">i", payload, pos)
    pos += 4
    brokers = []
    for _ in range(count):
        (node,) = struct.unpack_from(">i", payload, pos)
        (size,) = struct.unpack_from(">h", payload, pos + 4)
        host = payload[pos + 6 : pos + 6 + size].decode()
        pos += 6 + size
        (port,) = struct.unpack_from(">i", payload, pos)
        pos += 4
        (rack,) = struct.unpack_from(">h", payload, pos)
        pos += 2 + max(rack, 0)
        brokers.append((node, host, port))
    return brokers


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_unknown_mechanism_lists_enabled_ones_and_closes(secure, protocol):
    _gw, listeners = secure
    sock = _connect(listeners, protocol)
    error, mechanisms = _handshake(sock, "GSSAPI")
    assert error == 33  # UNSUPPORTED_SASL_MECHANISM
    assert mechanisms == MECHANISMS
    assert connection_closed(sock)


def test_authenticate_before_handshake_is_illegal_state(secure):
    _gw, listeners = secure
    sock = _connect(listeners, "SASL_PLAINTEXT")
    error, _message, _token = _authenticate(sock, _plain(USER, PASSWORD))
    assert error == 34  # ILLEGAL_SASL_STATE
    assert connection_closed(sock)


def test_second_handshake_is_illegal_state(secure):
    _gw, listeners = secure
    sock = _connect(listeners, "SASL_PLAINTEXT")
    assert _handshake(sock, "SCRAM-SHA-256") == (0, MECHANISMS)
    error, _ = _handshake(sock, "PLAIN")
    assert error == 34
    assert connection_closed(sock)


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_requests_before_authentication_close_the_connection(secure, protocol):
    _gw, listeners = secure
    sock = _connect(listeners, protocol)
    # ApiVersions is allowed (clients ask before the handshake)...
    sock.sendall(encode_request(api_versions_request(), 1))
    assert recv_frame(sock)[:4] == struct.pack(">i", 1)
    # ...Metadata is not.
    sock.sendall(encode_request(metadata_request(None), 2))
    assert connection_closed(sock)


def test_wrong_password_and_unknown_user_look_the_same(secure):
    _gw, listeners = secure
    messages = set()
    for user, password in [(USER, "wrong"), ("nobody", "wrong"), ("nobody", PASSWORD)]:
        sock = _connect(listeners, "SASL_SSL")
        assert _handshake(sock, "PLAIN")[0] == 0
        error, message, _ = _authenticate(sock, _plain(user, password))
        assert error == 58  # SASL_AUTHENTICATION_FAILED
        messages.add(message)
        assert connection_closed(sock)
    assert messages == {"Authentication failed: Invalid username or password"}


def test_plain_with_v1_framing_then_metadata_names_this_listener(secure):
    _gw, listeners = secure
    sock = _connect(listeners, "SASL_SSL")
    assert _handshake(sock, "PLAIN") == (0, MECHANISMS)
    assert _authenticate(sock, _plain(USER, PASSWORD)) == (0, None, b"")
    assert _metadata_brokers(sock) == [(1, "127.0.0.1", listeners.ports["SASL_SSL"])]
    # After authentication a handshake is out of place but the connection stays.
    assert _handshake(sock, "PLAIN")[0] == 34
    assert _metadata_brokers(sock)


def test_plain_with_v0_raw_tokens(secure):
    _gw, listeners = secure
    sock = _connect(listeners, "SASL_PLAINTEXT")
    assert _handshake(sock, "PLAIN", version=0) == (0, MECHANISMS)
    sock.sendall(frame(_plain(USER, PASSWORD)))  # a bare token, no request header
    assert recv_exact(sock, 4) == b"\x00\x00\x00\x00"  # the empty server token
    assert _metadata_brokers(sock) == [(1, "127.0.0.1", listeners.ports["SASL_PLAINTEXT"])]


def test_v0_raw_token_with_wrong_password_closes(secure):
    _gw, listeners = secure
    sock = _connect(listeners, "SASL_PLAINTEXT")
    assert _handshake(sock, "PLAIN", version=0)[0] == 0
    sock.sendall(frame(_plain(USER, "wrong")))
    assert connection_closed(sock)


def test_scram_with_v0_raw_tokens(secure):
    """SCRAM-SHA-512 over raw tokens, with a client computed here (RFC 5802)."""
    import base64
    import hashlib
    import hmac

    _gw, listeners = secure
    sock = _connect(listeners, "SASL_PLAINTEXT")
    assert _handshake(sock, "SCRAM-SHA-512", version=0)[0] == 0
    bare = f"n={USER},r=clientnonce123"
    sock.sendall(frame(f"n,,{bare}".encode()))
    server_first = recv_frame(sock).decode()
    attrs = dict(item.split("=", 1) for item in server_first.split(","))
    assert attrs["r"].startswith("clientnonce123")
    salted = hashlib.pbkdf2_hmac(
        "sha512", PASSWORD.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    client_key = hmac.digest(salted, b"Client Key", "sha512")
    signature = hmac.digest(hashlib.sha512(client_key).digest(), auth_message, "sha512")
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    sock.sendall(frame(f"{without_proof},p={base64.b64encode(proof).decode()}".encode()))
    server_final = recv_frame(sock).decode()
    expected = hmac.digest(hmac.digest(salted, b"Server Key", "sha512"), auth_message, "sha512")
    assert server_final == "v=" + base64.b64encode(expected).decode()
    assert _metadata_brokers(sock)


def test_garbage_instead_of_tls_closes_without_disturbing_others(secure):
    gw, listeners = secure
    bystander = _connect(listeners, "SSL")
    bystander.sendall(encode_request(api_versions_request(), 1))
    recv_frame(bystander)
    for garbage in (
        b"\x00" * 64,
        b"GET / HTTP/1.1\r\n\r\n",
        encode_request(api_versions_request(), 1),
    ):
        sock = open_socket(listeners.bootstrap("SSL"))
        sock.sendall(garbage)
        assert connection_closed(sock)
    bystander.sendall(encode_request(api_versions_request(), 2))
    assert recv_frame(bystander)[:4] == struct.pack(">i", 2)
    assert "Traceback" not in gw.log_tail()


def test_mutual_tls_principal_is_the_subject_dn(secure):
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from gateway.security.tls import principal_from_certificate

    _gw, listeners = secure
    cert = x509.load_pem_x509_certificate(listeners.certs.client_cert.read_bytes())
    principal = principal_from_certificate(cert.public_bytes(Encoding.DER))
    assert principal.startswith(f"User:CN={CLIENT_CN},OU={CLIENT_OU},O=")


# --- malformed requests on the plaintext listener ---------------------------------------

_NULL = struct.pack(">i", -1)
_I32 = struct.Struct(">i")
NULL_ARRAY_REQUESTS = {
    # name: (api key, version, body with a null where the schema needs an array)
    "ListOffsets": (2, 1, _I32.pack(-1) + _NULL),
    "Fetch": (
        1,
        4,
        _I32.pack(-1) + _I32.pack(100) + _I32.pack(1) + _I32.pack(1024) + b"\x00" + _NULL,
    ),
    "DescribeGroups": (15, 0, _NULL),
    "DeleteTopics": (20, 1, _NULL + _I32.pack(1000)),
    "DeleteRecords": (21, 0, _NULL + _I32.pack(1000)),
    "DeleteGroups": (42, 0, _NULL),
    "CreateTopics": (19, 2, _NULL + _I32.pack(1000) + b"\x00"),
}


def test_null_arrays_close_with_one_warning_and_no_traceback(tmp_path):
    gw = Gateway(tmp_path / "data", tmp_path / "server.log", ())
    gw.start_fresh()
    try:
        for _round in range(5):
            for api_key, version, body in NULL_ARRAY_REQUESTS.values():
                sock = open_socket(gw.bootstrap)
                sock.sendall(frame(request_header(api_key, version, 1) + body))
                assert connection_closed(sock), (api_key, version)
        # Still serving.
        sock = open_socket(gw.bootstrap)
        sock.sendall(encode_request(api_versions_request(), 1))
        assert recv_frame(sock)[:4] == struct.pack(">i", 1)
        log = gw.log_tail()
    finally:
        gw.close()
    assert "Traceback" not in log and "ERROR" not in log, log
    warnings = [line for line in log.splitlines() if "WARNING" in line and "null" in line]
    # 35 bad frames within a few seconds: the rate limit lets through about one a second.
    assert 1 <= len(warnings) <= 10, warnings


# --- command line ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listeners", "FOO://127.0.0.1:0"], "has no security protocol"),
        (["--listeners", "SSL://127.0.0.1:0"], "needs --ssl-certfile"),
        (["--listeners", "PLAINTEXT//127.0.0.1:0"], "expected NAME://HOST:PORT"),
        (
            ["--listeners", "SASL_SSL://127.0.0.1:0", "--advertised-listeners", "SSL://h:1"],
            "matches no listener",
        ),
        (["--sasl-enabled-mechanisms", "GSSAPI"], "unknown SASL mechanism"),
    ],
)
def test_bad_listener_arguments_are_explained(tmp_path, args, message):
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--data-dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_network_listener_without_authentication_warns_once(tmp_path):
    port = free_port()
    gw = Gateway(
        tmp_path / "data",
        tmp_path / "server.log",
        [
            "--listeners",
            f"EXTERNAL://0.0.0.0:{port}",
            "--listener-security-protocol-map",
            "EXTERNAL:PLAINTEXT",
            "--advertised-listeners",
            f"EXTERNAL://127.0.0.1:{port}",
        ],
    )
    gw.start_fresh()
    try:
        sock = open_socket(f"127.0.0.1:{port}")
        assert _metadata_brokers(sock) == [(1, "127.0.0.1", port)]
        log = gw.log_tail()
    finally:
        gw.close()
    assert len([line for line in log.splitlines() if "without authentication" in line]) == 1


def test_loopback_default_does_not_warn(secure):
    gw, _listeners = secure
    assert "without authentication" not in gw.log_tail()


def test_users_cli_bootstraps_the_first_user(tmp_path):
    """`streamgate users add` before the first start; PLAIN and SCRAM logins work, and the
    password is nowhere in the data dir."""

    data = tmp_path / "data"
    secret = "first-admin-Secret-9"
    added = subprocess.run(
        [sys.executable, "-m", "gateway", "users", "add", "admin", "--data-dir", str(data)],
        input=secret + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert added.returncode == 0, added.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "gateway", "users", "list", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "admin SCRAM-SHA-256(iterations=4096) SCRAM-SHA-512(iterations=4096)" in listed.stdout
    port = free_port()
    gw = Gateway(
        data, tmp_path / "server.log", ["--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}"]
    )
    gw.start_fresh()
    try:
        produce_with_each_mechanism(port, "admin", secret, "cli-users", MECHANISMS)
    finally:
        gw.close()
    for path in data.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert secret not in (tmp_path / "server.log").read_text()


def test_oversized_frame_before_authentication_closes(secure):
    """Kafka's sasl.server.max.receive.size (512 KiB) before authentication."""
    _gw, listeners = secure
    sock = _connect(listeners, "SASL_PLAINTEXT")
    sock.sendall(struct.pack(">i", 600 * 1024) + b"\x00" * 1024)
    assert connection_closed(sock)
