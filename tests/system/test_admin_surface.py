"""Kafka's admin surface (issue 11), side by side with a single-node Apache Kafka 3.5.1.

Every test runs the same calls against streamgate and, when `../shared/kafka` and Java are
there, against Kafka (one broker for the module), then compares the fields that should agree.
When Kafka is missing, the streamgate half still runs and the test is skipped afterwards
with the reason, so a missing reference never hides a streamgate failure.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic as KpNewTopic
from kio.static.primitive import i32, i64
from support.acl import any_acl_filter
from support.client import RawClient, Rec, build_record_batch, ms, produce_request, unique_topic
from support.kafka import need_kafka

from harness.kafka import run_tool, unavailable_reason

TIMEOUT = 30.0
NODE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
LOG_DIR_NOT_FOUND = 57
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100

# Kafka 3.5's topic configs (LogConfig), each with a non-default value Kafka accepts.
KAFKA_35_TOPIC_CONFIGS = {
    "cleanup.policy": "compact,delete",
    "compression.type": "gzip",
    "delete.retention.ms": "3600000",
    "file.delete.delay.ms": "1000",
    "flush.messages": "1000",
    "flush.ms": "1000",
    "follower.replication.throttled.replicas": "*",
    "index.interval.bytes": "8192",
    "leader.replication.throttled.replicas": "0:1",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "86400000",
    "max.message.bytes": "2000000",
    "message.downconversion.enable": "false",
    "message.format.version": "3.0-IV1",
    "message.timestamp.difference.max.ms": "3600000",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.25",
    "min.compaction.lag.ms": "1000",
    "min.insync.replicas": "1",
    "preallocate": "true",
    "remote.storage.enable": "false",
    "retention.bytes": "1073741824",
    "retention.ms": "86400000",
    "segment.bytes": "1048576",
    "segment.index.bytes": "1048576",
    "segment.jitter.ms": "10",
    "segment.ms": "3600000",
    "unclean.leader.election.enable": "true",
}
# Kafka 3.6+ configs Kafka 3.5 does not know yet (streamgate accepts them).
LATER_TOPIC_CONFIGS = {
    "message.timestamp.before.max.ms": "3600000",
    "message.timestamp.after.max.ms": "3600000",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
}


# --------------------------------------------------------------------------- fixtures


def both(shared_gateway, kafka) -> dict[str, str]:
    """Bootstrap addresses: streamgate always, Kafka when it runs."""
    out = {"streamgate": shared_gateway.bootstrap}
    if kafka is not None:
        out["kafka"] = kafka.bootstrap
    return out


def confluent_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def kp_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def create_topic(bootstrap: str, name: str, partitions: int = 2, **configs: str) -> None:
    client = confluent_admin(bootstrap)  # held: futures fail once their client is freed
    futures = client.create_topics(
        [NewTopic(name, partitions, 1, config=configs)], operation_timeout=TIMEOUT
    )
    futures[name].result(TIMEOUT)
    wait_for_leaders(bootstrap, name, partitions)


def wait_for_leaders(bootstrap: str, name: str, partitions: int) -> None:
    """Kafka creates topics asynchronously; wait until every partition has a leader."""
    client = confluent_admin(bootstrap)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        topic = client.list_topics(name, timeout=TIMEOUT).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader == NODE for p in topic.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} has no leaders on {bootstrap}")


def raw(bootstrap: str, request: Any) -> Any:
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        return client.request(request)


def need_tools() -> None:
    """Kafka's own CLI tools are a client here: skip, saying why, when they cannot run."""
    if (why := unavailable_reason()) is not None:
        pytest.skip(f"Kafka's tools unavailable: {why}")


def tool(name: str, *args: str, input: str | None = None) -> tuple[int, str]:
    need_tools()
    out = run_tool(name, list(args), timeout=120, input=input)
    return out.returncode, out.stdout + out.stderr


def configs_described(bootstrap: str, entity_type: str, name: str, *extra: str) -> str:
    """kafka-configs.sh --describe of one entity: its output."""
    code, out = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        bootstrap,
        "--describe",
        "--entity-type",
        entity_type,
        "--entity-name",
        name,
        *extra,
    )
    assert code == 0, out
    return out


