"""ACLs with real clients: Kafka's kafka-acls.sh adds, lists and removes them; confluent-kafka
and kafka-python producers/consumers are let in or refused; AdminClient's describe calls get
the principal's authorized operations (KIP-430); ACLs survive a restart."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic
from support.acl import ADMIN, acl_gateway, any_acl_filter, client_config, java_properties

from harness.kafka import run_tool, unavailable_reason

TIMEOUT = 30


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Any]:
    gateway = acl_gateway(tmp_path)
    gateway.start_fresh()
    yield gateway
    gateway.close()


def acls_tool(gw: Any, tmp_path: Path, user: str, *args: str) -> tuple[int, str]:
    props = java_properties(user, tmp_path / f"{user}.properties")
    out = run_tool(
        "kafka-acls.sh",
        ["--bootstrap-server", gw.bootstrap, "--command-config", str(props), *args],
        timeout=120,
    )
    return out.returncode, out.stdout + out.stderr


def admin_client(gw: Any, user: str = ADMIN) -> AdminClient:
    return AdminClient(client_config(user, gw.bootstrap))


def create_topic(gw: Any, name: str) -> None:
    admin = admin_client(gw)  # kept alive until the result is in
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(TIMEOUT)


def produce(gw: Any, user: str, topic: str, count: int = 3) -> list[Any]:
    reports: list[Any] = []
    producer = Producer(
        client_config(user, gw.bootstrap, **{"message.timeout.ms": 10_000, "retries": 0})
    )
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: reports.append(e))
    producer.flush(TIMEOUT)
    return reports


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_kafka_acls_tool_adds_lists_removes(gw: Any, tmp_path: Path) -> None:
    code, out = acls_tool(
        gw,
        tmp_path,
        ADMIN,
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "Write",
        "--topic",
        "orders",
    )
    assert code == 0, out
    code, out = acls_tool(
        gw,
        tmp_path,
        ADMIN,
        "--add",
        "--allow-principal",
        "User:alice",
        "--consumer",
        "--topic",
        "ord",
        "--resource-pattern-type",
        "prefixed",
        "--group",
        "app",
    )
    assert code == 0, out
    code, out = acls_tool(
        gw,
        tmp_path,
        ADMIN,
        "--add",
        "--deny-principal",
        "User:mallory",
        "--deny-host",
        "10.1.2.3",
        "--operation",
        "All",
        "--cluster",
    )
    assert code == 0, out
    code, out = acls_tool(gw, tmp_path, ADMIN, "--list")
    assert code == 0, out
    assert "name=orders, patternType=LITERAL" in out
    assert "name=ord, patternType=PREFIXED" in out
    assert "resourceType=GROUP, name=app" in out
    assert "principal=User:mallory, host=10.1.2.3, operation=ALL, permissionType=DENY" in out
    assert out.count("principal=User:alice") == 5  # READ, WRITE; READ, DESCRIBE; READ (group)
    code, out = acls_tool(
        gw,
        tmp_path,
        ADMIN,
        "--remove",
        "--force",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Write",
        "--topic",
        "orders",
    )
    assert code == 0, out
    code, out = acls_tool(gw, tmp_path, ADMIN, "--list", "--topic", "orders")
    assert "operation=READ" in out and "operation=WRITE" not in out
    # Listing needs DESCRIBE on the cluster: refused for anyone else.
    code, out = acls_tool(gw, tmp_path, "alice", "--list")
    assert code != 0 and "ClusterAuthorizationException" in out
    # They are in SQLite: still there (and enforced) after a restart.
    gw.restart()
    code, out = acls_tool(gw, tmp_path, ADMIN, "--list", "--topic", "orders")
    assert code == 0 and "principal=User:alice, host=*, operation=READ" in out, out


def test_confluent_producer_and_consumer(gw: Any) -> None:
    create_topic(gw, "orders")
    admin = admin_client(gw)
    from confluent_kafka.admin import (
        AclBinding,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    def allow(rtype: ResourceType, name: str, op: AclOperation) -> AclBinding:
        return AclBinding(
            rtype, name, ResourcePatternType.LITERAL, "User:alice", "*", op, AclPermissionType.ALLOW
        )

    bindings = [
        allow(ResourceType.TOPIC, "orders", AclOperation.WRITE),
        allow(ResourceType.TOPIC, "orders", AclOperation.READ),
        allow(ResourceType.GROUP, "app", AclOperation.READ),
    ]
    for future in admin.create_acls(bindings).values():
        future.result(TIMEOUT)
    described = admin.describe_acls(any_acl_filter(), request_timeout=TIMEOUT).result(TIMEOUT)
    assert set(described) == set(bindings)

    assert produce(gw, "alice", "orders") == [None, None, None]
    denied = produce(gw, "mallory", "orders")
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3

    def consume(user: str) -> tuple[list[bytes], KafkaException | None]:
        consumer = Consumer(
            client_config(
                user,
                gw.bootstrap,
                **{"group.id": "app", "auto.offset.reset": "earliest", "enable.auto.commit": False},
            )
        )
        consumer.subscribe(["orders"])
        values: list[bytes] = []
        try:
            for _ in range(40):
                msg = consumer.poll(0.5)
                if msg is None:
                    if len(values) == 3:
                        break
                    continue
                if msg.error():
                    raise KafkaException(msg.error())
                values.append(msg.value())
            consumer.commit(asynchronous=False)
            return values, None
        except KafkaException as exc:
            return values, exc
        finally:
            consumer.close()

    values, error = consume("alice")
    assert error is None and sorted(values) == [b"v0", b"v1", b"v2"]
    values, error = consume("mallory")
    assert values == [] and error is not None
    assert error.args[0].code() in (
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    )


def test_admin_client_authorized_operations(gw: Any) -> None:
    """KIP-430 through AdminClient describe calls (which ask for authorized operations)."""
    create_topic(gw, "kip430")
    from confluent_kafka.admin import (
        AclBinding,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    def allow(rtype: ResourceType, name: str, op: AclOperation) -> AclBinding:
        return AclBinding(
            rtype, name, ResourcePatternType.LITERAL, "User:carol", "*", op, AclPermissionType.ALLOW
        )

    admin = admin_client(gw)
    wanted = [
        allow(ResourceType.TOPIC, "kip430", AclOperation.WRITE),
        allow(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
    ]
    for future in admin.create_acls(wanted).values():
        future.result(TIMEOUT)
    carol = admin_client(gw, "carol")
    topic = carol.describe_topics(TopicCollection(["kip430"]), include_authorized_operations=True)[
        "kip430"
    ].result(TIMEOUT)
    assert set(topic.authorized_operations) == {AclOperation.WRITE, AclOperation.DESCRIBE}
    cluster = carol.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert set(cluster.authorized_operations) == {AclOperation.DESCRIBE}
    admin_ops = (
        admin.describe_cluster(include_authorized_operations=True)
        .result(TIMEOUT)
        .authorized_operations
    )
    assert AclOperation.ALTER in set(admin_ops) and AclOperation.CREATE in set(admin_ops)


def test_kafka_python_denied_and_allowed(gw: Any) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    topic = f"kp-{uuid.uuid4().hex[:6]}"
    create_topic(gw, topic)
    allowed = KafkaProducer(bootstrap_servers=gw.bootstrap, client_id=ADMIN)
    allowed.send(topic, b"x").get(TIMEOUT)
    allowed.close()
    denied = KafkaProducer(bootstrap_servers=gw.bootstrap, client_id="mallory", max_block_ms=5000)
    with pytest.raises(TopicAuthorizationFailedError):
        denied.send(topic, b"x").get(TIMEOUT)
    denied.close()
