"""Which node gives a segment away, and to whom (core/nodes/balance.py)."""

from __future__ import annotations

from core.nodes.balance import choose_move


def test_only_the_most_loaded_node_moves_and_only_past_a_difference_of_two() -> None:
    assert choose_move({1: 3, 2: 0, 3: 3}, 1) == 2  # the lowest id of the most loaded
    assert choose_move({1: 3, 2: 0, 3: 3}, 3) is None
    assert choose_move({1: 3, 2: 0, 3: 3}, 2) is None
    assert choose_move({1: 2, 2: 1, 3: 1}, 1) is None  # balanced enough
    assert choose_move({1: 2, 2: 0, 3: 0}, 1) == 2  # ties among the least: lowest id
    assert choose_move({1: 4}, 1) is None
    assert choose_move({2: 4, 3: 0}, 1) is None  # not live
