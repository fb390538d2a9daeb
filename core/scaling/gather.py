"""Several nodes: bring a cold segment onto its neighbour's node, so merges can join them.

The policy merges only adjacent open segments one node owns (a merge is one local scale
event). After a split has placed successors on different nodes, cold neighbours would stay
apart forever; so a node whose open segment is cold (the policy's merge condition on its
own) and whose neighbouring partition range is owned by another live node with a lower id
hands the segment over to that node. The next evaluations there merge the two if both are
cold. Moving only towards the lower id means two nodes never swap their cold segments.
(Pure: `core/scaling/scaler.py` applies the decision through the store's hand-over.)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from .policy import MERGE_FRACTION, Decision, ScalingPolicy, SegmentLoad


def gather_move(
    loads: Sequence[SegmentLoad],
    policy: ScalingPolicy,
    cooldown: float,
    node_id: int,
    owner_of: Callable[[int], int | None],
    live: Collection[int],
    busy: Collection[int] = (),
) -> Decision | None:
    """At most one move per evaluation: the first cold local segment (in `loads`, this
    node's open segments by partition range, none in `busy`) whose neighbour partition
    (`owner_of(p)`: the node owning the open segment holding p, None if unknown) is owned
    by a live node with a lower id than `node_id`."""
    if policy.kind == "fixed" or policy.target <= 0:
        return None
    limit = policy.target * MERGE_FRACTION
    for load in loads:
        if load.segment_id in busy or load.age < cooldown or load.rate >= limit:
            continue
        for neighbour in (load.first - 1, load.last + 1):
            if neighbour < 0:
                continue
            node = owner_of(neighbour)
            if node is not None and node in live and node < node_id:
                return Decision(
                    "move",
                    [load.segment_id],
                    [(load.first, load.last)],
                    f"rate {load.rate:.1f} < {limit:g}: cold, joins its neighbour "
                    f"(partition {neighbour}) on node {node} so they can merge",
                    to_node=node,
                )
    return None
