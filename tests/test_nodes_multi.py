"""Three active gateway nodes on one PostgreSQL database and one tier-2 folder
(`--multi-node true`): each topic is led by the node that created it, Metadata on any node
lists every live node and each topic's leader, clients find their way from any bootstrap
node, a request to a non-leader gets NOT_LEADER_OR_FOLLOWER, and groups are spread over the
nodes by FindCoordinator."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import (
    RawClient,
    Rec,
    build_record_batch,
    fetch_request,
    list_offsets_request,
    produce_request,
    wait_until,
)
from kafka import KafkaConsumer

from harness.gateway import Gateway
from tests.nodes_fixtures import gateway_args, pg_url, postgres, requires_postgres  # noqa: F401

pytestmark = requires_postgres
NOT_LEADER_OR_FOLLOWER = 6


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str):  # noqa: F811
    nodes = [
        Gateway(
            tmp_path / f"n{i}",
            tmp_path / f"n{i}.log",
            [*gateway_args(pg_url, i), "--multi-node", "true", "--tier2", str(tmp_path / "t2")],
        )
        for i in (1, 2, 3)
    ]
    try:
        for node in nodes:
            node.start_fresh()
        yield nodes
    finally:
        for node in nodes:
            node.close()


def _leaders(bootstrap: str, topic: str) -> tuple[set[int], set[int]]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = meta.topics[topic]
    return set(meta.brokers), {p.leader for p in t.partitions.values()} if not t.error else set()


def test_three_nodes_lead_their_topics_and_clients_follow(cluster: list[Gateway]) -> None:
    for i, node in enumerate(cluster, start=1):
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic(f"on{i}", num_partitions=3)])[f"on{i}"].result(10)
    # every node sees every live node and each topic's leader within a sync or two
    for node in cluster:
        for i in (1, 2, 3):
            wait_until(lambda n=node, i=i: _leaders(n.bootstrap, f"on{i}") == ({1, 2, 3}, {i}), 15)

    # one producer bootstrapped on node 1 only writes to topics led by all three
    producer = Producer(
        {"bootstrap.servers": cluster[0].bootstrap, "acks": "all", "enable.idempotence": True}
    )
    for n in range(600):
        producer.produce(f"on{n % 3 + 1}", key=f"k{n % 11}", value=f"v{n}")
    assert producer.flush(60) == 0

    # a request to a node that does not lead the topic: NOT_LEADER_OR_FOLLOWER
    with RawClient(cluster[1].bootstrap) as client:
        batch = build_record_batch([Rec(b"k", b"wrong node")])
        produced = client.request(produce_request("on1", 0, batch))
        assert produced.responses[0].partition_responses[0].error_code == NOT_LEADER_OR_FOLLOWER
        fetched = client.request(fetch_request("on1", 0, 0))
        assert fetched.responses[0].partitions[0].error_code == NOT_LEADER_OR_FOLLOWER
        listed = client.request(list_offsets_request("on1", 0, -1))
        assert listed.topics[0].partitions[0].error_code == NOT_LEADER_OR_FOLLOWER

    # consumers in groups, bootstrapped on node 3: every record once, per-key order kept
    consumer = Consumer(
        {
            "bootstrap.servers": cluster[2].bootstrap,
            "group.id": "multi-g1",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["on1", "on2", "on3"])
    got: list[tuple[str, str]] = []
    deadline = time.monotonic() + 60
    while len(got) < 600 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.key().decode(), msg.value().decode()))
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(v for _k, v in got) == sorted(f"v{n}" for n in range(600))
    for key in {k for k, _v in got}:
        numbers = [int(v[1:]) for k, v in got if k == key]
        by_topic: dict[int, list[int]] = {}
        for n in numbers:
            by_topic.setdefault(n % 3, []).append(n)
        assert all(ns == sorted(ns) for ns in by_topic.values()), key

    kc = KafkaConsumer(
        bootstrap_servers=cluster[1].bootstrap,
        group_id="multi-g2",
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    kc.subscribe(["on2"])
    assert len(list(kc)) == 200
    kc.close()
