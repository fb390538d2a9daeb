"""Per partition transaction state: open transactions and the aborted-transactions index.

A partition learns everything from the batches it indexes (on append and on replay of the
tier-1 logs): a transactional data batch opens its producer's transaction at that offset,
a marker (control batch) closes it, and an abort marker records (producer id, first
offset, last offset) so read_committed fetches can tell clients what to drop. The last
stable offset (LSO) is the first offset of the oldest open transaction, else the high
watermark. It is per partition, like producer state, so scale events do not touch it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


@dataclass(slots=True)
class PartitionTxns:
    # producer id -> first offset of its open transaction in this partition
    ongoing: dict[int, int] = field(default_factory=dict)
    # in marker order, so last offsets are increasing
    aborted: list[AbortedTxn] = field(default_factory=list)
    _aborted_lasts: list[int] = field(default_factory=list)
    # producer id -> (first offset, marker offset) of its last closed transaction: a
    # marker whose write fails is rolled back, and the transaction is open again
    _closed: dict[int, tuple[int, int]] = field(default_factory=dict)

    def on_data(self, producer_id: int, base_offset: int) -> None:
        self.ongoing.setdefault(producer_id, base_offset)

    def on_marker(self, producer_id: int, offset: int, commit: bool) -> AbortedTxn | None:
        """A marker at `offset` ends the producer's transaction; the aborted range if any."""
        first = self.ongoing.pop(producer_id, None)
        if first is not None:
            self._closed[producer_id] = (first, offset)
        if commit or first is None:
            return None
        return self.add_aborted(AbortedTxn(producer_id, first, offset))

    def add_aborted(self, entry: AbortedTxn) -> AbortedTxn | None:
        """Remember an aborted range (a known one, e.g. loaded and replayed, only once)."""
        i = bisect.bisect_left(self._aborted_lasts, entry.last_offset)
        if i < len(self.aborted) and self.aborted[i] == entry:
            return None
        self.aborted.insert(i, entry)
        self._aborted_lasts.insert(i, entry.last_offset)
        return entry

    def durable_open(self, high_watermark: int) -> dict[int, int]:
        """Open transactions as a restart must see them: also those whose marker is not
        durable yet (below the high watermark), since a crash would lose that marker."""
        state = dict(self.ongoing)
        for pid, (first, marker) in self._closed.items():
            if marker >= high_watermark and pid not in state:
                state[pid] = first
        return state

    def restore_open(self, producer_id: int, first_offset: int) -> None:
        """After replaying tier 1: a saved open transaction whose first batches were trimmed.
        A marker of the producer replayed after `first_offset` closed it already."""
        closed = self._closed.get(producer_id)
        if closed is not None and closed[1] > first_offset:
            return
        current = self.ongoing.get(producer_id)
        self.ongoing[producer_id] = first_offset if current is None else min(current, first_offset)

    def first_unstable(self) -> int | None:
        return min(self.ongoing.values()) if self.ongoing else None

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [start, end)."""
        i = bisect.bisect_left(self._aborted_lasts, start)
        return [(a.producer_id, a.first_offset) for a in self.aborted[i:] if a.first_offset < end]

    def truncate_to(self, offset: int) -> None:
        """Forget what starts at or after `offset` (a failed write was rolled back)."""
        self.ongoing = {pid: first for pid, first in self.ongoing.items() if first < offset}
        for pid, (first, marker) in list(self._closed.items()):
            if marker >= offset:
                del self._closed[pid]
                if first < offset:
                    self.ongoing[pid] = first
        keep = bisect.bisect_left(self._aborted_lasts, offset)
        del self.aborted[keep:]
        del self._aborted_lasts[keep:]
