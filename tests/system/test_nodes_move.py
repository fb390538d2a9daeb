"""Placement and moving segments between nodes (docs/several-nodes.md, the same section):
three real node processes (`--multi-node true`) on a real PostgreSQL and one tier-2 folder.

- a new topic's segments are spread over the live nodes, and Metadata reports
  per-partition leaders on every node;
- a split that hands a successor to another node while an idempotent confluent-kafka
  producer keeps producing (acks=all): every acked record is stored exactly once at its
  acked offset, offsets stay dense, per-partition order is kept, and the partitions are
  then led by two nodes; a kafka-python consumer reads every partition across the move;
- the old owner refuses appends to the moved partitions (NOT_LEADER_OR_FOLLOWER) while the
  new owner continues their offsets.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition
from support.client import RawClient, Rec, build_record_batch, produce_request, wait_until
from support.crash import check_exactly_once, read_from_start
from support.nodes import gateway_args, pg_url, postgres, requires_postgres, running  # noqa: F401

from harness.gateway import Gateway

pytestmark = requires_postgres
NOT_LEADER_OR_FOLLOWER = 6
ROOT = Path(__file__).resolve().parents[2]
FAST_SCALER = ("--scaling-window-s", "1.5", "--scaling-interval-s", "0.25")


def _cluster(
    tmp_path: Path, url: str, placement: str, extra: tuple[str, ...] = ()
) -> list[Gateway]:
    return [
        Gateway(
            tmp_path / f"n{i}",
            tmp_path / f"n{i}.log",
            [
                *gateway_args(url, i, multi_node=True),
                *("--tier2", str(tmp_path / "t2")),
                *extra,
            ],
            metrics=True,
            env={"STREAMGATE_PLACEMENT": placement},
        )
        for i in (1, 2, 3)
    ]


@pytest.fixture
def spread_cluster(tmp_path: Path, pg_url: str):  # noqa: F811
    nodes = _cluster(tmp_path, pg_url, "least-loaded")
    with running(nodes):
        yield nodes


@pytest.fixture
def creator_cluster(tmp_path: Path, pg_url: str):  # noqa: F811
    # a fast scaler (as in tests/system/test_scaling.py); topics here scale only when asked to
    nodes = _cluster(tmp_path, pg_url, "creator", FAST_SCALER)
    with running(nodes):
        yield nodes


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader, from Metadata on `bootstrap`."""
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = meta.topics[topic]
    return {} if t.error else {p.id: p.leader for p in t.partitions.values()}


def _brokers(bootstrap: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def _streams_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "streams", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
    )


def test_a_new_topic_spreads_over_the_live_nodes(spread_cluster: list[Gateway]) -> None:
    nodes = spread_cluster
    for node in nodes:
        wait_until(lambda n=node: _brokers(n.bootstrap) == {1, 2, 3}, 15)
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    admin.create_topics([NewTopic("spread", num_partitions=6)])["spread"].result(10)
    admin.create_topics([NewTopic("single", num_partitions=1)])["single"].result(10)
    expected = {0: 1, 1: 1, 2: 2, 3: 2, 4: 3, 5: 3}  # all idle: node ids in order
    for node in nodes:  # every node reports the same per-partition leaders
        wait_until(lambda n=node: _leaders(n.bootstrap, "spread") == expected, 15)
    # a one-partition topic has one segment, on the least-loaded node (all have one: node 1)
    wait_until(lambda: _leaders(nodes[2].bootstrap, "single") == {0: 1}, 15)

    # clients find each partition's leader, from any bootstrap node
    producer = Producer(
        {"bootstrap.servers": nodes[1].bootstrap, "acks": "all", "enable.idempotence": True}
    )
    for n in range(300):
        producer.produce("spread", value=f"s{n}", partition=n % 6)
    assert producer.flush(30) == 0
    stored = read_from_start(nodes[2].bootstrap, "spread", 6)
    assert {p: len(v) for p, v in stored.items()} == dict.fromkeys(range(6), 50)
    for p, items in stored.items():  # order kept per partition
        assert [int(v[1:]) for _o, v in items] == list(range(p, 300, 6))

    # `streams describe` shows each segment's node
    described = _streams_cli("describe", "spread", "--admin", nodes[2].admin_url)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert "NODE" in lines[1].split()
    nodes_column = lines[1].split().index("NODE")
    assert sorted(line.split()[nodes_column] for line in lines[2:]) == ["1", "2", "3"]


