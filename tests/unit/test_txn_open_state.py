"""Unit tests (no server) of the saved open transactions that let a restart see a
transaction whose first batches were trimmed from tier 1: the snapshot a chunk commit
saves and how a restart merges it with what tier-1 replay found (the stored snapshots,
where a late, older one never replaces a newer one: tests/test_metadata_store.py)."""

from __future__ import annotations

from core.txn.partition_state import PartitionTxns


def test_snapshot_keeps_a_transaction_whose_marker_is_not_durable() -> None:
    txns = PartitionTxns()
    txns.on_data(7, 10)
    txns.on_data(8, 11)
    txns.on_marker(7, 12, commit=True)
    # marker at 12 not fsync'd yet (high watermark 12): a crash would lose it
    assert txns.durable_open(12) == {7: 10, 8: 11}
    assert txns.durable_open(13) == {8: 11}


def test_restore_after_replay() -> None:
    txns = PartitionTxns()
    # tier 1 still holds a later batch of producer 5's open transaction
    txns.on_data(5, 40)
    txns.restore_open(5, 20)
    assert txns.ongoing == {5: 20}
    # producer 6's saved transaction ended by a marker found in tier 1: stays closed
    txns.on_data(6, 30)
    txns.on_marker(6, 45, commit=False)
    txns.restore_open(6, 25)
    assert 6 not in txns.ongoing
    # producer 9: only in the saved rows
    txns.restore_open(9, 3)
    assert txns.first_unstable() == 3
    # and a later abort marker covers the whole range, trimmed part included
    aborted = txns.on_marker(9, 50, commit=False)
    assert aborted is not None and aborted.first_offset == 3
