"""Principals for the ACL and quota tests.

Until SASL lands (issue 17 part 1), a gateway started with `acl_gateway()` maps the client id
to the principal (the test-only STREAMGATE_TEST_PRINCIPAL_FROM_CLIENT_ID=1): a client whose
client.id is "alice" acts as User:alice. Every test reaches principals only through
`client_config`, `java_properties` and `PrincipalClient`, so switching the tests to SASL users
means changing these three (and the gateway's arguments) and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from harness.gateway import Gateway
from kafkawire.codec import build_entity
from support.client import RawClient, encode_request

ADMIN = "admin"  # a super user
TEST_ENV = {"STREAMGATE_TEST_PRINCIPAL_FROM_CLIENT_ID": "1"}


def acl_gateway(base: Path, *extra: str, allow_if_no_acl: bool = False) -> Gateway:
    args = ["--authorizer", "true", "--super-users", f"User:{ADMIN}", *extra]
    if allow_if_no_acl:
        args += ["--allow-everyone-if-no-acl-found", "true"]
    return Gateway(base / "data", base / "server.log", args, default_partitions=2, env=TEST_ENV)


def client_config(user: str, bootstrap: str, **extra: Any) -> dict[str, Any]:
    """confluent-kafka / librdkafka settings that authenticate as User:<user>."""
    return {"bootstrap.servers": bootstrap, "client.id": user, **extra}


def java_properties(user: str, path: Path) -> Path:
    """A Java client properties file (--command-config) that authenticates as User:<user>."""
    path.write_text(f"client.id={user}\n")
    return path


class PrincipalClient(RawClient):
    """Raw requests (built from dicts of spec field names) as User:<user>."""

    def __init__(self, bootstrap: str, user: str, timeout: float = 15.0):
        super().__init__(bootstrap, timeout)
        self.user = user

    def send(self, entity: Any) -> int:
        self.correlation_id += 1
        self.sock.sendall(encode_request(entity, self.correlation_id, client_id=self.user))
        return self.correlation_id

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        return self.request(build_entity(load_request_schema(api_key, version), body))


def any_acl_filter() -> Any:
    """A confluent-kafka AclBindingFilter that matches every binding."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
