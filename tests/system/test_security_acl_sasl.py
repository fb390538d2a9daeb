"""SASL principals meet the authorizer: users created with `streamgate users add`, logged in
with SCRAM over a SASL_PLAINTEXT listener, allowed or refused by ACLs that a super user made
through the Kafka admin API (no test-only principal mapping here)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.gateway import Gateway
from harness.security import SecureListeners, make_certs

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "mallory": "mallory-secret"}


def _add_user(data_dir: Path, name: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "gateway", "users", "add", name, "--data-dir", str(data_dir)],
        input=PASSWORDS[name] + "\n",
        text=True,
        check=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, str]]:
    base = tmp_path_factory.mktemp("sasl-acl")
    listeners = SecureListeners(make_certs(base / "certs"))
    for name in PASSWORDS:
        _add_user(base / "data", name)
    gw = Gateway(
        base / "data",
        base / "server.log",
        [*listeners.gateway_args(), "--authorizer", "true", "--super-users", "User:admin"],
    )
    gw.start_fresh()
    try:
        yield gw, listeners.bootstrap("SASL_PLAINTEXT")
    finally:
        gw.close()


def _conf(bootstrap: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }


def _produce(bootstrap: str, user: str, topic: str) -> str | None:
    """Produce one record as `user`; None when acknowledged, else the error's name."""
    from confluent_kafka import Producer

    outcome: list[str | None] = []
    conf = dict(_conf(bootstrap, user), **{"message.timeout.ms": 10_000, "log_level": 0})
    producer = Producer(conf)
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err and err.name()))
    producer.flush(20)
    return outcome[0] if outcome else "NOT_DELIVERED"


def test_acls_apply_to_sasl_principals(cluster: tuple[Gateway, str]) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    _gw, bootstrap = cluster
    allowed, other = f"sa-ok-{uuid.uuid4().hex[:6]}", f"sa-no-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(_conf(bootstrap, "admin"))  # a super user
    for future in admin.create_topics([NewTopic(allowed, 1), NewTopic(other, 1)]).values():
        future.result(timeout=30)
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            allowed,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)

    assert _produce(bootstrap, "alice", allowed) is None
    assert _produce(bootstrap, "alice", other) == "TOPIC_AUTHORIZATION_FAILED"
    assert _produce(bootstrap, "mallory", allowed) == "TOPIC_AUTHORIZATION_FAILED"

    # Metadata shows each principal only the topics it may describe.
    alice_sees = set(AdminClient(_conf(bootstrap, "alice")).list_topics(timeout=20).topics)
    assert allowed in alice_sees and other not in alice_sees
    mallory_sees = set(AdminClient(_conf(bootstrap, "mallory")).list_topics(timeout=20).topics)
    assert allowed not in mallory_sees and other not in mallory_sees


def test_non_super_user_cannot_grant_itself(cluster: tuple[Gateway, str]) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    _gw, bootstrap = cluster
    mallory = AdminClient(_conf(bootstrap, "mallory"))
    grab = AclBinding(
        ResourceType.TOPIC,
        "*",
        ResourcePatternType.LITERAL,
        "User:mallory",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException, match="(?i)authoriz"):
        for future in mallory.create_acls([grab]).values():
            future.result(timeout=30)
