"""Transactions v2 at the end of the epochs: the transaction whose ending bumps the epoch to
its int16 maximum gets its markers with the old producer id and that epoch, then the id goes
on with a new producer id at epoch 0; a retried EndTxn with the old pair is answered NONE."""

from __future__ import annotations

from typing import Any

import trio

from core.api import AppendResult
from core.errors import ErrorCode
from core.metadata import CommittedOffset, TxnRecord
from core.recordbatch import read_batch_header
from core.txn.coordinator import TransactionCoordinator
from core.txn.state import COMPLETE_COMMIT, MAX_EPOCH


class _Partition:
    txns = None


class _Stream:
    def __init__(self) -> None:
        self.markers: list[tuple[int, int]] = []

    def has_partition(self, index: int) -> bool:
        return index == 0

    def partition(self, index: int) -> _Partition:
        return _Partition()

    def start_marker(self, index: int, marker: bytes) -> AppendResult:
        header = read_batch_header(marker)
        self.markers.append((header.producer_id, header.producer_epoch))
        return AppendResult(ErrorCode.NONE, base_offset=len(self.markers))


class _Store:
    def __init__(self) -> None:
        self.streams = {"t": _Stream()}
        self._next = 1000

    async def allocate_producer_id(self) -> int:
        self._next += 1
        return self._next


class _Metadata:
    def __init__(self) -> None:
        self.saved: list[TxnRecord] = []

    def save_transaction(self, txn: TxnRecord) -> None:
        self.saved.append(txn)


class _Worker:
    async def call(self, fn: Any, *args: Any) -> Any:
        return fn(*args)


async def _no_offsets(offsets: list[CommittedOffset]) -> None:
    pass


def test_the_last_epoch_rolls_over_to_a_new_producer_id() -> None:
    store, metadata = _Store(), _Metadata()
    coordinator = TransactionCoordinator(
        store,  # type: ignore[arg-type]
        metadata,  # type: ignore[arg-type]
        _Worker(),  # type: ignore[arg-type]
        _no_offsets,
    )

    async def main() -> None:
        error, pid, epoch = await coordinator.init_producer_id("id", 60_000)
        assert (error, epoch) == (ErrorCode.NONE, 0)
        record = coordinator.describe("id")
        assert record is not None
        record.epoch = epoch = MAX_EPOCH - 1
        assert await coordinator.add_partitions("id", pid, epoch, [("t", 0)]) == {("t", 0): 0}
        error, new_pid, new_epoch = await coordinator.end_txn_v2("id", pid, epoch, commit=True)
        assert (error, new_epoch) == (ErrorCode.NONE, 0) and new_pid != pid
        assert store.streams["t"].markers == [(pid, MAX_EPOCH)]
        assert (metadata.saved[-1].producer_id, metadata.saved[-1].state) == (
            new_pid,
            COMPLETE_COMMIT,
        )
        # The retry names the old pair; the new producer id goes on from epoch 0.
        assert await coordinator.end_txn_v2("id", pid, epoch, commit=True) == (0, new_pid, 0)
        assert await coordinator.end_txn_v2("id", pid, epoch, commit=False) == (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            -1,
            -1,
        )
        assert await coordinator.end_txn_v2("id", new_pid, 0, commit=False) == (0, new_pid, 1)

    trio.run(main)
