"""ACLs on the next-generation consumer group protocol, with confluent-kafka: a regex
subscription resolves only to topics the member may DESCRIBE, a subscription naming a topic it
may not DESCRIBE is refused, and describing a group that names such a topic is refused too."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from support.acl import ADMIN, acl_gateway, client_config

TIMEOUT = 30
ARGS = ("--group-consumer-heartbeat-interval-ms", "300")


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Any]:
    gateway = acl_gateway(tmp_path, *ARGS)
    gateway.start_fresh()
    yield gateway
    gateway.close()


def _allow(user: str, rtype: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(
        rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op, AclPermissionType.ALLOW
    )


def _consumer(gw: Any, user: str, group: str) -> Consumer:
    return Consumer(
        client_config(
            user,
            gw.bootstrap,
            **{
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 500,
            },
        )
    )


def test_regex_resolves_to_describable_topics_only(gw: Any) -> None:
    prefix = f"rxacl{uuid.uuid4().hex[:6]}"
    group = f"g-{prefix}"
    mine, other = f"{prefix}-mine", f"{prefix}-other"
    admin = AdminClient(client_config(ADMIN, gw.bootstrap))
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in (mine, other)]).values():
        future.result(TIMEOUT)
    bindings = [
        _allow("carol", ResourceType.GROUP, group, AclOperation.READ),
        _allow("carol", ResourceType.TOPIC, mine, AclOperation.READ),
        _allow("dave", ResourceType.GROUP, group, AclOperation.DESCRIBE),
    ]
    for future in admin.create_acls(bindings).values():
        future.result(TIMEOUT)
    producer = Producer(client_config(ADMIN, gw.bootstrap))
    for topic in (mine, other):
        for i in range(4):
            producer.produce(topic, f"{topic}-{i}".encode(), partition=i % 2)
    assert producer.flush(TIMEOUT) == 0

    consumer = _consumer(gw, "carol", group)
    consumer.subscribe([f"^{prefix}-.*"])
    seen: list[str] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value().decode())
        # a while longer: nothing of the topic carol may not describe may come
        end = time.monotonic() + 2
        while time.monotonic() < end:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value().decode())
        assert {p.topic for p in consumer.assignment()} == {mine}
        # dave may describe the group but not the topic it is assigned: refused, as Kafka does
        refused = AdminClient(client_config("dave", gw.bootstrap))
        with pytest.raises(KafkaException) as caught:
            refused.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert "TOPIC_AUTHORIZATION_FAILED" in str(caught.value)
        described = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert [m.client_id for m in described.members] == ["carol"]
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"{mine}-{i}" for i in range(4))


def test_subscribing_by_name_to_a_topic_not_describable_is_refused(gw: Any) -> None:
    topic = f"named{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    admin = AdminClient(client_config(ADMIN, gw.bootstrap))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT)
    admin.create_acls([_allow("erin", ResourceType.GROUP, group, AclOperation.READ)])
    time.sleep(0.5)
    consumer = _consumer(gw, "erin", group)
    consumer.subscribe([topic])
    errors: list[str] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while not errors and time.monotonic() < deadline:
            try:
                message = consumer.poll(0.5)
            except KafkaException as exc:
                errors.append(str(exc))
                continue
            if message is not None and message.error() is not None:
                errors.append(str(message.error()))
        assert consumer.assignment() == []
    finally:
        consumer.close()
    assert any("TOPIC_AUTHORIZATION_FAILED" in e or "authoriz" in e.lower() for e in errors), errors
