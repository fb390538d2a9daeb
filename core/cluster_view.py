"""What this node knows about the other live nodes (README "Several nodes", multi-node).

Process-wide, like the fence: one process is one node. Off (single node) unless
`core/nodes.py` enables it with `--multi-node`; then its sync task refreshes the live
brokers and each topic's owner (the owner of its open segments: a split keeps successors
with their predecessors' node, so a topic has one owner) every half second. Handlers ask
`is_local(topic)` before serving data and `leader(topic)` for Metadata.
"""

from __future__ import annotations

import zlib


class ClusterView:
    def __init__(self) -> None:
        self.enabled = False
        self.node_id = 1
        self.brokers: list[tuple[int, str, int]] = []  # live nodes: (id, host, port)
        self.owners: dict[str, int] = {}  # topic -> owner node

    def leader(self, topic: str) -> int | None:
        """The node leading every partition of `topic`; None: this node (or unknown yet,
        e.g. a topic this node has just created)."""
        if not self.enabled:
            return None
        return self.owners.get(topic)

    def is_local(self, topic: str) -> bool:
        owner = self.leader(topic)
        return owner is None or owner == self.node_id

    def coordinator(self, group_id: str) -> tuple[int, str, int] | None:
        """The live node that coordinates `group_id` (a stable hash over the live nodes);
        None: this node."""
        if not self.enabled or not self.brokers:
            return None
        nodes = sorted(self.brokers)
        return nodes[zlib.crc32(group_id.encode()) % len(nodes)]


CLUSTER = ClusterView()
