"""core.gathered_io: gathered writes resumed after partial writes give back every byte in
order, however few bytes and pieces each call takes."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from core.gathered_io import IOV_MAX, views_of, write_all


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(st.binary(max_size=40), max_size=3 * IOV_MAX // 100),
    seed=st.integers(0, 2**32 - 1),
)
def test_write_all_writes_every_byte_in_order(pieces: list[bytes], seed: int) -> None:
    rng = random.Random(seed)
    out = bytearray()
    calls = []

    def partial_write(views: list[memoryview]) -> int:
        assert 0 < len(views) <= IOV_MAX
        joined = b"".join(views)
        n = rng.randint(1, len(joined))  # a short write, as a kernel may make
        out.extend(joined[:n])
        calls.append(n)
        return n

    write_all(partial_write, views_of([memoryview(p) for p in pieces]))
    assert bytes(out) == b"".join(pieces)


def test_more_pieces_than_one_call_takes() -> None:
    pieces = [bytes([i % 256]) for i in range(3 * IOV_MAX + 5)]
    sizes = []

    def write(views: list[memoryview]) -> int:
        sizes.append(len(views))
        return sum(map(len, views))

    write_all(write, views_of(pieces))
    assert sizes == [IOV_MAX, IOV_MAX, IOV_MAX, 5]
