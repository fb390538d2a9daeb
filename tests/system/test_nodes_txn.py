"""Transactions on `serve --nodes 3 --wal object`: one node coordinates a transactional id (a
hash over the live nodes, as for groups) and the partitions' leaders are others; markers
reach them through the metadata store. A transaction commits or aborts across the nodes;
when the coordinator freezes in the middle of transactions, another node takes the ids
over: a producer that lives on commits there, and a transaction whose producer died too
is aborted there when its timeout passes. read_committed sees all of a committed transaction,
nothing of an aborted one, and the partitions never stay blocked behind one. (Also: a group
config set through one node reaches the others.)"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.error
import urllib.request
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from support.client import RawClient, wait_until
from support.nodes import requires_postgres

from harness.nodes_cluster import NodesCluster, consecutive_free_ports

pytestmark = requires_postgres
PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodesCluster]:
    nodes = NodesCluster(
        Path(tmp_path_factory.mktemp("txn-nodes")),
        3,
        ["--node-lease-s", "1", "--wal", "object", "--wal-flush-ms", "5"],
    )
    admin_port = consecutive_free_ports(3)  # node i's admin listener: admin_port + i - 1
    while abs(admin_port - nodes.base_port) < 3:  # not the Kafka listeners' ports
        admin_port = consecutive_free_ports(3) + 3
    nodes.extra_args += ("--metrics-listen", f"127.0.0.1:{admin_port}")
    nodes.admin_port = admin_port  # type: ignore[attr-defined]
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.close()


def _id_on(node: int, prefix: str) -> str:
    """A transactional id that node `node` of the three coordinates."""
    for n in range(10_000):
        tid = f"{prefix}-{n}"
        if [1, 2, 3][zlib.crc32(tid.encode()) % 3] == node:
            return tid
    raise AssertionError("no id found")


def _topic(cluster: NodesCluster) -> str:
    topic = f"ntx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(30)

    def leaders(bootstrap: str) -> list[int]:
        """One node's own answer: each node learns a topic created elsewhere at its sync
        (not yet: UNKNOWN_TOPIC_OR_PARTITION, then LEADER_NOT_AVAILABLE, no partitions)."""
        with RawClient(bootstrap) as client:
            answer = client.request(
                MetadataRequest(
                    topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            ).topics[0]
        return sorted(p.leader_id for p in answer.partitions)

    for bootstrap in cluster.bootstraps:
        wait_until(lambda: leaders(bootstrap) == [1, 2, 3], 30)  # noqa: B023
    return topic


def _producer(cluster: NodesCluster, tid: str, **extra: object) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": tid,
            "transaction.timeout.ms": 60000,
            "reconnect.backoff.max.ms": 200,
            **extra,
        }
    )
    producer.init_transactions(60)
    return producer


def _read_committed(cluster: NodesCluster, topic: str, want: int, timeout: float) -> list[bytes]:
    """Every record read_committed returns, until `want` of them or `timeout`."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"r-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    return values


