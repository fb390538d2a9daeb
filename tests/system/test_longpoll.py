"""Fetch long-polling, out-of-range fetches, high watermark and log start offset."""

from __future__ import annotations

import threading
import time

import kafka.errors as kerr
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KPTopicPartition
from support.client import (
    ERR_NONE,
    ERR_OFFSET_OUT_OF_RANGE,
    ERR_UNKNOWN_TOPIC_OR_PARTITION,
    RawClient,
    Rec,
    api_versions_ok,
    build_record_batch,
    confluent_consume,
    decode_records,
    fetch_request,
    list_offsets_request,
    ms,
    produce_request,
    unique_topic,
    wait_until,
)

LONG_WAIT_MS = 10_000
# A record produced while a consumer is parked in a 10 s long poll must arrive well
# before the poll would have expired on its own.
PROMPT_S = 6.0


def produce_sync(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    errors: list = []
    for v in values:
        producer.produce(
            topic, value=v, partition=partition, on_delivery=lambda e, _m: e and errors.append(e)
        )
    assert producer.flush(20) == 0
    assert errors == []


def single_partition(fetch_response):
    (topic_resp,) = fetch_response.responses
    (part,) = topic_resp.partitions
    return part


# ------------------------------------------------------------------- raw protocol


def test_fetch_at_end_waits_for_max_wait(shared_gateway, topic):
    produce_sync(shared_gateway.bootstrap, topic, [b"a", b"b"])
    with RawClient(shared_gateway.bootstrap) as client:
        start = time.monotonic()
        resp = client.request(fetch_request(topic, 0, 2, max_wait_ms=1000))
        elapsed = time.monotonic() - start
    part = single_partition(resp)
    assert part.error_code == ERR_NONE
    assert part.high_watermark == 2
    assert decode_records(part.records) == []
    # It must actually wait (not busy-return) but not grossly overshoot.
    assert 0.8 <= elapsed < 6.0, elapsed


def test_fetch_with_data_returns_immediately(shared_gateway, topic):
    produce_sync(shared_gateway.bootstrap, topic, [b"a", b"b", b"c"])
    with RawClient(shared_gateway.bootstrap) as client:
        start = time.monotonic()
        resp = client.request(fetch_request(topic, 0, 1, max_wait_ms=LONG_WAIT_MS))
        elapsed = time.monotonic() - start
    part = single_partition(resp)
    assert part.error_code == ERR_NONE
    got = [(o, v) for o, _k, v in decode_records(part.records) if o >= 1]
    assert got == [(1, b"b"), (2, b"c")]
    assert elapsed < PROMPT_S


def test_raw_long_poll_wakes_up_on_append(shared_gateway, topic):
    produce_sync(shared_gateway.bootstrap, topic, [b"seed"])
    timer = threading.Timer(0.5, produce_sync, args=(shared_gateway.bootstrap, topic, [b"wake-up"]))
    with RawClient(shared_gateway.bootstrap, timeout=30) as client:
        start = time.monotonic()
        correlation_id = client.send(fetch_request(topic, 0, 1, max_wait_ms=LONG_WAIT_MS))
        timer.start()
        try:
            resp = client.receive(fetch_request(topic, 0, 1), correlation_id)
        finally:
            timer.join()
        elapsed = time.monotonic() - start
    part = single_partition(resp)
    assert part.error_code == ERR_NONE
    assert [(o, v) for o, _k, v in decode_records(part.records)] == [(1, b"wake-up")]
    assert part.high_watermark == 2
    assert elapsed < PROMPT_S, f"long poll not woken by the append ({elapsed:.1f}s)"


def test_confluent_consumer_gets_record_during_long_poll(shared_gateway, topic):
    produce_sync(shared_gateway.bootstrap, topic, [b"old"])
    consumer = Consumer(
        {
            "bootstrap.servers": shared_gateway.bootstrap,
            "group.id": "longpoll",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": LONG_WAIT_MS,
            "socket.timeout.ms": 30000,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 1)])

        # Nothing to read yet; after this the consumer's fetch is parked on the server
        # (waiting for the first empty fetch to report EOF would take the full 10 s).
        assert confluent_consume(consumer, 1, timeout=1.0) == []
        sent_at = time.monotonic()
        produce_sync(shared_gateway.bootstrap, topic, [b"fresh"])
        msgs = confluent_consume(consumer, 1, timeout=PROMPT_S)
        received_after = time.monotonic() - sent_at
    finally:
        consumer.close()
    assert [(m.offset(), m.value()) for m in msgs] == [(1, b"fresh")]
    assert received_after < PROMPT_S


