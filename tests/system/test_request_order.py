"""Requests on one connection take effect in the order they were sent (Kafka's promise).

Each case pipelines a request that changes something and one that reads it back on one
connection, without waiting for the first answer, and checks the read saw the change:
raw requests for every pair the ordering contract names, then the same scenarios through
confluent-kafka and kafka-python as users hit them (asynchronous commits then a
synchronous one; DeleteRecords then ListOffsets right behind it).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kio.index import load_request_schema
from support.client import (
    RawClient,
    Rec,
    build_record_batch,
    decode_records,
    fetch_request,
    list_offsets_request,
    metadata_request,
    produce_request,
    wait_until,
)

from kafkawire.codec import build_entity

TRIES = 30
EARLIEST, LATEST = -2, -1
TIMEOUT = 20.0


def _request(api_key: int, version: int, **body: Any) -> Any:
    return build_entity(load_request_schema(api_key, version), body)


def _pipelined(client: RawClient, requests: list[Any]) -> list[Any]:
    """Send every request before reading any answer; the answers in order."""
    ids = [client.send(r) for r in requests]
    return [client.receive(r, i) for r, i in zip(requests, ids, strict=True)]


def _create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT)


def _commit(group: str, topic: str, offset: int) -> Any:
    return _request(
        8,
        8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    )


def _offset_fetch(group: str, topic: str) -> Any:
    return _request(
        9,
        7,
        group_id=group,
        topics=[{"name": topic, "partition_indexes": [0]}],
        require_stable=False,
    )


def _delete_records(topic: str, offset: int) -> Any:
    return _request(
        21,
        2,
        topics=[{"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}],
        timeout=5_000,
    )


def _batch(tag: str, count: int = 1) -> bytes:
    return build_record_batch([Rec(f"{tag}-{i}".encode()) for i in range(count)])


def _low_and_high(client: RawClient, topic: str) -> tuple[int, int]:
    low, high = _pipelined(
        client, [list_offsets_request(topic, 0, EARLIEST), list_offsets_request(topic, 0, LATEST)]
    )
    return (
        low.topics[0].partitions[0].offset,
        high.topics[0].partitions[0].offset,
    )


# --------------------------------------------------------------- raw pipelined pairs


def test_pipelined_commits_then_offset_fetch(shared_gateway):
    """20 OffsetCommits of growing offsets, then an OffsetFetch, all in flight at once:
    the fetch returns the last commit, every time."""
    topic, group = f"order-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    _create_topic(shared_gateway.bootstrap, topic)
    stale = []
    with RawClient(shared_gateway.bootstrap) as client:
        for attempt in range(TRIES):
            base = attempt * 100
            requests = [_commit(group, topic, base + i) for i in range(1, 21)]
            requests.append(_offset_fetch(group, topic))
            *commits, fetched = _pipelined(client, requests)
            assert all(c.topics[0].partitions[0].error_code == 0 for c in commits)
            got = fetched.topics[0].partitions[0].committed_offset
            if got != base + 20:
                stale.append((attempt, got, base + 20))
    assert not stale, f"{len(stale)} of {TRIES} OffsetFetches missed an earlier commit: {stale}"


def test_pipelined_delete_records_then_list_offsets(shared_gateway):
    topic = f"order-{uuid.uuid4().hex[:8]}"
    _create_topic(shared_gateway.bootstrap, topic)
    stale = []
    with RawClient(shared_gateway.bootstrap) as client:
        response = client.request(produce_request(topic, 0, _batch("r", TRIES + 1)))
        assert response.responses[0].partition_responses[0].error_code == 0
        for offset in range(1, TRIES + 1):
            deleted, earliest = _pipelined(
                client, [_delete_records(topic, offset), list_offsets_request(topic, 0, EARLIEST)]
            )
            assert deleted.topics[0].partitions[0].error_code == 0
            assert deleted.topics[0].partitions[0].low_watermark == offset
            got = earliest.topics[0].partitions[0].offset
            if got != offset:
                stale.append((offset, got))
    assert not stale, f"{len(stale)} of {TRIES} ListOffsets saw an old log start: {stale}"


@pytest.mark.parametrize("acks", [-1, 1, 0])
def test_pipelined_produce_then_fetch(shared_gateway, acks):
    """A Fetch that does not wait (max_wait 0) right behind a Produce reads its record,
    and ListOffsets(latest) counts it, for every acks setting (acks=0 has no answer)."""
    topic = f"order-{uuid.uuid4().hex[:8]}"
    _create_topic(shared_gateway.bootstrap, topic)
    stale = []
    with RawClient(shared_gateway.bootstrap) as client:
        for offset in range(TRIES):
            value = f"p{offset}".encode()
            produce = produce_request(topic, 0, build_record_batch([Rec(value)]), acks=acks)
            fetch = fetch_request(topic, 0, offset, max_wait_ms=0)
            latest = list_offsets_request(topic, 0, LATEST)
            if acks == 0:
                client.send(produce)  # never answered
                fetched, end = _pipelined(client, [fetch, latest])
            else:
                produced, fetched, end = _pipelined(client, [produce, fetch, latest])
                part = produced.responses[0].partition_responses[0]
                assert (part.error_code, part.base_offset) == (0, offset)
            records = decode_records(fetched.responses[0].partitions[0].records)
            high = end.topics[0].partitions[0].offset
            if [r[2] for r in records[:1]] != [value] or high != offset + 1:
                stale.append((offset, records[:1], high))
    assert not stale, f"{len(stale)} of {TRIES} reads missed the Produce before them: {stale}"


def test_pipelined_create_topics_then_metadata(shared_gateway):
    stale = []
    with RawClient(shared_gateway.bootstrap) as client:
        for attempt in range(TRIES):
            topic = f"order-{uuid.uuid4().hex[:8]}-{attempt}"
            create = _request(
                19,
                5,
                topics=[
                    {
                        "name": topic,
                        "num_partitions": 2,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                timeout=10_000,
                validate_only=False,
            )
            created, metadata = _pipelined(
                client, [create, metadata_request([topic], auto_create=False)]
            )
            assert created.topics[0].error_code == 0
            described = metadata.topics[0]
            if described.error_code != 0 or len(described.partitions) != 2:
                stale.append((topic, int(described.error_code), len(described.partitions)))
    assert not stale, f"{len(stale)} of {TRIES} Metadata answers missed the topic: {stale}"


def test_pipelined_alter_configs_then_describe_configs(shared_gateway):
    topic = f"order-{uuid.uuid4().hex[:8]}"
    _create_topic(shared_gateway.bootstrap, topic)
    stale = []
    with RawClient(shared_gateway.bootstrap) as client:
        for attempt in range(TRIES):
            value = str(3_600_000 + attempt)
            alter = _request(
                33,
                2,
                resources=[
                    {
                        "resource_type": 2,
                        "resource_name": topic,
                        "configs": [{"name": "retention.ms", "value": value}],
                    }
                ],
                validate_only=False,
            )
            describe = _request(
                32,
                4,
                resources=[
                    {
                        "resource_type": 2,
                        "resource_name": topic,
                        "configuration_keys": ["retention.ms"],
                    }
                ],
                include_synonyms=False,
                include_documentation=False,
            )
            altered, described = _pipelined(client, [alter, describe])
            assert altered.responses[0].error_code == 0
            got = described.results[0].configs[0].value
            if got != value:
                stale.append((value, got))
    assert not stale, f"{len(stale)} of {TRIES} DescribeConfigs missed the AlterConfigs: {stale}"


def test_pipelined_produces_keep_their_order_and_answers(shared_gateway):
    """Consecutive Produce requests still overlap (one group commit) and keep their order:
    64 in flight get dense, growing offsets, answered in request order."""
    topic = f"order-{uuid.uuid4().hex[:8]}"
    _create_topic(shared_gateway.bootstrap, topic)
    with RawClient(shared_gateway.bootstrap) as client:
        requests = [produce_request(topic, 0, _batch(f"b{i}", 2)) for i in range(64)]
        answers = _pipelined(client, requests)
        offsets = [a.responses[0].partition_responses[0].base_offset for a in answers]
        assert offsets == list(range(0, 128, 2))
        assert _low_and_high(client, topic) == (0, 128)


@pytest.mark.parametrize("acks", [-1, 1])
def test_a_producer_waiting_for_each_answer_then_reads_them_back(shared_gateway, acks):
    """One Produce at a time (the only request in flight is answered where its group commit
    ends, not by the connection's writer task): every answer in turn, with dense offsets,
    then a pipelined Produce pair, a Fetch of all of it and ListOffsets on the same
    connection."""
    topic = f"order-{uuid.uuid4().hex[:8]}"
    _create_topic(shared_gateway.bootstrap, topic)
    with RawClient(shared_gateway.bootstrap) as client:
        for i in range(100):
            answer = client.request(produce_request(topic, 0, _batch(f"w{i}"), acks=acks))
            part = answer.responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (0, i)
        pair = [produce_request(topic, 0, _batch(f"p{i}"), acks=acks) for i in range(2)]
        offsets = [
            a.responses[0].partition_responses[0].base_offset for a in _pipelined(client, pair)
        ]
        assert offsets == [100, 101]
        fetched = client.request(fetch_request(topic, 0, 0, max_wait_ms=0))
        values = [r[2] for r in decode_records(fetched.responses[0].partitions[0].records)]
        assert values == [f"w{i}-0".encode() for i in range(100)] + [b"p0-0", b"p1-0"]
        assert _low_and_high(client, topic) == (0, 102)


def test_a_produce_read_behind_a_lone_one_is_answered_after_it(shared_gateway):
    """A Produce read while the one before it waits for its group commit (two topics: two
    logs, whose writes may end in either order): the answers still come in request order."""
    topics = [f"order-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for topic in topics:
        _create_topic(shared_gateway.bootstrap, topic)
    # The first write is large, so the second one's usually ends first.
    large = build_record_batch([Rec(b"v" * 1000) for _ in range(800)])
    with RawClient(shared_gateway.bootstrap) as client:
        for i in range(100):
            first = produce_request(topics[0], 0, large)
            second = produce_request(topics[1], 0, _batch(f"b{i}"))
            answers = _pipelined(client, [first, second])  # (checks correlation ids)
            offsets = [a.responses[0].partition_responses[0].base_offset for a in answers]
            assert offsets == [800 * i, i]


def test_clients_gone_before_their_answer_leave_the_gateway_serving(shared_gateway):
    """Connections closed right after sending a Produce (its answer due when the group
    commit ends, with no one to read it): the records are still written, nothing fails in
    the gateway's log, and the next client is served."""
    topic = f"order-{uuid.uuid4().hex[:8]}"
    _create_topic(shared_gateway.bootstrap, topic)
    for i in range(30):
        gone = RawClient(shared_gateway.bootstrap)
        gone.send(produce_request(topic, 0, _batch(f"g{i}")))
        gone.close()
    with RawClient(shared_gateway.bootstrap) as client:
        wait_until(lambda: _low_and_high(client, topic) == (0, 30), timeout=TIMEOUT)
        answer = client.request(produce_request(topic, 0, _batch("after")))
        assert answer.responses[0].partition_responses[0].base_offset == 30
    log = shared_gateway.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "handler failed" not in log


# ------------------------------------------------------------------ real clients


def test_confluent_async_commits_then_sync_commit(shared_gateway):
    """200 asynchronous commits of growing offsets, then a synchronous one: committed()
    returns the last, in every round (librdkafka pipelines commits on one connection)."""
    bootstrap = shared_gateway.bootstrap
    topic = f"order-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic)
    stale = []
    for round_ in range(10):
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"g-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
            }
        )
        try:
            for offset in range(1, 201):
                consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=True)
            consumer.commit(offsets=[TopicPartition(topic, 0, 200)], asynchronous=False)
            got = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)[0].offset
            if got != 200:
                stale.append((round_, got))
        finally:
            consumer.close()
    assert not stale, f"{len(stale)} of 10 rounds committed() went back: {stale}"


