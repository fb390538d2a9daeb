"""One share partition: the in-flight records of a (share group, topic, partition).

The share-partition start offset (SPSO) is the first offset not yet done (acknowledged or
archived); the end (SPEO) is the next offset never handed out. Every record in between has
an entry: its state, its delivery count and, while acquired, its owner and lock deadline.
Offsets in the window without an entry (control records, gaps) count as done.

Pure bookkeeping, no I/O: the coordinator reads the log, asks `acquire` which offsets of
the batches it read go to a member, and persists `snapshot()` after every change.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from .errors import ShareError


class RecordState(IntEnum):
    """Kafka's record states (their numbers appear in the persisted state)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    owner: str = ""
    deadline: float = 0.0


@dataclass(frozen=True, slots=True)
class Acquired:
    """A run of consecutive offsets acquired with one delivery count."""

    first: int
    last: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What survives a restart: the window and every entry's state and count."""

    start: int
    end: int
    records: list[tuple[int, int, int]]  # (offset, state, delivery count)


class SharePartition:
    def __init__(self, start: int, end: int | None = None) -> None:
        self.start = start
        self.end = start if end is None else max(end, start)
        self.records: dict[int, InFlight] = {}  # ascending offsets, all in [start, end)
        # No lock runs out before this (None: nothing acquired); an early guess is fine,
        # it only costs one scan. Keeps the coordinator's timer from scanning every window.
        self.lock_deadline: float | None = None

    @classmethod
    def restore(cls, snapshot: Snapshot) -> SharePartition:
        """A partition as persisted; records acquired then are available again (their
        delivery counts kept), since no member holds them after a restart."""
        part = cls(snapshot.start, snapshot.end)
        for offset, state, count in sorted(snapshot.records):
            if offset < part.start:
                continue
            kind = RecordState(state)
            if kind is RecordState.ACQUIRED:
                kind = RecordState.AVAILABLE
            part.records[offset] = InFlight(kind, count)
        part.end = max(part.end, max(part.records, default=part.start - 1) + 1)
        return part

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self.start,
            self.end,
            [(o, int(r.state), r.delivery_count) for o, r in self.records.items()],
        )

    # --- acquisition -------------------------------------------------------------------

    def first_available(self) -> int | None:
        """The lowest offset a fetch could hand out again, None if none in the window."""
        for offset, rec in self.records.items():
            if rec.state is RecordState.AVAILABLE:
                return offset
        return None

    def in_flight(self) -> int:
        return len(self.records)

    def acquire(
        self,
        first: int,
        last: int,
        member: str,
        deadline: float,
        limit: int,
        budget: int,
        window_limit: int,
    ) -> list[Acquired]:
        """Acquire for `member` the records of one read batch [first, last]: those
        available, and those past the end (new, entered at delivery 1). At most `budget`
        records; records at the delivery limit are archived instead. Runs of what was
        acquired, in offset order."""
        runs: list[Acquired] = []
        taken = 0
        offset = max(first, self.start)
        while offset <= last and taken < budget:
            rec = self.records.get(offset)
            if rec is None and offset >= self.end:
                if len(self.records) >= window_limit:
                    break
                rec = InFlight(RecordState.AVAILABLE, 0)
                self.records[offset] = rec
                self.end = offset + 1
            if rec is not None and rec.state is RecordState.AVAILABLE:
                if rec.delivery_count >= limit:
                    rec.state = RecordState.ARCHIVED
                else:
                    rec.state = RecordState.ACQUIRED
                    rec.delivery_count += 1
                    rec.owner = member
                    rec.deadline = deadline
                    if self.lock_deadline is None or deadline < self.lock_deadline:
                        self.lock_deadline = deadline
                    taken += 1
                    _extend(runs, offset, rec.delivery_count)
            offset += 1
        self._advance()
        return runs

    def skip(self, first: int, last: int) -> None:
        """Offsets [first, last] hold no deliverable record (a control batch): past the
        end, they join the window as done."""
        if last >= self.end:
            self.end = last + 1
            self._advance()

    def vanished(self, first: int, last: int) -> None:
        """Offsets [first, last] are no longer in the log (compaction removed them): what
        was waiting there is done; records someone holds are left to their owner."""
        for offset in range(max(first, self.start), min(last, self.end - 1) + 1):
            rec = self.records.get(offset)
            if rec is not None and rec.state is RecordState.AVAILABLE:
                rec.state = RecordState.ARCHIVED
        self._advance()

    # --- acknowledgement ---------------------------------------------------------------

    def acknowledge(
        self, member: str, first: int, last: int, types: list[int], limit: int
    ) -> ShareError:
        """Apply one acknowledgement batch: `types` has one type for the whole range or
        one per offset. Every record must be acquired by `member` (gap offsets aside);
        otherwise nothing of the batch changes and INVALID_RECORD_STATE is returned."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            return ShareError.INVALID_REQUEST
        try:
            kinds = [AckType(t) for t in types]
        except ValueError:
            return ShareError.INVALID_REQUEST
        if last >= self.end:  # never handed out (this also bounds the loops below)
            return ShareError.INVALID_RECORD_STATE
        if len(kinds) == 1:
            first = max(first, self.start)  # below the start everything is done
        for offset in range(first, last + 1):
            kind = kinds[0] if len(kinds) == 1 else kinds[offset - first]
            rec = self.records.get(offset)
            if kind is AckType.GAP and (rec is None or rec.owner == member):
                continue
            if rec is None or rec.state is not RecordState.ACQUIRED or rec.owner != member:
                if offset < self.start:  # done already: a repeat is harmless
                    continue
                return ShareError.INVALID_RECORD_STATE
        for offset in range(first, last + 1):
            kind = kinds[0] if len(kinds) == 1 else kinds[offset - first]
            rec = self.records.get(offset)
            if rec is None or offset < self.start:
                continue
            if kind is AckType.ACCEPT:
                rec.state = RecordState.ACKNOWLEDGED
            elif kind in (AckType.REJECT, AckType.GAP):
                rec.state = RecordState.ARCHIVED
            elif kind is AckType.RELEASE:
                self._release(rec, limit)
            elif kind is AckType.RENEW:
                continue  # the lock is renewed by the caller's new deadline
            rec.owner = ""
        self._advance()
        return ShareError.NONE

    def renew(self, member: str, first: int, last: int, deadline: float) -> None:
        for offset in range(max(first, self.start), min(last, self.end - 1) + 1):
            rec = self.records.get(offset)
            if rec is not None and rec.state is RecordState.ACQUIRED and rec.owner == member:
                rec.deadline = deadline

    def release_member(self, member: str, limit: int) -> int:
        """Release every record `member` holds (it left, or closed its session)."""
        released = 0
        for rec in self.records.values():
            if rec.state is RecordState.ACQUIRED and rec.owner == member:
                self._release(rec, limit)
                released += 1
        self._advance()
        return released

    def expire_locks(self, now: float, limit: int) -> int:
        """Release every record whose acquisition lock has run out; how many."""
        if self.lock_deadline is None or now < self.lock_deadline:
            return 0
        expired = 0
        earliest: float | None = None
        for rec in self.records.values():
            if rec.state is not RecordState.ACQUIRED:
                continue
            if rec.deadline <= now:
                self._release(rec, limit)
                expired += 1
            elif earliest is None or rec.deadline < earliest:
                earliest = rec.deadline
        self.lock_deadline = earliest
        if expired:
            self._advance()
        return expired

    def reset(self, start: int) -> None:
        """Move the start (an admin reset): the window is dropped."""
        self.records.clear()
        self.start = self.end = start

    def counts(self) -> dict[str, int]:
        out = {s.name.lower(): 0 for s in RecordState}
        for rec in self.records.values():
            out[rec.state.name.lower()] += 1
        return out

    # --- internals ---------------------------------------------------------------------

    @staticmethod
    def _release(rec: InFlight, limit: int) -> None:
        rec.owner = ""
        rec.state = RecordState.ARCHIVED if rec.delivery_count >= limit else RecordState.AVAILABLE

    def _advance(self) -> None:
        """Move the start over done records (and gaps) up to the first pending one."""
        records = self.records
        while records:
            offset = next(iter(records))
            if records[offset].state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                self.start = offset
                return
            del records[offset]
        self.start = self.end


def _extend(runs: list[Acquired], offset: int, count: int) -> None:
    if runs and runs[-1].last == offset - 1 and runs[-1].delivery_count == count:
        runs[-1] = Acquired(runs[-1].first, offset, count)
    else:
        runs.append(Acquired(offset, offset, count))