def test_kafka_python_consumer_gets_record_during_long_poll(shared_gateway, topic):
    produce_sync(shared_gateway.bootstrap, topic, [b"old"])
    tp = KPTopicPartition(topic, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=shared_gateway.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_wait_ms=LONG_WAIT_MS,
        request_timeout_ms=30000,
    )
    try:
        consumer.assign([tp])
        consumer.seek(tp, 1)
        assert consumer.poll(timeout_ms=1000) == {}  # a long fetch is now outstanding
        timer = threading.Timer(
            0.3, produce_sync, args=(shared_gateway.bootstrap, topic, [b"fresh"])
        )
        start = time.monotonic()
        timer.start()
        records: list = []
        while not records and time.monotonic() - start < PROMPT_S:
            for recs in consumer.poll(timeout_ms=200).values():
                records.extend(recs)
        elapsed = time.monotonic() - start
        timer.join()
    finally:
        consumer.close()
    assert [(r.offset, r.value) for r in records] == [(1, b"fresh")]
    assert elapsed < PROMPT_S


# ----------------------------------------------------------------- offset errors


@pytest.mark.parametrize("offset", [3, 50, -7])
def test_fetch_out_of_range_error_code(shared_gateway, topic, offset):
    produce_sync(shared_gateway.bootstrap, topic, [b"a", b"b"])
    with RawClient(shared_gateway.bootstrap) as client:
        start = time.monotonic()
        resp = client.request(fetch_request(topic, 0, offset, max_wait_ms=LONG_WAIT_MS))
        elapsed = time.monotonic() - start
    part = single_partition(resp)
    assert part.error_code == ERR_OFFSET_OUT_OF_RANGE
    assert decode_records(part.records) == []
    assert elapsed < PROMPT_S, "an error should be returned without waiting out max_wait"


def test_kafka_python_offset_out_of_range_raises(shared_gateway, topic):
    produce_sync(shared_gateway.bootstrap, topic, [b"a", b"b", b"c"])
    tp = KPTopicPartition(topic, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=shared_gateway.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
    )
    try:
        consumer.assign([tp])
        consumer.seek(tp, 100)
        with pytest.raises(kerr.OffsetOutOfRangeError):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                assert consumer.poll(timeout_ms=200) == {}
    finally:
        consumer.close()


def test_confluent_offset_out_of_range_reset_error(shared_gateway, topic):
    produce_sync(shared_gateway.bootstrap, topic, [b"a"])
    consumer = Consumer(
        {
            "bootstrap.servers": shared_gateway.bootstrap,
            "group.id": "oor",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 42)])

        def got_error():
            msg = consumer.poll(0.2)
            if msg is None:
                return None
            assert msg.error() is not None, f"unexpected message at offset {msg.offset()}"
            return msg.error()

        err = wait_until(got_error, timeout=15)
    finally:
        consumer.close()
    assert err.code() == KafkaError._AUTO_OFFSET_RESET


def test_fetch_unknown_topic_and_partition(shared_gateway, topic):
    produce_sync(shared_gateway.bootstrap, topic, [b"a"])
    missing = unique_topic("missing")
    with RawClient(shared_gateway.bootstrap) as client:
        bad_topic = single_partition(client.request(fetch_request(missing, 0, 0, max_wait_ms=0)))
        bad_part = single_partition(client.request(fetch_request(topic, 99, 0, max_wait_ms=0)))
        lo = client.request(list_offsets_request(missing, 0, -1))
    assert bad_topic.error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION
    assert bad_part.error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION
    assert lo.topics[0].partitions[0].error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION
    # a fetch or list-offsets must not auto-create the topic
    admin_md = Consumer({"bootstrap.servers": shared_gateway.bootstrap, "group.id": "md"})
    try:
        assert missing not in admin_md.list_topics(timeout=10).topics
    finally:
        admin_md.close()


# ------------------------------------------------------- watermarks, log start offset


def test_high_watermark_log_start_and_list_offsets(shared_gateway, topic):
    produce_sync(shared_gateway.bootstrap, topic, [f"r{i}".encode() for i in range(5)])
    with RawClient(shared_gateway.bootstrap) as client:
        empty = single_partition(client.request(fetch_request(topic, 1, 0, max_wait_ms=0)))
        full = single_partition(client.request(fetch_request(topic, 0, 0, max_wait_ms=0)))
        tail = single_partition(client.request(fetch_request(topic, 0, 3, max_wait_ms=0)))
        earliest = client.request(list_offsets_request(topic, 0, -2))
        latest = client.request(list_offsets_request(topic, 0, -1))
        latest_empty = client.request(list_offsets_request(topic, 1, -1))

    assert (empty.error_code, empty.high_watermark, empty.log_start_offset) == (0, 0, 0)
    assert empty.last_stable_offset == 0
    assert decode_records(empty.records) == []

    assert (full.error_code, full.high_watermark, full.log_start_offset) == (0, 5, 0)
    assert full.last_stable_offset == 5
    assert [(o, v) for o, _k, v in decode_records(full.records)] == [
        (i, f"r{i}".encode()) for i in range(5)
    ]
    assert tail.high_watermark == 5
    assert [o for o, _k, _v in decode_records(tail.records) if o >= 3] == [3, 4]

    def offset_of(resp):
        (t,) = resp.topics
        (p,) = t.partitions
        assert p.error_code == ERR_NONE
        return p.offset

    assert offset_of(earliest) == 0
    assert offset_of(latest) == 5
    assert offset_of(latest_empty) == 0


