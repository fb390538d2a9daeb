"""DeleteRecords (API 21): confluent-kafka, kafka-python and raw v0-v2 requests against a real
gateway, including durability across SIGKILL and produce afterwards."""

from __future__ import annotations

from typing import Any

import kafka.errors as kerr
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from support.client import (
    ERR_NONE,
    ERR_OFFSET_OUT_OF_RANGE,
    ERR_UNKNOWN_TOPIC_OR_PARTITION,
    RawClient,
    Rec,
    api_versions_request,
    build_record_batch,
    confluent_consume,
    confluent_drain,
    decode_records,
    fetch_request,
    kafka_python_consume,
    list_offsets_request,
    ms,
    produce_request,
)
from support.confluent import confluent_consumer, create_topic

TIMEOUT = 20.0
API_DELETE_RECORDS = 21
EARLIEST, LATEST = -2, -1


# ------------------------------------------------------------------------------ helpers


def produce_raw(bootstrap: str, topic: str, partition: int, count: int, tag: str = "v") -> int:
    """One batch of `count` records; returns its base offset."""
    batch = build_record_batch([Rec(f"{tag}{i}".encode()) for i in range(count)])
    with RawClient(bootstrap) as client:
        response = client.request(produce_request(topic, partition, batch))
    part = response.responses[0].partition_responses[0]
    assert part.error_code == ERR_NONE
    return part.base_offset


