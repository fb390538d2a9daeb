"""`streamgate serve --nodes auto`: one node per usable core under the supervisor, and the
cluster serves a produce and a consume with confluent-kafka across its nodes."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from support.crash import read_from_start
from support.nodes import requires_postgres

from cli.serve import usable_cores
from harness.nodes_cluster import NodesCluster

pytestmark = requires_postgres


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodesCluster]:
    nodes = NodesCluster(tmp_path_factory.mktemp("auto"), usable_cores(), nodes_flag="auto")
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.close()


def test_auto_starts_one_node_per_core_and_serves(cluster: NodesCluster) -> None:
    log = cluster.log_since_start().decode(errors="replace")
    started = {int(n) for n in re.findall(r"node (\d+): started \(pid", log)}
    assert started == set(range(1, usable_cores() + 1)), log

    topic = f"auto-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    values = [f"v{i}" for i in range(200)]
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % cluster.default_partitions)
    assert producer.flush(30) == 0

    stored = read_from_start(cluster.bootstrap, topic, cluster.default_partitions)
    assert sorted(v for records in stored.values() for _offset, v in records) == sorted(values)