def test_fetch_respects_partition_max_bytes_but_returns_first_batch(shared_gateway, topic):
    big = b"x" * 50_000
    produce_sync(shared_gateway.bootstrap, topic, [big, b"small"])
    with RawClient(shared_gateway.bootstrap) as client:
        part = single_partition(
            client.request(fetch_request(topic, 0, 0, max_wait_ms=0, partition_max_bytes=1000))
        )
    assert part.error_code == ERR_NONE
    # Like Kafka, at least the first batch is returned even if larger than the limit,
    # so that consumers can always make progress.
    records = decode_records(part.records)
    assert records[:1] == [(0, None, big)]


def test_shutdown_while_long_poll_outstanding(gateway, topic):
    produce_sync(gateway.bootstrap, topic, [b"a"])
    client = RawClient(gateway.bootstrap, timeout=30)
    try:
        client.send(fetch_request(topic, 0, 1, max_wait_ms=30_000))
        client.wait_request_taken()  # the fetch is parked on the server
        start = time.monotonic()
        assert gateway.stop(timeout=15) == 0
        assert time.monotonic() - start < 10, "shutdown waited for the long poll to expire"
    finally:
        client.close()


def test_long_poll_returns_when_topic_is_deleted(shared_gateway, topic):
    from confluent_kafka.admin import AdminClient

    produce_sync(shared_gateway.bootstrap, topic, [b"a"])
    admin = AdminClient({"bootstrap.servers": shared_gateway.bootstrap})
    with RawClient(shared_gateway.bootstrap, timeout=30) as client:
        start = time.monotonic()
        correlation_id = client.send(fetch_request(topic, 0, 1, max_wait_ms=LONG_WAIT_MS))
        client.wait_request_taken()  # parked before the topic goes
        admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=20)
        resp = client.receive(fetch_request(topic, 0, 1), correlation_id)
        elapsed = time.monotonic() - start
    part = single_partition(resp)
    assert part.error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION
    assert elapsed < PROMPT_S, "parked fetch was not released when its topic was deleted"
    assert api_versions_ok(shared_gateway.bootstrap)


def test_list_offsets_max_timestamp(shared_gateway, topic):
    """ListOffsets v7 timestamp -3 (KIP-734): the offset holding the largest timestamp."""
    with RawClient(shared_gateway.bootstrap) as client:
        for ts in (1000, 3000, 2000):
            client.request(produce_request(topic, 0, build_record_batch([Rec(b"x")], ts)))
        (t,) = client.request(list_offsets_request(topic, 0, -3)).topics
        (empty_t,) = client.request(list_offsets_request(topic, 1, -3)).topics
    (p,) = t.partitions
    assert (p.error_code, p.offset, p.timestamp) == (ERR_NONE, 1, 3000)
    (e,) = empty_t.partitions
    assert (e.error_code, e.offset) == (ERR_NONE, -1)


def test_multi_partition_fetch_reports_errors_per_partition(shared_gateway, topic):
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.static.primitive import i8, i32, i64

    produce_sync(shared_gateway.bootstrap, topic, [b"p0-0", b"p0-1", b"p0-2"], partition=0)
    wanted = [(0, 1), (1, 5), (2, 0), (7, 0)]
    request = FetchRequest(
        max_wait=ms(0),
        min_bytes=i32(1),
        isolation_level=i8(1),  # read_committed: no transactions, so LSO == HW
        topics=(
            FetchTopic(
                topic=topic,
                partitions=tuple(
                    FetchPartition(
                        partition=i32(p), fetch_offset=i64(o), partition_max_bytes=i32(1 << 20)
                    )
                    for p, o in wanted
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    with RawClient(shared_gateway.bootstrap) as client:
        resp = client.request(request)
    (t,) = resp.responses
    got = {
        p.partition_index: (
            p.error_code,
            [
                (o, v)
                for o, _k, v in decode_records(p.records)
                if o >= dict(wanted)[p.partition_index]
            ],
        )
        for p in t.partitions
    }
    assert got == {
        0: (ERR_NONE, [(1, b"p0-1"), (2, b"p0-2")]),
        1: (ERR_OFFSET_OUT_OF_RANGE, []),
        2: (ERR_NONE, []),
        7: (ERR_UNKNOWN_TOPIC_OR_PARTITION, []),
    }
    p0 = next(p for p in t.partitions if p.partition_index == 0)
    assert (p0.high_watermark, p0.last_stable_offset) == (3, 3)
