"""Round trips through the gateway with kafka-python."""

from __future__ import annotations

import time
from collections import defaultdict

import kafka.errors as kerr
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.codec import has_lz4, has_snappy, has_zstd
from support.client import DEFAULT_PARTITIONS, kafka_python_consume, unique_topic, wait_until

TIMEOUT = 20.0

CODEC_AVAILABLE = {
    None: True,
    "gzip": True,
    "snappy": has_snappy(),
    "lz4": has_lz4(),
    "zstd": has_zstd(),
}
CODEC_PACKAGES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}


def make_producer(bootstrap: str, **extra) -> KafkaProducer:
    conf = {"bootstrap_servers": bootstrap, "linger_ms": 5, "request_timeout_ms": 15000}
    conf.update(extra)
    return KafkaProducer(**conf)


def make_consumer(bootstrap: str, **extra) -> KafkaConsumer:
    conf = {
        "bootstrap_servers": bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        # out-of-range positions must raise rather than silently reset
        "auto_offset_reset": "none",
        "request_timeout_ms": 15000,
    }
    conf.update(extra)
    return KafkaConsumer(**conf)


def send_all(producer: KafkaProducer, topic: str, messages: list[dict]) -> list:
    futures = [producer.send(topic, **m) for m in messages]
    producer.flush(timeout=TIMEOUT)
    return [f.get(timeout=TIMEOUT) for f in futures]


def read_all(bootstrap: str, topic: str, count: int, partitions: int) -> list:
    consumer = make_consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records = kafka_python_consume(consumer, count, TIMEOUT)
        records += kafka_python_consume(consumer, 1, 0.5)  # nothing extra may show up
        return records
    finally:
        consumer.close()


def by_partition(records) -> dict[int, list]:
    out: dict[int, list] = defaultdict(list)
    for r in records:
        out[r.partition].append(r)
    return out


# ----------------------------------------------------------------- metadata / admin


def test_list_metadata(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap)
    send_all(producer, topic, [{"value": b"x"}])
    producer.close()
    consumer = make_consumer(shared_gateway.bootstrap)
    try:
        assert topic in consumer.topics()
        assert consumer.partitions_for_topic(topic) == set(range(DEFAULT_PARTITIONS))
    finally:
        consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=shared_gateway.bootstrap)
    try:
        assert topic in admin.list_topics()
        (desc,) = admin.describe_topics([topic])
        assert desc["error_code"] == 0
        assert sorted(p["partition_index"] for p in desc["partitions"]) == list(
            range(DEFAULT_PARTITIONS)
        )
        cluster = admin.describe_cluster()
        assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [
            ("127.0.0.1", shared_gateway.port)
        ]
    finally:
        admin.close()


def test_create_and_delete_topic(shared_gateway):
    topic = unique_topic("kp-admin")
    admin = KafkaAdminClient(bootstrap_servers=shared_gateway.bootstrap)
    try:
        admin.create_topics({topic: {"num_partitions": 4, "replication_factor": 1}})
        (desc,) = admin.describe_topics([topic])
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1, 2, 3]

        with pytest.raises(kerr.TopicAlreadyExistsError):
            admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}})

        admin.delete_topics([topic])
        wait_until(lambda: topic not in admin.list_topics(), timeout=10)
    finally:
        admin.close()


def test_create_topic_validate_only(shared_gateway):
    topic = unique_topic("kp-validate")
    admin = KafkaAdminClient(bootstrap_servers=shared_gateway.bootstrap)
    try:
        result = admin.create_topics(
            {topic: {"num_partitions": 2, "replication_factor": 1}}, validate_only=True
        )
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
        assert topic not in admin.list_topics()
    finally:
        admin.close()


def test_auto_create_on_produce(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap)
    (meta,) = send_all(producer, topic, [{"value": b"first", "partition": 2}])
    producer.close()
    assert (meta.topic, meta.partition, meta.offset) == (topic, 2, 0)
    consumer = make_consumer(shared_gateway.bootstrap)
    try:
        assert consumer.partitions_for_topic(topic) == set(range(DEFAULT_PARTITIONS))
    finally:
        consumer.close()


# ------------------------------------------------------------------- produce paths