# --------------------------------------------------------------------------- versions


def test_api_versions_claim_kafka_40(shared_gateway, kafka):
    """Every API key streamgate advertises, beside Kafka's; the version-inferring clients
    (kafka-python's api_version detection: 4.0; librdkafka's feature detection: Kafka
    3.5.1's features)."""
    from support.client import api_versions_request

    ours = {
        k.api_key: (k.min_version, k.max_version)
        for k in raw(shared_gateway.bootstrap, api_versions_request()).api_keys
    }
    for key, versions in {1: (4, 18), 3: (0, 13), 19: (2, 7), 20: (1, 6)}.items():
        assert ours[key] == versions
    for key in (32, 34, 35, 43, 45, 46, 60):  # the admin APIs a 3.x client expects
        assert key in ours
    client = kp_admin(shared_gateway.bootstrap)
    try:
        assert client._manager.broker_version_data.broker_version == (4, 0)
    except AttributeError:  # older layout: ask the client object directly
        assert client._client.check_version() == (4, 0)
    finally:
        client.close()
    our_features = librdkafka_features(shared_gateway.bootstrap)
    for feature in (
        "MsgVer2",
        "IdempotentProducer",
        "ZSTD",
        "ApiVersion",
        "BrokerGroupCoordinator",
    ):
        assert feature in our_features, our_features

    kafka = need_kafka(kafka)
    theirs = {
        k.api_key: (k.min_version, k.max_version)
        for k in raw(kafka.bootstrap, api_versions_request()).api_keys
    }
    # Where both advertise an API, streamgate reaches at least Kafka 3.5's top version,
    # except the ones whose newer versions need transactions or batched groups.
    behind = {
        key: (ours[key], theirs[key])
        for key in ours.keys() & theirs.keys()
        if ours[key][1] < theirs[key][1]
    }
    assert set(behind) <= {9, 10, 11, 13}, (
        behind
    )  # OffsetFetch v8, FindCoordinator v4, JoinGroup v8-9, LeaveGroup v5
    # librdkafka derives the same features from both, but transactions (not supported).
    their_features = librdkafka_features(kafka.bootstrap)
    missing = their_features - our_features
    assert missing <= {"Transactions", "Sasl", "SaslHandshake", "SaslAuthReq"}, missing


