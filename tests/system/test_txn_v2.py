"""Transactions v2 (KIP-890 part 2) byte for byte: no client here speaks it, so a raw
producer does what a Kafka 4 producer does once `transaction.version` 2 is finalized:
Produce v12 without AddPartitionsToTxn, TxnOffsetCommit v5 without AddOffsetsToTxn, EndTxn v5
answered with the bumped epoch, which the next transaction uses. read_committed consumers
(confluent-kafka) see exactly the committed records; the old epoch is fenced."""

from __future__ import annotations

from typing import Any

from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.txn_offset_commit.v5 import request as toc_v5
from kio.static.primitive import i16, i32, i64
from support.client import RawClient, unique_topic
from support.txn import confluent_values, create_topic
from system.test_txn_protocol import _init, _txn_batch
from system.test_txn_verification import _offset, _produce

from core.errors import ErrorCode


def _end_v5(
    client: RawClient, txn_id: str, pid: int, epoch: int, commit: bool
) -> tuple[int, int, int]:
    r = client.request(
        EndTxnRequest(
            transactional_id=txn_id,
            producer_id=i64(pid),
            producer_epoch=i16(epoch),
            committed=commit,
        )
    )
    return r.error_code, r.producer_id, r.producer_epoch


def _txn_offset_commit_v5(
    client: RawClient, txn_id: str, group: str, pid: int, epoch: int, topic: str, offset: int
) -> int:
    r = client.request(
        toc_v5.TxnOffsetCommitRequest(
            transactional_id=txn_id,
            group_id=group,
            producer_id=i64(pid),
            producer_epoch=i16(epoch),
            topics=(
                toc_v5.TxnOffsetCommitRequestTopic(
                    name=topic,
                    partitions=(
                        toc_v5.TxnOffsetCommitRequestPartition(
                            partition_index=i32(0),
                            committed_offset=i64(offset),
                            committed_metadata="",
                        ),
                    ),
                ),
            ),
        )
    )
    return r.topics[0].partitions[0].error_code


def _committed(client: RawClient, group: str, topic: str) -> Any:
    r = client.request(
        OffsetFetchRequest(
            group_id=group,
            topics=(OffsetFetchRequestTopic(name=topic, partition_indexes=(i32(0),)),),
            require_stable=True,
        )
    )
    return r.topics[0].partitions[0]


def test_a_v2_producer_bumps_its_epoch_and_adds_partitions_implicitly(shared_gateway) -> None:
    topic = unique_topic("tv2")
    create_topic(shared_gateway.bootstrap, topic, partitions=2)
    txn_id = unique_topic("tv2-id")
    group = unique_topic("tv2-group")
    with RawClient(shared_gateway.bootstrap) as client:
        init = _init(client, txn_id)
        assert init.error_code == ErrorCode.NONE
        pid, epoch = init.producer_id, init.producer_epoch

        # Transaction 1: two partitions and the group's offset, nothing added explicitly.
        for part in (0, 1):
            batch = _txn_batch(pid, epoch, 0, [b"c%d" % part, b"d%d" % part])
            assert _produce(client, 12, txn_id, topic, part, batch).error_code == 0
        # The same producer's next write to a partition it added goes straight in.
        more = _txn_batch(pid, epoch, 2, [b"e0"])
        assert _produce(client, 12, txn_id, topic, 0, more).error_code == ErrorCode.NONE
        assert _offset(client, topic, 0, -1, isolation=1) == 0  # open: nothing stable
        assert _txn_offset_commit_v5(client, txn_id, group, pid, epoch, topic, 42) == 0
        assert _committed(client, group, topic).error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT
        assert _end_v5(client, txn_id, pid, epoch, commit=True) == (0, pid, epoch + 1)
        # A retry of that EndTxn (its answer lost) gets the same answer.
        assert _end_v5(client, txn_id, pid, epoch, commit=True) == (0, pid, epoch + 1)
        assert _end_v5(client, txn_id, pid, epoch, commit=False)[0] == (ErrorCode.PRODUCER_FENCED)
        assert _committed(client, group, topic).committed_offset == 42

        # A write of the ended transaction arriving late (a zombie's) is fenced.
        late = _txn_batch(pid, epoch, 3, [b"late"])
        assert _produce(client, 12, txn_id, topic, 0, late).error_code == (
            ErrorCode.INVALID_PRODUCER_EPOCH
        )

        # Transaction 2 with the bumped epoch, aborted: its records stay hidden.
        epoch += 1
        aborted = _txn_batch(pid, epoch, 0, [b"aborted"])
        assert _produce(client, 12, txn_id, topic, 1, aborted).error_code == ErrorCode.NONE
        assert _txn_offset_commit_v5(client, txn_id, group, pid, epoch, topic, 99) == 0
        assert _end_v5(client, txn_id, pid, epoch, commit=False) == (0, pid, epoch + 1)
        epoch += 1
        assert _committed(client, group, topic).committed_offset == 42

        # An abort with nothing open still bumps; a commit of nothing is refused.
        assert _end_v5(client, txn_id, pid, epoch, commit=False) == (0, pid, epoch + 1)
        epoch += 1
        assert _end_v5(client, txn_id, pid, epoch, commit=True)[0] == (ErrorCode.INVALID_TXN_STATE)

        # Transaction 3 commits; nothing is left open on either partition.
        last = _txn_batch(pid, epoch, 0, [b"f0"])
        assert _produce(client, 12, txn_id, topic, 0, last).error_code == ErrorCode.NONE
        assert _end_v5(client, txn_id, pid, epoch, commit=True) == (0, pid, epoch + 1)
        for part in (0, 1):
            assert _offset(client, topic, part, -1, isolation=1) == _offset(client, topic, part, -1)

        # A v1 request of the same id after v2 ones keeps working (InitProducerId bumps).
        again = _init(client, txn_id)
        assert (again.error_code, again.producer_id) == (0, pid)
        assert again.producer_epoch == epoch + 2

    values = confluent_values(shared_gateway.bootstrap, topic, "read_committed", expect=6)
    assert sorted(values) == [b"c0", b"c1", b"d0", b"d1", b"e0", b"f0"]
