"""`streamgate serve --nodes 3` (the user's path: one supervisor, an embedded PostgreSQL,
three nodes) and topic changes made on one node reaching the others: a delete closes and
forgets the topic everywhere within a sync (its local files removed), a new topic of the
same name works; CreatePartitions and config changes on a non-leader are seen everywhere.
A node SIGKILLed is restarted by the supervisor with nothing acknowledged lost; the whole
cluster restarts with its data; bad flag combinations get one clear line."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from support.client import wait_until
from support.crash import check_exactly_once, read_from_start
from support.nodes import requires_postgres

from harness.nodes_cluster import NodesCluster

pytestmark = requires_postgres
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodesCluster]:
    nodes = NodesCluster(
        tmp_path_factory.mktemp("nodes"),
        3,
        ["--node-lease-s", "1"],
        # these tests follow a topic through its creator (placement: test_nodes_move.py)
        env={"STREAMGATE_PLACEMENT": "creator"},
    )
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.close()


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = _admin(bootstrap)  # kept alive until the future is done
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(10)


def _topic_view(bootstrap: str, topic: str) -> tuple[int, set[int]] | None:
    """(partition count, leaders) of `topic` as one node answers, None if unknown."""
    meta = _admin(bootstrap).list_topics(timeout=10)  # all topics: asking for one creates it
    t = meta.topics.get(topic)
    if t is None or t.error is not None:
        return None
    return len(t.partitions), {p.leader for p in t.partitions.values()}


def _stream_dirs(cluster: NodesCluster, node_id: int) -> set[str]:
    folder = cluster.data_dir / f"node-{node_id}" / "streams"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def _produce(bootstrap: str, topic: str, values: list[str], partition: int = -1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        if partition >= 0:
            producer.produce(topic, value=value, partition=partition)
        else:
            producer.produce(topic, value=value)
    assert producer.flush(60) == 0


def _consume_all(bootstrap: str, topic: str, expected: int, group: str) -> list[str]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[str] = []
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    # anything more than expected would show up within a second
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    consumer.close()
    return got


def test_serve_nodes_runs_three_nodes_on_an_embedded_postgres(cluster: NodesCluster) -> None:
    def brokers(bootstrap: str) -> list[tuple[int, int]]:
        meta = _admin(bootstrap).list_topics(timeout=10)
        return sorted((b.id, b.port) for b in meta.brokers.values())

    expected = list(zip([1, 2, 3], cluster.ports, strict=True))
    for bootstrap in cluster.bootstraps:  # within a sync or two every node knows the others
        wait_until(lambda b=bootstrap: brokers(b) == expected, 30)
    admin = _admin(cluster.bootstraps[1])  # kept alive until the future is done
    described = admin.describe_cluster().result(10)
    assert sorted((n.id, n.port) for n in described.nodes) == expected
    assert (cluster.data_dir / "postgres" / "data" / "PG_VERSION").is_file()
    for i in (1, 2, 3):
        assert (cluster.data_dir / f"node-{i}").is_dir()
    log = cluster.log_text()
    assert "PostgreSQL on 127.0.0.1:" in log
    assert "node 2 | " in log  # each node's lines are prefixed with its id


def test_a_topic_deleted_on_one_node_is_forgotten_by_the_others(cluster: NodesCluster) -> None:
    b1, b2, b3 = cluster.bootstraps
    untouched = {i: _stream_dirs(cluster, i) for i in (1, 2, 3)}
    _create(b2, "gone", 2)
    for b in cluster.bootstraps:
        wait_until(lambda b=b: _topic_view(b, "gone") == (2, {2}), 30)
    _produce(b1, "gone", [f"old{n}" for n in range(50)])
    # every node has opened the topic (a sync round adopts it; the metadata view above is
    # read from the database, sooner): a node that never opened it has nothing to forget
    for i in (1, 2, 3):
        wait_until(lambda i=i: len(_stream_dirs(cluster, i) - untouched[i]) == 1, 30)
    before = {i: _stream_dirs(cluster, i) for i in (1, 2, 3)}

    # deleted through node 1, which does not lead it
    admin = _admin(b1)
    admin.delete_topics(["gone"])["gone"].result(10)
    for b in cluster.bootstraps:
        wait_until(lambda b=b: _topic_view(b, "gone") is None, 30)
    # the client sends the delete to the controller it last heard of (each node names
    # itself): that node deletes it, every other node forgets it
    for i in (1, 2, 3):
        try:
            wait_until(lambda i=i: f"node {i} | ".encode() in _forgot_lines(cluster, "gone"), 30)
        except TimeoutError:
            pytest.fail(f"node {i} did not log the delete; log:\n{cluster.log_tail(20000)}")
    assert _forgot_lines(cluster, "gone").count(b"on another node") == 2
    for i in (1, 2, 3):  # the stream's local folder is gone on every node
        wait_until(lambda i=i: len(before[i] - _stream_dirs(cluster, i)) == 1, 30)

    # a new topic of the same name, created on node 3: only its own records
    _create(b3, "gone", 1)
    for b in cluster.bootstraps:
        wait_until(lambda b=b: _topic_view(b, "gone") == (1, {3}), 30)
    _produce(b2, "gone", [f"new{n}" for n in range(20)])
    got = _consume_all(b1, "gone", 20, "gone-readers")
    assert sorted(got) == sorted(f"new{n}" for n in range(20))


def _forgot_lines(cluster: NodesCluster, topic: str) -> bytes:
    """Lines of nodes deleting `topic` or forgetting it as deleted on another node."""
    return b"\n".join(
        line
        for line in cluster.log_since_start().splitlines()
        if re.search(rf"topic {topic} deleted( on another node)?$".encode(), line.rstrip())
    )


def test_partitions_and_configs_changed_on_a_non_leader_reach_every_node(
    cluster: NodesCluster,
) -> None:
    b1, b2, b3 = cluster.bootstraps
    _create(b1, "grows", 2)
    for b in cluster.bootstraps:
        wait_until(lambda b=b: _topic_view(b, "grows") == (2, {1}), 30)
    admin = _admin(b3)

    def grown() -> bool:
        # the controller node may not have opened the topic yet right after its sync
        # (UNKNOWN_TOPIC_OR_PARTITION, seen under load): the client would retry too
        try:
            admin.create_partitions([NewPartitions("grows", 4)])["grows"].result(10)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            return False
        return True

    wait_until(grown, 30, interval=0.5)
    for b in cluster.bootstraps:
        wait_until(lambda b=b: _topic_view(b, "grows") == (4, {1}), 30)
    resource = ConfigResource(ResourceType.TOPIC, "grows", set_config={"retention.ms": "3600000"})
    admin = _admin(b2)
    admin.alter_configs([resource])[resource].result(10)

    def retention(bootstrap: str) -> str | None:
        res = ConfigResource(ResourceType.TOPIC, "grows")
        client = _admin(bootstrap)
        configs = client.describe_configs([res])[res].result(10)
        return configs["retention.ms"].value

    for b in cluster.bootstraps:
        wait_until(lambda b=b: retention(b) == "3600000", 30)
    # the leader serves the new partitions
    _produce(b2, "grows", [f"p3-{n}" for n in range(10)], partition=3)
    got = _consume_all(b3, "grows", 10, "grows-readers")
    assert sorted(got) == sorted(f"p3-{n}" for n in range(10))


def test_the_supervisor_restarts_a_killed_node_and_nothing_acked_is_lost(
    cluster: NodesCluster,
) -> None:
    b1, b2, _ = cluster.bootstraps
    _create(b2, "crashy", 3)
    for b in cluster.bootstraps:
        wait_until(lambda b=b: _topic_view(b, "crashy") == (3, {2}), 30)
    acked: dict[str, tuple[int, int]] = {}

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked[msg.value().decode()] = (msg.partition(), msg.offset())

    producer = Producer(
        {
            "bootstrap.servers": b1,
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
            producer.produce("crashy", key=f"k{sent % 7}", value=str(sent), on_delivery=on_delivery)
            sent += 1
            producer.poll(0.002)

    produce_for(1.0)
    old_pid = cluster.kill_node(2)
    produce_for(1.0)
    cluster.wait_restarted(2, old_pid)
    produce_for(1.0)
    assert producer.flush(90) == 0
    assert len(acked) == sent and sent > 100
    check_exactly_once(read_from_start(b1, "crashy", 3), acked)
    assert "node 2 was killed by SIGKILL; restarting" in cluster.log_text()


def test_the_whole_cluster_restarts_with_its_topics(cluster: NodesCluster) -> None:
    b1 = cluster.bootstraps[0]
    _create(b1, "kept", 1)
    _produce(b1, "kept", [f"k{n}" for n in range(30)])
    assert cluster.stop() == 0
    log = cluster.log_text()
    assert "PostgreSQL stopped" in log
    for i in (1, 2, 3):
        assert f"node {i}: stopped (exited with status 0)" in log
    cluster.start()
    for b in cluster.bootstraps:
        wait_until(lambda b=b: _topic_view(b, "kept") == (1, {1}), 30)
    assert sorted(_consume_all(cluster.bootstraps[2], "kept", 30, "kept-readers")) == sorted(
        f"k{n}" for n in range(30)
    )


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--nodes", "0"], {}, "--nodes must be at least 1"),
        (["--nodes", "2", "--listeners", "PLAINTEXT://127.0.0.1:0"], {}, "not --listeners"),
        (["--nodes", "2", "--listen", "127.0.0.1:0"], {}, "needs a fixed --listen port"),
        (["--nodes", "2"], {"POSTGRES_BIN": "/nonexistent"}, "POSTGRES_BIN=/nonexistent"),
    ],
)
def test_bad_nodes_flags_get_one_clear_line(
    tmp_path: Path, flags: list[str], env: dict[str, str], message: str
) -> None:
    import os

    out = subprocess.run(
        [sys.executable, "-m", "cli", "serve", "--data-dir", str(tmp_path / "d"), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, **env},
    )
    assert out.returncode != 0
    assert message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