def test_keyed_unkeyed_headers_roundtrip(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap)
    sent = [
        {"key": b"k1", "value": b"keyed"},
        {"value": b"unkeyed"},
        {"key": b"k2", "value": None},
        {"value": b"with-headers", "headers": [("h1", b"v1"), ("h2", b""), ("h1", b"again")]},
        {"value": b"\x00\xff binary"},
    ]
    metas = send_all(producer, topic, [dict(m, partition=0) for m in sent])
    producer.close()
    assert [m.offset for m in metas] == list(range(len(sent)))
    records = read_all(shared_gateway.bootstrap, topic, len(sent), DEFAULT_PARTITIONS)
    assert [(r.partition, r.offset, r.key, r.value, r.headers) for r in records] == [
        (0, 0, b"k1", b"keyed", []),
        (0, 1, None, b"unkeyed", []),
        (0, 2, b"k2", None, []),
        (0, 3, None, b"with-headers", [("h1", b"v1"), ("h2", b""), ("h1", b"again")]),
        (0, 4, None, b"\x00\xff binary", []),
    ]


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_compression_roundtrip(shared_gateway, codec):
    if not CODEC_AVAILABLE[codec]:
        pytest.skip(f"kafka-python needs the {CODEC_PACKAGES[codec]} package for {codec}")
    topic = unique_topic(f"kp-{codec}")
    producer = make_producer(shared_gateway.bootstrap, compression_type=codec, linger_ms=50)
    n = 150
    sent = [
        {
            "key": f"key-{i % 5}".encode(),
            "value": (f"payload-{i}:" * (i % 11 + 1)).encode(),
            "headers": [("i", str(i).encode())],
        }
        for i in range(n)
    ]
    metas = send_all(producer, topic, sent)
    producer.close()
    records = read_all(shared_gateway.bootstrap, topic, n, DEFAULT_PARTITIONS)
    assert len(records) == n
    expected = {
        (m.partition, m.offset): (s["key"], s["value"]) for m, s in zip(metas, sent, strict=True)
    }
    assert {(r.partition, r.offset): (r.key, r.value) for r in records} == expected
    assert sorted(int(r.headers[0][1]) for r in records) == list(range(n))
    for p, recs in by_partition(records).items():
        assert [r.offset for r in recs] == list(range(len(recs))), p


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(shared_gateway, acks):
    topic = unique_topic(f"kp-acks-{acks}")
    producer = make_producer(shared_gateway.bootstrap, acks=acks, enable_idempotence=acks == "all")
    n = 25
    metas = send_all(
        producer, topic, [{"value": f"a{i}".encode(), "partition": 1} for i in range(n)]
    )
    producer.close()
    if acks != 0:
        assert [m.offset for m in metas] == list(range(n))
    records = read_all(shared_gateway.bootstrap, topic, n, DEFAULT_PARTITIONS)
    assert [(r.partition, r.offset, r.value) for r in records] == [
        (1, i, f"a{i}".encode()) for i in range(n)
    ]


def test_consume_earliest_latest_and_specific_offset(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap)
    send_all(producer, topic, [{"value": f"old{i}".encode(), "partition": 0} for i in range(5)])
    tp = TopicPartition(topic, 0)
    earliest = make_consumer(shared_gateway.bootstrap)
    latest = make_consumer(shared_gateway.bootstrap)
    specific = make_consumer(shared_gateway.bootstrap)
    try:
        for c in (earliest, latest, specific):
            c.assign([tp])
        earliest.seek_to_beginning(tp)
        specific.seek(tp, 2)
        latest.seek_to_end(tp)
        assert latest.position(tp) == 5
        assert earliest.position(tp) == 0

        send_all(producer, topic, [{"value": f"new{i}".encode(), "partition": 0} for i in range(2)])
        got_earliest = kafka_python_consume(earliest, 7)
        got_specific = kafka_python_consume(specific, 5)
        got_latest = kafka_python_consume(latest, 2)
        extra = kafka_python_consume(latest, 1, 0.5)
    finally:
        producer.close()
        for c in (earliest, latest, specific):
            c.close()
    values = [f"old{i}".encode() for i in range(5)] + [b"new0", b"new1"]
    assert [(r.offset, r.value) for r in got_earliest] == list(enumerate(values))
    assert [(r.offset, r.value) for r in got_specific] == list(enumerate(values))[2:]
    assert [(r.offset, r.value) for r in got_latest] == [(5, b"new0"), (6, b"new1")]
    assert extra == []


