"""One int object for each value that many partitions repeat.

Every int above 256 is an object of its own (32 bytes with its allocator slot). With a
million partitions written once each, most of their per-partition ints carry the same few
values (the partition indexes of 0-9,999 in every topic, one batch size, one reservation
mark, one timestamp): as separate objects, about seven per partition, over 200 MiB.
`shared` hands out one object per value instead.

The table is bounded: when full it is emptied and starts over, so values that never repeat
(offsets, positions) cost a dict insert now and then, never memory without limit. Objects
handed out before stay valid (an int is immutable); only later ones stop being shared with
them. Call it where a value is stored for long in per-partition state, not on every update.
"""

from __future__ import annotations

CAPACITY = 1 << 14  # values held (about 1.5 MiB when full)

_table: dict[int, int] = {}


def shared(value: int) -> int:
    """`value`, as the one object this table holds for it (equal to `value`, always)."""
    found = _table.get(value)
    if found is not None:
        return found
    if len(_table) >= CAPACITY:
        _table.clear()
    _table[value] = value
    return value


def reset() -> None:
    """Forget every value held (tests)."""
    _table.clear()
