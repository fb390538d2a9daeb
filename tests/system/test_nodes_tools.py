"""Kafka's Java console tools (3.5.1) and kafka-python against a 3-node cluster started the
user's way, `streamgate serve --nodes 3`: kafka-topics.sh --create / --describe (leaders
listed) / --delete, kafka-console-producer.sh and kafka-console-consumer.sh with a group,
each bootstrapped on a node that does not lead the topic, kafka-consumer-groups.sh
--describe, then a kafka-python producer and group consumer on the same cluster."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from support.client import wait_until
from support.nodes import requires_postgres

from harness.kafka import run_tool, unavailable_reason
from harness.nodes_cluster import NodesCluster

pytestmark = [
    requires_postgres,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]
TOPIC = "java-tools"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodesCluster]:
    nodes = NodesCluster(tmp_path_factory.mktemp("tools"), 3)
    nodes.start()
    try:
        b1 = nodes.bootstraps[0]
        wait_until(lambda: len(_brokers(b1)) == 3, 15)
        yield nodes
    finally:
        nodes.close()


def _brokers(bootstrap: str) -> list[int]:
    return sorted(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def _tool(tool: str, args: list[str], **kw: object) -> str:
    out = run_tool(tool, args, **kw)  # type: ignore[arg-type]
    assert out.returncode == 0, f"{tool} {args}: {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def _leaders(bootstrap: str) -> list[int]:
    text = _tool(
        "kafka-topics.sh", ["--bootstrap-server", bootstrap, "--describe", "--topic", TOPIC]
    )
    return [int(n) for n in re.findall(r"Leader: (\d+)", text)]


def test_java_tools_and_kafka_python_across_three_nodes(cluster: NodesCluster) -> None:
    b1, b2, b3 = cluster.bootstraps
    _tool(
        "kafka-topics.sh",
        ["--bootstrap-server", b2, "--create", "--topic", TOPIC, "--partitions", "3"],
    )
    # described through node 1: least-loaded placement gives each node one partition
    wait_until(lambda: sorted(_leaders(b1)) == [1, 2, 3], 20, interval=0.5)

    # the console producer starts on node 1 and finds the leader
    lines = "".join(f"k{n % 5}:v{n}\n" for n in range(30))
    _tool(
        "kafka-console-producer.sh",
        ["--bootstrap-server", b1, "--topic", TOPIC, "--producer-property", "acks=all"]
        + ["--property", "parse.key=true", "--property", "key.separator=:"],
        input=lines,
    )
    # the console consumer in a group, bootstrapped on node 3
    consumed = _tool(
        "kafka-console-consumer.sh",
        ["--bootstrap-server", b3, "--topic", TOPIC, "--group", "java-group"]
        + ["--from-beginning", "--max-messages", "30", "--timeout-ms", "60000"]
        + ["--property", "print.key=true", "--property", "key.separator=:"],
    )
    got = [line for line in consumed.splitlines() if line.startswith("k")]
    assert sorted(got) == sorted(line for line in lines.splitlines())
    for key in {line.split(":")[0] for line in got}:  # per-key order kept
        numbers = [int(line.split(":v")[1]) for line in got if line.startswith(key + ":")]
        assert numbers == sorted(numbers), key

    # the group's committed offsets, described through node 1
    described = _tool(
        "kafka-consumer-groups.sh",
        ["--bootstrap-server", b1, "--describe", "--group", "java-group"],
    )
    rows = [line.split() for line in described.splitlines() if line.startswith("java-group")]
    assert len(rows) == 3, described
    assert sum(int(row[3]) for row in rows) == 30, described  # CURRENT-OFFSET
    assert all(row[5] == "0" for row in rows), described  # LAG

    # kafka-python on the same cluster: produce through node 3, a group bootstrapped on node 1
    producer = KafkaProducer(bootstrap_servers=b3, acks="all")
    for n in range(20):
        producer.send(TOPIC, key=b"py", value=f"py{n}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=b1,
        group_id="python-group",
        auto_offset_reset="earliest",
        consumer_timeout_ms=8000,
    )
    values = []
    deadline = time.monotonic() + 60
    while len(values) < 50 and time.monotonic() < deadline:
        values += [m.value.decode() for m in consumer]
    consumer.commit()
    consumer.close()
    assert sorted(values) == sorted([f"v{n}" for n in range(30)] + [f"py{n}" for n in range(20)])
    py = [v for v in values if v.startswith("py")]
    assert py == [f"py{n}" for n in range(20)]  # one key: one partition, in order

    # deleted through node 3; node 1 and node 2 no longer list it
    _tool("kafka-topics.sh", ["--bootstrap-server", b3, "--delete", "--topic", TOPIC])

    def listed(bootstrap: str) -> list[str]:
        return _tool("kafka-topics.sh", ["--bootstrap-server", bootstrap, "--list"]).split()

    for bootstrap in (b1, b2):

        def gone(b: str = bootstrap) -> bool:
            return TOPIC not in listed(b)

        wait_until(gone, 20, interval=0.5)
