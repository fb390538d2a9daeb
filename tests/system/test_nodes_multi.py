"""Three active gateway nodes on one PostgreSQL database and one tier-2 folder
(`--multi-node true`): each topic is led by the node that created it, Metadata on any node
lists every live node and each topic's leader, clients find their way from any bootstrap
node, a request to a non-leader gets NOT_LEADER_OR_FOLLOWER, and groups are spread over the
nodes by FindCoordinator."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from support.client import (
    RawClient,
    Rec,
    build_record_batch,
    fetch_request,
    list_offsets_request,
    produce_request,
    wait_until,
)
from support.crash import check_exactly_once, read_from_start
from support.nodes import gateway_args, pg_url, postgres, requires_postgres, running  # noqa: F401

from harness.gateway import Gateway

pytestmark = requires_postgres
NOT_LEADER_OR_FOLLOWER = 6
# these tests assume a topic is led by the node that created it (placement "creator";
# least-loaded placement is tested in tests/system/test_nodes_move.py)
CREATOR_PLACEMENT = {"STREAMGATE_PLACEMENT": "creator"}


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str):  # noqa: F811
    nodes = [
        Gateway(
            tmp_path / f"n{i}",
            tmp_path / f"n{i}.log",
            # the plain `serve --metadata postgresql://... --node-id N`: several active
            # nodes is the default with --metadata
            [*gateway_args(pg_url, i, multi_node=None), "--tier2", str(tmp_path / "t2")],
            env=CREATOR_PLACEMENT,
        )
        for i in (1, 2, 3)
    ]
    with running(nodes):
        yield nodes


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


def test_a_node_killed_under_load_loses_nothing_and_the_others_keep_serving(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    nodes = [
        Gateway(
            tmp_path / f"k{i}",
            tmp_path / f"k{i}.log",
            gateway_args(pg_url, i, lease_s=1.0, multi_node=True),
            env=CREATOR_PLACEMENT,
        )
        for i in (1, 2, 3)
    ]
    try:
        for node in nodes:
            node.start_fresh()
        for i, node in enumerate(nodes, start=1):
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            admin.create_topics([NewTopic(f"k{i}", num_partitions=4)])[f"k{i}"].result(10)
        for i in (1, 2):
            wait_until(lambda i=i: _leaders(nodes[0].bootstrap, f"k{i}")[1] == {i}, 15)

        acked: dict[str, dict[str, tuple[int, int]]] = {"k1": {}, "k2": {}}
        acked_at: dict[str, list[float]] = {"k1": [], "k2": []}
        lock = threading.Lock()

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                with lock:
                    acked[msg.topic()][msg.value().decode()] = (msg.partition(), msg.offset())
                    acked_at[msg.topic()].append(time.monotonic())

        producer = Producer(
            {
                "bootstrap.servers": nodes[0].bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 90000,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
            }
        )
        sent = 0

        def produce_for(seconds: float) -> None:
            nonlocal sent
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                for topic in ("k1", "k2"):
                    producer.produce(
                        topic, key=f"k{sent % 13}", value=f"{sent}", on_delivery=on_delivery
                    )
                    sent += 1
                producer.poll(0.005)

        produce_for(1.0)
        nodes[1].kill()  # node 2 leads k2
        killed = time.monotonic()
        produce_for(1.5)  # k2 waits (its leader is gone); k1 on node 1 goes on
        with lock:
            k1_during = [t for t in acked_at["k1"] if t > killed + 0.1]
        nodes[1].start()  # the same node id and data dir: k2 is served again
        produce_for(1.0)
        assert producer.flush(90) == 0
        assert k1_during, "node 1 stopped acknowledging while node 2 was down"
        for topic in ("k1", "k2"):
            assert len(acked[topic]) > 100, topic
            stored = read_from_start(nodes[0].bootstrap, topic, 4)
            check_exactly_once(stored, acked[topic])
    finally:
        for node in nodes:
            node.close()


def test_a_group_moves_to_another_coordinator_with_its_committed_offsets(
    cluster: list[Gateway],
) -> None:
    import zlib

    # a group that node 3 coordinates among nodes 1-3, reading a topic that node 1 leads
    group = next(g for g in (f"move-{n}" for n in range(1000)) if zlib.crc32(g.encode()) % 3 == 2)
    admin = AdminClient({"bootstrap.servers": cluster[0].bootstrap})
    admin.create_topics([NewTopic("moving", num_partitions=2)])["moving"].result(10)
    for node in cluster:  # every node sees all three before the group starts
        wait_until(lambda n=node: _leaders(n.bootstrap, "moving") == ({1, 2, 3}, {1}), 15)
    producer = Producer({"bootstrap.servers": cluster[0].bootstrap, "acks": "all"})
    for n in range(100):
        producer.produce("moving", value=f"m{n}", partition=n % 2)
    assert producer.flush(30) == 0
    conf = {
        "bootstrap.servers": cluster[0].bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    first = Consumer(conf)
    first.subscribe(["moving"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 100 and time.monotonic() < deadline:
        msg = first.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
    first.commit(asynchronous=False)
    first.close()
    assert got == 100

    cluster[2].stop()  # node 3 goes away: the group hashes over nodes 1-2 now
    wait_until(lambda: _leaders(cluster[0].bootstrap, "moving")[0] == {1, 2}, 15)
    time.sleep(2.5)  # the new coordinator's periodic refresh has read the offsets
    for n in range(100, 110):
        producer.produce("moving", value=f"m{n}", partition=n % 2)
    assert producer.flush(30) == 0
    second = Consumer(conf)
    second.subscribe(["moving"])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 10 and time.monotonic() < deadline:
        msg = second.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value().decode())
    extra = second.poll(2.0)
    second.close()
    # resumed from the committed offsets: only the 10 new records, none of the first 100
    assert sorted(values) == sorted(f"m{n}" for n in range(100, 110)), values[:5]
    assert extra is None or extra.error() is not None


def test_an_offset_committed_on_one_node_is_fetched_at_once_on_another(
    cluster: list[Gateway],
) -> None:
    """OffsetFetch reads the group's rows from the database first: a commit made through
    one node is seen through any other right away (a coordinator that moves between the two
    calls misses nothing), not after the nodes' periodic offset refresh."""
    from kio.schema.offset_commit.v8.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kio.static.primitive import i32, i64
    from support.groups import committed_offsets

    admin = AdminClient({"bootstrap.servers": cluster[0].bootstrap})
    admin.create_topics([NewTopic("fresh", num_partitions=2)])["fresh"].result(10)
    wait_until(lambda: _leaders(cluster[1].bootstrap, "fresh") == ({1, 2, 3}, {1}), 15)
    for offset in (42, 43, 97):
        with RawClient(cluster[0].bootstrap) as client:
            response = client.request(
                OffsetCommitRequest(
                    group_id="fresh-g",
                    generation_id_or_member_epoch=i32(-1),
                    member_id="",
                    group_instance_id=None,
                    topics=(
                        OffsetCommitRequestTopic(
                            name="fresh",
                            partitions=(
                                OffsetCommitRequestPartition(
                                    partition_index=i32(1),
                                    committed_offset=i64(offset),
                                    committed_leader_epoch=i32(-1),
                                    committed_metadata=None,
                                ),
                            ),
                        ),
                    ),
                )
            )
        assert [p.error_code for t in response.topics for p in t.partitions] == [0]
        for node in cluster[1:]:  # straight away, on the nodes that did not take the commit
            assert committed_offsets(node.bootstrap, "fresh-g") == {("fresh", 1): offset}