def librdkafka_features(bootstrap: str) -> set[str]:
    """The protocol features librdkafka enables after ApiVersions (its `feature` debug log)."""
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex}")
    logger.addHandler(Capture())
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    client = AdminClient({"bootstrap.servers": bootstrap, "debug": "feature"}, logger=logger)
    client.list_topics(timeout=TIMEOUT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("Enabling feature" in x for x in lines):
        client.poll(0.2)
    client.poll(0.5)
    features: set[str] = set()
    for line in lines:  # the last word on each feature wins
        match = re.search(r"(Enabling|Disabling) feature (\S+)", line)
        if match and match.group(1) == "Enabling":
            features.add(match.group(2))
        elif match:
            features.discard(match.group(2))
    assert features, lines[-20:]
    return features


# --------------------------------------------------------------------------- topic ids


def test_topic_ids_in_metadata_and_fetch_v13(shared_gateway, kafka):
    """Metadata v12 carries a real topic id; Fetch v15 by that id reads the topic, an
    unknown id gets UNKNOWN_TOPIC_ID; kafka-topics.sh shows the id."""
    from support.client import metadata_request

    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("ids")
        create_topic(bootstrap, name, 1)
        batch = build_record_batch([Rec(b"hello", b"k")])
        produced = raw(bootstrap, produce_request(name, 0, batch))
        assert produced.responses[0].partition_responses[0].error_code == 0, label
        (topic,) = raw(bootstrap, metadata_request([name])).topics
        assert topic.topic_id not in (None, uuid.UUID(int=0)), label

        fetched = raw(bootstrap, fetch_v15(topic.topic_id))
        (response_topic,) = fetched.responses
        assert response_topic.topic_id == topic.topic_id, label
        (part,) = response_topic.partitions
        assert part.error_code == 0 and part.records, (label, part)

        unknown = raw(bootstrap, fetch_v15(uuid.uuid4()))
        assert unknown.responses[0].partitions[0].error_code == UNKNOWN_TOPIC_ID, label

        code, out = tool(
            "kafka-topics.sh", "--bootstrap-server", bootstrap, "--describe", "--topic", name
        )
        assert code == 0, out
        assert f"TopicId: {kafka_id(topic.topic_id)}" in out, (label, out)
    need_kafka(kafka)


def kafka_id(topic_id: uuid.UUID) -> str:
    import base64

    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def fetch_v15(topic_id: uuid.UUID) -> Any:
    from kio.schema.fetch.v15.request import FetchPartition, FetchRequest, FetchTopic

    return FetchRequest(
        max_wait=ms(100),
        min_bytes=i32(1),
        topics=(
            FetchTopic(
                topic_id=topic_id,
                partitions=(
                    FetchPartition(
                        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def test_topic_id_stable_across_restart(gateway):
    from support.client import metadata_request

    name = unique_topic("stable-id")
    create_topic(gateway.bootstrap, name, 2)
    (before,) = raw(gateway.bootstrap, metadata_request([name])).topics
    gateway.restart()
    (after,) = raw(gateway.bootstrap, metadata_request([name])).topics
    assert after.topic_id == before.topic_id != uuid.UUID(int=0)
    # Deleted and created again under the same name: a new id.
    admin = confluent_admin(gateway.bootstrap)
    admin.delete_topics([name])[name].result(TIMEOUT)
    create_topic(gateway.bootstrap, name, 2)
    (again,) = raw(gateway.bootstrap, metadata_request([name])).topics
    assert again.topic_id not in (before.topic_id, uuid.UUID(int=0))


SPARK_KAFKA_CLIENTS = (
    Path(__file__).resolve().parents[3] / "shared" / "spark-connector" / "kafka-clients-3.9.1.jar"
)


@pytest.mark.parametrize("client_jar", ["3.5.1", "3.9.1"])
def test_java_consumers_fetch_by_topic_id(shared_gateway, client_jar):
    """Kafka's console consumer with its own client 3.5.1, and with kafka-clients 3.9.1 (the
    one Spark 4.0's connector uses) first on the classpath: both fetch by topic id (v13+)
    once Metadata carries ids."""
    if unavailable_reason() is not None:
        pytest.skip(unavailable_reason())
    env = {}
    if client_jar == "3.9.1":
        if not SPARK_KAFKA_CLIENTS.is_file():
            pytest.skip(f"no {SPARK_KAFKA_CLIENTS}")
        env = {"CLASSPATH": str(SPARK_KAFKA_CLIENTS), "KAFKA_OPTS": "-verbose:class"}
    name = unique_topic("java-ids")
    create_topic(shared_gateway.bootstrap, name, 1)
    producer = Producer({"bootstrap.servers": shared_gateway.bootstrap})
    for i in range(5):
        producer.produce(name, f"m{i}".encode(), partition=0)
    producer.flush(TIMEOUT)
    need_tools()
    result = run_tool(
        "kafka-console-consumer.sh",
        [
            "--bootstrap-server",
            shared_gateway.bootstrap,
            "--topic",
            name,
            "--from-beginning",
            "--max-messages",
            "5",
            "--timeout-ms",
            "30000",
        ],
        env=env,
        timeout=120,
    )
    code, out = result.returncode, result.stdout + result.stderr

    assert code == 0, out
    assert [line for line in out.splitlines() if line.startswith("m")] == [
        f"m{i}" for i in range(5)
    ]
    if client_jar == "3.9.1":  # the consumer class came from the 3.9.1 jar
        assert re.search(r"clients\.consumer\.KafkaConsumer source: .*kafka-clients-3\.9\.1", out)


# --------------------------------------------------------------------------- admin APIs


def test_describe_log_dirs(shared_gateway, kafka):
    results = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("logdirs")
        create_topic(bootstrap, name, 2)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(name, b"x" * 1000, partition=1)
        producer.flush(TIMEOUT)
        client = kp_admin(bootstrap)
        try:
            (broker,) = client.describe_log_dirs({name: [0, 1]})
        finally:
            client.close()
        (log_dir,) = broker["log_dirs"]
        assert log_dir["error_code"] == 0 and log_dir["log_dir"].startswith("/")
        (topic,) = [t for t in log_dir["topics"] if t["name"] == name]
        sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
        assert sizes[0] == 0 and sizes[1] > 1000, (label, sizes)
        assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in topic["partitions"])
        code, out = tool(
            "kafka-log-dirs.sh", "--bootstrap-server", bootstrap, "--describe", "--topic-list", name
        )
        assert code == 0, out
        described = json.loads(out.strip().splitlines()[-1])
        (listed,) = described["brokers"]
        assert listed["broker"] == NODE
        partitions = {p["partition"]: p for p in listed["logDirs"][0]["partitions"]}
        assert set(partitions) == {f"{name}-0", f"{name}-1"}, (label, out)
        results[label] = (log_dir["log_dir"], sizes)
    kafka = need_kafka(kafka)
    # Batches are stored as produced: both count the same bytes for the same record.
    assert results["streamgate"][1] == results["kafka"][1]


def test_alter_replica_log_dirs(shared_gateway, kafka):
    from kafka import TopicPartitionReplica

    codes = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("move-dir")
        create_topic(bootstrap, name, 1)
        client = kp_admin(bootstrap)
        try:
            (broker,) = client.describe_log_dirs({name: [0]})
            here = broker["log_dirs"][0]["log_dir"]
            result = client.alter_replica_log_dirs(
                {
                    TopicPartitionReplica(name, 0, NODE): here,
                    TopicPartitionReplica(name + "-none", 0, NODE): here,
                }
            )
            elsewhere = client.alter_replica_log_dirs(
                {TopicPartitionReplica(name, 0, NODE): "/nonexistent/dir"}
            )
        finally:
            client.close()
        codes[label] = (
            result[TopicPartitionReplica(name, 0, NODE)].errno,
            result[TopicPartitionReplica(name + "-none", 0, NODE)].errno,
            elsewhere[TopicPartitionReplica(name, 0, NODE)].errno,
        )
    assert codes["streamgate"] == (0, UNKNOWN_TOPIC_OR_PARTITION, LOG_DIR_NOT_FOUND)
    need_kafka(kafka)
    assert codes["streamgate"] == codes["kafka"]


def test_elect_leaders(shared_gateway, kafka):
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as CTopicPartition

    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("elect")
        create_topic(bootstrap, name, 2)
        admin = confluent_admin(bootstrap)
        future = admin.elect_leaders(
            ElectionType.PREFERRED, [CTopicPartition(name, 0), CTopicPartition(name + "-no", 0)]
        )
        result = future.result(TIMEOUT)
        confluent_codes = {tp.topic: (e.code() if e else 0) for tp, e in result.items()}
        client = kp_admin(bootstrap)
        try:
            response = client.elect_leaders(1, {name: [1]}, raise_errors=False)  # unclean
            everything = client.elect_leaders(0, None, raise_errors=False)
        finally:
            client.close()
        kp_codes = [
            p.error_code for r in response.replica_election_results for p in r.partition_result
        ]
        code, out = tool(
            "kafka-leader-election.sh",
            "--bootstrap-server",
            bootstrap,
            "--election-type",
            "preferred",
            "--topic",
            name,
            "--partition",
            "0",
        )
        seen[label] = (
            confluent_codes[name],
            confluent_codes[name + "-no"],
            kp_codes,
            {p.error_code for r in everything.replica_election_results for p in r.partition_result},
            "Valid replica already elected for partitions" in out,
        )
    assert seen["streamgate"] == (
        ELECTION_NOT_NEEDED,
        UNKNOWN_TOPIC_OR_PARTITION,
        [ELECTION_NOT_NEEDED],
        {ELECTION_NOT_NEEDED},
        True,
    )
    need_kafka(kafka)
    assert seen["streamgate"] == seen["kafka"]


def test_partition_reassignments(shared_gateway, kafka, tmp_path: Path):
    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("reassign")
        create_topic(bootstrap, name, 2)
        client = kp_admin(bootstrap)
        try:
            result = client.alter_partition_reassignments(
                {
                    TopicPartition(name, 0): [NODE],  # where it already is
                    TopicPartition(name, 1): [NODE, 2],  # a broker that does not exist
                    TopicPartition(name + "-no", 0): [NODE],
                }
            )
            cancel = client.alter_partition_reassignments({TopicPartition(name, 0): None})
            listed = client.list_partition_reassignments()
        finally:
            client.close()
        plan = tmp_path / f"{label}.json"
        plan.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [
                        {"topic": name, "partition": 1, "replicas": [2], "log_dirs": ["any"]}
                    ],
                }
            )
        )
        code, out = tool(
            "kafka-reassign-partitions.sh",
            "--bootstrap-server",
            bootstrap,
            "--execute",
            "--reassignment-json-file",
            str(plan),
        )
        code_list, out_list = tool(
            "kafka-reassign-partitions.sh", "--bootstrap-server", bootstrap, "--list"
        )
        seen[label] = (
            {
                tp.partition if tp.topic == name else -1: (e.errno if e else 0)
                for tp, e in result.items()
            },
            {tp.partition: (e.errno if e else 0) for tp, e in cancel.items()},
            listed,
            code != 0 and "2" in out,
            code_list == 0 and "No partition reassignments found" in out_list,
        )
    assert seen["streamgate"] == (
        {0: 0, 1: INVALID_REPLICA_ASSIGNMENT, -1: UNKNOWN_TOPIC_OR_PARTITION},
        {0: NO_REASSIGNMENT_IN_PROGRESS},
        {},
        True,
        True,
    )
    need_kafka(kafka)
    assert seen["streamgate"] == seen["kafka"]


def test_replica_assignments_naming_unknown_brokers(shared_gateway, kafka):
    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        client = confluent_admin(bootstrap)
        name = unique_topic("assign")
        # confluent-kafka's NewTopic refuses replica_assignment: kafka-python creates them.
        kp = kp_admin(bootstrap)
        try:
            bad = kp.create_topics(
                [KpNewTopic(name, -1, -1, replica_assignments={0: [NODE, 2]})], raise_errors=False
            )
            kp.create_topics([KpNewTopic(name, -1, -1, replica_assignments={0: [NODE], 1: [NODE]})])
        finally:
            kp.close()
        (bad_topic,) = bad["topics"]
        wait_for_leaders(bootstrap, name, 2)
        grow = client.create_partitions([NewPartitions(name, 3, replica_assignment=[[3]])])
        with pytest.raises(KafkaException) as grow_refused:
            grow[name].result(TIMEOUT)
        code, out = tool(
            "kafka-topics.sh",
            "--bootstrap-server",
            bootstrap,
            "--create",
            "--topic",
            name + "-tool",
            "--replica-assignment",
            "1:2",
        )
        seen[label] = (
            bad_topic["error_code"],
            grow_refused.value.args[0].code(),
            code != 0 and "InvalidReplicaAssignmentException" in out,
        )
    assert seen["streamgate"] == (INVALID_REPLICA_ASSIGNMENT, INVALID_REPLICA_ASSIGNMENT, True)
    need_kafka(kafka)
    assert seen["streamgate"] == seen["kafka"]


def test_describe_cluster_and_broker_configs(shared_gateway, kafka):
    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        admin = confluent_admin(bootstrap)
        cluster = admin.describe_cluster().result(TIMEOUT)
        assert [n.id for n in cluster.nodes] == [NODE] and cluster.controller.id == NODE
        resource = ConfigResource(ResourceType.BROKER, str(NODE))
        (future,) = admin.describe_configs([resource]).values()
        configs = future.result(TIMEOUT)
        out = configs_described(bootstrap, "brokers", str(NODE), "--all")
        seen[label] = (configs, out)
    ours, out = seen["streamgate"]
    for name in (
        "log.dirs",
        "message.max.bytes",
        "num.partitions",
        "log.retention.ms",
        "log.cleanup.policy",
        "compression.type",
        "log.flush.interval.messages",
    ):
        assert name in ours, name
        assert f"{name}=" in out, (name, out)
    assert ours["log.dirs"].source == ours["message.max.bytes"].source  # STATIC_BROKER_CONFIG
    kafka = need_kafka(kafka)
    theirs, _ = seen["kafka"]
    # The broker-level defaults of every topic config Kafka describes, with equal values
    # where streamgate keeps Kafka's default.
    for name in (
        "log.cleanup.policy",
        "compression.type",
        "log.segment.bytes",
        "log.flush.interval.messages",
        "log.cleaner.delete.retention.ms",
        "log.segment.delete.delay.ms",
        "log.index.interval.bytes",
        "log.message.timestamp.type",
        "min.insync.replicas",
    ):
        assert ours[name].value == theirs[name].value, name


# --------------------------------------------------------------------------- topic configs


def test_every_kafka_topic_config_confluent(shared_gateway, kafka):
    """Created with every Kafka 3.5 topic config set, described back with source 1."""
    described = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("all-configs")
        create_topic(bootstrap, name, 1, **KAFKA_35_TOPIC_CONFIGS)
        admin = confluent_admin(bootstrap)
        (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)]).values()
        described[label] = {k: (v.value, v.source) for k, v in future.result(TIMEOUT).items()}
    ours = described["streamgate"]
    for key, value in KAFKA_35_TOPIC_CONFIGS.items():
        assert ours[key] == (value, 1), key
    later = unique_topic("later-configs")
    create_topic(shared_gateway.bootstrap, later, 1, **LATER_TOPIC_CONFIGS)
    kafka = need_kafka(kafka)
    theirs = described["kafka"]
    assert set(theirs) <= set(ours), set(theirs) - set(ours)
    for key in KAFKA_35_TOPIC_CONFIGS:
        assert ours[key] == theirs[key], key