def _send(producer: Producer, topic: str, tag: str, count: int = 30) -> list[bytes]:
    values = [f"{tag}-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return values


def test_commit_and_abort_across_the_nodes(cluster: NodesCluster) -> None:
    topic = _topic(cluster)
    producer = _producer(cluster, _id_on(1, "across"))
    producer.begin_transaction()
    committed = _send(producer, topic, "committed")
    producer.commit_transaction(30)
    producer.begin_transaction()
    _send(producer, topic, "aborted")
    producer.abort_transaction(30)
    producer.begin_transaction()
    after = _send(producer, topic, "after")
    producer.commit_transaction(30)
    read = _read_committed(cluster, topic, 60, 30)
    assert sorted(read) == sorted(committed + after)


def test_a_late_write_to_another_nodes_partition_is_refused(cluster: NodesCluster) -> None:
    """KIP-890 part 1 across nodes: one node coordinates the id, another leads the
    partition and checks a transaction's first write there against the committed record."""
    from system.test_txn_protocol import _add, _end, _init, _txn_batch
    from system.test_txn_verification import _offset, _produce

    topic = _topic(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    described = admin.list_topics(topic, timeout=10)
    brokers = {b.id: f"{b.host}:{b.port}" for b in described.brokers.values()}

    def metadata_leader(client: RawClient, part: int) -> int:  # no auto-creation
        answer = client.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        ).topics[0]
        return next((p.leader_id for p in answer.partitions if p.partition_index == part), -1)

    # A partition whose leader takes the transaction's first write (a node learns of a new
    # topic, then of its segments, at its next syncs: UNKNOWN_TOPIC_OR_PARTITION and
    # NOT_LEADER_OR_FOLLOWER until then).
    codes: dict[int, int] = {}
    for part, node in sorted((p, m.leader) for p, m in described.topics[topic].partitions.items()):
        other = 1 if node != 1 else 2  # node `other` coordinates the id, node `node` leads
        tid = _id_on(other, f"late{part}")
        coordinator, leader = RawClient(brokers[other]), RawClient(brokers[node])
        pid = _init(coordinator, tid).producer_id

        def added() -> list | None:
            added = _add(coordinator, tid, pid, 0, topic, part)  # noqa: B023
            return None if added == [3] else added

        assert wait_until(added, 15) == [0]
        wait_until(lambda: metadata_leader(leader, part) == node, 15)  # noqa: B023
        first = _txn_batch(pid, 0, 0, [b"a"])
        deadline = time.monotonic() + 8
        while (code := _produce(leader, 11, tid, topic, part, first).error_code) == 6:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if code == 0:
            break
        codes[part] = code
        coordinator.close()
        leader.close()
    else:
        raise AssertionError(f"no leader took its partition: {codes}")
    with coordinator, leader:
        assert _produce(leader, 11, tid, topic, part, _txn_batch(pid, 0, 1, [b"b"])).error_code == 0
        assert _end(coordinator, tid, pid, 0, commit=False) == 0
        wait_until(lambda: _offset(leader, topic, part, -1, isolation=1) == 3, 15)

        late = _txn_batch(pid, 0, 2, [b"late"])
        assert _produce(leader, 11, tid, topic, part, late).error_code == 120  # abortable
        assert _produce(leader, 9, tid, topic, part, late).error_code == 48  # INVALID_TXN_STATE
        assert (
            _produce(leader, 11, tid, topic, part, _txn_batch(pid, 1, 0, [b"x"])).error_code == 47
        )
        assert _offset(leader, topic, part, -1) == 3
        assert _offset(leader, topic, part, -1, isolation=1) == 3  # nothing left open

        assert _add(coordinator, tid, pid, 0, topic, part) == [0]
        again = _txn_batch(pid, 0, 2, [b"c"])
        assert _produce(leader, 12, tid, topic, part, again).error_code == 0
        assert _offset(leader, topic, part, -1, isolation=1) == 3
        assert _end(coordinator, tid, pid, 0, commit=True) == 0
        wait_until(lambda: _offset(leader, topic, part, -1, isolation=1) == 5, 15)

        # Transactions v2 is not finalized on several nodes: a v12 write outside the
        # transaction is refused as in v1, not added to it.
        from kio.schema.api_versions.v4.request import ApiVersionsRequest

        v2_write = _txn_batch(pid, 0, 3, [b"v2"])
        assert _produce(leader, 12, tid, topic, part, v2_write).error_code == 120
        versions = leader.request(
            ApiVersionsRequest(client_software_name="tests", client_software_version="1")
        )
        assert "transaction.version" in {f.name for f in versions.supported_features}
        assert "transaction.version" not in {f.name for f in versions.finalized_features}


def test_a_group_config_set_through_one_node_reaches_the_others(cluster: NodesCluster) -> None:
    """Per-group configs live in the metadata store; every node reloads them each second."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    group = f"cfg-{uuid.uuid4().hex[:8]}"
    entry = ConfigEntry(
        "consumer.heartbeat.interval.ms", "7000", incremental_operation=AlterConfigOpType.SET
    )
    first = AdminClient({"bootstrap.servers": cluster.bootstraps[0]})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    first.incremental_alter_configs([resource])[resource].result(15)
    last = AdminClient({"bootstrap.servers": cluster.bootstraps[2]})

    def described() -> str:
        wanted = ConfigResource(ResourceType.GROUP, group)
        return last.describe_configs([wanted])[wanted].result(15)[entry.name].value

    wait_until(lambda: described() == "7000", 10)


def test_the_coordinator_is_lost_in_the_middle_of_transactions(cluster: NodesCluster) -> None:
    topic = _topic(cluster)
    # one producer lives on and commits on the next coordinator (it gives up on a silent
    # broker after 3 s, not the default 60)...
    survivor = _producer(cluster, _id_on(1, "lives"), **{"socket.timeout.ms": 3000})
    # ...the other is never heard of again: its transaction times out there
    orphan = _producer(cluster, _id_on(1, "dies"), **{"transaction.timeout.ms": 4000})
    survivor.begin_transaction()
    kept = _send(survivor, topic, "kept")
    orphan.begin_transaction()
    _send(orphan, topic, "orphaned")
    # node 1, their coordinator and a partition's leader, freezes (a stalled machine): it
    # neither answers nor restarts until resumed
    pid = cluster.node_pid(1)
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: b"took over segment" in cluster.log_since_start(), 30)
        survivor.commit_transaction(60)
        wait_until(
            lambda: re.search(rb"node [23] .*dies-\d+: timed out", cluster.log_since_start()), 30
        )
    finally:
        os.kill(pid, signal.SIGCONT)  # the zombie is fenced and restarts
    cluster.wait_restarted(1, pid)
    # the orphan's aborted transaction holds no partition: records after it show
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    later = [f"later-{i}".encode() for i in range(PARTITIONS)]
    for i, value in enumerate(later):
        plain.produce(topic, value, partition=i)
    assert plain.flush(30) == 0
    read = _read_committed(cluster, topic, len(kept) + len(later), 60)
    assert sorted(read) == sorted(kept + later)
    del orphan


def test_a_transaction_open_across_a_segment_move_aborts_whole(cluster: NodesCluster) -> None:
    topic = _topic(cluster)
    port = cluster.admin_port  # type: ignore[attr-defined]

    def describe() -> dict | None:  # once node 1 has synced the topic
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/streams/{topic}") as r:
                return dict(json.load(r))
        except urllib.error.HTTPError:
            return None

    described = wait_until(describe, 10)
    segment = next(
        s["segment_id"]
        for s in described["segments"]
        if s.get("node") == 1 and s["state"] == "open"
    )
    producer = _producer(cluster, _id_on(2, "moved"))
    producer.begin_transaction()
    _send(producer, topic, "aborted")
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/streams/{topic}/move",
        data=json.dumps({"segment": segment, "to_node": 3}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=90) as r:
        assert json.load(r)["to_node"] == 3
    producer.abort_transaction(30)
    producer.begin_transaction()
    after = _send(producer, topic, "after")
    producer.commit_transaction(30)
    read = _read_committed(cluster, topic, len(after), 30)
    assert sorted(read) == sorted(after)
