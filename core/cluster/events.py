"""Recent segment moves and takeovers this node took part in, for the console.

Process-wide like the cluster view: the hand-over (core/stream/handover.py), the takeover of
a dead node's segments (core/nodes/takeover.py) and the rebalancer (core/nodes/balance.py,
through the hand-over) append here; `GET /api/nodes/events` reads it. A bounded ring in
memory: nothing is persisted, a restart starts empty, and each node knows only the events it
gave or received (the metadata keeps owners, not their history).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

KEPT = 200


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """`kind`: "move" (this node handed segments over), "received" (another node handed
    segments to this one) or "takeover" (this node took a dead node's segment). Node
    ids are None where this node does not know them."""

    kind: str
    topic: str
    segments: tuple[int, ...]  # the segments sealed or taken
    from_node: int | None
    to_nodes: tuple[int, ...]
    cause: str
    successors: tuple[int, ...] = ()
    seconds: float | None = None  # how long it took, where measured
    time_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["segments"], out["successors"] = list(self.segments), list(self.successors)
        out["to_nodes"] = list(self.to_nodes)
        return out


class ClusterEvents:
    def __init__(self, kept: int = KEPT) -> None:
        self._ring: deque[ClusterEvent] = deque(maxlen=kept)

    def record(self, event: ClusterEvent) -> None:
        self._ring.append(event)

    def recent(self, limit: int = KEPT) -> list[ClusterEvent]:
        """The newest `limit` events, newest first."""
        return list(reversed(self._ring))[:limit]


EVENTS = ClusterEvents()