def kp_topic_configs(client: KafkaAdminClient, name: str) -> dict[str, str]:
    """A topic's described config values, through kafka-python."""
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    described = client.describe_configs([KpResource(ConfigResourceType.TOPIC, name)])
    return {k: v["value"] for k, v in described["topic"][name].items()}


def test_every_kafka_topic_config_kafka_python_and_tools(shared_gateway, kafka):
    """Set one by one with kafka-python's IncrementalAlterConfigs and kafka-configs.sh."""
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("kp-configs")
        create_topic(bootstrap, name, 1)
        client = kp_admin(bootstrap)
        try:
            refused_client_side = set()
            for key, value in KAFKA_35_TOPIC_CONFIGS.items():
                resource = KpResource(ConfigResourceType.TOPIC, name, {key: value})
                try:
                    assert client.alter_configs([resource]) == {"topic": {name: "OK"}}, key
                except ValueError:  # kafka-python: the broker does not describe it as dynamic
                    refused_client_side.add(key)
            expected = {
                k: v for k, v in KAFKA_35_TOPIC_CONFIGS.items() if k not in refused_client_side
            }
            # Kafka's brokers apply an altered config once the controller's metadata record
            # reaches them, so its describe may briefly lag the last alter.
            values = kp_topic_configs(client, name)
            deadline = time.monotonic() + TIMEOUT
            while values != expected and time.monotonic() < deadline:
                time.sleep(0.2)
                values = kp_topic_configs(client, name)
        finally:
            client.close()
        assert values == expected, (label, values)
        if label == "streamgate":
            assert not refused_client_side
        code, out = tool(
            "kafka-configs.sh",
            "--bootstrap-server",
            bootstrap,
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            name,
            "--add-config",
            "flush.ms=5000,file.delete.delay.ms=2000,compression.type=zstd",
            "--delete-config",
            "preallocate",
        )
        assert code == 0, out
        deadline = time.monotonic() + TIMEOUT
        while True:
            out = configs_described(bootstrap, "topics", name)
            described = dict(re.findall(r"(\S+)=(\S+) sensitive", out))
            settled = described.get("flush.ms") == "5000" and "preallocate" not in described
            if settled or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        seen[label] = (described, refused_client_side)
    ours, _ = seen["streamgate"]
    assert ours["flush.ms"] == "5000" and ours["compression.type"] == "zstd"
    assert "preallocate" not in ours
    need_kafka(kafka)
    # kafka-python could not set some configs on Kafka 3.5 (local.retention.*, ...: Kafka
    # describes them read-only there); every config both accepted reads back the same.
    theirs, not_on_kafka = seen["kafka"]
    assert {k: v for k, v in ours.items() if k not in not_on_kafka} == theirs


