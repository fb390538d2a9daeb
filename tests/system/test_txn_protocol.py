"""The transaction APIs byte for byte (kio entities over a raw socket): the error codes
Kafka's clients act on, the transactional Produce rules, markers taking an offset, and
Fetch read_committed's last stable offset and aborted-transactions list."""

from __future__ import annotations

from typing import Any

import crc32c
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import Records, i8, i16, i32, i64
from support.client import RawClient, Rec, build_record_batch, ms, unique_topic
from support.txn import create_topic

from core.errors import ErrorCode
from core.recordbatch import build_control_batch

TRANSACTIONAL_BIT = 0x10


def _init(client: RawClient, txn_id: str, timeout_ms: int = 60_000) -> Any:
    return client.request(
        InitProducerIdRequest(
            transactional_id=txn_id,
            transaction_timeout=ms(timeout_ms),
            producer_id=i64(-1),
            producer_epoch=i16(-1),
        )
    )


def _add(client: RawClient, txn_id: str, pid: int, epoch: int, topic: str, *parts: int) -> list:
    response = client.request(
        AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn_id,
            v3_and_below_producer_id=i64(pid),
            v3_and_below_producer_epoch=i16(epoch),
            v3_and_below_topics=(
                AddPartitionsToTxnTopic(name=topic, partitions=tuple(i32(p) for p in parts)),
            ),
        )
    )
    return [
        r.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for r in t.results_by_partition
    ]


def _end(client: RawClient, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
    return client.request(
        EndTxnRequest(
            transactional_id=txn_id,
            producer_id=i64(pid),
            producer_epoch=i16(epoch),
            committed=commit,
        )
    ).error_code


def _txn_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    batch = bytearray(
        build_record_batch(
            [Rec(key=None, value=v) for v in values],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
    )
    # Set the transactional bit and redo the CRC (it covers attributes onwards).
    batch[22] |= TRANSACTIONAL_BIT
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return bytes(batch)


def _produce(client: RawClient, txn_id: str | None, topic: str, part: int, batch: bytes):
    response = client.request(
        ProduceRequest(
            transactional_id=txn_id,
            acks=i16(-1),
            timeout=ms(10_000),
            topic_data=(
                TopicProduceData(
                    name=topic,
                    partition_data=(PartitionProduceData(index=i32(part), records=Records(batch)),),
                ),
            ),
        )
    )
    return response.responses[0].partition_responses[0]


def _fetch(client: RawClient, topic: str, part: int, offset: int, isolation: int) -> Any:
    response = client.request(
        FetchRequest(
            replica_id=i32(-1),
            max_wait=ms(0),
            min_bytes=i32(0),
            max_bytes=i32(1 << 20),
            isolation_level=i8(isolation),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=(
                FetchTopic(
                    topic=topic,
                    partitions=(
                        FetchPartition(
                            partition=i32(part),
                            current_leader_epoch=i32(-1),
                            fetch_offset=i64(offset),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(1 << 20),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
    )
    return response.responses[0].partitions[0]


def _latest(client: RawClient, topic: str, isolation: int) -> int:
    response = client.request(
        ListOffsetsRequest(
            replica_id=i32(-1),
            isolation_level=i8(isolation),
            topics=(
                ListOffsetsTopic(
                    name=topic,
                    partitions=(
                        ListOffsetsPartition(
                            partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-1)
                        ),
                    ),
                ),
            ),
        )
    )
    return response.topics[0].partitions[0].offset


def test_transaction_protocol_errors_and_markers(shared_gateway) -> None:
    topic = unique_topic("rawtxn")
    create_topic(shared_gateway.bootstrap, topic, partitions=2)
    txn_id = unique_topic("raw-id")
    with RawClient(shared_gateway.bootstrap) as client:
        assert _init(client, txn_id, timeout_ms=10_000_000).error_code == (
            ErrorCode.INVALID_TRANSACTION_TIMEOUT
        )
        init = _init(client, txn_id)
        assert init.error_code == ErrorCode.NONE and init.producer_epoch == 0
        pid = init.producer_id

        # Produce before the partition was added to the transaction.
        batch = _txn_batch(pid, 0, 0, [b"a", b"b", b"c"])
        assert _produce(client, txn_id, topic, 0, batch).error_code == ErrorCode.INVALID_TXN_STATE
        # Transactional batches need the transactional id; control batches are refused.
        assert _produce(client, None, topic, 0, batch).error_code == ErrorCode.INVALID_RECORD
        assert _add(client, txn_id, pid, 0, topic, 0) == [ErrorCode.NONE]
        marker = build_control_batch(pid, 0, commit=True)
        assert _produce(client, txn_id, topic, 0, marker).error_code == ErrorCode.INVALID_RECORD

        assert _add(client, txn_id, pid, 1, topic, 1) == [ErrorCode.PRODUCER_FENCED]
        assert _add(client, txn_id, pid + 1, 0, topic, 1) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]
        assert _add(client, txn_id, pid, 0, "no-such-topic", 0) == [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        ]
        assert _end(client, "never-initialised", pid, 0, True) == (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )

        produced = _produce(client, txn_id, topic, 0, batch)
        assert produced.error_code == ErrorCode.NONE and produced.base_offset == 0
        # Open: read_committed sees nothing, its last stable offset is the first record.
        open_read = _fetch(client, topic, 0, 0, isolation=1)
        assert open_read.high_watermark == 3 and open_read.last_stable_offset == 0
        assert not open_read.records
        assert _latest(client, topic, isolation=1) == 0
        assert _latest(client, topic, isolation=0) == 3

        assert _end(client, txn_id, pid, 0, commit=False) == ErrorCode.NONE
        assert _end(client, txn_id, pid, 0, commit=False) == ErrorCode.NONE  # a retry
        assert _end(client, txn_id, pid, 0, commit=True) == ErrorCode.INVALID_TXN_STATE
        # The abort marker took offset 3; the aborted range is listed for read_committed.
        done = _fetch(client, topic, 0, 0, isolation=1)
        assert done.high_watermark == 4 and done.last_stable_offset == 4
        assert [(a.producer_id, a.first_offset) for a in done.aborted_transactions] == [(pid, 0)]
        plain = _fetch(client, topic, 0, 0, isolation=0)
        assert not plain.aborted_transactions and plain.records

        # A new InitProducerId bumps the epoch: the old one is fenced.
        again = _init(client, txn_id)
        assert (again.producer_id, again.producer_epoch) == (pid, 1)
        assert _add(client, txn_id, pid, 0, topic, 0) == [ErrorCode.PRODUCER_FENCED]
        assert _end(client, txn_id, pid, 0, commit=True) == ErrorCode.PRODUCER_FENCED
        assert _add(client, txn_id, pid, 1, topic, 0) == [ErrorCode.NONE]
        stale = _txn_batch(pid, 0, 3, [b"zombie"])
        assert _produce(client, txn_id, topic, 0, stale).error_code == (
            ErrorCode.INVALID_PRODUCER_EPOCH
        )
        fresh = _txn_batch(pid, 1, 0, [b"d"])
        assert _produce(client, txn_id, topic, 0, fresh).base_offset == 4
        assert _end(client, txn_id, pid, 1, commit=True) == ErrorCode.NONE
        final = _fetch(client, topic, 0, 4, isolation=1)
        assert final.last_stable_offset == 6 and not final.aborted_transactions
