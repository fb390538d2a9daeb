"""Certificates, listener arguments and SCRAM users for gateways (and Kafka) with TLS/SASL.

`make_certs(folder)` writes a throwaway CA, a server certificate for 127.0.0.1/localhost
and a client certificate (trustme); `SecureListeners` picks free ports for SASL_SSL, SSL and
SASL_PLAINTEXT listeners and gives the gateway arguments and client settings for each;
`add_scram_user` creates a user through the plaintext listener with AlterUserScramCredentials
(confluent-kafka's AdminClient), as an operator would with kafka-configs.sh.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ports import free_port

CLIENT_CN = "alice-client"
CLIENT_OU = "streamgate-tests"


@dataclass(frozen=True, slots=True)
class Certs:
    folder: Path
    ca: Path  # PEM CA certificate (clients' truststore, the server's client CA)
    server: Path  # PEM key + certificate chain of the server
    client: Path  # PEM key + certificate chain of a client (mutual TLS)
    client_cert: Path  # the client's certificate chain alone
    client_key: Path  # the client's key alone
    server_pkcs8: Path  # the server's PKCS#8 key + chain (Kafka's PEM keystore wants PKCS#8)


def make_certs(folder: Path) -> Certs:
    import trustme  # a test dependency
    from cryptography.hazmat.primitives import serialization

    folder.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert(
        "client.example", common_name=CLIENT_CN, organization_unit_name=CLIENT_OU
    )
    paths = Certs(
        folder,
        folder / "ca.pem",
        folder / "server.pem",
        folder / "client.pem",
        folder / "client-cert.pem",
        folder / "client-key.pem",
        folder / "server-pkcs8.pem",
    )
    ca.cert_pem.write_to_path(str(paths.ca))
    server.private_key_and_cert_chain_pem.write_to_path(str(paths.server))
    client.private_key_and_cert_chain_pem.write_to_path(str(paths.client))
    client.private_key_pem.write_to_path(str(paths.client_key))
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    paths.server_pkcs8.write_bytes(pkcs8 + b"".join(c.bytes() for c in server.cert_chain_pems))
    for i, blob in enumerate(client.cert_chain_pems):
        blob.write_to_path(str(paths.client_cert), append=i > 0)
    return paths


@dataclass(slots=True)
class SecureListeners:
    """Free ports for one listener of each secured protocol."""

    certs: Certs
    ports: dict[str, int] = field(default_factory=dict)
    client_auth: str = "requested"

    def __post_init__(self) -> None:
        for protocol in ("SASL_SSL", "SSL", "SASL_PLAINTEXT"):
            self.ports.setdefault(protocol, free_port())

    def gateway_args(self) -> list[str]:
        listeners = ",".join(f"{p}://127.0.0.1:{port}" for p, port in self.ports.items())
        return [
            "--listeners",
            listeners,
            "--ssl-certfile",
            str(self.certs.server),
            "--ssl-cafile",
            str(self.certs.ca),
            "--ssl-client-auth",
            self.client_auth,
        ]

    def bootstrap(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"


def add_scram_user(bootstrap: str, user: str, password: str, iterations: int = 4096) -> None:
    """Both SCRAM mechanisms for `user`, through AlterUserScramCredentials."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    alterations: list[Any] = [
        UserScramCredentialUpsertion(
            user, ScramCredentialInfo(mechanism, iterations), password.encode()
        )
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for future in admin.alter_user_scram_credentials(alterations).values():
        future.result(timeout=30)
