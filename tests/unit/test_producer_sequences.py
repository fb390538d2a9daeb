"""Idempotent-producer checks of a partition (core/partition.py): in-order batches, retried
duplicates, gaps and epochs, including sequence numbers that wrap at INT32_MAX."""

from __future__ import annotations

from core.errors import ErrorCode
from core.partition import INT32_MAX, PRODUCER_BATCH_CACHE, Partition

PID = 7


def _record(partition: Partition, epoch: int, first: int, count: int, base: int) -> None:
    partition.record_sequence(PID, epoch, first, count, base)


def test_next_batch_passes_and_a_retry_points_at_its_offset() -> None:
    partition = Partition(0)
    assert partition.check_sequence(PID, 0, 0, 5).error == ErrorCode.NONE  # unknown producer
    _record(partition, 0, 0, 5, 100)
    _record(partition, 0, 5, 5, 105)
    in_order = partition.check_sequence(PID, 0, 10, 3)
    assert in_order.error == ErrorCode.NONE and in_order.duplicate_of is None
    retry = partition.check_sequence(PID, 0, 5, 5)
    assert retry.error == ErrorCode.NONE and retry.duplicate_of == 105
    gap = partition.check_sequence(PID, 0, 11, 1)
    assert gap.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_epochs() -> None:
    partition = Partition(0)
    _record(partition, 3, 0, 2, 0)
    assert partition.check_sequence(PID, 2, 2, 1).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert partition.check_sequence(PID, 4, 0, 1).error == ErrorCode.NONE  # a new epoch
    assert partition.check_sequence(PID, 4, 2, 1).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_only_the_last_batches_are_remembered_and_sequences_wrap() -> None:
    partition = Partition(0)
    first = INT32_MAX - 3
    for i in range(PRODUCER_BATCH_CACHE + 2):
        _record(partition, 0, (first + 2 * i) % (INT32_MAX + 1), 2, 10 * i)
    after = (first + 2 * (PRODUCER_BATCH_CACHE + 2)) % (INT32_MAX + 1)
    assert partition.check_sequence(PID, 0, after, 1).duplicate_of is None
    assert partition.check_sequence(PID, 0, after, 1).error == ErrorCode.NONE
    newest = partition.check_sequence(PID, 0, (after - 2) % (INT32_MAX + 1), 2)
    assert newest.duplicate_of == 10 * (PRODUCER_BATCH_CACHE + 1)
    # the oldest batches were forgotten: a retry of one is out of order
    assert partition.check_sequence(PID, 0, first, 2).error == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