def stored_codecs(bootstrap: str, name: str) -> list[int]:
    """The codec of every stored batch of partition 0 (attributes' low 3 bits)."""
    from support.client import fetch_request

    response = raw(bootstrap, fetch_request(name, 0, 0))
    blob = bytes(response.responses[0].partitions[0].records or b"")
    codecs, pos = [], 0
    while pos + 61 <= len(blob):
        length = int.from_bytes(blob[pos + 8 : pos + 12], "big")
        codecs.append(int.from_bytes(blob[pos + 21 : pos + 23], "big") & 7)
        pos += 12 + length
    return codecs


@pytest.mark.parametrize(
    ("topic_codec", "producer_codec", "stored"),
    [
        ("gzip", "lz4", 1),
        ("uncompressed", "zstd", 0),
        ("producer", "snappy", 2),
        ("zstd", "none", 4),
    ],
)
def test_compression_type_recompresses(shared_gateway, kafka, topic_codec, producer_codec, stored):
    """The topic's codec wins unless it is `producer`; an idempotent producer's batches
    stay deduplicated and in order; every client reads them back."""
    from kafka import KafkaConsumer

    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("codec")
        create_topic(bootstrap, name, 1, **{"compression.type": topic_codec})
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "compression.type": producer_codec,
                "linger.ms": 20,
            }
        )
        for i in range(50):
            producer.produce(name, f"value-{i}".encode() * 10, key=b"k", partition=0)
        producer.flush(TIMEOUT)
        codecs = stored_codecs(bootstrap, name)
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=5000,
            enable_auto_commit=False,
        )
        consumer.assign([TopicPartition(name, 0)])
        values = [m.value for m in consumer]
        consumer.close()
        assert values == [f"value-{i}".encode() * 10 for i in range(50)], label
        seen[label] = set(codecs)
    assert seen["streamgate"] == {stored}
    need_kafka(kafka)
    assert seen["streamgate"] == seen["kafka"]


