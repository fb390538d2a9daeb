"""What this node knows about the other live nodes (docs/several-nodes.md, multi-node).

Process-wide, like the fence: one process is one node. Off (single node) unless
`core/nodes/membership.py` enables it with `--multi-node`; then its sync task refreshes the live
brokers and, per topic, the partition ranges of the open segments with each one's owner
node, every half second. A partition's leader is the owner of the open segment holding it.
Handlers ask `is_local(topic, partition)` before serving data and `leader_ranges` for
Metadata. A node changes its own entries at once when it creates a topic or hands a
segment over (core/stream/handover.py), without waiting for the next sync.
"""

from __future__ import annotations

import bisect
import zlib
from dataclasses import dataclass

Ranges = list[tuple[int, int, int]]  # (first partition, last partition, node), sorted


@dataclass(frozen=True, slots=True)
class Lease:
    """A node's lease as the last sync read it: `left_s` seconds to go (by the database's
    clock) at `read_at` (this process's time.monotonic())."""

    node_id: int
    host: str
    port: int
    incarnation: int
    live: bool
    left_s: float
    read_at: float


class ClusterView:
    def __init__(self) -> None:
        self.enabled = False
        self.node_id = 1
        self.brokers: list[tuple[int, str, int]] = []  # live nodes: (id, host, port)
        # every registered node, live or not, as of the last sync: the console's leases
        self.leases: list[Lease] = []
        self.owners: dict[str, int] = {}  # topic -> a node owning open segments (legacy view)
        self.ranges: dict[str, Ranges] = {}  # topic -> open segments' (first, last, node)
        # topic -> segment id -> the node that owns (or last owned) it: `streams describe`
        self.segment_nodes: dict[str, dict[int, int]] = {}
        # topic -> partitions this node is handing over: it serves none of them meanwhile
        self.moving: dict[str, set[int]] = {}
        # topic -> partitions of segments this node took over but could not open yet (the
        # object store down): the database names this node, yet it serves none of them
        self.unopened: dict[str, set[int]] = {}
        self._versions: dict[str, int] = {}  # topic -> local changes (the sync skips stale)

    def touch(self, topic: str) -> None:
        """This node changed the topic's owners itself: a sync that read the database
        before must not overwrite them."""
        self._versions[topic] = self._versions.get(topic, 0) + 1

    def version(self, topic: str) -> int:
        return self._versions.get(topic, 0)

    def leader(self, topic: str, partition: int = 0) -> int | None:
        """The node leading `partition` of `topic`; None: this node (or unknown yet,
        e.g. a topic this node has just created)."""
        if not self.enabled:
            return None
        ranges = self.ranges.get(topic)
        if ranges:
            i = bisect.bisect_right(ranges, (partition, 2**31, 2**31)) - 1
            if i >= 0 and ranges[i][0] <= partition <= ranges[i][1]:
                return ranges[i][2]
            return None
        return self.owners.get(topic)

    def knows_leaders(self, topic: str) -> bool:
        """Several nodes: a sync has said who leads the topic (a topic another node created
        is opened before its segments' owners are read; until then no leader is known)."""
        return not self.enabled or topic in self.ranges or topic in self.owners

    def is_local(self, topic: str, partition: int = 0) -> bool:
        if not self.enabled:
            return True
        if partition in self.moving.get(topic, ()) or partition in self.unopened.get(topic, ()):
            return False
        if topic not in self.ranges and topic not in self.owners:
            return False  # not synced yet (e.g. just after start): the next sync knows
        owner = self.leader(topic, partition)
        return owner is None or owner == self.node_id

    def leads_any(self, topic: str) -> bool:
        """This node leads at least one partition of `topic` (its scaler runs there)."""
        if not self.enabled:
            return True
        ranges = self.ranges.get(topic)
        if not ranges:
            return self.is_local(topic)
        return any(node == self.node_id for _f, _l, node in ranges)

    def leader_ranges(self, topic: str, count: int) -> Ranges | None:
        """(first, last, leader) covering partitions 0..count-1 (-1: this node), or None
        when one node leads them all (then `leader(topic)` says which)."""
        ranges = self.ranges.get(topic) if self.enabled else None
        if not ranges or len({node for _f, _l, node in ranges}) < 2:
            return None
        out: Ranges = []
        expected = 0
        for first, last, node in ranges:
            if first >= count:
                break
            if first > expected:
                out.append((expected, first - 1, -1))
            out.append((first, min(last, count - 1), node))
            expected = min(last, count - 1) + 1
        if expected < count:
            out.append((expected, count - 1, -1))
        return out

    def set_segments(self, topic: str, open_segments: list[tuple[int, int, int, int]]) -> None:
        """The topic's open segments as (segment id, first, last, owner node)."""
        self.ranges[topic] = sorted((f, last, node) for _s, f, last, node in open_segments)
        nodes = self.segment_nodes.setdefault(topic, {})
        for segment_id, _f, _l, node in open_segments:
            nodes[segment_id] = node

    def segment_is_local(self, topic: str, segment_id: int) -> bool:
        """Appends' last fence: the open segment is known to be this node's."""
        if not self.enabled:
            return True
        return self.segment_nodes.get(topic, {}).get(segment_id) == self.node_id

    def set_segment_owner(self, topic: str, segment_id: int, node: int) -> None:
        self.segment_nodes.setdefault(topic, {})[segment_id] = node

    def forget(self, topic: str) -> None:
        self.ranges.pop(topic, None)
        self.segment_nodes.pop(topic, None)
        self.moving.pop(topic, None)
        self.unopened.pop(topic, None)

    def open_segment_counts(self) -> dict[int, int]:
        """Live node -> open segments it owns (the placement load)."""
        counts = {node_id: 0 for node_id, _h, _p in self.brokers}
        for ranges in self.ranges.values():
            for _f, _l, node in ranges:
                if node in counts:
                    counts[node] += 1
        return counts

    def coordinator(self, group_id: str) -> tuple[int, str, int] | None:
        """The live node that coordinates `group_id` (a stable hash over the live nodes);
        None: this node."""
        if not self.enabled or not self.brokers:
            return None
        nodes = sorted(self.brokers)
        return nodes[zlib.crc32(group_id.encode()) % len(nodes)]


CLUSTER = ClusterView()