def test_kafka_python_async_commits_then_sync_commit(shared_gateway):
    bootstrap = shared_gateway.bootstrap
    topic = f"order-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic)
    partition = KpTopicPartition(topic, 0)
    from kafka.structs import OffsetAndMetadata

    stale = []
    for round_ in range(10):
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=f"g-{uuid.uuid4().hex[:8]}",
            enable_auto_commit=False,
            # kafka-python sends queued requests only while fewer than this are unanswered;
            # with its default of 5, 200 commits without a poll time out on Kafka too.
            max_in_flight_requests_per_connection=256,
        )
        try:
            # Find the coordinator first: kafka-python sends async commits made before it
            # knows the coordinator once the lookup ends, and under load those can go out
            # after later commits (its own ordering, on any broker); this test is about
            # the gateway keeping the order they were sent in.
            assert consumer.committed(partition) is None
            for offset in range(1, 201):
                consumer.commit_async({partition: OffsetAndMetadata(offset, "", -1)})
            consumer.commit({partition: OffsetAndMetadata(200, "", -1)})
            got = consumer.committed(partition)
            if got != 200:
                stale.append((round_, got))
        finally:
            consumer.close()
    assert not stale, f"{len(stale)} of 10 rounds committed() went back: {stale}"


def test_confluent_delete_records_then_list_offsets(shared_gateway):
    from confluent_kafka.admin import OffsetSpec

    bootstrap = shared_gateway.bootstrap
    topic = f"order-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic)
    with RawClient(bootstrap) as client:
        client.request(produce_request(topic, 0, _batch("c", TRIES + 1)))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Until the client knows the partition's leader, a request may go out on its bootstrap
    # connection and the next on the leader's: two connections, no order promised (on
    # Kafka neither). Learn the leader first; then both go on one connection.
    admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})[
        TopicPartition(topic, 0)
    ].result(TIMEOUT)
    stale = []
    for offset in range(1, TRIES + 1):
        part = TopicPartition(topic, 0, offset)
        deleted = admin.delete_records([part])[part]
        listed = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
        deleted.result(TIMEOUT)
        got = listed[TopicPartition(topic, 0)].result(TIMEOUT).offset
        if got != offset:
            stale.append((offset, got))
    assert not stale, f"{len(stale)} of {TRIES} ListOffsets saw an old log start: {stale}"


def test_kafka_python_delete_records_then_list_offsets(shared_gateway):
    bootstrap = shared_gateway.bootstrap
    topic = f"order-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic)
    with RawClient(bootstrap) as client:
        client.request(produce_request(topic, 0, _batch("k", TRIES + 1)))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    stale = []
    try:
        partition = KpTopicPartition(topic, 0)
        for offset in range(1, TRIES + 1):
            admin.delete_records({partition: offset})
            got = consumer.beginning_offsets([partition])[partition]
            if got != offset:
                stale.append((offset, got))
    finally:
        admin.close()
        consumer.close()
    assert not stale, f"{len(stale)} of {TRIES} beginning_offsets saw an old log start: {stale}"