def test_compact_topic_refuses_keyless_records(shared_gateway, kafka):
    """KIP-467: INVALID_RECORD with record_errors naming the keyless records' indexes."""
    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("compact")
        create_topic(bootstrap, name, 1, **{"cleanup.policy": "compact"})
        batch = build_record_batch(
            [Rec(b"a", b"k1"), Rec(b"b", None), Rec(b"c", b"k2"), Rec(b"d", None)]
        )
        response = raw(bootstrap, produce_request(name, 0, batch))
        part = response.responses[0].partition_responses[0]
        keyed = raw(bootstrap, produce_request(name, 0, build_record_batch([Rec(b"e", b"k")])))
        seen[label] = (
            part.error_code,
            [e.batch_index for e in part.record_errors],
            keyed.responses[0].partition_responses[0].error_code,
            keyed.responses[0].partition_responses[0].base_offset,
        )
        assert part.error_message, label
        assert all("without key" in e.batch_index_error_message for e in part.record_errors)
        errors: list = []
        producer = Producer({"bootstrap.servers": bootstrap, "retries": 0})
        producer.produce(
            name, b"no key", partition=0, on_delivery=lambda e, m, errors=errors: errors.append(e)
        )
        producer.flush(TIMEOUT)
        assert [e.code() for e in errors] == [INVALID_RECORD], (label, errors)
    assert seen["streamgate"] == (INVALID_RECORD, [1, 3], 0, 0)
    need_kafka(kafka)
    assert seen["streamgate"] == seen["kafka"]


