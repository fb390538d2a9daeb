"""Where new segments go when several nodes are active (pure functions)."""

from __future__ import annotations


def place_segments(loads: dict[int, int], partitions: int, this_node: int) -> list[int]:
    """The owner node of each of a new topic's segments, in partition order.

    `loads`: live node -> open segments it owns. One segment per live node up to the
    partition count, least loaded first (ties: lower node id). This node stands in for an
    empty or unknown view (it is live: it is creating the topic).
    """
    loads = dict(loads) or {this_node: 0}
    loads.setdefault(this_node, 0)
    count = max(1, min(partitions, len(loads)))
    return sorted(loads, key=lambda node: (loads[node], node))[:count]


def least_loaded_other(loads: dict[int, int], this_node: int) -> int | None:
    """A live node with fewer open segments than this one (the least loaded), or None."""
    mine = loads.get(this_node, 0)
    others = [(count, node) for node, count in loads.items() if node != this_node]
    if not others:
        return None
    count, node = min(others)
    return node if count < mine else None
