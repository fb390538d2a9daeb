"""One Fetch over many partitions, some read from tier 2 and some from tier 1.

The Fetch handler plans every tier-1 read in request order (sizes from the index) and reads
them all in one worker-thread hop at the end, while tier-2 reads are awaited in place: the
answer must still be each partition's batches in order, `max_bytes` shared out in request
order (only the first partition with data may exceed it), and per-partition errors kept.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.client import (
    RawClient,
    Rec,
    build_record_batch,
    decode_records,
    metadata_request,
    ms,
    produce_request,
    wait_until,
)

GATEWAY_ARGS = ("--chunk-bytes", "4096", "--chunk-age-ms", "200", "--local-retain-bytes", "0")
PARTITIONS = 8
BATCHES = 3
VALUE_BYTES = 1000
ERR_OFFSET_OUT_OF_RANGE = 1


def _value(partition: int, n: int) -> bytes:
    return b"%02d-%02d-" % (partition, n) + b"v" * (VALUE_BYTES - 6)


def _produce(client: RawClient, topic: str, partition: int) -> None:
    for n in range(BATCHES):
        batch = build_record_batch([Rec(key=b"k", value=_value(partition, n))])
        response = client.request(produce_request(topic, partition, batch))
        assert response.responses[0].partition_responses[0].error_code == 0


def _earliest_local(client: RawClient, topic: str, partition: int) -> int:
    from kio.schema.list_offsets.v8.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )
    from kio.static.primitive import i8, i32, i64

    request = ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(0),
        topics=(
            ListOffsetsTopic(
                name=topic,
                partitions=(
                    ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(-4)),
                ),
            ),
        ),
    )
    return int(client.request(request).topics[0].partitions[0].offset)


def _fetch(
    client: RawClient, topic: str, offsets: list[tuple[int, int]], max_bytes: int = 1 << 24
) -> Any:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.static.primitive import i32, i64

    request = FetchRequest(
        max_wait=ms(0),
        min_bytes=i32(0),
        max_bytes=i32(max_bytes),
        topics=(
            FetchTopic(
                topic=topic,
                partitions=tuple(
                    FetchPartition(
                        partition=i32(p), fetch_offset=i64(o), partition_max_bytes=i32(1 << 20)
                    )
                    for p, o in offsets
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    return client.request(request).responses[0].partitions


@pytest.fixture
def filled(shared_gateway: Any, topic: str) -> tuple[RawClient, str]:
    """Partitions 0-3 only in tier 2 (trimmed from tier 1), then 4-7 written just now."""
    client = RawClient(shared_gateway.bootstrap)
    client.request(metadata_request([topic]))  # auto-creates with 3 partitions: grow it
    from kio.schema.create_partitions.v3.request import (
        CreatePartitionsRequest,
        CreatePartitionsTopic,
    )
    from kio.static.primitive import i32

    grow = CreatePartitionsRequest(
        topics=(CreatePartitionsTopic(name=topic, count=i32(PARTITIONS), assignments=None),),
        timeout=ms(10_000),
        validate_only=False,
    )
    assert client.request(grow).results[0].error_code == 0
    for p in range(4):
        _produce(client, topic, p)
    wait_until(
        lambda: all(_earliest_local(client, topic, p) == BATCHES for p in range(4)), timeout=60
    )
    for p in range(4, PARTITIONS):
        _produce(client, topic, p)
    yield client, topic
    client.close()


def test_one_fetch_reads_every_partition_from_both_tiers(filled: tuple[RawClient, str]) -> None:
    client, topic = filled
    # A tier-2 read stops at the end of one chunk's slice: fetch on from where each
    # partition stopped, every partition in each request, until all are read.
    got: dict[int, list[tuple[int, bytes | None]]] = {p: [] for p in range(PARTITIONS)}
    # Partitions 4-7 move from tier 1 to tier 2 meanwhile: a read caught in a file's trim
    # may come back empty, so rounds go on (a pause after one that read nothing) for a while.
    deadline = time.monotonic() + 15.0
    round_, read = 0, -1
    while time.monotonic() < deadline:
        if all(len(got[p]) == BATCHES for p in range(PARTITIONS)):
            break
        if sum(map(len, got.values())) == read:  # the last round read nothing
            time.sleep(0.05)
        read = sum(map(len, got.values()))
        round_ += 1
        offsets = [(p, len(got[p])) for p in range(PARTITIONS)]
        partitions = _fetch(client, topic, offsets)
        assert [int(p.partition_index) for p in partitions] == list(range(PARTITIONS))
        for p in partitions:
            assert p.error_code == 0 and p.high_watermark == BATCHES, p
            records = decode_records(p.records)
            if round_ == 1:
                assert records, f"partition {p.partition_index}: nothing in the first fetch"
            got[int(p.partition_index)] += [(offset, value) for offset, _, value in records]
    for index, records in got.items():
        assert records == [(n, _value(index, n)) for n in range(BATCHES)], index


def test_max_bytes_is_shared_out_in_request_order(filled: tuple[RawClient, str]) -> None:
    client, topic = filled
    # Room for about one batch: the first partition gets its first batch (it may exceed
    # the limit), the ones after it nothing more than what is left.
    order = [5, 1, 6, 2]
    partitions = _fetch(client, topic, [(p, 0) for p in order], max_bytes=VALUE_BYTES + 200)
    sizes = [len(p.records or b"") for p in partitions]
    assert [int(p.partition_index) for p in partitions] == order
    assert len(decode_records(partitions[0].records)) == 1, sizes
    assert sum(sizes) <= max(sizes[0], VALUE_BYTES + 200), sizes
    for p in partitions:
        assert p.error_code == 0, p


def test_errors_stay_with_their_partition(filled: tuple[RawClient, str]) -> None:
    client, topic = filled
    partitions = _fetch(client, topic, [(4, 1), (0, 99), (1, 2), (7, 99), (6, BATCHES)])
    errors = {int(p.partition_index): p.error_code for p in partitions}
    assert errors == {4: 0, 0: ERR_OFFSET_OUT_OF_RANGE, 1: 0, 7: ERR_OFFSET_OUT_OF_RANGE, 6: 0}
    got = {int(p.partition_index): decode_records(p.records) for p in partitions}
    assert [offset for offset, _, _ in got[4]] == [1, 2]
    assert [offset for offset, _, _ in got[1]] == [2]
    assert got[6] == []
