"""A share group's membership: members, epochs and the server-side assignment.

Share groups need no revocation: a partition may be read by several members at once (the
records, not the partitions, are handed out), so a member moves to its new assignment at
once and the member epoch simply follows the group epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TopicPartition = tuple[str, int]  # (topic name, partition index)


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed: tuple[str, ...] = ()
    epoch: int = 0
    assignment: frozenset[TopicPartition] = frozenset()
    last_seen: float = 0.0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's share group states: Empty or Stable (assignment is immediate)."""
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


def assign(
    members: dict[str, ShareMember], partitions: dict[str, int]
) -> dict[str, set[TopicPartition]]:
    """Spread every subscribed topic's partitions over its subscribers, uniformly.

    With no more members than partitions each partition goes to one member (round robin);
    with more members, each member gets one partition and partitions are shared, so every
    member has work and every partition is read."""
    target: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for topic in sorted({t for m in members.values() for t in m.subscribed}):
        count = partitions.get(topic, 0)
        if count <= 0:
            continue
        readers = sorted(m.member_id for m in members.values() if topic in m.subscribed)
        if len(readers) <= count:
            for index in range(count):
                target[readers[index % len(readers)]].add((topic, index))
        else:
            for i, member in enumerate(readers):
                target[member].add((topic, i % count))
    return target
