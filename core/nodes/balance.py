"""Several nodes with `--wal object`: hand open segments back to nodes that lead fewer.

A takeover gives a dead node's segments to the live ones, and the node that comes back (or
a node that joins) then leads nothing: every later takeover or load lands on the others.
Like Kafka's preferred-leader rebalancing, every `REBALANCE_EVERY_S` the most loaded live
node (the lowest id among equals, so two nodes never act at once) moves one of its open
segments to the least loaded live node when they differ by two or more open segments. The
move is the usual hand-over (core/stream/handover.py): clients see a retriable
NOT_LEADER_OR_FOLLOWER for a moment, offsets and idempotent sequences go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..cluster.view import CLUSTER

if TYPE_CHECKING:
    from ..metadata.postgres import PostgresMetadataStore
    from ..store import StreamStore

log = logging.getLogger(__name__)

REBALANCE_EVERY_S = 10.0
Call = Callable[..., Awaitable[Any]]


def choose_move(loads: dict[int, int], me: int) -> int | None:
    """The node this one should give a segment to now, or None."""
    if me not in loads or len(loads) < 2:
        return None
    most = max(loads.values())
    if loads[me] != most or me != min(n for n, load in loads.items() if load == most):
        return None
    least = min(loads, key=lambda n: (loads[n], n))
    return least if loads[me] - loads[least] >= 2 else None


def _a_segment_of(store: StreamStore, me: int) -> tuple[str, int] | None:
    """One of this node's open segments that no move or scale is touching."""
    for name in sorted(store.streams):
        stream = store.streams[name]
        if stream.deleted or CLUSTER.moving.get(name):
            continue
        owned = CLUSTER.segment_nodes.get(name, {})
        for _first, _last, segment_id in stream.owners():
            if owned.get(segment_id) == me and segment_id in stream.segments:
                return name, segment_id
    return None


async def rebalance(store: StreamStore, db: PostgresMetadataStore, call: Call, me: int) -> None:
    """One round: at most one segment moved off this node."""
    loads = await call(db.node_loads)
    to_node = choose_move(loads, me)
    if to_node is None:
        return
    found = _a_segment_of(store, me)
    if found is None:
        return
    name, segment_id = found
    started = time.monotonic()
    why = f"rebalancing: node {me} led {loads[me]} open segments, node {to_node} {loads[to_node]}"
    await store.move(name, segment_id, to_node, cause=why)
    log.info(
        "topic %s: moved segment %d to node %d, which led fewer segments, in %.2f s",
        name,
        segment_id,
        to_node,
        time.monotonic() - started,
    )
