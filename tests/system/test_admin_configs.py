"""Admin APIs with real values: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
CreatePartitions, DescribeCluster and CreateTopics with configs.

Driven through confluent-kafka's AdminClient, kafka-python's KafkaAdminClient, kcat and the
raw protocol (kio entities, to pin exact fields per version), against a real gateway.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess

import kafka.errors as kerr
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kio.static.primitive import i8, i16, i32, i32Timedelta
from support.client import DEFAULT_PARTITIONS, RawClient, confluent_consume, unique_topic

TIMEOUT = 20.0
MAX_MESSAGE_BYTES = 2_000_000
GATEWAY_ARGS = ("--max-message-bytes", str(MAX_MESSAGE_BYTES))

TOPIC, DYNAMIC, STATIC, DEFAULT = 1, 1, 4, 5
SOURCE_NAMES = {1: "DYNAMIC_TOPIC_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG"}
ERR_INVALID_PARTITIONS = 37
ERR_INVALID_CONFIG = 40
ERR_INVALID_REQUEST = 42
ERR_UNKNOWN_TOPIC = 3

# Every topic config of a topic that sets none: (value, source).
TOPIC_DEFAULTS = {
    "cleanup.policy": ("delete", DEFAULT),
    "retention.ms": ("-1", DEFAULT),
    "retention.bytes": ("-1", DEFAULT),
    "max.message.bytes": (str(MAX_MESSAGE_BYTES), STATIC),
    "message.timestamp.type": ("CreateTime", DEFAULT),
    "segment.bytes": ("1073741824", DEFAULT),
    "segment.ms": ("604800000", DEFAULT),
    "compression.type": ("producer", DEFAULT),
    "min.insync.replicas": ("1", DEFAULT),
    "segment.jitter.ms": ("0", DEFAULT),
    "segment.index.bytes": ("10485760", DEFAULT),
    "index.interval.bytes": ("4096", DEFAULT),
    "file.delete.delay.ms": ("60000", DEFAULT),
    "preallocate": ("false", DEFAULT),
    "flush.messages": ("9223372036854775807", DEFAULT),
    "flush.ms": ("9223372036854775807", DEFAULT),
    "unclean.leader.election.enable": ("false", DEFAULT),
    "leader.replication.throttled.replicas": ("", DEFAULT),
    "follower.replication.throttled.replicas": ("", DEFAULT),
    "delete.retention.ms": ("86400000", DEFAULT),
    "min.compaction.lag.ms": ("0", DEFAULT),
    "max.compaction.lag.ms": ("9223372036854775807", DEFAULT),
    "min.cleanable.dirty.ratio": ("0.5", DEFAULT),
    "local.retention.ms": ("-2", DEFAULT),
    "local.retention.bytes": ("-2", DEFAULT),
    "remote.storage.enable": ("false", DEFAULT),
    "remote.log.copy.disable": ("false", DEFAULT),
    "remote.log.delete.on.disable": ("false", DEFAULT),
    "message.timestamp.difference.max.ms": ("9223372036854775807", DEFAULT),
    "message.timestamp.before.max.ms": ("9223372036854775807", DEFAULT),
    "message.timestamp.after.max.ms": ("9223372036854775807", DEFAULT),
    "message.downconversion.enable": ("true", DEFAULT),
    "message.format.version": ("3.0-IV1", DEFAULT),
    "streamgate.scaling.policy": ("fixed", DEFAULT),
    "streamgate.scaling.target.rate": ("0", DEFAULT),
    "streamgate.scaling.scale.factor": ("2", DEFAULT),
    "streamgate.scaling.min.segments": ("1", DEFAULT),
}


# --------------------------------------------------------------------------- helpers


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def source(entry: ConfigEntry) -> int:
    value = entry.source
    return value.value if isinstance(value, ConfigSource) else int(value)


def describe_topic(client: AdminClient, topic: str) -> dict[str, tuple[str | None, int]]:
    futures = client.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    (future,) = futures.values()
    return {name: (e.value, source(e)) for name, e in future.result(TIMEOUT).items()}


def create(client: AdminClient, topic: str, partitions: int = 2, **configs: str) -> None:
    futures = client.create_topics(
        [NewTopic(topic, partitions, 1, config=configs)], operation_timeout=TIMEOUT
    )
    futures[topic].result(TIMEOUT)


def kafka_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0]


def partition_count(client: AdminClient, topic: str) -> int:
    return len(client.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions)


def produce_to(bootstrap: str, topic: str, partition: int, value: bytes) -> tuple[int, int]:
    """Produce one message to a given partition; (partition, offset) of its delivery."""
    reports: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20000})
    producer.produce(
        topic, value, partition=partition, on_delivery=lambda e, m: reports.append((e, m))
    )
    assert producer.flush(TIMEOUT) == 0
    ((err, msg),) = reports
    assert err is None, err
    return msg.partition(), msg.offset()


def consume_from(bootstrap: str, topic: str, partition: int, count: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        messages = confluent_consume(consumer, count, TIMEOUT)
        return [(m.offset(), m.value()) for m in messages]
    finally:
        consumer.close()


def kp_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)


# ------------------------------------------------------------- confluent-kafka: describe


def test_describe_topic_defaults_confluent(shared_gateway, topic):
    client = admin(shared_gateway.bootstrap)
    create(client, topic)
    assert describe_topic(client, topic) == TOPIC_DEFAULTS


def test_describe_topic_synonyms_confluent(shared_gateway, topic):
    client = admin(shared_gateway.bootstrap)
    create(client, topic, **{"retention.ms": "1000"})
    futures = client.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    configs = next(iter(futures.values())).result(TIMEOUT)
    retention = configs["retention.ms"]
    assert (retention.value, source(retention), retention.is_read_only) == ("1000", DYNAMIC, False)
    assert [(s.name, s.value, source(s)) for s in retention.synonyms.values()] == [
        ("retention.ms", "1000", DYNAMIC),
        ("log.retention.ms", "-1", DEFAULT),
    ]
    size = configs["max.message.bytes"]
    assert [(s.name, s.value, source(s)) for s in size.synonyms.values()] == [
        ("message.max.bytes", str(MAX_MESSAGE_BYTES), STATIC)
    ]


def test_describe_broker_confluent(shared_gateway):
    client = admin(shared_gateway.bootstrap)
    futures = client.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
    configs = next(iter(futures.values())).result(TIMEOUT)
    got = {name: (e.value, source(e), e.is_read_only) for name, e in configs.items()}
    expected_static = {
        "num.partitions": str(DEFAULT_PARTITIONS),
        "auto.create.topics.enable": "true",
        "message.max.bytes": str(MAX_MESSAGE_BYTES),
        "socket.request.max.bytes": str(100 * 1024 * 1024),
        "log.dirs": str(shared_gateway.data_dir),
        "listeners": f"PLAINTEXT://{shared_gateway.bootstrap}",
        "advertised.listeners": f"PLAINTEXT://{shared_gateway.bootstrap}",
    }
    # read-only unless Kafka 3.5.1 lets it change dynamically (message.max.bytes, log.*)
    dynamic = {"message.max.bytes", "listeners", "advertised.listeners"}
    for name, value in expected_static.items():
        assert got[name] == (value, STATIC, name not in dynamic), name
    assert got["log.retention.ms"] == ("-1", DEFAULT, False)
    assert got["log.cleanup.policy"] == ("delete", DEFAULT, False)
    assert got["node.id"] == ("1", DEFAULT, True)


def test_describe_unknown_topic_confluent(shared_gateway):
    client = admin(shared_gateway.bootstrap)
    futures = client.describe_configs([ConfigResource(ResourceType.TOPIC, unique_topic("nope"))])
    assert kafka_error(next(iter(futures.values()))).code() == ERR_UNKNOWN_TOPIC


# --------------------------------------------------------- confluent-kafka: CreateTopics


def test_create_topic_with_valid_configs_confluent(shared_gateway, topic):
    client = admin(shared_gateway.bootstrap)
    create(
        client,
        topic,
        4,
        **{
            "retention.ms": " 0086400000",
            "cleanup.policy": "delete",
            "streamgate.scaling.policy": "data-rate",
            "streamgate.scaling.target.rate": "1024",
            "streamgate.scaling.min.segments": "4",
        },
    )
    expected = dict(TOPIC_DEFAULTS)
    expected.update(
        {
            "retention.ms": ("86400000", DYNAMIC),  # stored normalised
            "cleanup.policy": ("delete", DYNAMIC),
            "streamgate.scaling.policy": ("data-rate", DYNAMIC),
            "streamgate.scaling.target.rate": ("1024", DYNAMIC),
            "streamgate.scaling.min.segments": ("4", DYNAMIC),
        }
    )
    assert describe_topic(client, topic) == expected


@pytest.mark.parametrize(
    ("configs", "message_part"),
    [
        ({"cleanup.policy": "shred"}, "cleanup.policy must be one of"),
        ({"cleanup.policy": "delete,shred"}, "cleanup.policy must be one of"),
        ({"no.such.config": "1"}, "unknown topic config 'no.such.config'"),
        ({"streamgate.nope": "1"}, "unknown topic config 'streamgate.nope'"),
        ({"retention.ms": "a week"}, "retention.ms must be an integer"),
        ({"retention.ms": "-2"}, "retention.ms must be between -1"),
        ({"message.timestamp.type": "Sometime"}, "message.timestamp.type must be one of"),
        ({"compression.type": "brotli"}, "compression.type must be one of"),
        ({"min.cleanable.dirty.ratio": "2"}, "min.cleanable.dirty.ratio must be between 0"),
        ({"preallocate": "maybe"}, "preallocate must be true or false"),
        ({"streamgate.scaling.policy": "event-rate"}, "needs streamgate.scaling.target.rate > 0"),
        ({"streamgate.scaling.min.segments": "3"}, "exceeds the topic's 2 partitions"),
        ({"streamgate.scaling.scale.factor": "1"}, "scale.factor must be between 2"),
    ],
)
def test_create_topic_with_invalid_configs_confluent(shared_gateway, configs, message_part):
    client = admin(shared_gateway.bootstrap)
    topic = unique_topic("bad-config")
    futures = client.create_topics([NewTopic(topic, 2, 1, config=configs)])
    error = kafka_error(futures[topic])
    assert error.code() == ERR_INVALID_CONFIG
    assert message_part in error.str()
    assert topic not in client.list_topics(timeout=TIMEOUT).topics


def test_create_topic_validate_only_confluent(shared_gateway, topic):
    client = admin(shared_gateway.bootstrap)
    futures = client.create_topics(
        [NewTopic(topic, 2, 1, config={"retention.ms": "5"})], validate_only=True
    )
    assert futures[topic].result(TIMEOUT) is None
    assert topic not in client.list_topics(timeout=TIMEOUT).topics
    futures = client.create_topics(
        [NewTopic(topic, 2, 1, config={"cleanup.policy": "shred"})], validate_only=True
    )
    assert kafka_error(futures[topic]).code() == ERR_INVALID_CONFIG


# ----------------------------------------------------------- confluent-kafka: alter


def test_alter_configs_replaces_whole_set_confluent(shared_gateway, topic):
    client = admin(shared_gateway.bootstrap)
    create(client, topic, **{"retention.ms": "1000", "retention.bytes": "5"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "7"})
    futures = client.alter_configs([resource], validate_only=True)
    assert next(iter(futures.values())).result(TIMEOUT) is None
    described = describe_topic(client, topic)
    assert (described["retention.ms"], described["retention.bytes"]) == (
        ("1000", DYNAMIC),
        ("5", DYNAMIC),
    )

    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "7"})
    futures = client.alter_configs([resource])
    assert next(iter(futures.values())).result(TIMEOUT) is None
    expected = dict(TOPIC_DEFAULTS)
    expected["retention.bytes"] = ("7", DYNAMIC)  # retention.ms went back to its default
    assert describe_topic(client, topic) == expected

    bad = ConfigResource(ResourceType.TOPIC, topic, set_config={"cleanup.policy": "shred"})
    assert kafka_error(next(iter(client.alter_configs([bad]).values()))).code() == (
        ERR_INVALID_CONFIG
    )
    assert describe_topic(client, topic) == expected


def _incremental(client: AdminClient, topic: str, *entries: ConfigEntry, validate_only=False):
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
    futures = client.incremental_alter_configs([resource], validate_only=validate_only)
    return next(iter(futures.values()))


def test_incremental_alter_configs_confluent(shared_gateway, topic):
    client = admin(shared_gateway.bootstrap)
    create(client, topic, **{"retention.bytes": "5", "segment.bytes": "1048576"})
    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    APPEND, SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT

    future = _incremental(
        client,
        topic,
        ConfigEntry("retention.ms", "60000", incremental_operation=SET),
        ConfigEntry("retention.bytes", None, incremental_operation=DELETE),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=APPEND),
    )
    assert future.result(TIMEOUT) is None
    expected = dict(TOPIC_DEFAULTS)
    expected.update(
        {
            "retention.ms": ("60000", DYNAMIC),
            "segment.bytes": ("1048576", DYNAMIC),  # untouched
            "cleanup.policy": ("delete", DYNAMIC),  # appended to the default, no duplicate
        }
    )
    assert describe_topic(client, topic) == expected

    refused = [
        ConfigEntry("cleanup.policy", "shred", incremental_operation=APPEND),
        ConfigEntry("retention.ms", "5", incremental_operation=APPEND),  # not a list
        ConfigEntry("retention.ms", "5", incremental_operation=SUBTRACT),
        ConfigEntry("nope.nope", "5", incremental_operation=SET),
        ConfigEntry("retention.ms", "soon", incremental_operation=SET),
    ]
    for entry in refused:
        error = kafka_error(_incremental(client, topic, entry))
        assert error.code() == ERR_INVALID_CONFIG, (entry, error)
    validated = _incremental(
        client,
        topic,
        ConfigEntry("retention.ms", "1", incremental_operation=SET),
        validate_only=True,
    )
    assert validated.result(TIMEOUT) is None
    assert describe_topic(client, topic) == expected  # nothing above changed anything


def test_broker_configs_are_read_only_confluent(shared_gateway):
    client = admin(shared_gateway.bootstrap)
    resource = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("num.partitions", "9", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    future = next(iter(client.incremental_alter_configs([resource]).values()))
    assert kafka_error(future).code() == ERR_INVALID_REQUEST


def test_alter_unknown_topic_confluent(shared_gateway):
    client = admin(shared_gateway.bootstrap)
    future = _incremental(
        client,
        unique_topic("nope"),
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET),
    )
    assert kafka_error(future).code() == ERR_UNKNOWN_TOPIC


# ----------------------------------------------------- max.message.bytes on produce


def test_topic_max_message_bytes_enforced(shared_gateway, topic):
    client = admin(shared_gateway.bootstrap)
    create(client, topic, 1, **{"max.message.bytes": "1000"})
    other = unique_topic("roomy")
    create(client, other, 1)
    reports: list = []
    producer = Producer({"bootstrap.servers": shared_gateway.bootstrap, "retries": 0})
    payload = b"x" * 2000
    for name in (topic, other):
        producer.produce(
            name, payload, partition=0, on_delivery=lambda e, m: reports.append((e, m))
        )
        assert producer.flush(TIMEOUT) == 0
    errors = {m.topic(): (e.code() if e else None) for e, m in reports}
    assert errors == {topic: KafkaError.MSG_SIZE_TOO_LARGE, other: None}

    future = _incremental(
        client,
        topic,
        ConfigEntry("max.message.bytes", "5000", incremental_operation=AlterConfigOpType.SET),
    )
    assert future.result(TIMEOUT) is None
    assert produce_to(shared_gateway.bootstrap, topic, 0, payload) == (0, 0)


# ------------------------------------------------------ confluent-kafka: partitions


def test_create_partitions_confluent_produce_consume_and_restart(gateway, topic):
    client = admin(gateway.bootstrap)
    create(client, topic, 2)
    assert produce_to(gateway.bootstrap, topic, 1, b"before") == (1, 0)

    futures = client.create_partitions([NewPartitions(topic, 6)], validate_only=True)
    assert futures[topic].result(TIMEOUT) is None
    assert partition_count(client, topic) == 2
    futures = client.create_partitions([NewPartitions(topic, 4)])
    assert futures[topic].result(TIMEOUT) is None
    assert partition_count(client, topic) == 4
    for count in (4, 3):
        error = kafka_error(client.create_partitions([NewPartitions(topic, count)])[topic])
        assert error.code() == ERR_INVALID_PARTITIONS
    nope = unique_topic("nope")
    assert (
        kafka_error(client.create_partitions([NewPartitions(nope, 3)])[nope]).code()
        == ERR_UNKNOWN_TOPIC
    )

    assert produce_to(gateway.bootstrap, topic, 3, b"new-partition") == (3, 0)
    assert consume_from(gateway.bootstrap, topic, 3, 1) == [(0, b"new-partition")]

    gateway.restart()
    client = admin(gateway.bootstrap)
    assert partition_count(client, topic) == 4
    assert produce_to(gateway.bootstrap, topic, 3, b"after-restart") == (3, 1)
    assert produce_to(gateway.bootstrap, topic, 2, b"p2") == (2, 0)
    assert consume_from(gateway.bootstrap, topic, 3, 2) == [
        (0, b"new-partition"),
        (1, b"after-restart"),
    ]
    assert consume_from(gateway.bootstrap, topic, 1, 1) == [(0, b"before")]
    # And it can grow again after the restart.
    assert client.create_partitions([NewPartitions(topic, 5)])[topic].result(TIMEOUT) is None
    assert produce_to(gateway.bootstrap, topic, 4, b"p4") == (4, 0)


KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_lists_new_partition_count(shared_gateway, topic):
    client = admin(shared_gateway.bootstrap)
    create(client, topic, 1)
    assert client.create_partitions([NewPartitions(topic, 3)])[topic].result(TIMEOUT) is None
    assert KCAT is not None
    out = subprocess.run(
        [KCAT, "-L", "-J", "-b", shared_gateway.bootstrap, "-t", topic],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    (listed,) = json.loads(out)["topics"]
    assert listed["topic"] == topic
    assert [p["partition"] for p in listed["partitions"]] == [0, 1, 2]


# --------------------------------------------------------- confluent-kafka: cluster


def test_describe_cluster_confluent(shared_gateway):
    client = admin(shared_gateway.bootstrap)
    cluster_id = client.list_topics(timeout=TIMEOUT).cluster_id
    result = client.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT)
    assert result.cluster_id == cluster_id and len(cluster_id) == 22
    assert (result.controller.id, result.controller.host, result.controller.port) == (
        1,
        "127.0.0.1",
        shared_gateway.port,
    )
    assert [(n.id, n.host, n.port) for n in result.nodes] == [(1, "127.0.0.1", shared_gateway.port)]
    assert result.authorized_operations is None
    result = client.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert set(result.authorized_operations) == {
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
    }


# ------------------------------------------------------------------- kafka-python


def test_describe_configs_kafka_python(shared_gateway, topic):
    client = kp_admin(shared_gateway.bootstrap)
    try:
        client.create_topics({topic: {"num_partitions": 2, "configs": {"retention.ms": "1000"}}})
        modified = client.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)])
        (only,) = modified["topic"][topic].items()
        assert only[0] == "retention.ms"
        assert (only[1]["value"], only[1]["config_source"], only[1]["config_type"]) == (
            "1000",
            "DYNAMIC_TOPIC_CONFIG",
            "LONG",
        )
        everything = client.describe_configs(
            [KpConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
        )["topic"][topic]
        expected = dict(TOPIC_DEFAULTS)
        expected["retention.ms"] = ("1000", DYNAMIC)
        assert {k: (v["value"], v["config_source"]) for k, v in everything.items()} == {
            k: (value, SOURCE_NAMES[src]) for k, (value, src) in expected.items()
        }
        broker = client.describe_configs(
            [KpConfigResource(ConfigResourceType.BROKER, "1", ["num.partitions", "log.dirs"])],
            config_filter="all",
        )["broker"]["1"]
        assert {k: (v["value"], v["read_only"], v["config_source"]) for k, v in broker.items()} == {
            "num.partitions": (str(DEFAULT_PARTITIONS), True, "STATIC_BROKER_CONFIG"),
            "log.dirs": (str(shared_gateway.data_dir), True, "STATIC_BROKER_CONFIG"),
        }
    finally:
        client.close()


def test_alter_configs_kafka_python(shared_gateway, topic):
    client = kp_admin(shared_gateway.bootstrap)
    try:
        client.create_topics({topic: {"num_partitions": 1, "configs": {"retention.ms": "1000"}}})
        resource = KpConfigResource(ConfigResourceType.TOPIC, topic, {"retention.bytes": "4096"})
        # Legacy AlterConfigs: the client re-sends the modified configs (retention.ms) too.
        assert client.alter_configs([resource], incremental=False) == {"topic": {topic: "OK"}}
        resource = KpConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "2000"})
        assert client.alter_configs([resource]) == {"topic": {topic: "OK"}}  # incremental
        modified = client.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)])
        assert {k: v["value"] for k, v in modified["topic"][topic].items()} == {
            "retention.ms": "2000",
            "retention.bytes": "4096",
        }
        bad = KpConfigResource(ConfigResourceType.TOPIC, topic, {"cleanup.policy": "shred"})
        result = client.alter_configs([bad])["topic"][topic]
        assert result.startswith("[Error 40] InvalidConfigurationError"), result
        reset = KpConfigResource(ConfigResourceType.TOPIC, topic, ["retention.ms"])
        assert client.reset_configs([reset]) == {"topic": {topic: "OK"}}
        modified = client.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)])
        assert {k: v["value"] for k, v in modified["topic"][topic].items()} == {
            "retention.bytes": "4096"
        }
    finally:
        client.close()


def test_create_topics_with_configs_kafka_python(shared_gateway, topic):
    client = kp_admin(shared_gateway.bootstrap)
    try:
        response = client.create_topics(
            {topic: {"num_partitions": 2, "configs": {"cleanup.policy": "delete"}}}
        )
        (result,) = response["topics"]
        assert (result["error_code"], result["num_partitions"]) == (0, 2)
        configs = {k: (v["value"], v["config_source"]) for k, v in result["configs"].items()}
        expected = dict(TOPIC_DEFAULTS)
        expected["cleanup.policy"] = ("delete", DYNAMIC)
        assert configs == {k: (value, SOURCE_NAMES[src]) for k, (value, src) in expected.items()}
        bad = unique_topic("bad")
        with pytest.raises(kerr.InvalidConfigurationError):
            client.create_topics({bad: {"num_partitions": 1, "configs": {"retention.ms": "x"}}})
        assert bad not in client.list_topics()
    finally:
        client.close()


def test_create_partitions_kafka_python(shared_gateway, topic):
    client = kp_admin(shared_gateway.bootstrap)
    try:
        client.create_topics({topic: {"num_partitions": 1}})
        client.create_partitions({topic: 3})
        (described,) = client.describe_topics([topic])
        assert [p["partition_index"] for p in described["partitions"]] == [0, 1, 2]
        with pytest.raises(kerr.InvalidPartitionsError):
            client.create_partitions({topic: 2})
    finally:
        client.close()
    assert produce_to(shared_gateway.bootstrap, topic, 2, b"third") == (2, 0)
    assert consume_from(shared_gateway.bootstrap, topic, 2, 1) == [(0, b"third")]


def test_describe_cluster_kafka_python(shared_gateway):
    client = kp_admin(shared_gateway.bootstrap)
    try:
        described = client.describe_cluster()
    finally:
        client.close()
    cluster_id = admin(shared_gateway.bootstrap).list_topics(timeout=TIMEOUT).cluster_id
    assert described["cluster_id"] == cluster_id
    assert described["controller_id"] == 1
    # DescribeCluster v2 (Kafka 4.1's) adds is_fenced: never here.
    assert described["brokers"] == [
        {
            "broker_id": 1,
            "host": "127.0.0.1",
            "port": shared_gateway.port,
            "rack": None,
            "is_fenced": False,
        }
    ]
    assert sorted(described["authorized_operations"]) == [
        "CREATE",
        "DESCRIBE",
        "DESCRIBE_CONFIGS",
        "IDEMPOTENT_WRITE",
    ]


# ------------------------------------------------------- raw protocol: exact fields


def test_describe_configs_v4_fields_raw(shared_gateway, topic):
    from kio.schema.describe_configs.v4.request import (
        DescribeConfigsRequest,
        DescribeConfigsResource,
    )

    create(admin(shared_gateway.bootstrap), topic, **{"retention.ms": "1000"})
    request = DescribeConfigsRequest(
        resources=(
            DescribeConfigsResource(
                resource_type=i8(2),
                resource_name=topic,
                configuration_keys=("retention.ms", "cleanup.policy", "no.such.key"),
            ),
            DescribeConfigsResource(
                resource_type=i8(4), resource_name="7", configuration_keys=None
            ),
        ),
        include_synonyms=False,
        include_documentation=True,
    )
    with RawClient(shared_gateway.bootstrap) as raw:
        response = raw.request(request)
    topic_result, broker_result = response.results
    assert (topic_result.error_code, topic_result.resource_name) == (0, topic)
    got = {
        c.name: (c.value, c.config_source, c.config_type, c.read_only, c.synonyms)
        for c in topic_result.configs
    }
    assert got == {
        "retention.ms": ("1000", DYNAMIC, 5, False, ()),  # LONG, no synonyms unless asked
        "cleanup.policy": ("delete", DEFAULT, 7, False, ()),  # LIST
    }
    assert all(c.documentation for c in topic_result.configs)
    assert broker_result.error_code == ERR_INVALID_REQUEST  # this gateway is node 1, not 7


def test_describe_configs_v1_raw(shared_gateway):
    from kio.schema.describe_configs.v1.request import (
        DescribeConfigsRequest,
        DescribeConfigsResource,
    )

    request = DescribeConfigsRequest(
        resources=(
            DescribeConfigsResource(
                resource_type=i8(4), resource_name="1", configuration_keys=("num.partitions",)
            ),
            DescribeConfigsResource(
                resource_type=i8(2), resource_name=unique_topic("none"), configuration_keys=None
            ),
        ),
        include_synonyms=True,
    )
    with RawClient(shared_gateway.bootstrap) as raw:
        response = raw.request(request)
    broker, missing = response.results
    ((entry),) = broker.configs
    assert (entry.name, entry.value, entry.read_only, entry.config_source) == (
        "num.partitions",
        str(DEFAULT_PARTITIONS),
        True,
        STATIC,
    )
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("num.partitions", str(DEFAULT_PARTITIONS), STATIC)
    ]
    assert (missing.error_code, missing.configs) == (ERR_UNKNOWN_TOPIC, ())


def test_create_topics_v5_returns_configs_raw(shared_gateway, topic):
    from kio.schema.create_topics.v5.request import (
        CreatableTopic,
        CreatableTopicConfig,
        CreateTopicsRequest,
    )

    def request(validate_only: bool, name: str) -> CreateTopicsRequest:
        return CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=name,
                    num_partitions=i32(-1),
                    replication_factor=i16(-1),
                    assignments=(),
                    configs=(CreatableTopicConfig(name="segment.ms", value="60000"),),
                ),
            ),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            validate_only=validate_only,
        )

    with RawClient(shared_gateway.bootstrap) as raw:
        for validate_only in (True, False):
            (result,) = raw.request(request(validate_only, topic)).topics
            assert (result.error_code, result.num_partitions, result.replication_factor) == (
                0,
                DEFAULT_PARTITIONS,
                1,
            )
            configs = {c.name: (c.value, c.config_source, c.read_only) for c in result.configs}
            expected = {k: (v, s, False) for k, (v, s) in TOPIC_DEFAULTS.items()}
            expected["segment.ms"] = ("60000", DYNAMIC, False)
            assert configs == expected
        (again,) = raw.request(request(False, topic)).topics
        assert again.error_code == 36  # TOPIC_ALREADY_EXISTS


def test_create_partitions_raw_errors(shared_gateway, topic):
    from kio.schema.create_partitions.v3.request import (
        CreatePartitionsRequest,
        CreatePartitionsTopic,
    )

    create(admin(shared_gateway.bootstrap), topic, 1)
    twice = CreatePartitionsRequest(
        topics=(
            CreatePartitionsTopic(name=topic, count=i32(2), assignments=None),
            CreatePartitionsTopic(name=topic, count=i32(3), assignments=None),
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        validate_only=False,
    )
    with RawClient(shared_gateway.bootstrap) as raw:
        results = raw.request(twice).results
    assert [(r.name, r.error_code) for r in results] == [
        (topic, ERR_INVALID_REQUEST),
        (topic, ERR_INVALID_REQUEST),
    ]
    assert partition_count(admin(shared_gateway.bootstrap), topic) == 1
