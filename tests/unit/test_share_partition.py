"""SharePartition: acquisition, acknowledgement, lock expiry, delivery limit, restore."""

from __future__ import annotations

from core.sharegroups import RecordState, SharePartition
from core.sharegroups.errors import ShareError
from core.sharegroups.group import ShareMember, assign
from core.sharegroups.partition import AckType

LIMIT = 3


def _acquire(part: SharePartition, member: str, first: int, last: int, budget: int = 100):
    return part.acquire(first, last, member, 10.0, LIMIT, budget, 1000)


def test_new_records_are_acquired_once() -> None:
    part = SharePartition(0)
    runs = _acquire(part, "a", 0, 4)
    assert [(r.first, r.last, r.delivery_count) for r in runs] == [(0, 4, 1)]
    assert part.end == 5 and part.start == 0
    assert _acquire(part, "b", 0, 4) == []  # held by a


def test_accept_advances_the_start_and_release_redelivers() -> None:
    part = SharePartition(0)
    _acquire(part, "a", 0, 3)
    assert part.acknowledge("a", 0, 1, [AckType.ACCEPT], LIMIT) is ShareError.NONE
    assert part.start == 2
    assert part.acknowledge("a", 2, 3, [AckType.RELEASE, AckType.REJECT], LIMIT) is ShareError.NONE
    assert part.start == 2 and part.first_available() == 2
    runs = _acquire(part, "b", 0, 3)
    assert [(r.first, r.last, r.delivery_count) for r in runs] == [(2, 2, 2)]


def test_only_the_owner_acknowledges() -> None:
    part = SharePartition(0)
    _acquire(part, "a", 0, 1)
    assert part.acknowledge("b", 0, 1, [AckType.ACCEPT], LIMIT) is ShareError.INVALID_RECORD_STATE
    assert part.records[0].state is RecordState.ACQUIRED


def test_lock_expiry_and_delivery_limit_archive() -> None:
    part = SharePartition(0)
    for delivery in range(1, LIMIT + 1):
        runs = _acquire(part, "a", 0, 0)
        assert runs[0].delivery_count == delivery
        assert part.expire_locks(11.0, LIMIT) == 1
    assert part.start == 1 and not part.records  # archived after the last delivery
    assert _acquire(part, "a", 0, 0) == []


def test_restore_makes_acquired_records_available_with_their_counts() -> None:
    part = SharePartition(5)
    _acquire(part, "a", 5, 9)
    part.acknowledge("a", 6, 6, [AckType.ACCEPT], LIMIT)
    again = SharePartition.restore(part.snapshot())
    assert again.start == 5 and again.end == 10
    assert again.records[5].state is RecordState.AVAILABLE
    assert again.records[5].delivery_count == 1
    assert again.records[6].state is RecordState.ACKNOWLEDGED


def test_budget_and_window_limits() -> None:
    part = SharePartition(0)
    assert sum(r.last - r.first + 1 for r in _acquire(part, "a", 0, 9, budget=4)) == 4
    assert part.end == 4
    assert part.acquire(4, 9, "b", 10.0, LIMIT, 100, 5) and part.end == 5


def test_assignment_spreads_partitions_and_shares_when_members_outnumber() -> None:
    members = {m: ShareMember(m, subscribed=("t",)) for m in ("a", "b", "c", "d")}
    target = assign(members, {"t": 2})
    assert all(len(parts) == 1 for parts in target.values())
    assert {p for parts in target.values() for p in parts} == {("t", 0), ("t", 1)}
    target = assign({"a": members["a"]}, {"t": 3})
    assert target["a"] == {("t", 0), ("t", 1), ("t", 2)}


def test_acknowledgements_outside_the_window_are_refused_at_once() -> None:
    part = SharePartition(0)
    _acquire(part, "a", 0, 1)
    huge = part.acknowledge("a", 0, 2**62, [AckType.ACCEPT], LIMIT)
    assert huge is ShareError.INVALID_RECORD_STATE  # past the end: no loop over 2**62
    assert part.acknowledge("a", 0, 1, [AckType.ACCEPT], LIMIT) is ShareError.NONE
    assert part.acknowledge("a", -(2**62), 1, [AckType.ACCEPT], LIMIT) is ShareError.NONE


def test_records_compacted_away_do_not_hold_the_start() -> None:
    part = SharePartition(0)
    _acquire(part, "a", 0, 3)
    part.acknowledge("a", 0, 3, [AckType.RELEASE], LIMIT)
    part.vanished(0, 1)  # the log now starts its batches at 2
    assert part.start == 2 and part.first_available() == 2
