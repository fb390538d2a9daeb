"""Server-side partition assignors of the consumer group protocol: `uniform` and `range`.

An assignor sees every member's subscribed topics (by topic id), the partition count of
each subscribed topic, and the previous target assignment; it returns the new target
assignment of every member. Both are deterministic (members sorted by their id), so the
same inputs always give the same answer. Racks are not used.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

TopicPartitions = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    """What an assignor decides from. `members`: member id -> subscribed topic ids;
    `partitions`: topic id -> partition count; `previous`: the last target assignment."""

    members: Mapping[str, frozenset[uuid.UUID]]
    partitions: Mapping[uuid.UUID, int]
    previous: Mapping[str, TopicPartitions]


def uniform(spec: AssignmentSpec) -> dict[str, TopicPartitions]:
    """Balanced and sticky: members keep what they had while that stays balanced; every
    partition goes to a subscribed member; counts differ by at most one among members that
    could take the same partition."""
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in spec.members}
    taken: set[tuple[uuid.UUID, int]] = set()
    for member in sorted(spec.members):
        subscribed = spec.members[member]
        for topic, parts in spec.previous.get(member, {}).items():
            if topic not in subscribed:
                continue
            for p in parts:
                key = (topic, p)
                if p < spec.partitions.get(topic, 0) and key not in taken:
                    owned[member].add(key)
                    taken.add(key)
    eligible: dict[uuid.UUID, list[str]] = {}
    for member in sorted(spec.members):
        for topic in spec.members[member]:
            if topic in spec.partitions:
                eligible.setdefault(topic, []).append(member)
    # Unassigned partitions go to the least loaded eligible member.
    for topic in sorted(eligible):
        for p in range(spec.partitions[topic]):
            if (topic, p) not in taken:
                member = min(eligible[topic], key=lambda m: (len(owned[m]), m))
                owned[member].add((topic, p))
                taken.add((topic, p))
    # Then even out: move a partition from a member to an eligible one with two fewer.
    moved = True
    while moved:
        moved = False
        for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for key in sorted(owned[giver]):
                taker = min(eligible[key[0]], key=lambda m: (len(owned[m]), m))
                if len(owned[taker]) < len(owned[giver]) - 1:
                    owned[giver].discard(key)
                    owned[taker].add(key)
                    moved = True
                    break
            if moved:
                break
    return {member: _by_topic(keys) for member, keys in owned.items()}


def range_(spec: AssignmentSpec) -> dict[str, TopicPartitions]:
    """Per topic, the subscribed members (sorted) get consecutive ranges of partitions; the
    first `count % members` of them one more than the others."""
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in spec.members}
    for topic, count in spec.partitions.items():
        members = sorted(m for m, topics in spec.members.items() if topic in topics)
        if not members:
            continue
        quota, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = quota + (1 if i < extra else 0)
            owned[member].update((topic, p) for p in range(start, start + size))
            start += size
    return {member: _by_topic(keys) for member, keys in owned.items()}


ASSIGNORS = {"uniform": uniform, "range": range_}
DEFAULT_ASSIGNOR = "uniform"


def _by_topic(keys: set[tuple[uuid.UUID, int]]) -> TopicPartitions:
    grouped: dict[uuid.UUID, set[int]] = {}
    for topic, p in keys:
        grouped.setdefault(topic, set()).add(p)
    return {topic: frozenset(parts) for topic, parts in grouped.items()}
