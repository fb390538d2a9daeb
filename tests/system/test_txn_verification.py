"""KIP-890 part 1 and Kafka 4.1's request versions, byte for byte over a raw socket.

A transactional write that reaches the partition after its transaction ended (a delayed
retry) is refused, with TRANSACTION_ABORTABLE to Produce v11+ clients and INVALID_TXN_STATE to
older ones, and leaves no transaction open: the last stable offset stays at the high
watermark. AddPartitionsToTxn v4/v5 (the batched form) adds or only verifies.
"""

from __future__ import annotations

from typing import Any

from kio.schema.add_partitions_to_txn.v5 import request as add_v5
from kio.schema.describe_cluster.v2.request import DescribeClusterRequest
from kio.schema.fetch.v17 import request as fetch_v17
from kio.schema.list_offsets.v10 import request as offsets_v10
from kio.schema.list_transactions.v2.request import ListTransactionsRequest
from kio.schema.metadata.v13.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.produce.v11 import request as produce_v11
from kio.schema.produce.v12 import request as produce_v12
from kio.static.primitive import Records, i8, i16, i32, i64
from support.client import RawClient, Rec, build_record_batch, ms, unique_topic
from support.txn import create_topic
from system.test_txn_protocol import _add, _end, _init, _txn_batch

from core.errors import ErrorCode

_PRODUCE = {9: produce_v9, 11: produce_v11, 12: produce_v12}


def _produce(
    client: RawClient, version: int, txn_id: str | None, topic: str, part: int, batch: bytes
) -> Any:
    m = _PRODUCE[version]
    response = client.request(
        m.ProduceRequest(
            transactional_id=txn_id,
            acks=i16(-1),
            timeout=ms(10_000),
            topic_data=(
                m.TopicProduceData(
                    name=topic,
                    partition_data=(
                        m.PartitionProduceData(index=i32(part), records=Records(batch)),
                    ),
                ),
            ),
        )
    )
    return response.responses[0].partition_responses[0]


def _batched_add(
    client: RawClient, txn_id: str, pid: int, epoch: int, topic: str, part: int, verify: bool
) -> Any:
    request = add_v5.AddPartitionsToTxnRequest(
        transactions=(
            add_v5.AddPartitionsToTxnTransaction(
                transactional_id=txn_id,
                producer_id=i64(pid),
                producer_epoch=i16(epoch),
                verify_only=verify,
                topics=(add_v5.AddPartitionsToTxnTopic(name=topic, partitions=(i32(part),)),),
            ),
        )
    )
    response = client.request(request)
    assert response.error_code == ErrorCode.NONE
    (result,) = response.results_by_transaction
    return result.topic_results[0].results_by_partition[0].partition_error_code


def _offset(client: RawClient, topic: str, part: int, timestamp: int, isolation: int = 0) -> int:
    response = client.request(
        offsets_v10.ListOffsetsRequest(
            replica_id=i32(-1),
            isolation_level=i8(isolation),
            timeout=ms(5_000),
            topics=(
                offsets_v10.ListOffsetsTopic(
                    name=topic,
                    partitions=(
                        offsets_v10.ListOffsetsPartition(
                            partition_index=i32(part), timestamp=i64(timestamp)
                        ),
                    ),
                ),
            ),
        )
    )
    result = response.topics[0].partitions[0]
    assert result.error_code == ErrorCode.NONE
    return result.offset