def test_log_append_time(shared_gateway, kafka):
    from kafka import KafkaConsumer

    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("append-time")
        create_topic(bootstrap, name, 1, **{"message.timestamp.type": "LogAppendTime"})
        before = int(time.time() * 1000)
        batch = build_record_batch([Rec(b"old", b"k")], base_timestamp=1_000)
        response = raw(bootstrap, produce_request(name, 0, batch))
        part = response.responses[0].partition_responses[0]
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000
        )
        consumer.assign([TopicPartition(name, 0)])
        (message,) = list(consumer)
        consumer.close()
        append_ms = int(part.log_append_time.timestamp() * 1000)
        assert part.error_code == 0 and append_ms >= before - 1000, label
        seen[label] = (message.timestamp_type, message.timestamp == append_ms)
    assert seen["streamgate"] == (1, True)
    need_kafka(kafka)
    assert seen["streamgate"] == seen["kafka"]


def test_unknown_config_names_only_are_invalid(shared_gateway, kafka):
    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        client = confluent_admin(bootstrap)
        codes = []
        for configs in (
            {"no.such.config": "1"},
            {"compression.type": "brotli"},
            {"message.format.version": "2.8"},
        ):
            name = unique_topic("invalid")
            future = client.create_topics([NewTopic(name, 1, 1, config=configs)])[name]
            try:
                future.result(TIMEOUT)
                codes.append(0)
            except KafkaException as exc:
                codes.append(exc.args[0].code())
        seen[label] = codes
    assert seen["streamgate"] == [INVALID_CONFIG, INVALID_CONFIG, 0]
    need_kafka(kafka)
    assert seen["streamgate"] == seen["kafka"]


