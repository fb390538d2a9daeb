"""`serve --nodes 3`: a node whose disk is lost (its data dir removed, then SIGKILL) comes
back, restarted by the supervisor, reports the lost offsets of the partition it leads and
serves it from past them; the partitions of the other nodes lose nothing."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.client import wait_until
from support.nodes import requires_postgres

from harness.nodes_cluster import NodesCluster

pytestmark = requires_postgres
PARTITIONS = 3
RECORDS = 3000


@pytest.fixture
def cluster(tmp_path) -> Iterator[NodesCluster]:
    nodes = NodesCluster(tmp_path, 3, ["--node-lease-s", "1"])
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.close()


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: m.leader for p, m in meta.topics[topic].partitions.items()}


def _watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wal-loss-probe"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def test_node_with_a_lost_disk_serves_its_partition_past_the_lost_offsets(
    cluster: NodesCluster,
) -> None:
    topic = "lost-disk"
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(10)
    leaders: dict[int, int] = {}

    def placed() -> bool:
        leaders.update(_leaders(bootstrap, topic))
        return set(leaders.values()) == {1, 2, 3}

    wait_until(placed, 30)
    lost_partition = next(p for p, node in leaders.items() if node == 1)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in range(RECORDS):
        producer.produce(topic, value=str(n), partition=n % PARTITIONS)
        if n % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    before = _watermarks(bootstrap, topic)
    assert all(high == RECORDS // PARTITIONS for _low, high in before.values())

    shutil.rmtree(cluster.data_dir / "node-1")  # the disk dies, then the machine
    old_pid = cluster.kill_node(1)
    cluster.wait_restarted(1, old_pid)

    lost = re.findall(
        rf"node 1 \| .*ERROR.*topic {topic} partition (\d+): lost offsets \[(\d+), (\d+)\)",
        cluster.log_text(),
    )
    assert len(lost) == 1, cluster.log_tail()
    partition, first_lost, new_start = map(int, lost[0])
    assert partition == lost_partition and first_lost < RECORDS // PARTITIONS <= new_start

    expected = dict(before)
    expected[lost_partition] = (new_start, new_start)  # the others lost nothing
    seen: list[dict[int, tuple[int, int]]] = []

    def served() -> bool:
        try:
            seen.append(_watermarks(bootstrap, topic))
        except Exception:  # noqa: BLE001 - the node is not the leader in every view yet
            return False
        return seen[-1] == expected

    try:
        wait_until(served, 30)
    except TimeoutError:
        pytest.fail(f"watermarks {seen[-1:]}, expected {expected}")

    delivered: list[int] = []
    producer.produce(
        topic,
        value="after",
        partition=lost_partition,
        on_delivery=lambda err, msg: delivered.append(-1 if err else msg.offset()),
    )
    assert producer.flush(30) == 0
    assert delivered == [new_start]
