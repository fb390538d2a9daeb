"""Unit tests of the per partition transaction index (no server): open transactions, the
aborted-transactions list, and rollback of a failed write."""

from __future__ import annotations

from core.txn.partition_state import AbortedTxn, PartitionTxns


def test_open_transactions_and_aborted_ranges() -> None:
    txns = PartitionTxns()
    txns.on_data(7, 10)
    txns.on_data(7, 12)  # the same transaction: its first offset stays
    txns.on_data(8, 11)
    assert txns.first_unstable() == 10
    assert txns.on_marker(7, 13, commit=True) is None
    assert txns.first_unstable() == 11
    assert txns.on_marker(8, 14, commit=False) == AbortedTxn(8, 11, 14)
    assert txns.first_unstable() is None
    assert txns.aborted_between(0, 100) == [(8, 11)]
    assert txns.aborted_between(15, 100) == []  # ended before the range
    assert txns.aborted_between(0, 11) == []  # starts after it
    # A marker for a producer with nothing open (a repeated one after a restart).
    assert txns.on_marker(8, 20, commit=False) is None
    # Known ranges (loaded from SQLite and replayed from tier 1) are kept once.
    assert txns.add_aborted(AbortedTxn(8, 11, 14)) is None
    assert len(txns.aborted) == 1


def test_rolled_back_marker_reopens_the_transaction() -> None:
    txns = PartitionTxns()
    txns.on_data(5, 0)
    txns.on_marker(5, 3, commit=False)
    txns.truncate_to(3)  # the marker's write failed
    assert txns.ongoing == {5: 0} and txns.aborted == []
    assert txns.on_marker(5, 3, commit=False) == AbortedTxn(5, 0, 3)  # written again
    txns.truncate_to(4)  # later failures leave it alone
    assert txns.aborted == [AbortedTxn(5, 0, 3)] and txns.ongoing == {}