def test_a_late_transactional_write_is_refused_and_leaves_nothing_open(shared_gateway) -> None:
    topic = unique_topic("kip890")
    create_topic(shared_gateway.bootstrap, topic, partitions=2)
    txn_id = unique_topic("kip890-id")
    with RawClient(shared_gateway.bootstrap) as client:
        init = _init(client, txn_id)
        pid = init.producer_id
        assert _add(client, txn_id, pid, 0, topic, 0) == [ErrorCode.NONE]
        first = _txn_batch(pid, 0, 0, [b"a", b"b"])
        assert _produce(client, 11, txn_id, topic, 0, first).error_code == ErrorCode.NONE
        assert _batched_add(client, txn_id, pid, 0, topic, 0, verify=True) == ErrorCode.NONE
        assert _batched_add(client, txn_id, pid, 0, topic, 1, verify=True) == (
            ErrorCode.TRANSACTION_ABORTABLE
        )
        assert _end(client, txn_id, pid, 0, commit=False) == ErrorCode.NONE

        # The retry of a write of the ended transaction lands now: refused either way.
        late = _txn_batch(pid, 0, 2, [b"late"])
        assert _produce(client, 11, txn_id, topic, 0, late).error_code == (
            ErrorCode.TRANSACTION_ABORTABLE
        )
        assert _produce(client, 9, txn_id, topic, 0, late).error_code == (
            ErrorCode.INVALID_TXN_STATE
        )
        stale = _txn_batch(pid, 1, 0, [b"other epoch"])
        assert _produce(client, 11, txn_id, topic, 0, stale).error_code == (
            ErrorCode.INVALID_PRODUCER_EPOCH
        )
        # No hanging transaction: two records and the abort marker, all stable.
        assert _offset(client, topic, 0, -1) == 3
        assert _offset(client, topic, 0, -1, isolation=1) == 3
        assert _batched_add(client, txn_id, pid, 0, topic, 0, verify=True) == (
            ErrorCode.TRANSACTION_ABORTABLE
        )

        # The batched form adds too; then v12 writes into the open transaction.
        assert _batched_add(client, txn_id, pid, 0, topic, 1, verify=False) == ErrorCode.NONE
        assert _batched_add(client, txn_id, pid, 0, topic, 1, verify=True) == ErrorCode.NONE
        assert _batched_add(client, txn_id, pid, 1, topic, 1, verify=True) == (
            ErrorCode.PRODUCER_FENCED
        )
        second = _txn_batch(pid, 0, 0, [b"c"])
        assert _produce(client, 12, txn_id, topic, 1, second).error_code == ErrorCode.NONE
        assert _offset(client, topic, 1, -1, isolation=1) == 0
        assert _end(client, txn_id, pid, 0, commit=True) == ErrorCode.NONE
        assert _offset(client, topic, 1, -1, isolation=1) == 2

        listed = client.request(
            ListTransactionsRequest(
                state_filters=(), producer_id_filters=(), transactional_id_pattern="kip890-id.*"
            )
        )
        assert [t.transactional_id for t in listed.transaction_states] == [txn_id]
        bad = client.request(
            ListTransactionsRequest(
                state_filters=(), producer_id_filters=(), transactional_id_pattern="("
            )
        )
        assert bad.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_kafka_41_versions_answer(shared_gateway) -> None:
    topic = unique_topic("v41")
    create_topic(shared_gateway.bootstrap, topic, partitions=1)
    with RawClient(shared_gateway.bootstrap) as client:
        meta = client.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        assert meta.error_code == ErrorCode.NONE
        (described,) = meta.topics
        assert described.error_code == ErrorCode.NONE
        plain = build_record_batch([Rec(key=None, value=b"x")])
        assert _produce(client, 12, None, topic, 0, plain).error_code == ErrorCode.NONE
        fetched = client.request(
            fetch_v17.FetchRequest(
                max_wait=ms(0),
                min_bytes=i32(0),
                topics=(
                    fetch_v17.FetchTopic(
                        topic_id=described.topic_id,
                        partitions=(
                            fetch_v17.FetchPartition(
                                partition=i32(0),
                                fetch_offset=i64(0),
                                partition_max_bytes=i32(1 << 20),
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
        )
        assert fetched.responses[0].partitions[0].error_code == ErrorCode.NONE
        # Nothing of this topic is only in tier 2.
        assert _offset(client, topic, 0, -5) == -1
        cluster = client.request(
            DescribeClusterRequest(
                include_cluster_authorized_operations=False, include_fenced_brokers=True
            )
        )
        assert cluster.error_code == ErrorCode.NONE and cluster.brokers
        assert not any(b.is_fenced for b in cluster.brokers)