def test_a_split_hands_a_successor_to_another_node_under_load(
    creator_cluster: list[Gateway],
) -> None:
    nodes = creator_cluster
    for node in nodes:
        wait_until(lambda n=node: _brokers(n.bootstrap) == {1, 2, 3}, 15)
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    admin.create_topics([NewTopic("mv", num_partitions=4)])["mv"].result(10)
    for node in nodes:
        wait_until(lambda n=node: _leaders(n.bootstrap, "mv") == dict.fromkeys(range(4), 1), 15)

    acked: dict[str, tuple[int, int]] = {}
    acked_at: list[tuple[float, int]] = []  # (time, partition)
    errors: list[str] = []
    sent: set[str] = set()
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(f"{msg.partition()}: {err}")
            return
        with lock:
            acked[msg.value().decode()] = (msg.partition(), msg.offset())
            acked_at.append((time.monotonic(), msg.partition()))

    producer = Producer(
        {
            "bootstrap.servers": nodes[2].bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 20,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )

    def produce() -> None:
        n = 0
        while not stop.is_set():
            value = f"{n:07d}"
            sent.add(value)
            producer.produce("mv", value=value, partition=n % 4, on_delivery=on_delivery)
            n += 1
            producer.poll(0.001 if n % 20 else 0.005)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        time.sleep(1.5)
        with lock:
            before = len(acked)
        assert before > 50, "the producer did not get going"
        # split segment 0 (partitions 0-3): [0-1] stays on node 1, [2-3] goes to node 2
        moved = _streams_cli(
            "scale", "mv", "--split", "0", "--to-node", "2", "--admin", nodes[0].admin_url
        )
        assert moved.returncode == 0, moved.stderr
        assert "split" in moved.stdout and "node 2" in moved.stdout, moved.stdout
        moved_at = time.monotonic()
        time.sleep(2.0)
    finally:
        stop.set()
        thread.join()
    assert producer.flush(60) == 0
    assert not errors, errors[:5]
    expected = {0: 1, 1: 1, 2: 2, 3: 2}
    for node in nodes:
        wait_until(lambda n=node: _leaders(n.bootstrap, "mv") == expected, 15)

    stored = read_from_start(nodes[1].bootstrap, "mv", 4)
    check_exactly_once(stored, acked, sent)
    for p, items in stored.items():  # per-partition order: values increase with offsets
        values = [int(v) for _o, v in items]
        assert values == sorted(values), f"partition {p} out of order"
        assert all(v % 4 == p for v in values)
    # the moved partitions took records after the move too (on node 2)
    assert any(t > moved_at and p in (2, 3) for t, p in acked_at), "none acked after the move"

    # the move's segments in describe: sealed 0 on node 1, successors on nodes 1 and 2
    wait_until(
        lambda: (
            json.loads(urllib.request.urlopen(nodes[1].admin_url + "/streams/mv").read())[
                "open_segments"
            ]
            == 2
        ),
        10,
    )
    described = json.loads(urllib.request.urlopen(nodes[1].admin_url + "/streams/mv").read())
    by_id = {s["segment_id"]: s for s in described["segments"]}
    assert by_id[0]["state"] == "sealed"
    assert {(s["first_partition"], s["node"]) for s in by_id.values() if s["state"] == "open"} == {
        (0, 1),
        (2, 2),
    }

    # a kafka-python consumer reads every partition from offset 0 across the move
    consumer = KafkaConsumer(bootstrap_servers=nodes[0].bootstrap, consumer_timeout_ms=5000)
    parts = [TopicPartition("mv", p) for p in range(4)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    ends = consumer.end_offsets(parts)
    got: dict[int, list[tuple[int, str]]] = {p: [] for p in range(4)}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in got.values()) < sum(ends.values()):
        assert time.monotonic() < deadline, "kafka-python did not read the whole topic"
        for tp, records in consumer.poll(timeout_ms=500).items():
            got[tp.partition].extend((r.offset, r.value.decode()) for r in records)
    consumer.close()
    assert got == {p: stored[p] for p in range(4)}

    # fencing: the old owner refuses appends to the moved partitions; the new owner
    # continues their offsets densely
    batch = build_record_batch([Rec(b"k", b"fenced?")])
    with RawClient(nodes[0].bootstrap) as client:
        answer = client.request(produce_request("mv", 2, batch))
        assert answer.responses[0].partition_responses[0].error_code == NOT_LEADER_OR_FOLLOWER
    with RawClient(nodes[1].bootstrap) as client:
        answer = client.request(produce_request("mv", 2, batch))
        response = answer.responses[0].partition_responses[0]
        assert response.error_code == 0
        assert response.base_offset == len(stored[2])
        answer = client.request(produce_request("mv", 0, batch))
        assert answer.responses[0].partition_responses[0].error_code == NOT_LEADER_OR_FOLLOWER
    # the old owner cannot move what it no longer owns
    refused = _streams_cli(
        "move", "mv", "--segment", "2", "--to-node", "3", "--admin", nodes[0].admin_url
    )
    assert refused.returncode == 1 and "owned by node 2" in refused.stderr, refused.stderr

    # the new owner SIGKILLed and restarted (same id and data dir): it replays its log of
    # the successor over the predecessor's chunks in tier 2, and offsets go on densely
    nodes[1].kill()
    nodes[1].start()
    with RawClient(nodes[1].bootstrap) as client:

        def appended() -> int | None:
            answer = client.request(produce_request("mv", 2, batch))
            response = answer.responses[0].partition_responses[0]
            return response.base_offset if response.error_code == 0 else None

        assert wait_until(appended, 30, interval=0.2) == len(stored[2]) + 1
    # node 3 lists node 2 again only after its next sync: until then its Metadata names a
    # leader that is not among the brokers, and librdkafka calls the partition unknown
    wait_until(lambda: _brokers(nodes[2].bootstrap) == {1, 2, 3}, 15)
    after = read_from_start(nodes[2].bootstrap, "mv", 4)
    assert after[2][: len(stored[2])] == stored[2] and len(after[2]) == len(stored[2]) + 2
    assert [o for o, _v in after[2]] == list(range(len(after[2])))


def test_the_scaler_puts_a_split_successor_on_a_less_loaded_node(
    creator_cluster: list[Gateway],
) -> None:
    nodes = creator_cluster
    for node in nodes:
        wait_until(lambda n=node: _brokers(n.bootstrap) == {1, 2, 3}, 15)
    configs = {"streamgate.scaling.policy": "data-rate", "streamgate.scaling.target.rate": "4"}
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    admin.create_topics([NewTopic("hot", num_partitions=4, config=configs)])["hot"].result(10)
    acked: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            with lock:
                acked[msg.value().decode()] = (msg.partition(), msg.offset())

    producer = Producer(
        {"bootstrap.servers": nodes[0].bootstrap, "acks": "all", "enable.idempotence": True}
    )

    def nodes_of_open_segments() -> set[int]:
        described = json.loads(urllib.request.urlopen(nodes[0].admin_url + "/streams/hot").read())
        return {s["node"] for s in described["segments"] if s["state"] == "open"}

    n = 0
    deadline = time.monotonic() + 30
    while len(nodes_of_open_segments()) < 2:
        assert time.monotonic() < deadline, "the scaler placed no successor on another node"
        for _ in range(200):
            producer.produce(
                "hot", value=f"{n:07d}" + "x" * 200, partition=n % 4, on_delivery=on_delivery
            )
            n += 1
        producer.poll(0.05)
    for _ in range(400):  # more after the split, some to the other node
        producer.produce(
            "hot", value=f"{n:07d}" + "x" * 200, partition=n % 4, on_delivery=on_delivery
        )
        n += 1
    assert producer.flush(60) == 0
    assert len(acked) == n
    assert "scaler hot: split" in nodes[0].log_text() and "handed over" in nodes[0].log_text()
    # node 3 learns the new owner at its next sync (half a second; longer under load)
    wait_until(lambda: len(set(_leaders(nodes[2].bootstrap, "hot").values())) >= 2, 15)
    check_exactly_once(read_from_start(nodes[2].bootstrap, "hot", 4), acked)


def test_hand_over_is_a_compare_and_set_on_the_owner(pg_url: str) -> None:  # noqa: F811
    import uuid

    from core.metadata import SegmentRecord, TopicRecord
    from core.metadata.postgres import PostgresMetadataStore

    db = PostgresMetadataStore(pg_url, node_id=1)
    try:
        segments = [SegmentRecord(0, 0, 0, 1), SegmentRecord(1, 0, 2, 3)]
        db.create_topic_placed(TopicRecord("cas", uuid.uuid4(), 4, {}, segments=segments), [1, 2])
        owners = {(sid, node) for t, sid, _f, _l, node in db.open_segments() if t == "cas"}
        assert owners == {(0, 1), (1, 2)}
        # node 1 cannot hand over node 2's segment; nothing changes
        with pytest.raises(ValueError, match="not an open segment of node 1"):
            db.hand_over("cas", [1], [SegmentRecord(2, 1, 2, 3)], [3], from_node=1)
        db.hand_over("cas", [0], [SegmentRecord(2, 1, 0, 1)], [3], from_node=1)
        # a second hand-over of the same (now sealed) segment is refused
        with pytest.raises(ValueError):
            db.hand_over("cas", [0], [SegmentRecord(3, 1, 0, 1)], [2], from_node=1)
        owners = {(sid, node) for t, sid, _f, _l, node in db.open_segments() if t == "cas"}
        assert owners == {(1, 2), (2, 3)}
        sealed = {r.segment_id for r, _o in db.load_segments("cas") if r.sealed}
        assert sealed == {0}
    finally:
        db.close()


def test_cold_segments_on_several_nodes_gather_on_one_and_merge(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    """Merges bring them together: a topic spread over 3 nodes with no load hands its cold
    segments towards node 1 (core/scaling/gather.py), which merges them into one; every
    record written before, during and after is read back exactly once, offsets dense."""
    nodes = _cluster(tmp_path, pg_url, "least-loaded", FAST_SCALER)
    try:
        for node in nodes:
            node.start_fresh()
        for node in nodes:
            wait_until(lambda n=node: _brokers(n.bootstrap) == {1, 2, 3}, 15)
        configs = {
            "streamgate.scaling.policy": "data-rate",
            "streamgate.scaling.target.rate": "100000",  # any load here is cold
        }
        admin = AdminClient({"bootstrap.servers": nodes[2].bootstrap})
        admin.create_topics([NewTopic("cold", num_partitions=3, config=configs)])["cold"].result(10)
        wait_until(lambda: set(_leaders(nodes[0].bootstrap, "cold").values()) == {1, 2, 3}, 15)
        acked: dict[str, tuple[int, int]] = {}

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                acked[msg.value().decode()] = (msg.partition(), msg.offset())

        producer = Producer(
            {"bootstrap.servers": nodes[1].bootstrap, "acks": "all", "enable.idempotence": True}
        )

        def open_segments() -> list[tuple[int, int]]:
            url = nodes[0].admin_url + "/streams/cold"
            try:
                described = json.loads(urllib.request.urlopen(url).read())
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # node 1 opens the topic at its next sync
                    return []
                raise
            return [
                (s["segment_id"], s["node"]) for s in described["segments"] if s["state"] == "open"
            ]

        n = 0
        deadline = time.monotonic() + 90
        while not (len(segs := open_segments()) == 1 and segs[0][1] == 1):
            assert time.monotonic() < deadline, f"cold segments did not gather: {segs}"
            for _ in range(3):  # a trickle, far below the target rate
                producer.produce("cold", value=f"{n:06d}", partition=n % 3, on_delivery=on_delivery)
                n += 1
            producer.poll(0.5)
        for _ in range(30):
            producer.produce("cold", value=f"{n:06d}", partition=n % 3, on_delivery=on_delivery)
            n += 1
        assert producer.flush(60) == 0
        assert len(acked) == n
        assert set(_leaders(nodes[2].bootstrap, "cold").values()) == {1}
        log_1 = nodes[0].log_text()
        assert "scaler cold: merge" in log_1, log_1[-3000:]
        check_exactly_once(read_from_start(nodes[2].bootstrap, "cold", 3), acked)
    finally:
        for node in nodes:
            node.close()