def list_offset(client: RawClient, topic: str, partition: int, timestamp: int) -> int:
    response = client.request(list_offsets_request(topic, partition, timestamp))
    part = response.topics[0].partitions[0]
    assert part.error_code == ERR_NONE
    return part.offset


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(log start offset, high watermark) through ListOffsets earliest / latest."""
    with RawClient(bootstrap) as client:
        return (
            list_offset(client, topic, partition, EARLIEST),
            list_offset(client, topic, partition, LATEST),
        )


def fetch(bootstrap: str, topic: str, partition: int, offset: int) -> Any:
    with RawClient(bootstrap) as client:
        response = client.request(fetch_request(topic, partition, offset, max_wait_ms=100))
    return response.responses[0].partitions[0]


def delete_records_request(version: int, topics: list[tuple[str, list[tuple[int, int]]]]) -> Any:
    """A kio DeleteRecordsRequest of `version` for [(topic, [(partition, offset), ...])]."""
    import importlib

    from kio.static.primitive import i32, i64

    schema = importlib.import_module(f"kio.schema.delete_records.v{version}.request")
    return schema.DeleteRecordsRequest(
        topics=tuple(
            schema.DeleteRecordsTopic(
                name=name,
                partitions=tuple(
                    schema.DeleteRecordsPartition(partition_index=i32(p), offset=i64(o))
                    for p, o in partitions
                ),
            )
            for name, partitions in topics
        ),
        timeout=ms(5_000),
    )


def delete_records_raw(
    bootstrap: str, version: int, topics: list[tuple[str, list[tuple[int, int]]]]
) -> list[tuple[str, int, int, int]]:
    """Send DeleteRecords; (topic, partition, error code, low watermark) in response order."""
    request = delete_records_request(version, topics)
    with RawClient(bootstrap) as client:
        response = client.request(request)
    assert response.__version__ == version
    assert response.throttle_time.total_seconds() == 0
    return [
        (t.name, p.partition_index, int(p.error_code), p.low_watermark)
        for t in response.topics
        for p in t.partitions
    ]


def confluent_produce(bootstrap: str, topic: str, partition: int, count: int) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    offsets: list[int] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for i in range(count):
        producer.produce(
            topic, value=f"m{i}".encode(), partition=partition, on_delivery=on_delivery
        )
    assert producer.flush(TIMEOUT) == 0
    assert errors == []
    return sorted(offsets)


# ------------------------------------------------------------------------ confluent-kafka


def test_delete_records_confluent(gateway, topic):
    create_topic(gateway.bootstrap, topic, 2)
    assert confluent_produce(gateway.bootstrap, topic, 0, 10) == list(range(10))
    assert confluent_produce(gateway.bootstrap, topic, 1, 4) == list(range(4))

    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    futures = admin.delete_records(
        [TopicPartition(topic, 0, 6), TopicPartition(topic, 1, OFFSET_END)],
        request_timeout=TIMEOUT,
        operation_timeout=TIMEOUT,
    )
    lows = {tp.partition: future.result(TIMEOUT).low_watermark for tp, future in futures.items()}
    assert lows == {0: 6, 1: 4}

    # A consumer from the beginning starts at the new log start, mid-batch.
    consumer = confluent_consumer(gateway.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        messages = confluent_consume(consumer, 4, TIMEOUT)
        assert [(m.offset(), m.value()) for m in messages] == [
            (o, f"m{o}".encode()) for o in range(6, 10)
        ]
        assert confluent_drain(consumer, quiet=0.5) == []
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT) == (6, 10)
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), TIMEOUT) == (4, 4)
    finally:
        consumer.close()

    # Below the log start: librdkafka reports the out-of-range fetch (auto.offset.reset=error).
    consumer = confluent_consumer(gateway.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, 2)])
        error = None
        for _ in range(int(TIMEOUT / 0.2)):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error():
                error = msg.error()
                break
            assert msg is None, f"unexpected message at offset {msg.offset()}"
        assert error is not None
        assert error.code() == KafkaError._AUTO_OFFSET_RESET, error
        assert "Offset out of range" in error.str()
    finally:
        consumer.close()
    # With auto.offset.reset=earliest it resets to the new log start instead.
    consumer = confluent_consumer(gateway.bootstrap, **{"auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 2)])
        assert [m.offset() for m in confluent_consume(consumer, 4, TIMEOUT)] == [6, 7, 8, 9]
    finally:
        consumer.close()
    assert fetch(gateway.bootstrap, topic, 0, 2).error_code == ERR_OFFSET_OUT_OF_RANGE

    # Beyond the high watermark: the partition's future fails with OFFSET_OUT_OF_RANGE.
    futures = admin.delete_records([TopicPartition(topic, 0, 11)], request_timeout=TIMEOUT)
    with pytest.raises(KafkaException) as info:
        next(iter(futures.values())).result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    # librdkafka looks the leaders up first: an unknown topic or partition fails in the
    # client (_NOENT, "No leaders found") without a DeleteRecords request.
    for tp in (TopicPartition(f"{topic}-missing", 0, 1), TopicPartition(topic, 9, 1)):
        futures = admin.delete_records([tp], request_timeout=TIMEOUT)
        with pytest.raises(KafkaException) as info:
            next(iter(futures.values())).result(TIMEOUT)
        assert info.value.args[0].code() == KafkaError._NOENT
    assert watermarks(gateway.bootstrap, topic, 0) == (6, 10)


# -------------------------------------------------------------------------- kafka-python


def test_delete_records_kafka_python(gateway, topic):
    create_topic(gateway.bootstrap, topic, 2)
    produce_raw(gateway.bootstrap, topic, 0, 5, "a")
    produce_raw(gateway.bootstrap, topic, 0, 3, "b")  # offsets 5-7

    admin = KafkaAdminClient(bootstrap_servers=gateway.bootstrap, request_timeout_ms=15000)
    consumer = KafkaConsumer(
        bootstrap_servers=gateway.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        request_timeout_ms=15000,
    )
    try:
        tp0, tp1 = KpTopicPartition(topic, 0), KpTopicPartition(topic, 1)
        result = admin.delete_records({tp0: 4, tp1: 0}, timeout_ms=15000)
        assert {tp: (r["error_code"], r["low_watermark"]) for tp, r in result.items()} == {
            tp0: (0, 4),
            tp1: (0, 0),
        }
        # Again, lower: succeeds, the log start never moves back.
        result = admin.delete_records({tp0: 1}, timeout_ms=15000)
        assert result[tp0]["low_watermark"] == 4

        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 4, tp1: 0}
        assert consumer.end_offsets([tp0]) == {tp0: 8}
        consumer.assign([tp0])
        consumer.seek_to_beginning(tp0)
        records = kafka_python_consume(consumer, 4, TIMEOUT)
        assert [(r.offset, r.value) for r in records] == [
            (4, b"a4"),
            (5, b"b0"),
            (6, b"b1"),
            (7, b"b2"),
        ]

        consumer.seek(tp0, 1)
        with pytest.raises(kerr.OffsetOutOfRangeError):
            for _ in range(50):
                consumer.poll(timeout_ms=200)

        with pytest.raises(kerr.OffsetOutOfRangeError):
            admin.delete_records({tp0: 9}, timeout_ms=15000)
        # kafka-python resolves leaders through Metadata first: an unknown partition fails
        # in the client, before any DeleteRecords is sent.
        with pytest.raises(kerr.UnknownTopicOrPartitionError):
            admin.delete_records({KpTopicPartition(topic, 5): 0}, timeout_ms=15000)
        # Sent straight to the node (no leader lookup), the gateway answers it.
        with pytest.raises(kerr.UnknownTopicOrPartitionError):
            admin.delete_records(
                {KpTopicPartition(topic, 5): 0}, timeout_ms=15000, partition_leader_id=1
            )
        assert watermarks(gateway.bootstrap, topic, 0) == (4, 8)
    finally:
        consumer.close()
        admin.close()


# --------------------------------------------------------------------------- raw v0 - v2


def test_api_versions_advertises_delete_records(gateway):
    with RawClient(gateway.bootstrap) as client:
        response = client.request(api_versions_request())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[API_DELETE_RECORDS] == (0, 2)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records_raw(gateway, topic, version):
    create_topic(gateway.bootstrap, topic, 2)
    produce_raw(gateway.bootstrap, topic, 0, 6)
    produce_raw(gateway.bootstrap, topic, 1, 3)
    missing = f"{topic}-missing"

    results = delete_records_raw(
        gateway.bootstrap,
        version,
        [
            (topic, [(0, 2), (1, -1), (0, 4), (7, 0), (0, 7), (0, -2)]),
            (missing, [(0, 0)]),
            (topic, [(0, 3), (0, 6)]),  # the topic again: answered again, in order
        ],
    )
    assert results == [
        (topic, 0, ERR_NONE, 2),
        (topic, 1, ERR_NONE, 3),  # -1: up to the high watermark
        (topic, 0, ERR_NONE, 4),  # the same partition twice: both applied
        (topic, 7, ERR_UNKNOWN_TOPIC_OR_PARTITION, -1),
        (topic, 0, ERR_OFFSET_OUT_OF_RANGE, -1),  # beyond the high watermark (6)
        (topic, 0, ERR_OFFSET_OUT_OF_RANGE, -1),  # below -1
        (missing, 0, ERR_UNKNOWN_TOPIC_OR_PARTITION, -1),
        (topic, 0, ERR_NONE, 4),  # lower than the log start: it stays
        (topic, 0, ERR_NONE, 6),  # exactly the high watermark
    ]

    assert watermarks(gateway.bootstrap, topic, 0) == (6, 6)
    assert watermarks(gateway.bootstrap, topic, 1) == (3, 3)
    below = fetch(gateway.bootstrap, topic, 0, 5)
    assert below.error_code == ERR_OFFSET_OUT_OF_RANGE
    at_start = fetch(gateway.bootstrap, topic, 1, 3)
    assert (at_start.error_code, at_start.log_start_offset, at_start.high_watermark) == (
        ERR_NONE,
        3,
        3,
    )
    assert decode_records(at_start.records) == []
    # Unknown topics are not auto-created by DeleteRecords.
    with RawClient(gateway.bootstrap) as client:
        response = client.request(list_offsets_request(missing, 0, LATEST))
    assert response.topics[0].partitions[0].error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION


def test_delete_records_empty_request(gateway):
    for version in (0, 1, 2):
        assert delete_records_raw(gateway.bootstrap, version, []) == []


# ----------------------------------------------------------------- durability, produce after


def test_delete_records_survives_sigkill(gateway, topic):
    create_topic(gateway.bootstrap, topic, 2)
    produce_raw(gateway.bootstrap, topic, 0, 8)
    produce_raw(gateway.bootstrap, topic, 1, 2)
    assert delete_records_raw(gateway.bootstrap, 2, [(topic, [(0, 5), (1, -1)])]) == [
        (topic, 0, ERR_NONE, 5),
        (topic, 1, ERR_NONE, 2),
    ]

    gateway.kill()
    gateway.start()

    assert watermarks(gateway.bootstrap, topic, 0) == (5, 8)
    assert watermarks(gateway.bootstrap, topic, 1) == (2, 2)
    assert fetch(gateway.bootstrap, topic, 0, 4).error_code == ERR_OFFSET_OUT_OF_RANGE
    assert produce_raw(gateway.bootstrap, topic, 0, 2, "n") == 8
    assert produce_raw(gateway.bootstrap, topic, 1, 1, "n") == 2

    consumer = confluent_consumer(gateway.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        messages = confluent_consume(consumer, 5, TIMEOUT)
        assert [(m.offset(), m.value()) for m in messages] == [
            (5, b"v5"),
            (6, b"v6"),
            (7, b"v7"),
            (8, b"n0"),
            (9, b"n1"),
        ]
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), TIMEOUT) == (2, 3)
    finally:
        consumer.close()


def test_produce_after_delete_records_is_dense(gateway, topic):
    create_topic(gateway.bootstrap, topic, 1)
    produce_raw(gateway.bootstrap, topic, 0, 4)
    assert delete_records_raw(gateway.bootstrap, 1, [(topic, [(0, -1)])]) == [
        (topic, 0, ERR_NONE, 4)
    ]
    assert fetch(gateway.bootstrap, topic, 0, 0).error_code == ERR_OFFSET_OUT_OF_RANGE

    assert confluent_produce(gateway.bootstrap, topic, 0, 3) == [4, 5, 6]
    assert produce_raw(gateway.bootstrap, topic, 0, 2, "r") == 7
    assert watermarks(gateway.bootstrap, topic, 0) == (4, 9)

    part = fetch(gateway.bootstrap, topic, 0, 4)
    assert part.error_code == ERR_NONE
    assert [(o, v) for o, _k, v in decode_records(part.records)] == [
        (4, b"m0"),
        (5, b"m1"),
        (6, b"m2"),
        (7, b"r0"),
        (8, b"r1"),
    ]

    # Delete again in the middle of the new data; consumption resumes there.
    assert delete_records_raw(gateway.bootstrap, 0, [(topic, [(0, 6)])]) == [
        (topic, 0, ERR_NONE, 6)
    ]
    consumer = confluent_consumer(gateway.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        messages = confluent_consume(consumer, 3, TIMEOUT)
        assert [m.offset() for m in messages] == [6, 7, 8]
    finally:
        consumer.close()