def test_key_partitioning_order_and_dense_offsets(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap, linger_ms=10)
    n = 240
    sent = [{"key": f"user-{i % 13}".encode(), "value": str(i).encode()} for i in range(n)]
    metas = send_all(producer, topic, sent)
    producer.close()
    records = read_all(shared_gateway.bootstrap, topic, n, DEFAULT_PARTITIONS)
    assert len(records) == n

    key_partitions: dict[bytes, set[int]] = defaultdict(set)
    for r in records:
        key_partitions[r.key].add(r.partition)
    assert all(len(v) == 1 for v in key_partitions.values()), key_partitions
    assert len(set().union(*key_partitions.values())) > 1

    # the partition the client chose is where the record is stored, at the acked offset
    expected = {(m.partition, m.offset): s["value"] for m, s in zip(metas, sent, strict=True)}
    assert {(r.partition, r.offset): r.value for r in records} == expected
    for p, recs in by_partition(records).items():
        assert [r.offset for r in recs] == list(range(len(recs))), p
        values = [int(r.value) for r in recs]
        assert values == sorted(values), f"partition {p} out of production order"


def test_beginning_end_offsets_and_offsets_for_times(shared_gateway, topic):
    producer = make_producer(shared_gateway.bootstrap)
    base = int(time.time() * 1000) - 120_000
    stamps = [base + 2000 * i for i in range(5)]
    send_all(
        producer,
        topic,
        [
            {"value": f"t{i}".encode(), "partition": 2, "timestamp_ms": ts}
            for i, ts in enumerate(stamps)
        ],
    )
    producer.close()
    tp2 = TopicPartition(topic, 2)
    tp0 = TopicPartition(topic, 0)
    consumer = make_consumer(shared_gateway.bootstrap)
    try:
        assert consumer.beginning_offsets([tp0, tp2]) == {tp0: 0, tp2: 0}
        assert consumer.end_offsets([tp0, tp2]) == {tp0: 0, tp2: 5}

        def lookup(ts):
            found = consumer.offsets_for_times({tp2: ts})[tp2]
            return None if found is None else (found.offset, found.timestamp)

        assert lookup(base - 1) == (0, stamps[0])
        assert lookup(base) == (0, stamps[0])
        assert lookup(base + 1) == (1, stamps[1])
        assert lookup(base + 5000) == (3, stamps[3])
        assert lookup(stamps[-1]) == (4, stamps[-1])
        assert lookup(stamps[-1] + 1) is None

        consumer.assign([tp2])
        consumer.seek(tp2, 0)
        records = kafka_python_consume(consumer, 5)
    finally:
        consumer.close()
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in records] == [
        (i, ts, 0) for i, ts in enumerate(stamps)
    ]


@pytest.mark.parametrize("api_version", [(0, 11), (1, 0), (2, 0), (2, 1), (2, 5)], ids=str)
def test_older_protocol_versions(shared_gateway, api_version):
    """Pinning api_version makes kafka-python use older Produce/Fetch/ListOffsets/Metadata."""
    topic = unique_topic(f"kp-v{'-'.join(map(str, api_version))}")
    base = int(time.time() * 1000) - 10_000
    producer = make_producer(
        shared_gateway.bootstrap, api_version=api_version, enable_idempotence=False, acks=1
    )
    sent = [
        {
            "key": f"k{i}".encode(),
            "value": f"v{i}".encode(),
            "partition": 1,
            "timestamp_ms": base + i,
            "headers": [("n", str(i).encode())],
        }
        for i in range(4)
    ]
    metas = send_all(producer, topic, sent)
    producer.close()
    assert [m.offset for m in metas] == [0, 1, 2, 3]

    tp = TopicPartition(topic, 1)
    consumer = make_consumer(shared_gateway.bootstrap, api_version=api_version)
    try:
        assert consumer.end_offsets([tp]) == {tp: 4}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.offsets_for_times({tp: base + 2})[tp].offset == 2
        consumer.assign([tp])
        consumer.seek(tp, 1)
        records = kafka_python_consume(consumer, 3)
    finally:
        consumer.close()
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in records] == [
        (i, f"k{i}".encode(), f"v{i}".encode(), base + i, [("n", str(i).encode())])
        for i in range(1, 4)
    ]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_reads_batches_compressed_by_librdkafka(shared_gateway, codec):
    if not CODEC_AVAILABLE[codec]:
        pytest.skip(f"kafka-python needs the {CODEC_PACKAGES[codec]} package for {codec}")
    from confluent_kafka import Producer

    topic = unique_topic(f"kp-cross-{codec}")
    producer = Producer(
        {"bootstrap.servers": shared_gateway.bootstrap, "compression.type": codec, "linger.ms": 50}
    )
    for i in range(50):
        producer.produce(topic, value=f"x{i}".encode() * 10, key=b"k", partition=0)
    assert producer.flush(TIMEOUT) == 0
    records = read_all(shared_gateway.bootstrap, topic, 50, DEFAULT_PARTITIONS)
    assert [(r.offset, r.value) for r in records] == [(i, f"x{i}".encode() * 10) for i in range(50)]
