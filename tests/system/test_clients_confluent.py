"""Round trips through the gateway with confluent-kafka (librdkafka)."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from support.client import (
    DEFAULT_PARTITIONS,
    RawClient,
    confluent_consume,
    confluent_drain,
    metadata_request,
    unique_topic,
    wait_until,
)
from support.confluent import confluent_consumer

TIMEOUT = 20.0


def make_producer(bootstrap: str, **extra) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 20000}
    conf.update(extra)
    return Producer(conf)


class Deliveries:
    """Collects delivery reports; fails loudly on delivery errors."""

    def __init__(self) -> None:
        self.reports: list[tuple[int, int, bytes | None, bytes | None]] = []
        self.errors: list[KafkaError] = []

    def __call__(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.reports.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    def check(self, expected: int) -> None:
        assert self.errors == []
        assert len(self.reports) == expected


def produce_all(producer: Producer, topic: str, messages: list[dict]) -> Deliveries:
    deliveries = Deliveries()
    for kwargs in messages:
        producer.produce(topic, on_delivery=deliveries, **kwargs)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0, "messages still in flight after flush"
    deliveries.check(len(messages))
    return deliveries


def partition_count(client, topic: str) -> int:
    md = client.list_topics(topic, timeout=10)
    tmd = md.topics[topic]
    assert tmd.error is None, tmd.error
    return len(tmd.partitions)


def consume_all_from_beginning(bootstrap: str, topic: str, count: int, partitions: int) -> list:
    consumer = confluent_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        msgs = confluent_consume(consumer, count, TIMEOUT)
        msgs += confluent_drain(consumer, quiet=0.5)
        return msgs
    finally:
        consumer.close()


def by_partition(msgs) -> dict[int, list]:
    out: dict[int, list] = defaultdict(list)
    for m in msgs:
        out[m.partition()].append(m)
    return out


# ----------------------------------------------------------------- metadata / admin


def test_list_metadata(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap)
    produce_all(producer, topic, [{"value": b"x"}])
    md = AdminClient({"bootstrap.servers": shared_gateway.bootstrap}).list_topics(timeout=10)
    assert len(md.brokers) == 1
    broker = next(iter(md.brokers.values()))
    assert (broker.host, broker.port) == ("127.0.0.1", shared_gateway.port)
    assert topic in md.topics
    tmd = md.topics[topic]
    assert tmd.error is None
    assert sorted(tmd.partitions) == list(range(DEFAULT_PARTITIONS))
    for pmd in tmd.partitions.values():
        assert pmd.leader == broker.id
        assert pmd.error is None


def test_create_and_delete_topic(shared_gateway):
    topic = unique_topic("confluent-admin")
    admin = AdminClient({"bootstrap.servers": shared_gateway.bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=5, replication_factor=1)])
    assert futures[topic].result(timeout=TIMEOUT) is None

    md = admin.list_topics(timeout=10)
    assert topic in md.topics
    assert sorted(md.topics[topic].partitions) == [0, 1, 2, 3, 4]

    dup = admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    with pytest.raises(KafkaException) as excinfo:
        dup[topic].result(timeout=TIMEOUT)
    assert excinfo.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    # the failed re-create must not have changed the partition count
    assert sorted(admin.list_topics(timeout=10).topics[topic].partitions) == [0, 1, 2, 3, 4]

    deleted = admin.delete_topics([topic], operation_timeout=10)
    assert deleted[topic].result(timeout=TIMEOUT) is None
    # A full listing (no topic list) must not auto-create anything.
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, timeout=10)


def test_delete_unknown_topic_fails(shared_gateway):
    admin = AdminClient({"bootstrap.servers": shared_gateway.bootstrap})
    topic = unique_topic("never-created")
    with pytest.raises(KafkaException) as excinfo:
        admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=TIMEOUT)
    assert excinfo.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_auto_create_on_produce(shared_gateway, topic):
    admin = AdminClient({"bootstrap.servers": shared_gateway.bootstrap})
    assert topic not in admin.list_topics(timeout=10).topics
    producer = make_producer(shared_gateway.bootstrap)
    d = produce_all(producer, topic, [{"value": b"first", "partition": 0}])
    assert d.reports == [(0, 0, None, b"first")]
    assert partition_count(admin, topic) == DEFAULT_PARTITIONS


# ------------------------------------------------------------------- produce paths


def test_keyed_unkeyed_headers_roundtrip(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap)
    sent = [
        {"key": b"k1", "value": b"keyed"},
        {"value": b"unkeyed"},
        {"key": b"k2", "value": None},  # tombstone
        {"key": b"", "value": b""},  # empty, not null
        {"value": b"with-headers", "headers": [("h1", b"v1"), ("h2", b""), ("h1", b"again")]},
        {"value": b"\x00\xff binary \x80", "headers": [("nullv", None)]},
    ]
    produce_all(producer, topic, [dict(m, partition=1) for m in sent])

    msgs = consume_all_from_beginning(shared_gateway.bootstrap, topic, len(sent), 3)
    assert [m.partition() for m in msgs] == [1] * len(sent)
    assert [m.offset() for m in msgs] == list(range(len(sent)))
    got = [(m.key(), m.value(), m.headers()) for m in msgs]
    assert got == [
        (b"k1", b"keyed", None),
        (None, b"unkeyed", None),
        (b"k2", None, None),
        (b"", b"", None),
        (None, b"with-headers", [("h1", b"v1"), ("h2", b""), ("h1", b"again")]),
        (None, b"\x00\xff binary \x80", [("nullv", None)]),
    ]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_roundtrip(shared_gateway, codec):
    topic = unique_topic(f"confluent-{codec}")
    producer = make_producer(shared_gateway.bootstrap, **{"compression.type": codec})
    n = 200
    messages = [
        {
            "key": f"key-{i % 7}".encode(),
            "value": (f"value-{i}-" * (i % 13 + 1)).encode(),
            "headers": [("i", str(i).encode())],
        }
        for i in range(n)
    ]
    d = produce_all(producer, topic, messages)
    msgs = consume_all_from_beginning(shared_gateway.bootstrap, topic, n, DEFAULT_PARTITIONS)
    assert len(msgs) == n
    delivered = {(p, o): (k, v) for p, o, k, v in d.reports}
    for m in msgs:
        assert delivered[(m.partition(), m.offset())] == (m.key(), m.value())
    # every record exactly once, in production order within each partition
    expected_by_part: dict[int, list[bytes]] = defaultdict(list)
    for p, _o, _k, v in sorted(d.reports, key=lambda r: (r[0], r[1])):
        expected_by_part[p].append(v)
    for p, part_msgs in by_partition(msgs).items():
        assert [m.value() for m in part_msgs] == expected_by_part[p]
        assert [m.offset() for m in part_msgs] == list(range(len(part_msgs)))
    header_values = sorted(int(m.headers()[0][1]) for m in msgs)
    assert header_values == list(range(n))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batch_consumed_from_middle_offset(shared_gateway, codec):
    topic = unique_topic(f"confluent-mid-{codec}")
    producer = make_producer(
        shared_gateway.bootstrap, **{"compression.type": codec, "linger.ms": 200}
    )
    produce_all(producer, topic, [{"value": f"m{i}".encode(), "partition": 0} for i in range(10)])
    consumer = confluent_consumer(shared_gateway.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, 6)])
        msgs = confluent_consume(consumer, 4) + confluent_drain(consumer, quiet=0.5)
    finally:
        consumer.close()
    assert [(m.offset(), m.value()) for m in msgs] == [(i, f"m{i}".encode()) for i in range(6, 10)]


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(shared_gateway, acks):
    topic = unique_topic(f"confluent-acks-{acks}")
    producer = make_producer(shared_gateway.bootstrap, acks=acks)
    n = 30
    d = produce_all(
        producer, topic, [{"value": f"a{i}".encode(), "partition": 2} for i in range(n)]
    )
    if acks != "0":
        assert [o for _p, o, _k, _v in d.reports] == list(range(n))
    msgs = consume_all_from_beginning(shared_gateway.bootstrap, topic, n, DEFAULT_PARTITIONS)
    assert [(m.partition(), m.offset(), m.value()) for m in msgs] == [
        (2, i, f"a{i}".encode()) for i in range(n)
    ]


@pytest.mark.parametrize("idempotence", [True, False])
def test_idempotence(shared_gateway, idempotence):
    topic = unique_topic(f"confluent-idem-{idempotence}")
    producer = make_producer(
        shared_gateway.bootstrap,
        **{"enable.idempotence": idempotence, "acks": "all", "linger.ms": 20},
    )
    n = 100
    keys = [f"k{i % 10}".encode() for i in range(n)]
    d = produce_all(
        producer, topic, [{"key": keys[i], "value": f"v{i}".encode()} for i in range(n)]
    )
    msgs = consume_all_from_beginning(shared_gateway.bootstrap, topic, n, DEFAULT_PARTITIONS)
    assert sorted((m.partition(), m.offset(), m.key(), m.value()) for m in msgs) == sorted(
        d.reports
    )
    assert len({(m.partition(), m.offset()) for m in msgs}) == n


# ----------------------------------------------------------------- consume positions


def test_consume_earliest_latest_and_specific_offset(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap)
    produce_all(producer, topic, [{"value": f"old{i}".encode(), "partition": 0} for i in range(5)])

    earliest = confluent_consumer(shared_gateway.bootstrap)
    latest = confluent_consumer(shared_gateway.bootstrap, **{"enable.partition.eof": True})
    specific = confluent_consumer(shared_gateway.bootstrap)
    try:
        earliest.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        specific.assign([TopicPartition(topic, 0, 3)])
        latest.assign([TopicPartition(topic, 0, OFFSET_END)])

        def latest_at_eof():
            # The EOF event proves OFFSET_END was resolved before the new data is sent.
            msg = latest.poll(0.1)
            assert msg is None or msg.error() is not None, "unexpected message at 'latest'"
            return msg is not None and msg.error().code() == KafkaError._PARTITION_EOF

        wait_until(latest_at_eof, timeout=TIMEOUT)
        produce_all(
            producer, topic, [{"value": f"new{i}".encode(), "partition": 0} for i in range(2)]
        )

        got_earliest = confluent_consume(earliest, 7) + confluent_drain(earliest, quiet=0.3)
        got_specific = confluent_consume(specific, 4) + confluent_drain(specific, quiet=0.3)
        got_latest = confluent_consume(latest, 2) + confluent_drain(latest, quiet=0.3)
    finally:
        for c in (earliest, latest, specific):
            c.close()

    all_values = [f"old{i}".encode() for i in range(5)] + [b"new0", b"new1"]
    assert [(m.offset(), m.value()) for m in got_earliest] == list(enumerate(all_values))
    assert [(m.offset(), m.value()) for m in got_specific] == list(enumerate(all_values))[3:]
    assert [(m.offset(), m.value()) for m in got_latest] == [(5, b"new0"), (6, b"new1")]


def test_key_partitioning_order_and_dense_offsets(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap, **{"linger.ms": 10})
    n = 300
    keys = [f"user-{i % 17}".encode() for i in range(n)]
    d = produce_all(producer, topic, [{"key": keys[i], "value": f"{i}".encode()} for i in range(n)])
    msgs = consume_all_from_beginning(shared_gateway.bootstrap, topic, n, DEFAULT_PARTITIONS)
    assert len(msgs) == n

    key_partitions: dict[bytes, set[int]] = defaultdict(set)
    for m in msgs:
        key_partitions[m.key()].add(m.partition())
    assert all(len(parts) == 1 for parts in key_partitions.values()), key_partitions
    assert len({p for parts in key_partitions.values() for p in parts}) > 1

    reported = {(p, o): v for p, o, _k, v in d.reports}
    for p, part_msgs in by_partition(msgs).items():
        assert [m.offset() for m in part_msgs] == list(range(len(part_msgs))), p
        values = [int(m.value()) for m in part_msgs]
        assert values == sorted(values), f"partition {p} out of production order"
        for m in part_msgs:
            assert reported[(p, m.offset())] == m.value()


# -------------------------------------------------------------------- list offsets


def test_watermarks_and_offsets_for_times(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap)
    base = int(time.time() * 1000) - 60_000
    timestamps = [base + 1000 * i for i in range(6)]
    produce_all(
        producer,
        topic,
        [
            {"value": f"t{i}".encode(), "partition": 1, "timestamp": ts}
            for i, ts in enumerate(timestamps)
        ],
    )
    consumer = confluent_consumer(shared_gateway.bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, 6)
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)

        def lookup(ts: int) -> int:
            (res,) = consumer.offsets_for_times([TopicPartition(topic, 1, ts)], timeout=10)
            assert res.error is None
            return res.offset

        assert lookup(base - 5000) == 0
        assert lookup(base) == 0
        assert lookup(base + 1) == 1
        assert lookup(base + 2500) == 3
        assert lookup(timestamps[-1]) == 5
        assert lookup(timestamps[-1] + 1) == -1  # past the last record: no offset

        consumer.assign([TopicPartition(topic, 1, OFFSET_BEGINNING)])
        msgs = confluent_consume(consumer, 6)
    finally:
        consumer.close()
    assert [m.timestamp() for m in msgs] == [(TIMESTAMP_CREATE_TIME, ts) for ts in timestamps]


@pytest.mark.gateway_args("--auto-create-topics", "false")
def test_auto_create_disabled(gateway):
    topic = unique_topic("no-auto")
    producer = make_producer(gateway.bootstrap, **{"message.timeout.ms": 3000})
    deliveries = Deliveries()
    producer.produce(topic, value=b"x", on_delivery=deliveries)
    producer.flush(10)
    assert deliveries.reports == []
    assert len(deliveries.errors) == 1
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    md = admin.list_topics(topic, timeout=10)
    assert topic not in md.topics or md.topics[topic].error is not None
    assert topic not in admin.list_topics(timeout=10).topics

    # explicit creation still works
    futures = admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    futures[topic].result(timeout=TIMEOUT)
    d = produce_all(make_producer(gateway.bootstrap), topic, [{"value": b"y", "partition": 1}])
    assert d.reports == [(1, 0, None, b"y")]


def test_deleted_topic_recreated_starts_empty(shared_gateway, topic):
    admin = AdminClient({"bootstrap.servers": shared_gateway.bootstrap})
    produce_all(
        make_producer(shared_gateway.bootstrap),
        topic,
        [{"value": f"old{i}".encode(), "partition": 0} for i in range(5)],
    )
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=TIMEOUT)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, timeout=10)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=TIMEOUT
    )
    assert partition_count(admin, topic) == 1
    d = produce_all(make_producer(shared_gateway.bootstrap), topic, [{"value": b"new"}])
    assert d.reports == [(0, 0, None, b"new")]
    msgs = consume_all_from_beginning(shared_gateway.bootstrap, topic, 1, 1)
    assert [(m.offset(), m.value()) for m in msgs] == [(0, b"new")]


def test_offsets_for_times_with_unordered_timestamps(shared_gateway, topic):
    """The answer is the first offset whose timestamp is >= the target, not a bisection."""
    base = int(time.time() * 1000) - 100_000
    deltas = [0, 30_000, 10_000, 20_000, 5_000]
    producer = make_producer(shared_gateway.bootstrap, **{"linger.ms": 0})
    for i, delta in enumerate(deltas):
        # one flush per record so that each lands in its own batch
        produce_all(
            producer, topic, [{"value": str(i).encode(), "partition": 0, "timestamp": base + delta}]
        )
    consumer = confluent_consumer(shared_gateway.bootstrap)
    try:

        def lookup(delta: int) -> int:
            (res,) = consumer.offsets_for_times(
                [TopicPartition(topic, 0, base + delta)], timeout=10
            )
            return res.offset

        assert lookup(-1) == 0
        assert lookup(1) == 1
        assert lookup(15_000) == 1
        assert lookup(30_000) == 1
        assert lookup(30_001) == -1
    finally:
        consumer.close()


def test_small_fetch_sizes_page_through_everything(shared_gateway, topic):
    n = 2000
    produce_all(
        make_producer(shared_gateway.bootstrap),
        topic,
        [{"value": f"{i:06d}".encode(), "partition": 2} for i in range(n)],
    )
    consumer = confluent_consumer(
        shared_gateway.bootstrap,
        **{"fetch.max.bytes": 1024, "message.max.bytes": 1000, "max.partition.fetch.bytes": 300},
    )
    try:
        consumer.assign([TopicPartition(topic, 2, OFFSET_BEGINNING)])
        msgs = confluent_consume(consumer, n, 60) + confluent_drain(consumer, quiet=0.3)
    finally:
        consumer.close()
    assert [(m.offset(), m.value()) for m in msgs] == [(i, f"{i:06d}".encode()) for i in range(n)]


def test_large_message_roundtrip(shared_gateway, topic):
    big = bytes(range(256)) * (3 * 1024 * 1024 // 256)  # 3 MiB
    producer = make_producer(shared_gateway.bootstrap, **{"message.max.bytes": 8_000_000})
    d = produce_all(
        producer, topic, [{"value": big, "partition": 0}, {"value": b"after", "partition": 0}]
    )
    assert sorted((p, o, len(v)) for p, o, _k, v in d.reports) == [(0, 0, len(big)), (0, 1, 5)]
    consumer = confluent_consumer(
        shared_gateway.bootstrap,
        **{"fetch.max.bytes": 10_000_000, "max.partition.fetch.bytes": 10_000_000},
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        msgs = confluent_consume(consumer, 2, 30)
    finally:
        consumer.close()
    assert [m.offset() for m in msgs] == [0, 1]
    assert msgs[0].value() == big
    assert msgs[1].value() == b"after"


def test_concurrent_producers_same_partition(shared_gateway, topic):
    import threading

    writers, per_writer = 4, 150
    reports: list[list[tuple]] = [[] for _ in range(writers)]

    def run(w: int) -> None:
        producer = make_producer(shared_gateway.bootstrap, **{"linger.ms": 1})
        d = produce_all(
            producer,
            topic,
            [{"value": f"w{w}-{i}".encode(), "partition": 0} for i in range(per_writer)],
        )
        reports[w] = d.reports

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    all_reports = [r for rs in reports for r in rs]
    assert len(all_reports) == writers * per_writer
    offsets = sorted(o for _p, o, _k, _v in all_reports)
    assert offsets == list(range(writers * per_writer)), "offsets must be unique and dense"

    msgs = consume_all_from_beginning(shared_gateway.bootstrap, topic, len(offsets), 1)
    by_offset = {o: v for _p, o, _k, v in all_reports}
    assert [(m.offset(), m.value()) for m in msgs] == sorted(by_offset.items())
    for w in range(writers):
        mine = [
            int(m.value().split(b"-")[1]) for m in msgs if m.value().startswith(f"w{w}-".encode())
        ]
        assert mine == list(range(per_writer)), f"writer {w} reordered"


@pytest.mark.gateway_args("--advertised-listener", "localhost:{port}")
def test_advertised_listener(gateway):
    """Metadata names the advertised address, not the bind address."""
    with RawClient(gateway.bootstrap) as client:
        md = client.request(metadata_request([]))
    assert [(b.host, b.port) for b in md.brokers] == [("localhost", gateway.port)]
    # clients follow the advertised name and still work
    topic = unique_topic("advertised")
    d = produce_all(make_producer(gateway.bootstrap), topic, [{"value": b"v", "partition": 0}])
    assert d.reports == [(0, 0, None, b"v")]
