"""Per-group configs (the GROUP config resource) with confluent-kafka's AdminClient, and
their effect on the coordinators: the heartbeat interval a consumer group member and a
share group member are told."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from confluent_kafka.error import KafkaException
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from support.client import RawClient, ms, unique_topic
from support.txn import create_topic


def _alter(admin: AdminClient, group: str, *entries: tuple[str, str | None]) -> None:
    configs = [
        ConfigEntry(
            name,
            value,
            incremental_operation=AlterConfigOpType.DELETE
            if value is None
            else AlterConfigOpType.SET,
        )
        for name, value in entries
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=configs)
    admin.incremental_alter_configs([resource])[resource].result(15)


def _described(admin: AdminClient, group: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.GROUP, group)
    entries = admin.describe_configs([resource])[resource].result(15)
    return {name: entry.value for name, entry in entries.items()}


def _refused(admin: AdminClient, group: str, name: str, value: str) -> str:
    try:
        _alter(admin, group, (name, value))
    except KafkaException as exc:
        return exc.args[0].name()
    raise AssertionError(f"{name}={value} was accepted")


def test_group_configs_are_set_described_and_used(shared_gateway) -> None:
    admin = AdminClient({"bootstrap.servers": shared_gateway.bootstrap})
    group, share_group = unique_topic("gcfg"), unique_topic("gcfg-share")
    topic = unique_topic("gcfg-t")
    create_topic(shared_gateway.bootstrap, topic)
    before = _described(admin, group)
    assert {
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
        "share.record.lock.duration.ms",
        "share.auto.offset.reset",
    } <= set(before)

    _alter(admin, group, ("consumer.heartbeat.interval.ms", "6000"))
    _alter(admin, share_group, ("share.heartbeat.interval.ms", "7000"))
    _alter(admin, share_group, ("share.auto.offset.reset", "earliest"))
    assert _described(admin, group)["consumer.heartbeat.interval.ms"] == "6000"
    assert _described(admin, share_group)["share.auto.offset.reset"] == "earliest"
    assert _refused(admin, group, "consumer.session.timeout.ms", "1000") == "INVALID_CONFIG"
    assert _refused(admin, group, "no.such.config", "1") == "INVALID_CONFIG"
    assert _refused(admin, group, "share.auto.offset.reset", "never") == "INVALID_CONFIG"

    with RawClient(shared_gateway.bootstrap) as client:
        joined = client.request(
            ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                rebalance_timeout=ms(30_000),
                subscribed_topic_names=(topic,),
                topic_partitions=(),
            )
        )
        assert joined.error_code == 0
        assert joined.heartbeat_interval.total_seconds() == 6.0
        shared = client.request(
            ShareGroupHeartbeatRequest(
                group_id=share_group,
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                subscribed_topic_names=(topic,),
            )
        )
        assert shared.error_code == 0
        assert shared.heartbeat_interval.total_seconds() == 7.0

    _alter(admin, group, ("consumer.heartbeat.interval.ms", None))  # back to the default
    assert (
        _described(admin, group)["consumer.heartbeat.interval.ms"]
        == before["consumer.heartbeat.interval.ms"]
    )