def test_acls_answer_security_disabled(shared_gateway, kafka):
    """No authorizer, like Kafka without one: SECURITY_DISABLED, not a closed connection."""
    from kio.schema.describe_acls.v3.request import DescribeAclsRequest
    from kio.static.primitive import i8

    security_disabled = 54
    any_ = i8(1)
    request = DescribeAclsRequest(
        resource_type_filter=any_,
        resource_name_filter=None,
        pattern_type_filter=any_,
        principal_filter=None,
        host_filter=None,
        operation=any_,
        permission_type=any_,
    )
    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        response = raw(bootstrap, request)
        assert response.error_message, label
        admin = confluent_admin(bootstrap)
        listed = admin.describe_acls(any_acl_filter()).result(TIMEOUT)  # librdkafka: empty
        code, out = tool("kafka-acls.sh", "--bootstrap-server", bootstrap, "--list")
        seen[label] = (response.error_code, listed, "SecurityDisabledException" in out)
    assert seen["streamgate"] == (security_disabled, [], True)
    need_kafka(kafka)
    assert seen["streamgate"] == seen["kafka"]


def test_metadata_and_delete_topics_by_id(shared_gateway, kafka):
    """Metadata v12 and DeleteTopics v6 name topics by id; unknown ids get UNKNOWN_TOPIC_ID."""
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from support.client import metadata_request

    def by_id(*ids: uuid.UUID) -> MetadataRequest:
        return MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=i, name=None) for i in ids),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )

    seen = {}
    for label, bootstrap in both(shared_gateway, kafka).items():
        name = unique_topic("by-id")
        create_topic(bootstrap, name, 2)
        (topic,) = raw(bootstrap, metadata_request([name])).topics
        stranger = uuid.uuid4()
        known, unknown = raw(bootstrap, by_id(topic.topic_id, stranger)).topics
        deleted = raw(
            bootstrap,
            DeleteTopicsRequest(
                topics=(
                    DeleteTopicState(topic_id=topic.topic_id),
                    DeleteTopicState(topic_id=stranger),
                ),
                timeout=ms(30_000),
            ),
        ).responses
        results = {r.topic_id: (r.name, r.error_code) for r in deleted}
        seen[label] = (
            (known.name, known.error_code, len(known.partitions)),
            (unknown.name, unknown.error_code),
            results[topic.topic_id],
            results[stranger][1],
        )
        seen[label + "-name"] = name
    name = seen.pop("streamgate-name")
    assert seen["streamgate"] == (
        (name, 0, 2),
        (None, UNKNOWN_TOPIC_ID),
        (name, 0),
        UNKNOWN_TOPIC_ID,
    )
    kafka = need_kafka(kafka)
    kafka_name = seen.pop("kafka-name")
    # Kafka 3.5 does not implement Metadata lookups by id (it answers UNKNOWN_TOPIC_ID);
    # streamgate resolves known ids. DeleteTopics by id agrees.
    assert seen["kafka"][2:] == ((kafka_name, 0), UNKNOWN_TOPIC_ID)
    assert seen["kafka"][0][1] == UNKNOWN_TOPIC_ID or seen["kafka"][1][1] == UNKNOWN_TOPIC_ID
